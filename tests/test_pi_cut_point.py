"""Pi cut points, context building and serialization on hand-built entries (docs/specs/pi.md §1.4, §3, §4.1, §4.4).

Sizes are in characters, so each expected cut follows from chars/4 by hand.
"""

from __future__ import annotations

from compaction_bench.strategies.pi_compaction import (
    BASE,
    LATER,
    FileOps,
    find_cut_point,
    prepare_compaction,
    serialize_conversation,
)
from compaction_bench.strategies.pi_session_tree import (
    BRANCH_SUMMARY_PREFIX,
    COMPACTION_SUMMARY_PREFIX,
    Entry,
    PathIndex,
    PiMessage,
    to_wire,
)
from tests.pi_builders import Entries


def _sums(rules=BASE) -> PathIndex:
    """Fresh estimate sums with the default image size and the version's image rules."""
    return PathIndex(image_chars=4800, user_images=rules.user_images)


def test_tie_break_uses_greater_or_equal_at_the_crossing_entry():
    e = Entries()
    e.user(40)  # 10 tokens
    e.assistant(40)  # 10
    e.user(40)  # 10
    e.assistant(40)  # 10: alone reaches exactly 10
    cut = find_cut_point(e.path, 0, 4, 10, index=_sums())
    # 10 >= 10 at the newest assistant (index 3): the crossing entry is itself valid.
    assert cut.first_kept_index == 3
    assert cut.is_split_turn and cut.turn_start_index == 2
    # one token more and the walk goes on to the user message at index 2
    assert find_cut_point(e.path, 0, 4, 11, index=_sums()).first_kept_index == 2


def test_crossing_tool_result_moves_to_the_oldest_valid_cut_at_or_after_it():
    e = Entries()
    e.user(8)  # 2
    e.assistant(8, [("c1", "read", {"path": "a"})])  # index 1: 8 + 4 + 12 chars = 6 tokens
    e.result("c1", 80)  # index 2: 20 tokens
    e.assistant(8, [("c2", "read", {"path": "b"})])  # index 3: 6
    e.result("c2", 8)  # index 4: 2
    e.assistant(16)  # index 5: 4
    # walk: 4 + 2 + 6 = 12, then + 20 = 32 crosses 20 at the tool result (index 2)
    cut = find_cut_point(e.path, 0, 6, 20, index=_sums())
    assert cut.first_kept_index == 3  # the assistant right after it, not the result
    assert e.path[cut.first_kept_index].role == "assistant"
    assert cut.turn_start_index == 0 and cut.is_split_turn


def test_crossing_tool_result_without_a_valid_cut_after_it_keeps_everything():
    e = Entries()
    e.user(8)
    e.assistant(8, [("c1", "read", {}), ("c2", "read", {})])
    e.result("c1", 80)
    e.result("c2", 80)  # the newest results alone exceed the budget
    cut = find_cut_point(e.path, 0, 4, 20, index=_sums())
    assert cut.first_kept_index == 0 and not cut.is_split_turn


def test_cut_extends_back_over_settings_entries_and_flags_the_quirky_split():
    e = Entries()
    e.user(400)  # 100
    e.assistant(400)  # 100
    e.setting()  # model_change just before the user message
    e.user(40)
    e.assistant(40)
    cut = find_cut_point(e.path, 0, 5, 20, index=_sums())
    # crossing at the user message (index 3), then back over the model_change to index 2
    assert cut.first_kept_index == 2
    # the cut is no longer a user message: the whole previous turn becomes the "prefix"
    assert cut.is_split_turn and cut.turn_start_index == 0


def test_no_valid_cut_points_keeps_from_start():
    e = Entries()
    e.setting()
    e.setting()
    assert find_cut_point(e.path, 0, 2, 5, index=_sums()).first_kept_index == 0


def compacted_path(summary: str) -> tuple[Entries, str]:
    """user, assistant (kept), compaction, user."""
    e = Entries()
    e.user(4)
    kept = e.assistant(4)
    e.compaction(first_kept=kept.id, summary=summary)
    e.user(4)
    return e, kept.id


def test_build_context_uses_latest_compaction_and_wrappers():
    e, _ = compacted_path("SUM")
    messages = _sums().update(e.path).session_context(nested_compactions=False)
    assert [m.role for m in messages] == ["compactionSummary", "assistant", "user"]
    wire = to_wire(messages)
    assert wire[0].content == COMPACTION_SUMMARY_PREFIX + "SUM" + "\n</summary>"
    branch = PiMessage(role="branchSummary", summary="B")
    assert to_wire([branch])[0].content == BRANCH_SUMMARY_PREFIX + "B</summary>"


def test_nested_compaction_in_kept_range_only_in_later():
    e, first_kept = compacted_path("OLD")
    e.compaction(first_kept=first_kept, summary="NEW")
    index = _sums().update(e.path)
    base = index.session_context(nested_compactions=False)
    later = index.session_context(nested_compactions=True)
    assert [m.summary for m in base if m.role == "compactionSummary"] == ["NEW"]
    assert [m.summary for m in later if m.role == "compactionSummary"] == ["NEW", "OLD"]


def test_provider_transform_drops_errors_and_patches_orphan_calls():
    from compaction_bench.request import ToolCall

    call = ToolCall("t1", "read", "{}")
    messages = [
        PiMessage(role="user", texts=("go",)),
        PiMessage(role="assistant", tool_calls=(call,), stop_reason="toolUse"),
        PiMessage(role="assistant", stop_reason="error", error_message="boom"),
        PiMessage(role="user", texts=("again",)),
    ]
    wire = to_wire(messages)
    assert [m.role for m in wire] == ["user", "assistant", "tool", "user"]
    assert wire[2].content == "No result provided" and wire[2].is_error and wire[2].tool_call_id == "t1"


def test_serializer_markers_and_tool_result_truncation():
    from compaction_bench.request import ToolCall

    messages = [
        PiMessage(role="user", texts=("fix ", "it")),
        PiMessage(role="assistant", thinking=("hmm",), texts=("ok", "sure"), tool_calls=(ToolCall("c", "read", '{"path":"a.py","limit":3}'),)),
        PiMessage(role="toolResult", texts=("x" * 2005,)),
    ]
    text = serialize_conversation(messages, 2000)
    assert text.split("\n\n")[:4] == [
        "[User]: fix it",
        "[Assistant thinking]: hmm",
        "[Assistant]: ok\nsure",
        '[Assistant tool calls]: read(path="a.py", limit=3)',
    ]
    assert text.endswith("[Tool result]: " + "x" * 2000 + "\n\n[... 5 more characters truncated]")


def test_file_lists_sorted_read_minus_modified():
    from compaction_bench.request import ToolCall

    ops = FileOps()
    ops.add_messages(
        [
            PiMessage(
                role="assistant",
                tool_calls=(
                    ToolCall("1", "read", '{"path":"b.py"}'),
                    ToolCall("2", "read", '{"path":"Z.py"}'),
                    ToolCall("3", "edit", '{"path":"b.py"}'),
                    ToolCall("4", "write", '{"path":"c.py"}'),
                    ToolCall("5", "bash", '{"path":"ignored.py"}'),
                    ToolCall("6", "read", '{"path":""}'),
                ),
            )
        ]
    )
    assert ops.details() == {"readFiles": ["Z.py"], "modifiedFiles": ["b.py", "c.py"]}
    assert ops.tags() == "\n\n<read-files>\nZ.py\n</read-files>\n\n<modified-files>\nb.py\nc.py\n</modified-files>"


def test_boundaries_per_version_2608():
    """BASE starts after the previous compaction, LATER at its firstKeptEntryId."""
    e = Entries()
    e.user(40)
    kept = e.user(40)
    e.assistant(40)
    e.compaction(first_kept=kept.id)
    e.user(400)
    e.assistant(40)
    base = prepare_compaction(e.path, BASE, keep_recent_tokens=5, index=_sums(BASE))
    later = prepare_compaction(e.path, LATER, keep_recent_tokens=5, index=_sums(LATER))
    assert base is not None and later is not None
    assert base.boundary_start == 4 and later.boundary_start == 1
    # LATER summarizes the previously kept messages (entries 1-2) too; BASE never sees them
    assert later.summarized_entries == ["e1", "e2", "e4"]
    assert base.summarized_entries == ["e4"]
    assert base.previous_summary == later.previous_summary == "S"


def test_already_compacted_returns_nothing():
    e = Entries()
    e.user(4)
    e.compaction(first_kept="e0")
    assert prepare_compaction(e.path, BASE, keep_recent_tokens=5, index=_sums(BASE)) is None


def test_user_images_count_only_later():
    from compaction_bench.strategies.pi_session_tree import estimate_tokens
    from compaction_bench.transcript import Attachment

    message = PiMessage(role="user", texts=("abcd",), images=(Attachment("image/png"),))
    assert estimate_tokens(message, image_chars=4800, user_images=False) == 1
    assert estimate_tokens(message, image_chars=4800, user_images=True) == 1201


def test_entry_is_not_a_cut_point_when_tool_result():
    from compaction_bench.strategies.pi_compaction import is_valid_cut_point

    assert not is_valid_cut_point(Entry("x", None, "message", 0, message=PiMessage(role="toolResult")))
    assert is_valid_cut_point(Entry("y", None, "custom_message", 0, message=PiMessage(role="custom")))
