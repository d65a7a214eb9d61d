"""`openhands` (SDK preset 80/4) and `openhands-v0` (V0 server pipeline) against docs/specs/openhands.md."""

from __future__ import annotations

from compaction_bench.replay import replay
from compaction_bench.strategies.openhands import Event, event_preview, manipulation_indices
from compaction_bench.transcript import Item
from tests.conftest import CORPORA
from tests.pi_builders import Session, small_profile
from tests.test_gemini_cli import strategy_pair_errors


def _ev(n: int, kind: str, **kw) -> Event:
    return Event(id=n, kind=kind, **kw)


def test_manipulation_indices_keep_batches_calls_and_thinking_loops():
    # §4.4: two parallel calls of one response, then their observations.
    view = [_ev(0, "system"), _ev(1, "message", source="user"), _ev(2, "action", response=1, call_id="a"),
            _ev(3, "action", response=1, call_id="b"), _ev(4, "observation", call_id="a"), _ev(5, "observation", call_id="b"),
            _ev(6, "message")]
    assert manipulation_indices(view) == [0, 1, 2, 6, 7]
    thought = (Item(id="t", kind="reasoning", text="hm"),)
    loop = [_ev(0, "message", source="user"), _ev(1, "action", response=1, call_id="a", thinking=thought),
            _ev(2, "observation", call_id="a"), _ev(3, "action", response=2, call_id="b"), _ev(4, "observation", call_id="b"),
            _ev(5, "action", response=3, call_id="c", thinking=thought), _ev(6, "observation", call_id="c"), _ev(7, "message")]
    assert manipulation_indices(loop) == [0, 1, 5, 7, 8]


def _steps(n: int, chars: int = 40) -> Session:
    s = Session()
    s.user("Refactor the billing module; keep the public API unchanged.")
    for k in range(n):
        s.assistant(f"step {k}", calls=[(f"c{k}", "execute_bash", {"command": f"run-secret-arg-{k}"})])
        s.result(f"c{k}", f"result {k} " + "r" * chars, name="execute_bash")
    s.assistant("finished")
    return s


def test_sdk_events_trigger_window_and_preview_prompt():
    # 1 user + 2 events per step: 81 > 80 events before step 40. events_from_tail = 80//2 - 4 - 1 = 35, so the
    # naive end 46 moves to the next valid index 47 and the start 4 to 5 (an action starts at every odd index).
    result = replay(_steps(45, chars=700).transcript(), "openhands", profile="64k")
    first = result.compactions[0]
    assert first.step == 40 and first.details["reasons"] == ["EVENTS"]
    assert first.details["forgotten_events"] == 42 and first.details["summary_offset"] == 5
    assert len(first.after) == 81 - 42 + 1
    assert first.after[5].role == "user" and first.after[5].content == first.summary
    assert [m.role for m in first.after[:5]] == ["user", "assistant", "tool", "assistant", "tool"]
    request = next(r for r in result.requests if r.kind == "summary")
    assert len(request.messages) == 1 and request.messages[0].role == "user"
    prompt = request.messages[0].content
    assert prompt.count("<EVENT>") == 42 and "<EVENT id=" not in prompt
    assert "ActionEvent (agent)" in prompt and "run-secret-arg-3" not in prompt  # previews carry no arguments
    assert ("r" * 501) not in prompt and "[...]" in prompt  # 500-character previews
    assert strategy_pair_errors(result) == 0


def test_sdk_tokens_reason_is_hard_and_targets_half():
    # max_tokens 3,000: TOKENS fires (HARD); the forgotten prefix is the shortest one whose removal
    # reduces the view by more than total - 1,500 tokens (§4.3).
    result = replay(_steps(12, chars=1_200).transcript(), "openhands", profile="64k", options={"max_tokens": 3_000})
    first = result.compactions[0]
    assert "TOKENS" in first.details["reasons"]
    assert first.tokens_after < first.tokens_before
    assert first.tokens_before > 3_000
    assert strategy_pair_errors(result) == 0


def test_v0_count_only_cut_loses_call_and_result_halves():
    # 121 > 120 events before step 60. head = view[:4] = user, a0, o0, a1; tail = 120//2 - 4 - 1 = 55 events,
    # so the kept tail starts at o32 whose action a32 was forgotten, and a1's observation o1 was forgotten (§5.1).
    result = replay(_steps(62).transcript(), "openhands-v0", profile="64k")
    first = result.compactions[0]
    assert first.step == 60 and first.trigger == "condensation"
    assert first.details["orphaned_calls"] == ["c1"] and first.details["orphaned_results"] == ["c32"]
    # V0 message building drops both halves silently (§7): no wire error, but the items are lost.
    after = first.after
    assert not any(m.tool_call_id == "c32" for m in after)
    assert not any(c.id == "c1" for m in after for c in m.tool_calls)
    call_1 = next(i.id for i in result.transcript.items if i.kind == "tool_call" and i.call_id == "c1")
    result_32 = next(i.id for i in result.transcript.items if i.kind == "tool_result" and i.call_id == "c32")
    assert call_1 in first.dropped_ids and result_32 in first.dropped_ids
    # The summary sits at keep_first in the view; a1 (pending forever) is not emitted, so it is message 3.
    assert [m.role for m in after[:4]] == ["user", "assistant", "tool", "user"] and after[3].content == first.summary
    prompt = next(r for r in result.requests if r.kind == "summary").messages[0].content
    assert "<PREVIOUS SUMMARY>\nNo events summarized\n</PREVIOUS SUMMARY>" in prompt and "<EVENT id=" in prompt
    assert strategy_pair_errors(result) == 0


def test_v0_conversation_window_on_overflow():
    # A context-window error → CondensationRequestAction → ConversationWindowCondenser: system and first user
    # message kept, the newest half of the rest, leading observations skipped, no summary (§2.3, §5.2).
    result = replay(_steps(30, chars=2_000).transcript(), "openhands-v0", profile=small_profile(8_000))
    window = [c for c in result.compactions if c.trigger == "conversation-window"]
    assert window and all(c.summary is None for c in window)
    assert window[0].after[0].content.startswith("Refactor the billing module")
    assert window[0].after[1].role == "assistant"
    assert strategy_pair_errors(result) == 0


def test_preview_forms():
    action = Event(id=1, kind="action", text="t" * 600, tool_name="execute_bash", arguments='{"command":"ls"}')
    assert event_preview(action) == "ActionEvent (agent)\n  Thought: " + "t" * 500 + "[...]\n  Action: execute_bash"
    summary = Event(id=2, kind="summary", text="s" * 600, source="environment")
    assert event_preview(summary).endswith("s" * 497 + "...")


def test_sdk_on_a_real_session_with_thinking_keeps_pairs():
    path = CORPORA / "pi-session-jsonl" / "badlogic__pi-mono" / "large-session.jsonl"
    if not path.exists():
        return
    result = replay(path, "openhands", profile="64k")
    assert result.compactions
    assert strategy_pair_errors(result) == 0


def test_sdk_hard_reset_when_one_thinking_loop_spans_the_view():
    # §4.4/§4.6: the first action carries thinking, so every later action and observation belongs to one tool
    # loop and no cut exists after keep_first; TOKENS is HARD, so everything is summarised at offset 0.
    s = Session()
    s.user("Migrate the database schema.")
    s.response += 1
    s._add(kind="reasoning", text="think first", response=s.response)
    s._add(kind="tool_call", call_id="c0", tool_name="execute_bash", arguments='{"command":"ls"}', response=s.response)
    s.result("c0", "out 0 " + "w " * 1_000, name="execute_bash")
    for k in range(1, 8):
        s.assistant(calls=[(f"c{k}", "execute_bash", {"command": f"step {k}"})])
        s.result(f"c{k}", f"out {k} " + "w " * 1_000, name="execute_bash")
    s.assistant("done")
    result = replay(s.transcript(), "openhands", profile="64k", options={"max_tokens": 3_000})
    first = result.compactions[0]
    assert first.trigger == "hard-reset" and first.details["summary_offset"] == 0
    assert "TOKENS" in first.details["reasons"]
    assert [m.role for m in first.after][0] == "user" and first.after[0].content == first.summary
    assert first.kept_ids == ()
    assert strategy_pair_errors(result) == 0
