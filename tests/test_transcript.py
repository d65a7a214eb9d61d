"""The canonical transcript model and its JSONL file format."""

from __future__ import annotations

import json

import pytest

from compaction_bench.transcript import Attachment, Item, Transcript, TranscriptError, Usage


def sample() -> Transcript:
    return Transcript(
        "t",
        (
            Item("sys", "system", "be brief"),
            Item("ctx", "user", "<env>cwd=/repo</env>", synthetic=True),
            Item("u0", "user", "fix tests 😀\u2028ok", turn=0, attachments=(Attachment("image/png", "x.png", 10),)),
            Item("r0", "reasoning", "think", response=0, turn=0, meta={"encrypted_size": 120}),
            Item("c0", "tool_call", call_id="call_a", tool_name="bash", arguments='{"cmd":"pytest"}', response=0, turn=0),
            Item("c1", "tool_call", call_id="call_b", tool_name="bash", arguments='{"cmd":"ls"}', response=0, turn=0,
                 usage=Usage(input=100, cached_input=20, output=7)),
            Item("o0", "tool_result", "FAILED", call_id="call_a", is_error=True, turn=0),
            Item("a1", "assistant", "done", response=1, turn=0, usage=Usage(input=130, output=2), timestamp="2025-01-01T00:00:00Z"),
            Item("u1", "user", "thanks", turn=1),
            Item("m", "marker", meta={"event": "compaction", "tokens_before": 5000}),
        ),
        source={"format": "test", "path": "x"},
        model="gpt-5",
        meta={"problems": ["line 3: bad"]},
    )


def test_round_trip_is_lossless():
    t = sample()
    again = Transcript.loads(t.dumps())
    assert again == t
    assert again.items[2].text == "fix tests 😀\u2028ok"
    assert again.items[3].meta["encrypted_size"] == 120


def test_header_line_and_one_item_per_line():
    lines = sample().dumps().rstrip("\n").split("\n")
    assert json.loads(lines[0])["format"] == "compaction-bench/transcript"
    assert len(lines) == 1 + len(sample().items)


def test_steps_turns_and_pairs():
    t = sample()
    steps = t.steps()
    assert [len(s.items) for s in steps] == [3, 1]
    assert steps[0].needs_follow_up and not steps[1].needs_follow_up
    assert steps[0].usage == Usage(input=100, cached_input=20, output=7)
    assert [len(turn.items) for turn in t.turns()] == [8, 2]
    assert [i.id for i in t.real_user_messages()] == ["u0", "u1"]
    assert t.orphans() == {"calls_without_result": ["c1"], "results_without_call": []}
    assert t.tool_call("call_a").id == "c0"
    assert [m.id for m in t.markers("compaction")] == ["m"]


def test_usage_total_defaults_to_input_plus_output():
    assert Usage(input=10, output=5).total == 15
    assert Usage(input=10, output=5, total=99).total == 99


def test_bad_input_names_the_line():
    good = sample().dumps().split("\n")
    broken = "\n".join([good[0], good[1], '{"id": "x", "kind": "user", "text": "cut', good[3]])
    with pytest.raises(TranscriptError, match=r"<string>:3: malformed JSON"):
        Transcript.loads(broken)
    with pytest.raises(TranscriptError, match=r":2: unknown item field"):
        Transcript.loads("\n".join([good[0], '{"id": "x", "kind": "user", "colour": 1}']))
    with pytest.raises(TranscriptError, match="empty file"):
        Transcript.loads("")
    with pytest.raises(TranscriptError, match="duplicate item id 'a'"):
        Transcript("t", (Item("a", "user"), Item("a", "user")))
    with pytest.raises(TranscriptError, match="unknown kind"):
        Item("a", "robot")
