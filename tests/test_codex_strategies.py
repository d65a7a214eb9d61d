"""The four Codex strategies on hand-built transcripts (docs/specs/codex.md §1.4, §2, §3, §4, §5).

Each test builds a small session whose right answer follows from the spec: recorded usage
(``usage="recorded"``) puts the server totals exactly where a test wants the trigger, and the
expected layouts are those of §2.2's example snapshots.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from compaction_bench.llm import LLMClient, LLMResult
from compaction_bench.profiles import get_profile
from compaction_bench.provider import SimulatedProvider
from compaction_bench.replay import ReplayResult, replay
from compaction_bench.request import message_from_item
from compaction_bench.strategies.codex_components import window_uuid
from compaction_bench.transcript import Item, Transcript, Usage

CODEX = ("codex-local", "codex-remote-v1", "codex-remote-v2", "codex-token-budget")
PREFIX_START = "A different language model already worked on this task"


@dataclass
class Session:
    """A tiny transcript builder: every model response gets the recorded total it is given."""

    items: list[Item] = field(default_factory=list)
    response: int = -1
    turn: int = -1

    def dev(self, id: str, text: str = "<permissions>sandboxed</permissions>") -> Session:
        self.items.append(Item(id, "system", text, synthetic=True, meta={"role": "developer"}))
        return self

    def env(self, id: str, text: str = "<environment_context>\n  <cwd>/repo</cwd>\n</environment_context>") -> Session:
        self.items.append(Item(id, "user", text, synthetic=True))
        return self

    def user(self, id: str, text: str) -> Session:
        self.turn += 1
        self.items.append(Item(id, "user", text, turn=self.turn))
        return self

    def reply(self, id: str, text: str, total: int) -> Session:
        self.response += 1
        self.items.append(Item(id, "assistant", text, response=self.response, turn=self.turn, usage=Usage(total=total)))
        return self

    def call(self, id: str, total: int, *, name: str = "shell", same_response: bool = False, usage: bool = True) -> Session:
        if not same_response:
            self.response += 1
        self.items.append(Item(id, "tool_call", call_id=f"call-{id}", tool_name=name, arguments='{"cmd":"ls"}',
                               response=self.response, turn=self.turn, usage=Usage(total=total) if usage else None))
        return self

    def result(self, id: str, call: str, text: str) -> Session:
        self.items.append(Item(id, "tool_result", text, call_id=f"call-{call}", turn=self.turn))
        return self

    def marker(self, id: str, model: str, **meta) -> Session:
        self.items.append(Item(id, "marker", meta={"event": "model_switch", "model": model, **meta}))
        return self

    def transcript(self) -> Transcript:
        return Transcript(id="hand-built", items=tuple(self.items))


def layout(messages) -> list[tuple[str, tuple[str, ...]]]:
    return [(m.role, m.item_ids) for m in messages]


def turn_request(result: ReplayResult, step: int):
    return next(r for r in result.requests if r.kind == "turn" and r.step == step and not r.overflow)


def pair_problems(messages) -> list[str]:
    """Tool calls without their output and outputs without their call (or before it)."""
    problems, open_calls, seen = [], set(), set()
    for m in messages:
        for c in m.tool_calls:
            open_calls.add(c.id)
            seen.add(c.id)
        if m.role == "tool":
            if m.tool_call_id not in seen:
                problems.append(f"output without call {m.tool_call_id}")
            open_calls.discard(m.tool_call_id)
    problems += [f"call without output {c}" for c in sorted(open_calls)]
    return problems


def assert_pairs_after_compaction(result: ReplayResult) -> None:
    assert result.compactions, "expected at least one compaction"
    first = result.compactions[0].next_request or 0
    for record in result.requests[first:]:
        if record.kind in ("turn", "summary"):
            assert pair_problems(record.messages) == [], (result.strategy, record.index)


# --------------------------------------------------------------------------- §2.2 layouts
def test_local_pre_turn_layout_user_summary_then_reinjected_context():
    s = (Session().dev("dev").env("env").user("u1", "Fix the failing test").reply("a1", "Looking.", 100)
         .user("u2", "Also update the docs").reply("a2", "Done with both.", 60_000)
         .user("u3", "Now release it").reply("a3", "Releasing.", 100))
    result = replay(s.transcript(), "codex-local", profile="64k", usage="recorded")
    assert [c.trigger for c in result.compactions] == ["pre-turn"]
    # §2.2: [user1, user2, summary, developer, env_ctx, user3]
    request = turn_request(result, 2)
    assert layout(request.messages) == [
        ("user", ("u1",)), ("user", ("u2",)), ("user", ()), ("developer", ("dev",)), ("user", ("env",)), ("user", ("u3",)),
    ]
    assert request.messages[2].content.startswith(PREFIX_START)
    record = result.compactions[0]
    assert record.summarized_ids == ("dev", "env", "u1", "a1", "u2", "a2")
    assert record.details["injection"] == "DoNotInject"
    summary_request = next(r for r in result.requests if r.kind == "summary")
    assert summary_request.messages[-1].role == "user" and "## Progress and key decisions" in summary_request.messages[-1].content
    # §2.1: the local path decides nothing on the summary request's size (it sends it and drops the oldest
    # item on an overflow), so the request holds no estimate of the agent's: no estimate error is measured on it
    assert summary_request.estimate_tokens is None


def test_local_mid_turn_layout_context_before_last_user_then_summary():
    s = (Session().dev("dev").env("env").user("u1", "Run the tests and fix them")
         .call("c1", 100).result("r1", "c1", "2 failed").call("c2", 60_000).result("r2", "c2", "fixed")
         .reply("a3", "All green.", 100))
    result = replay(s.transcript(), "codex-local", profile="64k", usage="recorded")
    assert [c.trigger for c in result.compactions] == ["mid-turn"]
    # §2.2: [developer, env_ctx, last_user, summary]
    request = turn_request(result, 2)
    assert layout(request.messages) == [("developer", ("dev",)), ("user", ("env",)), ("user", ("u1",)), ("user", ())]
    assert request.messages[-1].content.startswith(PREFIX_START)
    assert result.compactions[0].summarized_ids == ("dev", "env", "u1", "c1", "r1", "c2", "r2")


def test_mid_turn_context_goes_before_the_last_of_several_users():
    s = (Session().dev("dev").env("env").user("u0", "First question").reply("a0", "Answer.", 100)
         .user("u1", "Run the tests").call("c1", 60_000).result("r1", "c1", "ok").reply("a2", "Done.", 100))
    result = replay(s.transcript(), "codex-local", profile="64k", usage="recorded")
    assert layout(turn_request(result, 2).messages) == [
        ("user", ("u0",)), ("developer", ("dev",)), ("user", ("env",)), ("user", ("u1",)), ("user", ()),
    ]


def test_no_mid_turn_compaction_without_follow_up():
    s = (Session().user("u1", "Explain").reply("a1", "Long answer.", 60_000))
    result = replay(s.transcript(), "codex-local", profile="64k", usage="recorded")
    assert result.compactions == []


def test_local_twenty_k_selection_with_middle_truncated_boundary_message():
    m1 = "H" * 16_000 + "T" * 16_000  # 8,000 approx tokens
    m2, m3 = "b" * 24_000, "c" * 40_000  # 6,000 and 10,000
    s = (Session().user("m1", m1).reply("a1", "ok", 100).user("m2", m2).reply("a2", "ok", 100)
         .user("m3", m3).reply("a3", "ok", 60_000).user("m4", "continue").reply("a4", "ok", 100))
    result = replay(s.transcript(), "codex-local", profile="64k", usage="recorded")
    assert [c.trigger for c in result.compactions] == ["pre-turn"]
    after = result.compactions[0].after
    # newest first: m3 10,000 (10,000 left), m2 6,000 (4,000 left), m1 cut to 4,000 tokens = 16,000 bytes
    assert layout(after) == [("user", ("m1",)), ("user", ("m2",)), ("user", ("m3",)), ("user", ())]
    assert after[0].content == "H" * 8000 + "…4000 tokens truncated…" + "T" * 8000
    assert (after[1].content, after[2].content) == (m2, m3)
    assert result.compactions[0].details["truncated_user_ids"] == ["m1"]
    assert layout(turn_request(result, 3).messages)[-1] == ("user", ("m4",))


# --------------------------------------------------------------------------- §2.1 overflow
def test_summary_overflow_drops_the_oldest_item_with_its_call_partner():
    dense = " ".join(str(n % 10) for n in range(4000))  # ~1 token per 2 bytes: estimate below true count
    s = (Session().user("u1", "start the job").call("c1", 10).result("r1", "c1", dense)
         .reply("a1", " ".join(f"word{n}" for n in range(300)), 10**6).user("u2", "next").reply("a2", "ok", 10))
    items = {i.id: i for i in s.items}
    normal = [message_from_item(items[i]) for i in ("u1", "c1", "r1")]
    profile = get_profile("64k")
    window = SimulatedProvider(profile).count(normal) + 100
    tiny = profile.with_window("tiny", window, "test window")
    result = replay(s.transcript(), "codex-local", profile=tiny, usage="recorded")
    summaries = [r for r in result.requests if r.kind == "summary"]
    assert [r.overflow for r in summaries] == [True, True, False]
    assert result.compactions[0].details["dropped_for_overflow"] == ["u1", "c1", "r1"]
    assert summaries[1].item_ids()[:2] == ["c1", "r1"]
    assert "c1" not in summaries[2].item_ids() and "r1" not in summaries[2].item_ids()
    assert all(pair_problems(r.messages) == [] for r in summaries)


# --------------------------------------------------------------------------- §1.4 model switch
def test_comp_hash_change_compacts_with_the_previous_model():
    s = (Session().marker("m0", "gpt-5.5").user("u1", "hello").reply("a1", "hi", 100)
         .marker("m1", "gpt-5.6-sol").user("u2", "next").reply("a2", "ok", 100))
    result = replay(s.transcript(), "codex-local", profile="64k", usage="recorded")
    assert [(c.trigger, c.details["reason"], c.details["model"]) for c in result.compactions] == [
        ("model-switch", "CompHashChanged", "gpt-5.5")
    ]
    same = (Session().marker("m0", "gpt-5.4").user("u1", "hello").reply("a1", "hi", 100)
            .marker("m1", "gpt-5.5").user("u2", "next").reply("a2", "ok", 100))
    assert replay(same.transcript(), "codex-local", profile="64k", usage="recorded").compactions == []


@pytest.mark.parametrize("total, compacts", [(60_000, True), (50_000, False)])
def test_downshift_to_a_smaller_window_compacts_only_over_the_new_limit(total, compacts):
    # old window 128,000 (auto 115,200); new 64,000: auto 57,600, usable 60,800
    s = (Session().marker("m0", "o3", context_window=128_000).user("u1", "hello").reply("a1", "hi", total)
         .marker("m1", "o4-mini", context_window=64_000).user("u2", "next").reply("a2", "ok", 100))
    result = replay(s.transcript(), "codex-remote-v2", profile="128k", usage="recorded")
    expected = [("model-switch", "ModelDownshift", "o3")] if compacts else []
    assert [(c.trigger, c.details["reason"], c.details["model"]) for c in result.compactions] == expected


# --------------------------------------------------------------------------- §1.3 overflow quirk
def test_context_window_exceeded_fills_usage_to_zero_and_blinds_the_pre_turn_check():
    huge = " ".join(f"token{n}" for n in range(4000))
    s = (Session().user("u1", "one").reply("a1", "ok", 2000).user("u2", "two").reply("a2", "ok", 2000)
         .user("u3", huge).reply("a3", "ok", 10).user("u4", "four").reply("a4", "ok", 10))
    tiny = get_profile("64k").with_window("tiny", 3000, "test window")  # usable 2,850, auto 2,700
    result = replay(s.transcript(), "codex-local", profile=tiny, usage="recorded")
    overflowed = [r for r in result.requests if r.kind == "turn" and r.overflow]
    assert [r.step for r in overflowed] == [2, 3]
    # cumulative 4,000 > 2,850 → last_token_usage = max(2,850 - 4,000, 0) = 0: the pre-turn check
    # before u4 sees 0 and does not compact; the next estimate is only u4's own item estimate.
    assert result.compactions == []
    wire = json.dumps({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "four"}]},
                      separators=(",", ":"))
    assert overflowed[1].estimate_tokens == -(-len(wire) // 4)


class UsageSummarizer(LLMClient):
    """Returns "S" and reports 100 input and 50 output tokens."""

    def complete(self, messages, *, max_tokens=None, purpose="summary", **kw) -> LLMResult:
        return LLMResult(text="S", model="fixed", input_tokens=100, output_tokens=50, purpose=purpose)


def test_local_summary_usage_adds_to_the_cumulative_total_that_the_overflow_fill_reads():
    """`drain_to_completed` (compact.rs L692-752) passes the summary response's usage to
    `update_token_usage_info`: total_token_usage grows by it, so a later `set_total_tokens_full` fills less."""
    huge = " ".join(f"token{n}" for n in range(4000))
    s = (Session().user("u1", "one").reply("a1", "ok", 2800).user("u2", huge).reply("a2", "ok", 10)
         .user("u3", "four").reply("a3", "ok", 10))
    tiny = get_profile("64k").with_window("tiny", 3000, "test window")  # usable 2,850, auto 2,700
    result = replay(s.transcript(), "codex-local", profile=tiny, usage="recorded", summarizer=UsageSummarizer())
    assert [c.trigger for c in result.compactions] == ["pre-turn"]  # 2,800 >= 2,700 before u2
    overflowed = [r for r in result.requests if r.kind == "turn" and r.overflow]
    assert [r.step for r in overflowed] == [1, 2]
    # cumulative 2,800 + 150 (the summary's 100 + 50) = 2,950 > 2,850: u2's overflow leaves last_token_usage
    # max(2,850 - 2,950, 0) = 0 (without the summary's usage it would be 50), so u3's estimate is its own item's
    wire = json.dumps({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "four"}]},
                      separators=(",", ":"))
    assert overflowed[1].estimate_tokens == -(-len(wire) // 4)


# --------------------------------------------------------------------------- remote layouts
@pytest.mark.parametrize("strategy", ["codex-remote-v1", "codex-remote-v2"])
def test_remote_layouts_put_the_compaction_item_last(strategy):
    mid = (Session().dev("dev").env("env").user("u1", "Run the tests").call("c1", 60_000)
           .result("r1", "c1", "ok").reply("a2", "Done.", 100))
    result = replay(mid.transcript(), strategy, profile="64k", usage="recorded")
    assert layout(turn_request(result, 1).messages) == [
        ("developer", ("dev",)), ("user", ("env",)), ("user", ("u1",)), ("compaction", ()),
    ]
    pre = (Session().dev("dev").env("env").user("u1", "one").reply("a1", "ok", 100).user("u2", "two")
           .reply("a2", "ok", 60_000).user("u3", "three").reply("a3", "ok", 100))
    result = replay(pre.transcript(), strategy, profile="64k", usage="recorded")
    assert layout(turn_request(result, 2).messages) == [
        ("user", ("u1",)), ("user", ("u2",)), ("compaction", ()), ("developer", ("dev",)), ("user", ("env",)), ("user", ("u3",)),
    ]
    record = result.compactions[0]
    text = record.after[-1].content
    assert record.details["compaction_estimate"] == -(-len(text.encode()) // 4)
    # §3.1: the remote pre-trim decides on the compaction request's estimate, which the request carries
    summaries = [r for r in result.requests if r.kind == "summary"]
    assert summaries and all(r.estimate_tokens is not None for r in summaries)


# --------------------------------------------------------------------------- §5 token budget
def test_token_budget_new_window_has_only_initial_context_and_window_section():
    s = (Session().dev("dev").env("env").user("u1", "work").call("c1", 100).result("r1", "c1", "one")
         .call("c1b", 200).result("r1b", "c1b", "two").call("c2", 60_000).result("r2", "c2", "three")
         .reply("a3", "Done.", 100))
    result = replay(s.transcript(), "codex-token-budget", profile="64k", usage="recorded",
                    options={"reminder_threshold_tokens": 60_000})
    w0, w1 = window_uuid("thread", 0), window_uuid("thread", 1)
    first = turn_request(result, 0).messages
    # upstream order: the developer bundle, the separate <context_window> developer message, then the environment
    assert layout(first) == [("developer", ("dev",)), ("developer", ()), ("user", ("env",)), ("user", ("u1",))]
    assert first[1].content == f"<context_window>\nAgent name: /root\nFirst context window id: {w0}\nCurrent context window id: {w0}\n</context_window>"
    # one reminder in window 0 (after the first step, not again after the second)
    before = turn_request(result, 2).messages
    assert sum("tokens are left" in m.content for m in before) == 1
    after = turn_request(result, 3).messages
    assert [c.trigger for c in result.compactions] == ["mid-turn"]
    assert layout(after) == [("developer", ("dev",)), ("developer", ()), ("user", ("env",))]
    assert after[1].content == (
        f"<context_window>\nAgent name: /root\nFirst context window id: {w0}\nCurrent context window id: {w1}\n"
        f"Previous context window id: {w0}\n</context_window>"
    )
    assert result.compactions[0].summary is None
    # the reminder flag is per window: the new window gets its own reminder
    assert sum("tokens are left" in m.content for m in result.final.messages) == 1


def test_token_budget_new_context_tool_rolls_over_mid_turn():
    s = (Session().dev("dev").user("u1", "work").call("c1", 100, name="new_context")
         .result("r1", "c1", "A new context window will start without summarizing conversation history.")
         .reply("a2", "Continuing.", 100))
    result = replay(s.transcript(), "codex-token-budget", profile="64k", usage="recorded")
    assert [(c.trigger, c.details["reason"]) for c in result.compactions] == [("mid-turn", "NewContextRequested")]


def test_token_budget_pre_turn_rollover_sends_the_turn_context_once():
    """§5.1: `start_new_context_window` (session/mod.rs L3705-3735) builds the window from the incoming
    turn's context and makes it the reference (`replace_compacted_history`, L3311-3340), so the turn's
    context-update step (L3754-3808) records nothing: the new cwd is in the window, once."""
    s = (Session().dev("dev").env("env").user("u1", "work").reply("a1", "ok", 60_000)
         .env("env2", "<environment_context>\n  <cwd>/other</cwd>\n</environment_context>").user("u2", "next").reply("a2", "ok", 100))
    result = replay(s.transcript(), "codex-token-budget", profile="64k", usage="recorded")
    assert [c.trigger for c in result.compactions] == ["pre-turn"]
    assert layout(turn_request(result, 1).messages) == [
        ("developer", ("dev",)), ("developer", ()), ("user", ("env2",)), ("user", ("u2",)),
    ]


SWITCH = "<model_switch>\nThe user was previously using a different model."


def test_token_budget_pre_turn_rollover_puts_an_incoming_model_switch_first():
    """Same comp_hash (gpt-5.4 → gpt-5.5): no switch compaction; the ContextLimit window is the turn's full
    initial context, whose render puts the model-switch instructions first (mod.rs L3606-3614)."""
    s = (Session().dev("dev").env("env").marker("m0", "gpt-5.4").user("u1", "work").reply("a1", "ok", 60_000)
         .marker("m1", "gpt-5.5").dev("switch", SWITCH).user("u2", "next").reply("a2", "ok", 100))
    result = replay(s.transcript(), "codex-token-budget", profile="64k", usage="recorded")
    assert [c.trigger for c in result.compactions] == ["pre-turn"]
    assert layout(turn_request(result, 1).messages) == [
        ("developer", ("switch",)), ("developer", ("dev",)), ("developer", ()), ("user", ("env",)), ("user", ("u2",)),
    ]


def test_token_budget_model_switch_rollover_records_only_the_model_diff_after_the_window():
    """A downshift compacts with the previous model's turn context (turn.rs L1061-1153): the window has no
    model-switch instructions and its baseline is the previous model, so the turn's update step records the
    model's diff (`world_state/model.rs` `render_diff`) after it, and nothing else."""
    s = (Session().dev("dev").env("env").marker("m0", "o3", context_window=128_000).user("u1", "work").reply("a1", "ok", 60_000)
         .marker("m1", "o4-mini", context_window=64_000).dev("switch", SWITCH)
         .env("env2", "<environment_context>\n  <cwd>/other</cwd>\n</environment_context>").user("u2", "next").reply("a2", "ok", 100))
    result = replay(s.transcript(), "codex-token-budget", profile="128k", usage="recorded")
    assert [(c.trigger, c.details["reason"]) for c in result.compactions] == [("model-switch", "ModelDownshift")]
    assert layout(turn_request(result, 1).messages) == [
        ("developer", ("dev",)), ("developer", ()), ("user", ("env2",)), ("developer", ("switch",)), ("user", ("u2",)),
    ]


@pytest.mark.parametrize("strategy", ["codex-remote-v1", "codex-remote-v2"])
def test_remote_mid_turn_reinjects_the_initial_context_before_a_later_agent_message(strategy):
    """compact.rs L559-614: a non-final agent message after the last real user message is where the
    initial context goes (upstream, beyond §2.2 step 5's wording); the compaction item stays last."""
    s = Session().dev("dev").env("env").user("u1", "work")
    s.items.append(Item("am1", "user", "Message Type: PROGRESS\nsub-agent says hi", turn=s.turn, meta={"codex_type": "agent_message"}))
    s = s.call("c1", 60_000).result("r1", "c1", "out").reply("a2", "done", 100)
    result = replay(s.transcript(), strategy, profile="64k", usage="recorded")
    (compaction,) = result.compactions
    assert compaction.trigger == "mid-turn"
    assert layout(turn_request(result, 1).messages) == [
        ("user", ("u1",)), ("developer", ("dev",)), ("user", ("env",)), ("user", ("am1",)), ("compaction", ()),
    ]


# --------------------------------------------------------------------------- pairing
def synthetic_like_session(turns: int = 16) -> Transcript:
    """Tool loops with parallel calls, a call that never got an output, and long outputs."""
    s = Session().dev("dev").env("env")
    for t in range(turns):
        s.user(f"u{t}", f"Task {t}: fix module_{t}.py and keep the public API unchanged")
        for k in range(3):
            s.call(f"t{t}c{k}a", 0, usage=False)
            s.call(f"t{t}c{k}b", 0, same_response=True, usage=False)
            s.result(f"t{t}r{k}a", f"t{t}c{k}a", "\n".join(f"the parser in module {t} reads each configuration section and validates it (step {k})" for n in range(60)))
            s.result(f"t{t}r{k}b", f"t{t}c{k}b", f"grep found {t * k} matches")
        s.call(f"t{t}lost", 0, usage=False)  # aborted: no output ever recorded
        s.reply(f"t{t}a", f"Fixed module_{t}.py; next I will run the tests.", 0)
    items = [Item(**{**i.to_dict(), "usage": None}) if i.usage else i for i in s.items]
    return Transcript(id="synthetic-like", items=tuple(Item.from_dict(i.to_dict()) for i in items))


@pytest.mark.parametrize("strategy", CODEX)
def test_no_request_breaks_tool_pairs_after_compaction(strategy):
    tiny = get_profile("64k").with_window("small", 24_000, "test window")
    result = replay(synthetic_like_session(), strategy, profile=tiny)
    assert len(result.compactions) >= 1
    assert_pairs_after_compaction(result)
    assert result.overflows == 0


@pytest.fixture(scope="module")
def synthetic_suite():
    from compaction_bench.scenarios.synthetic import default_suite

    return {scenario.name: scenario.transcript for scenario in default_suite()}


@pytest.mark.parametrize("strategy", CODEX)
def test_default_synthetic_tool_shapes_compact_and_keep_pairs(strategy, synthetic_suite):
    for name, transcript in synthetic_suite.items():
        if "parallel" in name or "aborted" in name:
            result = replay(transcript, strategy, profile="64k")
            assert_pairs_after_compaction(result)
            assert result.overflows == 0


def test_failed_remote_compaction_ends_the_turn_without_recording_the_user_message():
    # §3.3 / §1.4: the remote request overflows, there is no trim-and-retry; the pre-turn failure
    # ends the turn and the new user message is not recorded.
    big = " ".join(f"word{n}" for n in range(1500))
    s = Session().user("u1", "hi").reply("a1", big, 10**6).user("u2", "next").reply("a2", "ok", 10)
    tiny = get_profile("64k").with_window("tiny", 1000, "test window")
    result = replay(s.transcript(), "codex-remote-v2", profile=tiny, usage="recorded")
    assert result.compactions == []
    assert [r.overflow for r in result.requests if r.kind == "summary"] == [True]
    last = [r for r in result.requests if r.kind == "turn"][-1]
    assert last.item_ids() == ["u1", "a1"]


def test_token_budget_fallback_prompt_once_at_zero_remaining_and_buffered_reset():
    # auto limit 57,600 + buffer 5,000 → forced reset at 62,600 (or the usable 60,800 first);
    # between 57,600 and that, remaining is 0: the fallback prompt is recorded once per window.
    s = (Session().user("u1", "work").call("c1", 58_000).result("r1", "c1", "one")
         .call("c2", 58_500).result("r2", "c2", "two").call("c3", 61_000).result("r3", "c3", "three")
         .reply("a4", "Done.", 100))
    options = {"auto_compact_fallback_prompt": "Write your notes now.", "auto_compact_fallback_buffer_tokens": 5_000}
    result = replay(s.transcript(), "codex-token-budget", profile="64k", usage="recorded", options=options)
    fallbacks = [sum(m.content == "Write your notes now." for m in turn_request(result, n).messages) for n in (1, 2)]
    assert fallbacks == [1, 1]
    assert [(c.trigger, c.step) for c in result.compactions] == [("mid-turn", 3)]
    without = replay(s.transcript(), "codex-token-budget", profile="64k", usage="recorded-always")
    # without the buffer every step at or over 57,600 rolls over at once (the recorded totals stay high)
    assert [c.step for c in without.compactions] == [1, 2, 3]
