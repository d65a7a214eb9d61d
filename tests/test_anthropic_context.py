"""`anthropic-clear-tool-uses` and `anthropic-compact` against docs/specs/anthropic-context-management.md."""

from __future__ import annotations

import re

import pytest

from compaction_bench.replay import replay
from compaction_bench.strategy import OptionError
from tests.pi_builders import Session
from tests.test_gemini_cli import strategy_pair_errors


def _tools(steps: int, chars: int = 4_000, name: str = "Bash") -> Session:
    s = Session()
    s.user("Investigate the flaky test in tests/test_io.py; do not change the CI config.")
    for k in range(steps):
        tool = "Edit" if k == 1 else name
        s.assistant(f"step {k}", calls=[(f"c{k}", tool, {"command": f"cmd {k}"})])
        s.result(f"c{k}", f"output {k}\n" + f"line {k} of the log\n" * (chars // 20), name=tool)
    s.assistant("done")
    return s


def test_clear_tool_uses_keeps_the_newest_three_and_the_pairs():
    # trigger 5,000 input tokens: once exceeded, every result but the newest 3 becomes the placeholder (§2.1, §7).
    result = replay(_tools(10).transcript(), "anthropic-clear-tool-uses", profile="claude-opus", options={"trigger_value": 5_000})
    final = result.final.messages
    tools = [m for m in final if m.role == "tool"]
    cleared = [m.tool_call_id for m in tools if m.content == "[Old tool result content cleared]"]
    assert cleared == [f"c{k}" for k in range(7)]
    assert all(m.content.startswith("output") for m in tools[-3:])
    # The calls' inputs stay unless clear_tool_inputs is set.
    assert any(c.arguments == '{"command":"cmd 0"}' for m in final for c in m.tool_calls)
    turn = [r for r in result.requests if r.kind == "turn"][-1]
    assert turn.meta["applied_edits"] == [{"type": "clear_tool_uses_20250919", "cleared_tool_uses": 7,
                                           "cleared_input_tokens": turn.meta["applied_edits"][0]["cleared_input_tokens"]}]
    assert turn.meta["applied_edits"][0]["cleared_input_tokens"] > 0
    assert strategy_pair_errors(result) == 0
    # The edit is recomputed from the unchanged client history: nothing is cleared below the trigger.
    first = [r for r in result.requests if r.kind == "turn"][0]
    assert "applied_edits" not in first.meta


def test_a_reused_call_id_pairs_each_call_with_its_own_result():
    """Ten calls, the first five all named `c0` (a recording that reuses an id), each answered by its own result: with
    keep 3 the seven oldest pairs are cleared, so all five `c0` results and `c5`, `c6` become the placeholder and
    `cleared_tool_uses` is 7, as with distinct ids (before, every `c0` call was paired with the first `c0` result, and
    the later `c0` results stayed whole while their calls counted as cleared)."""
    s = Session()
    s.user("Investigate the flaky test in tests/test_io.py; do not change the CI config.")
    for k in range(10):
        call = "c0" if k < 5 else f"c{k}"
        s.assistant(f"step {k}", calls=[(call, "Bash", {"command": f"cmd {k}"})])
        s.result(call, f"output {k}\n" + f"line {k} of the log\n" * 200, name="Bash")
    s.assistant("done")
    result = replay(s.transcript(), "anthropic-clear-tool-uses", profile="claude-opus", options={"trigger_value": 5_000})
    outputs = [m.content for m in result.final.messages if m.role == "tool"]
    assert outputs[:7] == ["[Old tool result content cleared]"] * 7
    assert [o.split("\n")[0] for o in outputs[7:]] == ["output 7", "output 8", "output 9"]
    turn = [r for r in result.requests if r.kind == "turn"][-1]
    assert turn.meta["applied_edits"][0]["cleared_tool_uses"] == 7


def test_a_result_answers_the_call_of_its_own_step_not_an_aborted_one_of_the_same_id():
    """Step 0's call `c0` gets no result (aborted) and step 1 reuses the id with a result: with `clear_tool_inputs` the
    cleared pair's input is step 1's (the wire pairs that result with step 1's call), and the aborted call, which no
    result answers, keeps its input (before, the result was paired with the aborted call, whose input was cleared)."""
    s = Session()
    s.user("Investigate the flaky test in tests/test_io.py; do not change the CI config.")
    s.assistant("step 0", calls=[("c0", "Bash", {"command": "sleep 999"})])
    for k in range(1, 10):
        s.assistant(f"step {k}", calls=[(f"c{k}" if k > 1 else "c0", "Bash", {"command": f"cmd {k}"})])
        s.result(f"c{k}" if k > 1 else "c0", f"output {k}\n" + f"line {k} of the log\n" * 200, name="Bash")
    s.assistant("done")
    result = replay(s.transcript(), "anthropic-clear-tool-uses", profile="claude-opus", options={"trigger_value": 5_000, "clear_tool_inputs": True})
    arguments = {m.content: [c.arguments for c in m.tool_calls] for m in result.final.messages if m.tool_calls}
    assert arguments["step 0"] == ['{"command":"sleep 999"}']
    assert arguments["step 1"] == ["{}"]


def test_clear_tool_uses_options():
    t = _tools(10).transcript()
    never = replay(t, "anthropic-clear-tool-uses", profile="claude-opus", options={"trigger_value": 5_000, "clear_at_least": 10_000_000})
    assert [c for c in never.compactions] == []
    excluded = replay(t, "anthropic-clear-tool-uses", profile="claude-opus", options={"trigger_value": 5_000, "exclude_tools": "Edit"})
    tools = {m.tool_call_id: m.content for m in excluded.final.messages if m.role == "tool"}
    assert tools["c1"].startswith("output 1")  # the Edit result is never cleared
    inputs = replay(t, "anthropic-clear-tool-uses", profile="claude-opus", options={"trigger_value": 5_000, "clear_tool_inputs": True})
    args = {c.id: c.arguments for m in inputs.final.messages for c in m.tool_calls}
    assert args["c0"] == "{}" and args["c9"] == '{"command":"cmd 9"}'
    by_uses = replay(t, "anthropic-clear-tool-uses", profile="claude-opus",
                     options={"trigger_type": "tool_uses", "trigger_value": 8})
    first = next(c for c in by_uses.compactions)
    assert first.step == 9  # 9 > 8 tool uses answered before step 9
    with pytest.raises(OptionError):
        replay(t, "anthropic-clear-tool-uses", profile="claude-opus", options={"trigger_type": "turns"})


def test_clearing_costs_cache_hits():
    # §2.3: each newly cleared result rewrites the prompt from that block on, so part of it is written again.
    t = _tools(30).transcript()
    cleared = replay(t, "anthropic-clear-tool-uses", profile="claude-opus", options={"trigger_value": 10_000})
    plain = replay(t, "none", profile="claude-opus")

    def hit_rate(result) -> float:
        turns = [r for r in result.requests if r.kind == "turn"]
        return sum(r.cached_tokens for r in turns) / sum(r.true_tokens for r in turns)

    assert hit_rate(cleared) < hit_rate(plain)
    rewrite = next(c for c in cleared.compactions if len(c.details["newly_cleared"]) == 1 and c.details["cleared_tool_uses"] > 1)
    request = cleared.requests[rewrite.next_request]
    assert request.cached_tokens < request.prefix_tokens or request.cache_write_tokens > 0


def test_compact_trigger_block_and_billing():
    with pytest.raises(OptionError):
        replay(_tools(2).transcript(), "anthropic-compact", profile="claude-opus", options={"trigger": 49_999})
    t = _tools(40, chars=8_000).transcript()
    result = replay(t, "anthropic-compact", profile="claude-opus", options={"trigger": 50_000})
    assert result.compactions
    first = result.compactions[0]
    assert first.estimate_tokens > 50_000 and first.trigger == "compact_20260112"
    assert [m.role for m in first.after] == ["compaction"]  # only the block and what follows it remain
    summary_request = result.requests[first.summary_request_indices[0]]
    assert summary_request.kind == "summary" and "<summary></summary>" in summary_request.messages[-1].content
    assert summary_request.messages[0].content.startswith("Investigate the flaky test")  # the full history goes in
    # The summary call is its own (billed) request; the next turn request starts with the block.
    nxt = result.requests[first.next_request]
    assert nxt.kind == "turn" and nxt.messages[0].role == "compaction"
    assert strategy_pair_errors(result) == 0
    custom = replay(t, "anthropic-compact", profile="claude-opus", options={"trigger": 50_000, "instructions": "Only list file names."})
    prompt = custom.requests[custom.compactions[0].summary_request_indices[0]].messages[-1].content
    assert prompt == "Only list file names."


def test_compact_pause_keeps_the_newest_three_messages():
    """After a paused compaction the client sends the block and what it keeps (§4.4). The docs' example
    ("Preserving recent messages after compaction", compaction page CP-2):

        preserved = messages[-3:] if len(messages) >= 3 else messages
        messages_after = [{"role": "assistant", "content": [compaction_block]}] + preserved

    keeps the last three messages. In a tool loop those are [results of step n-2, step n-1, its results]:
    the first holds results whose calls would be summarised, so the step with those calls is kept too
    (a `tool_result` must answer a `tool_use` of the assistant message before it). Before, the client kept
    the whole current turn: a long single-turn run then compacted before every request once the turn alone
    exceeded the trigger (44 compactions in 61 requests here), which the docs' client does not do."""
    result = replay(_tools(60, chars=8_000).transcript(), "anthropic-compact", profile="claude-opus",
                    options={"trigger": 50_000, "pause_after_compaction": True})
    assert [c.step for c in result.compactions] == [18, 34, 50]
    first = result.compactions[0]
    assert first.details["paused"] is True
    shape = [(m.role, tuple(c.id for c in m.tool_calls), m.tool_call_id) for m in first.after]
    assert shape == [("compaction", (), None), ("assistant", ("c16",), None), ("tool", (), "c16"),
                     ("assistant", ("c17",), None), ("tool", (), "c17")]
    nxt = result.requests[first.next_request]
    assert nxt.messages == first.after and nxt.true_tokens < 50_000 / 4
    assert strategy_pair_errors(result) == 0
    # At a new user message: the latest exchange and the message itself (the example's "latest exchange +
    # current user msg"), with the step whose results that exchange starts with; `pause_keep_messages=0`
    # keeps nothing (the plain pausing example, which appends the block after everything).
    s = _tools(17, chars=8_000)
    s.user("Now also check tests/test_net.py please. " + "Context of the request. " * 500)
    s.assistant("checking", calls=[("n1", "Bash", {"command": "pytest tests/test_net.py"})])
    s.result("n1", "1 passed", name="Bash")
    s.assistant("ok")
    chat = replay(s.transcript(), "anthropic-compact", profile="claude-opus", options={"trigger": 50_000, "pause_after_compaction": True})
    (at_prompt,) = chat.compactions
    assert [(m.role, m.content[:14]) for m in at_prompt.after] == [
        ("compaction", at_prompt.summary[:14]), ("assistant", "step 16"), ("tool", "output 16\nline"), ("assistant", "done"),
        ("user", "Now also check"),
    ]
    assert strategy_pair_errors(chat) == 0
    nothing = replay(s.transcript(), "anthropic-compact", profile="claude-opus",
                     options={"trigger": 50_000, "pause_after_compaction": True, "pause_keep_messages": 0})
    assert [m.role for m in nothing.compactions[0].after] == ["compaction"]


# ----------------------------------------------------------------------------- §4.9: the compaction iteration fails the call
def _window(tokens: int):
    from dataclasses import replace

    from compaction_bench.profiles import get_profile

    return replace(get_profile("claude-opus"), name=f"opus-{tokens}", context_window=tokens)


def _long_prompt(words: int) -> Session:
    s = Session()
    s.user("Summarise the log below, then fix the failing step.\n" + "word " * words)
    s.assistant("reading", calls=[("c0", "Bash", {"command": "pytest -x"})])
    s.result("c0", "1 failed", name="Bash")
    s.assistant("done")
    return s


def test_compact_overflowing_summary_is_one_failed_request():
    # Server-side compaction is an iteration of the turn's own call (§4.2 step 4): a summary that would exceed
    # the window is a 400 for that call (§4.9), one failed request, not a failed summary request and then a
    # failed turn. Here every request is over the 60,000 window and over the 50,000 trigger: the replay fails
    # exactly the requests `none` fails, each once.
    t = _long_prompt(70_000).transcript()
    profile = _window(60_000)
    result = replay(t, "anthropic-compact", profile=profile, options={"trigger": 50_000})
    plain = replay(t, "none", profile=profile)
    assert [r.kind for r in result.requests] == [r.kind for r in plain.requests] == ["turn", "turn", "final"]
    assert [r.overflow for r in result.requests] == [r.overflow for r in plain.requests] == [True, True, True]
    assert [r.true_tokens for r in result.requests] == [r.true_tokens for r in plain.requests]
    assert result.compactions == []
    for request in result.requests[:2]:
        assert request.meta["failed_in"] == "compaction"
        # the 400 names the compaction iteration's input: the prompt plus the summarisation instructions
        n, limit = map(int, re.search(r"(\d+) tokens > (\d+) maximum", request.error["message"]).groups())
        assert limit == 60_000 and n > request.true_tokens > 60_000


def test_compact_overflowing_summary_fails_a_request_that_would_fit():
    # The converse: the prompt alone fits the window exactly, but the compaction iteration (the prompt and the
    # summarisation instructions) does not. The API answers the call with the 400 (§4.9); `none` sends it.
    t = _long_prompt(55_000).transcript()
    fits = replay(t, "none", profile="claude-opus").requests[0].true_tokens
    assert fits > 50_000
    profile = _window(fits)
    plain = replay(t, "none", profile=profile)
    assert not plain.requests[0].overflow
    result = replay(t, "anthropic-compact", profile=profile, options={"trigger": 50_000})
    first = result.requests[0]
    assert (first.kind, first.true_tokens, first.overflow) == ("turn", fits, True)
    assert first.meta["failed_in"] == "compaction" and f"> {fits} maximum" in first.error["message"]
    assert first.output_tokens == 0 and first.cached_tokens == 0 and first.usage is None
    assert not any(r.kind == "summary" for r in result.requests) and result.compactions == []


def test_a_summary_in_request_belongs_to_request():
    # `summarize(in_request=True)` makes the summary an iteration of the request `request()` returns: sent from
    # anywhere else, it has no request to fail.
    from compaction_bench.replay import ReplayError
    from compaction_bench.request import Message, Request
    from compaction_bench.strategies.anthropic_context import ServerCompact

    class Stray(ServerCompact):
        name = "stray"

        def on_response(self, items, usage, needs_follow_up):
            super().on_response(items, usage, needs_follow_up)
            self.ctx.summarize(Request([Message("user", "x")], kind="summary"), in_request=True)

    with pytest.raises(ReplayError, match="outside request"):
        replay(_tools(1).transcript(), Stray, profile="claude-opus")


def test_a_run_of_the_anthropic_edits_at_another_provider_s_profile_says_whose_billing_its_cost_follows(tmp_path):
    """The edits exist only on Anthropic's API (spec §1): at an openai profile their cost and cache figures follow
    OpenAI's billing and caching, which the run's notes say; at an Anthropic profile, or for strategies an agent runs
    itself, nothing is said."""
    import json

    from compaction_bench.profiles import get_profile
    from compaction_bench.reports.leaderboard import provider_note

    def note(strategies: list[str], profiles: list[str]) -> str | None:
        root = tmp_path / "-".join(strategies + profiles)
        root.mkdir()
        manifest = {"config": {"strategies": strategies}, "profiles": {p: get_profile(p).to_dict() for p in profiles}}
        (root / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
        return provider_note(root)

    assert note(["none", "anthropic-compact", "anthropic-clear-tool-uses"], ["64k", "claude-opus", "gpt-5"]) == (
        "note: only anthropic's API runs anthropic-compact and anthropic-clear-tool-uses; at 64k (openai), gpt-5 (openai) their "
        "cost and cache figures follow that provider's billing and caching, which no real API offers with them: compare their "
        "cost at a profile whose provider is anthropic.")
    assert note(["anthropic-compact"], ["claude-sonnet", "claude-opus"]) is None
    assert note(["none", "claude-code"], ["64k"]) is None
