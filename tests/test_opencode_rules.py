"""OpenCode rules an audit found wrong or untested (issue 14), each with its answer worked out by
hand from docs/specs/opencode.md (§1.1, §1.4, §2.8, §5) or upstream where the spec defers to it (the
provider-error list of `packages/llm/src/provider-error.ts`; V2's serialization and trigger at
`packages/core/src/session/compaction.ts@031a4a9c`, which supersedes the spec's §6)."""

from __future__ import annotations

import pytest

from compaction_bench.provider import ProviderError
from compaction_bench.replay import replay
from compaction_bench.strategies.opencode_components import (
    ModelLimits,
    Record,
    Renderer,
    is_context_overflow,
    serialize_record,
    usable_window,
)
from compaction_bench.transcript import Attachment, Item
from tests.test_opencode_helpers import Session


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("Input validation error: tokens in request more than max tokens allowed", True),  # in upstream's list
        ("This model's maximum context length for your plan is 8192 tokens", False),  # not in upstream's list
    ],
)
def test_overflow_patterns_are_upstreams(message, expected):
    assert is_context_overflow(ProviderError("x", 400, "", message)) is expected


def test_v2_serialization_as_upstream():
    step = Record(1, "step", items=[
        Item("t", "assistant", "", response=0),
        Item("c", "tool_call", call_id="k1", tool_name="bash", arguments='{"cmd": "ls -la",  "n": 1}', response=0),
        Item("c2", "tool_call", call_id="k2", tool_name="bash", arguments='"raw string input"', response=0),
    ])
    step.results = {"k1": Item("o1", "tool_result", "E" * 3000, call_id="k1", is_error=True)}
    assert serialize_record(step, 2000) == (
        "[Assistant]: \n"  # an empty text part is kept
        '[Assistant tool call]: bash({"cmd":"ls -la","n":1})\n'  # JSON.stringify of the input
        "[Tool error]: " + "E" * 3000 + "\n"  # errors are not truncated
        "[Assistant tool call]: bash(raw string input)"  # a string input as it is
    )


def test_v2_compacts_once_and_sends_the_checkpoint_unchecked():
    # context 25,000, output 12,500 (half the window): ceiling 25,000 - max(12,500, 20,000) = 5,000. The first
    # request (the system prompt's 6 and u0's 10,000) reaches it and compacts; the request built from the
    # checkpoint is sent without another check, though over 5,000 ("run the completed checkpoint before
    # considering another automatic compaction", compaction.ts@031a4a9c L558-560). (The old rule checked again
    # until the compaction was refused.) No tool definitions: `tools_json_chars=2` is the empty array.
    s = Session().user("u0", "A" * 40_000).say("a0", "B" * 40_000).user("u1", "C" * 40_000).say("a1", "done")
    result = replay(s.transcript(), "opencode-v2", profile="64k", options={"context_limit": 25_000, "tools_json_chars": 2})
    assert [c.step for c in result.compactions].count(0) == 1
    first = result.compactions[0]
    assert (first.trigger, first.estimate_tokens, first.threshold) == ("threshold", 10_006, 5_000)
    sent = next(r for r in result.requests if r.kind == "turn" and r.step == 0)
    assert sent.threshold is None and "compaction_failed" not in sent.meta and not sent.overflow


def test_v1_reserved_applies_only_with_an_input_limit():
    with_input = ModelLimits(context=200_000, output=32_000, input=200_000)
    assert usable_window(with_input, 32_000, reserved=None, buffer=20_000) == 180_000  # min(20,000, 32,000)
    assert usable_window(with_input, 32_000, reserved=5_000, buffer=20_000) == 195_000
    without = ModelLimits(context=200_000, output=32_000)
    assert usable_window(without, 32_000, reserved=5_000, buffer=20_000) == 168_000  # reserved not used


def test_v1_summary_overflow_ends_without_retry():
    # the turn overflows the 64k window; the overflow compaction has no earlier user message to
    # replay, so it summarizes everything and that request overflows too: no compaction, no retry
    s = Session().user("u0", "word " * 70_000).say("a0", "ok")
    result = replay(s.transcript(), "opencode-v1", profile="64k", usage="recorded-always")
    assert [(r.kind, r.overflow) for r in result.requests if r.kind != "final"] == [("turn", True), ("summary", True)]
    assert result.compactions == []


def prune_session(turns: int, skill: tuple[int, ...] = ()) -> Session:
    s = Session()
    for n in range(turns):  # 10,000 estimated tokens of tool output per turn
        s.user(f"u{n}", f"step {n}").tool(f"c{n}", "x" * 40_000, name="skill" if n in skill else "bash").say(f"a{n}", f"done {n}")
    return s


def test_prune_never_counts_or_clears_skill_outputs():
    # 9 turns with turns 0-2 using `skill`: 40,000 of bash output protected (turns 3-6), the skill
    # outputs skipped: no candidate. Without the exemption the same session prunes turns 0-2.
    kept = replay(prune_session(9, skill=(0, 1, 2)).transcript(), "opencode-v1", profile="1m", usage="recorded-always", options={"prune": True})
    assert kept.compactions == []
    off = replay(prune_session(9, skill=(0, 1, 2)).transcript(), "opencode-v1", profile="1m", usage="recorded-always",
                 options={"prune": True, "prune_protected_tools": ""})
    assert [(c.trigger, c.details["pruned_outputs"]) for c in off.compactions] == [("prune", 3)]


def test_prune_stops_at_an_already_pruned_part():
    # 12 turns: turns 0-2 are pruned at the end of turn 8. Later passes stop at them: at turns 9 and
    # 10 the candidates (10,000 and 20,000) are not more than 20,000; at turn 11, turns 3-5 (30,000).
    result = replay(prune_session(12).transcript(), "opencode-v1", profile="1m", usage="recorded-always", options={"prune": True})
    assert [(c.turn, c.details["pruned_outputs"], c.details["pruned_tokens"]) for c in result.compactions] == [(8, 3, 30_000), (11, 3, 30_000)]


def test_prune_stops_at_a_summary():
    # 15 turns of 10,000-token outputs; turn 5's usage (2,000,000) compacts at its end, leaving a summary.
    # At the end of turn 13 the walk (after the newest two user messages) meets turns 11-6 (60,000: 20,000
    # of candidates, not more than 20,000) and stops at the summary; past it, turns 5-0 would have made
    # 80,000 of candidates. At the end of turn 14, turns 12-6: candidates 8, 7, 6 (30,000) are pruned.
    s = Session()
    for n in range(15):
        s.user(f"u{n}", f"step {n}").tool(f"c{n}", "x" * 40_000).say(f"a{n}", f"done {n}", usage=2_000_000 if n == 5 else 100)
    result = replay(s.transcript(), "opencode-v1", profile="1m", usage="recorded-always", options={"prune": True})
    assert [(c.trigger, c.turn) for c in result.compactions][0] == ("step", 5)
    pruned = [(c.turn, c.details["pruned_outputs"], c.details["pruned_tokens"]) for c in result.compactions if c.trigger == "prune"]
    assert pruned == [(14, 3, 30_000)]


def test_summary_input_keeps_non_media_file_parts_except_plain_text_and_directories():
    files = (Attachment("image/png", "a.png"), Attachment("application/json", "b.json"),
             Attachment("text/plain", "c.txt"), Attachment("application/x-directory", "src"))
    record = Record(0, "user", items=[Item("u", "user", "look", attachments=files)])
    (message,) = Renderer(2000).render([record], for_summary=True)
    assert message.content == "look\n[Attached image/png: a.png]"  # media become text
    assert message.attachments == (Attachment("application/json", "b.json"),)  # the other file stays a file


def test_an_interrupted_tool_call_is_sent_with_an_error_result():
    """§3.2: a tool part that never completed becomes an error result, so no call goes out unanswered."""
    s = Session().user("u0", "hello")
    s.items.append(Item("call-x", "tool_call", call_id="x", tool_name="bash", arguments="{}", response=s.response, turn=s.turn))
    s.response += 1
    s.user("u1", "continue").say("a1", "done")
    last = replay(s.transcript(), "opencode-v1", profile="1m").requests[-1]
    (result,) = [m for m in last.messages if m.role == "tool"]
    assert (result.tool_call_id, result.content, result.is_error) == ("x", "[Tool execution was interrupted]", True)
