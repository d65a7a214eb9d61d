"""`pi-2025-12`: Pi's December 2025 rules (upstream badlogic/pi-mono@83a6c269: compaction.ts,
agent-session.ts, agent.ts, pi-ai agent-loop.ts).

The expected cut points follow from upstream's `findCutPoint` rule worked by hand on small paths;
the expected requests around an auto compaction follow from `checkAutoCompaction` (no abort: the
running loop keeps its own messages) and `loadSessionFromEntries`; the corpus test compares the
replay with the two compactions the real Pi recorded.
"""

from __future__ import annotations

import json
import math

import pytest

from compaction_bench.fidelity import fidelity_rows
from compaction_bench.replay import replay
from compaction_bench.request import ToolCall
from compaction_bench.strategies.pi_compaction import find_cut_point_2025, prepare_compaction_2025
from compaction_bench.strategies.pi_session_tree import PiMessage, to_wire, to_wire_2025
from compaction_bench.transcript import Item
from tests.conftest import CORPORA
from tests.pi_builders import Entries, Session, small_profile, tool_pair_problems

FOLDER = CORPORA / "pi-session-jsonl" / "badlogic__pi-mono"


def test_cut_is_the_user_message_before_the_last_kept_assistant():
    e = Entries()
    e.user(10)  # 0
    e.assistant(10, total=1_000)  # 1
    e.user(10)  # 2
    e.assistant(10, calls=[("t1", "read", {"path": "a"})], total=5_000)  # 3
    e.result("t1", 10)  # 4
    e.assistant(10, total=9_000)  # 5
    e.user(10)  # 6
    e.assistant(10, total=12_000)  # 7
    # keep 4,000: newest 12,000; 12,000 - 9,000 = 3,000 < 4,000; 12,000 - 5,000 = 7,000 >= 4,000, so the
    # last kept assistant is index 5 and the cut is the newest user message at or before it: index 2
    assert find_cut_point_2025(e.path, 0, len(e.path), 4_000) == 2
    # keep 3,000: 12,000 - 9,000 reaches it at once; last kept assistant = 7 -> user 6
    assert find_cut_point_2025(e.path, 0, len(e.path), 3_000) == 6
    # never reached: keep everything in range
    assert find_cut_point_2025(e.path, 0, len(e.path), 50_000) == 0
    # no usage at all: only the last turn is kept
    bare = Entries()
    bare.user(10)
    bare.assistant(10)
    bare.user(10)
    bare.assistant(10)
    assert find_cut_point_2025(bare.path, 0, 4, 1) == 2


def test_aborted_assistants_do_not_count_and_no_user_message_keeps_everything():
    e = Entries()
    e.user(10)  # 0
    e.assistant(10, total=1_000)  # 1
    e.user(10)  # 2
    e.assistant(10, total=90_000, stop="aborted")  # 3: ignored
    e.assistant(10, total=2_000)  # 4
    assert find_cut_point_2025(e.path, 0, 5, 1_000) == 2
    only_assistants = Entries()
    only_assistants.assistant(10, total=1)
    only_assistants.assistant(10, total=50_000)
    assert find_cut_point_2025(only_assistants.path, 0, 2, 10) == 0


def test_preparation_starts_after_the_previous_compaction_and_hands_over_its_summary():
    e = Entries()
    e.user(10)  # 0
    e.assistant(10, total=1_000)  # 1
    e.user(10)  # 2
    e.assistant(10, total=30_000)  # 3
    e.compaction(first_kept="e2", summary="earlier work")  # 4
    e.user(10)  # 5
    e.assistant(10, total=8_000)  # 6
    e.user(10)  # 7
    e.assistant(10, total=40_000)  # 8
    prep = prepare_compaction_2025(e.path, keep_recent_tokens=20_000)
    assert prep is not None
    assert prep.first_kept_id == "e7" and not prep.is_split_turn and prep.turn_prefix == []
    assert prep.summarized_entries == ["e5", "e6"]  # the first compaction's kept tail (e2, e3) is not in it
    assert prep.previous_summary == "earlier work"
    assert prep.tokens_before == 40_000
    assert prep.file_ops.tags() == ""
    e.compaction(first_kept="e7")
    assert prepare_compaction_2025(e.path, keep_recent_tokens=20_000) is None  # "Already compacted"


def test_provider_transform_of_december_2025_drops_orphan_calls_but_not_in_the_last_message():
    call = ToolCall("t1", "read", "{}")
    orphan = PiMessage(role="assistant", tool_calls=(call,), texts=("looking",), stop_reason="toolUse")
    aborted = PiMessage(role="assistant", texts=("half",), stop_reason="aborted")
    user = PiMessage(role="user", texts=("go on",))
    wire = to_wire_2025([orphan, user, aborted])
    assert [m.role for m in wire] == ["assistant", "user", "assistant"]  # the aborted one stays
    assert wire[0].tool_calls == () and wire[0].content == "looking"
    assert to_wire_2025([user, orphan])[-1].tool_calls == (call,)  # ongoing turn: kept
    # the newer transform answers the call instead and drops the aborted assistant
    newer = to_wire([orphan, user, aborted])
    assert [m.role for m in newer] == ["assistant", "tool", "user"] and newer[1].content == "No result provided"


def aborted_run_session() -> Session:
    """A run whose last assistant crosses the threshold with a tool call pending: December 2025
    compacts right after it and the call never gets a result (as at line 628 of the recorded
    before-compaction.jsonl)."""
    s = Session()
    for n in range(6):
        s.user(f"task {n} " + "x" * 2_000)
        s.assistant("", calls=[(f"c{n}", "read", {"path": f"f{n}.py"})], total=3_000 + 3_000 * n)
        s.result(f"c{n}", "y" * 4_000)
        s.assistant(f"done {n}", total=4_000 + 3_000 * n)
    s.user("last task")
    s.assistant("", calls=[("late", "read", {"path": "g.py"})], total=30_000)
    s.user("where were we?")
    s.assistant("here", total=9_000)
    return s


@pytest.mark.parametrize("strategy", ["pi", "pi-2026-03", "pi-2025-12"])
def test_no_orphan_call_is_sent_where_the_provider_layer_repairs_it(strategy):
    t = aborted_run_session().transcript()
    profile = small_profile(40_000)  # threshold 40,000 - 16,384 = 23,616 < 30,000
    result = replay(t, strategy, profile=profile, usage="recorded-always")
    last = result.requests[-1]
    assert tool_pair_problems(last.messages) == []
    late = [m for m in last.messages if any(c.id == "late" for c in m.tool_calls) or m.tool_call_id == "late"]
    if strategy == "pi-2025-12":
        # compacted right after the crossing assistant (mid-run); the run ends without a result for the
        # call, and from the next prompt on the transform drops the unanswered call from its message
        assert result.compactions and result.compactions[0].trigger == "threshold"
        # usage differences from the newest (30,000): the first >= 20,000 is 30,000 - 10,000 ("done 2"),
        # so the last kept assistant is the call of task 3 and the cut its user message
        assert result.compactions[0].details["firstKeptEntryId"] == next(i.id for i in t.items if i.text.startswith("task 3 "))
        assert late == []
    else:
        # pi-ai since fb1fdb60: a synthetic error result answers it
        assert [m.role for m in late] == ["assistant", "tool"] and late[1].content == "No result provided" and late[1].is_error


def _estimate(message: dict) -> int:
    """Pi's chars/4 (UTF-16 lengths) of one raw message, written from docs/specs/pi.md §2.5."""

    def n(text: str) -> int:
        return len(text.encode("utf-16-le")) // 2

    role, content = message["role"], message.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else (content or [])
    chars = 0
    if role == "bashExecution":
        chars = n(message.get("command") or "") + n(message.get("output") or "")
    for block in blocks if role != "bashExecution" else ():
        if block["type"] == "text":
            chars += n(block["text"])
        elif block["type"] == "thinking" and role == "assistant":
            chars += n(block["thinking"])
        elif block["type"] == "toolCall":
            chars += n(block["name"]) + n(json.dumps(block["arguments"], ensure_ascii=False, separators=(",", ":")))
        elif block["type"] == "image" and role == "toolResult":
            chars += 4800
    return math.ceil(chars / 4)


@pytest.mark.corpora
def test_fidelity_reproduces_both_recorded_compactions_in_every_column():
    raw = [json.loads(line) for line in (FOLDER / "before-compaction.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    recorded = [(n, line) for n, line in enumerate(raw) if line.get("type") == "compaction"]
    rows = [r for r in fidelity_rows(FOLDER / "before-compaction.jsonl", strategies=("pi-2025-12",)) if r.strategy == "pi-2025-12"]
    assert len(rows) == len(recorded) == 2  # no compaction of its own besides the recorded ones
    for row, (index, line) in zip(rows, recorded, strict=True):
        first_kept = line["firstKeptEntryIndex"]
        kept = sum(_estimate(raw[i]["message"]) for i in range(first_kept, index) if raw[i].get("type") == "message")
        assert raw[first_kept]["message"]["role"] == "user"
        assert row.tokens_before == row.recorded_tokens_before == line["tokensBefore"]
        assert row.cut == row.recorded_cut and f"(user, line {first_kept + 1})" in row.cut
        assert row.kept == row.recorded_kept == kept
    assert [r.cut.split("`")[1] for r in rows] == ["00000125", "00000227"]
    assert [r.kept for r in rows] == [15_579, 16_642]
    assert [r.tokens_before for r in rows] == [175_004, 185_014]
    assert rows[0].trigger.startswith("does not fire → manual") and rows[1].trigger.startswith("fires")


@pytest.mark.parametrize("strategy", ["none", "truncate", "observation-masking"])
def test_baselines_send_an_orphan_call_as_recorded(strategy):
    """strategies/baselines.py: no provider layer, so the unanswered call goes out unrepaired."""
    s = Session()
    s.user("hello")
    s.assistant("", calls=[("c1", "read", {"path": "a"})], total=100)
    s.user("continue")
    s.assistant("done", total=130)
    last = replay(s.transcript(), strategy, profile=small_profile(100_000)).requests[-1]
    assert tool_pair_problems(last.messages) == ["message 2: calls ['c1'] not answered before it"]


def test_second_summary_request_starts_with_the_previous_summary_and_has_no_system_prompt():
    s = aborted_run_session()  # compaction 1 right after the assistant at 30,000
    for n in range(6, 9):
        s.user(f"task {n} " + "x" * 2_000)
        s.assistant(f"done {n}", total=10_000 + 4_000 * (n - 6))  # under 23,616
    s.user("more")
    s.assistant("wrapped up", total=33_000)  # 33,000 - 10,000 >= 20,000; the run ends here
    result = replay(s.transcript(), "pi-2025-12", profile=small_profile(40_000), usage="recorded-always")
    first, second = result.compactions
    request = [r for r in result.requests if r.kind == "summary"][1]
    assert request.messages[0].role == "user" and request.messages[0].content == "Previous session summary:\n" + first.summary
    assert "system" not in [m.role for m in request.messages]
    assert request.messages[-1].role == "user" and "hand-over summary" in request.messages[-1].content


def late_compaction_session() -> Session:
    """One run that crosses the threshold (40,000 - 16,384 = 23,616) at a tool call, then goes on: the
    call's result, a last assistant still over the threshold, then the next prompt."""
    s = Session()
    s.user("task " + "x" * 2_000)  # i0
    s.assistant("", calls=[("c0", "read", {"path": "a.py"})], total=3_000)  # i1
    s.result("c0", "y" * 400)  # i2
    s.assistant("", calls=[("late", "read", {"path": "g.py"})], total=30_000)  # i3: 30,000 > 23,616
    s.result("late", "the file g.py")  # i4
    s.assistant("after", total=31_000)  # i5: the run ends here, still over the threshold
    s.user("next")  # i6
    s.assistant("ok", total=5_000)  # i7
    return s


def roles(request) -> list[tuple[str, str]]:
    return [(m.role, m.tool_call_id or ",".join(c.id for c in m.tool_calls) or (m.content or "")[:12]) for m in request.messages]


def test_an_auto_compaction_leaves_the_run_going_on_its_own_uncompacted_messages():
    """83a6c269 `checkAutoCompaction` (agent-session.ts L586-631) does not abort the run: the agent loop
    keeps the messages it started with plus what the run adds (agent.ts L250-259, agent-loop.ts L25-37),
    so the call that crossed the threshold runs and the rest of the run sends the whole context; the
    compaction is sent from the next prompt on."""
    result = replay(late_compaction_session().transcript(), "pi-2025-12", profile=small_profile(40_000),
                    usage="recorded-always", strict=True)
    turns = [r for r in result.requests if r.kind == "turn"]
    # the request after the crossing assistant: everything, the late call answered by its recorded result
    assert roles(turns[2]) == [("user", "task xxxxxxx"), ("assistant", "c0"), ("tool", "c0"), ("assistant", "late"), ("tool", "late")]
    first, second = result.compactions
    # 1st, after i3: usages from the newest, 30,000 - 3,000 >= 20,000, so the last kept assistant is i3 and
    # the cut the user message before it: nothing to summarize, all kept
    assert first.details["firstKeptEntryId"] == "i0" and first.summarized_ids == ()
    # the first entry is saved once the late call's tool has run (after i4). 2nd, after i5 (31,000, still
    # over): its range starts after the first compaction entry and holds no user message, so it keeps
    # everything in range (i5 on) and summarizes only the previous summary
    summaries = [r for r in result.requests if r.kind == "summary"]
    assert summaries[1].messages[0].content == "Previous session summary:\n" + first.summary
    assert second.details["firstKeptEntryId"] == "i5"
    # both take effect at the next prompt: the first, replaced within the run, is not probed
    assert not first.probed and second.probed and second.next_request == turns[3].index
    # `loadSessionFromEntries`: the 2nd summary, then the messages from i5 on; the first compaction's
    # kept tail (the task and its tool calls) is lost without a summary of its own
    assert roles(turns[3]) == [("user", "The conversa"), ("assistant", "after"), ("user", "next")]
    assert second.dropped_ids == ("i0", "i1", "i2", "i3", "i4")


def test_the_run_requests_after_an_auto_compaction_hold_everything_and_it_shows_at_the_next_prompt():
    s = Session()
    s.user("task " + "x" * 2_000)
    s.assistant("", calls=[("c0", "read", {"path": "a.py"})], total=3_000)
    s.result("c0", "y" * 400)
    s.assistant("", calls=[("late", "read", {"path": "g.py"})], total=30_000)  # compaction; the run goes on
    s.result("late", "recorded, and upstream ran it")
    s.assistant("after", total=20_000)  # under 23,616: no second compaction
    s.user("next")
    s.assistant("ok", total=5_000)
    result = replay(s.transcript(), "pi-2025-12", profile=small_profile(40_000), usage="recorded-always", strict=True)
    (compaction,) = result.compactions
    turns = [r for r in result.requests if r.kind == "turn"]
    assert compaction.trigger == "threshold" and compaction.next_request == turns[3].index
    assert any(m.tool_call_id == "late" for m in turns[2].messages)  # the late call ran and its result was sent
    assert [m.content[:12] for m in turns[3].messages[:1]] == ["The conversa"]  # the summary first
    # kept from the task on (nothing summarized): the next prompt's context, call and result paired
    assert roles(turns[3])[1:] == [("user", "task xxxxxxx"), ("assistant", "c0"), ("tool", "c0"), ("assistant", "late"),
                                   ("tool", "late"), ("assistant", "after"), ("user", "next")]
    for request in turns:
        assert tool_pair_problems(request.messages) == [], request.index


def test_a_recorded_compaction_after_the_crossing_assistant_is_matched_to_the_pending_one():
    """`compact_at_recorded` (the fidelity replay): where the recorded agent compacted right after the
    assistant that crossed the threshold, the strategy's own compaction (saved there, reported at the end
    of the run) carries the recorded values instead of a second, manual compaction."""
    s = late_compaction_session()
    at = next(n for n, i in enumerate(s.items) if i.id == "i3") + 1
    marker = Item("m1", "marker", meta={"event": "compaction", "entry": "rec1", "firstKeptEntryId": "i0", "tokensBefore": 30_000})
    s.items.insert(at, marker)
    result = replay(s.transcript(), "pi-2025-12", profile=small_profile(40_000), usage="recorded-always",
                    options={"compact_at_recorded": True}, strict=True)
    first, second = result.compactions
    assert first.details["recorded"]["entry"] == "rec1" and first.details["recorded"]["triggerFires"]
    assert first.details["recorded"]["firstKeptRole"] == "user" and "recorded" not in second.details
    turns = [r for r in result.requests if r.kind == "turn"]
    assert any(m.tool_call_id == "late" for m in turns[2].messages)  # the run went on after the marker
