"""OpenCode shared components against docs/specs/opencode.md: estimator, limits, error patterns, tail
selection, and V2's serialization and tail (upstream `packages/core/src/session/compaction.ts@031a4a9c`, which
supersedes the spec's §6), each with answers worked out by hand from the spec or upstream's code."""

from __future__ import annotations

import json

import pytest

from compaction_bench.profiles import get_profile
from compaction_bench.provider import ProviderError, overflow_error
from compaction_bench.request import Message, ToolCall
from compaction_bench.strategies.opencode_components import (
    Estimator,
    ModelLimits,
    Record,
    Renderer,
    SessionStore,
    TailStart,
    View,
    find_tail_start,
    is_context_overflow,
    model_message_json,
    select_from_turns,
    serialize_record,
    turn_spans,
    usable_window,
    usage_count,
)
from compaction_bench.tokens import opencode_estimate
from compaction_bench.transcript import Attachment, Item, Usage


# ----------------------------------------------------------------- §2.4 estimate
def test_estimate_rounds_half_up_on_utf16_units():
    # U+1F600 is one code point but two UTF-16 units: 2/4 = 0.5 rounds up to 1 (Python's round gives 0).
    assert opencode_estimate("\U0001F600") == 1
    # 5 emoji = 10 units -> 2.5 -> 3 (banker's rounding would say 2; code points would say round(1.25) = 1).
    assert opencode_estimate("\U0001F600" * 5) == 3
    assert opencode_estimate("a\U0001F600") == 1  # 3 units -> 0.75 -> 1
    assert opencode_estimate("abcde") == 1  # 1.25 -> 1
    assert opencode_estimate("abcdef") == 2  # 1.5 -> 2
    assert opencode_estimate("") == 0


def test_estimator_is_the_estimate_of_the_json_of_the_slice():
    est = Estimator()
    messages = [
        Message("user", "fix \U0001F600 bug"),
        Message("assistant", "", tool_calls=(ToolCall("c1", "read", '{"path": "a.py"}'),)),
        Message("tool", "contents", tool_call_id="c1", name="read"),
    ]
    expected_json = json.dumps(
        [
            {"role": "user", "content": [{"type": "text", "text": "fix \U0001F600 bug"}]},
            {"role": "assistant", "content": [{"type": "tool-call", "toolCallId": "c1", "toolName": "read", "input": {"path": "a.py"}}]},
            {"role": "tool", "content": [{"type": "tool-result", "toolCallId": "c1", "toolName": "read", "output": {"type": "text", "value": "contents"}}]},
        ],
        ensure_ascii=False,
        separators=(",", ":"),
    )
    units = len(expected_json.encode("utf-16-le")) // 2
    estimate = est.slices([messages[:1], messages[1:]])
    assert estimate(0, 2) == (units + 2) // 4
    # the slice from the second group: the JSON array without the first element and its comma
    first = json.dumps(json.loads(expected_json)[0], ensure_ascii=False, separators=(",", ":"))
    rest = units - len(first.encode("utf-16-le")) // 2 - 1
    assert estimate(1, 2) == (rest + 2) // 4
    # groups of a history from index 5 on (offset 5): the same estimates
    assert est.slices([messages[:1], messages[1:]], 5)(5, 7) == estimate(0, 2)


def test_estimator_counts_media_as_a_data_url():
    est = Estimator()
    plain = Message("user", "look")
    with_image = Message("user", "look", attachments=(Attachment("image/png", "a.png", size=3000),))
    # 3000 bytes -> 4000 base64 characters plus the part's own JSON.
    assert est.units(with_image) - est.units(plain) >= 4000


# ----------------------------------------------------------------- §1 limits, usage, errors
def test_usable_window_examples_of_the_spec():
    assert usable_window(ModelLimits(200_000, 32_000), 32_000, None, 20_000) == 168_000
    assert usable_window(ModelLimits(200_000, 32_000, input=200_000), 32_000, None, 20_000) == 180_000
    assert usable_window(ModelLimits(200_000, 32_000, input=200_000), 32_000, 5_000, 20_000) == 195_000
    # limit.output 0: min() gives 0 and `|| 32000` applies.
    assert usable_window(ModelLimits(100_000, 0), 32_000, None, 20_000) == 68_000
    assert usable_window(ModelLimits(0, 32_000), 32_000, None, 20_000) == 0


def test_usage_count_is_total_or_the_fallback_sum_without_reasoning():
    assert usage_count(Usage(input=900, cached_input=800, output=50, reasoning=20, total=2000)) == 2000
    # input 900 includes 800 cached and 50 written; output 50 includes 20 reasoning:
    # fresh 50 + output 30 + read 800 + write 50.
    usage = Usage(input=900, cached_input=800, cache_write=50, output=50, reasoning=20)
    object.__setattr__(usage, "total", 0)
    assert usage_count(usage) == 930


@pytest.mark.parametrize(
    ("message", "status", "code", "expected"),
    [
        ("prompt is too long: 70000 tokens > 64000 maximum", 400, "invalid_request_error", True),
        ("This model's maximum context length is 128000 tokens.", 400, "", True),
        ("400 status code (no body)", 400, "", True),
        ("payload", 413, "", True),
        ("whatever", 400, "context_length_exceeded", True),
        ("Rate limit reached for requests", 429, "rate_limit", False),
        ("Internal server error", 500, "", False),
    ],
)
def test_overflow_classifier(message, status, code, expected):
    assert is_context_overflow(ProviderError("x", status, code, message)) is expected


def test_the_simulated_providers_errors_are_overflows():
    assert is_context_overflow(overflow_error(get_profile("64k"), 70_000, 0))
    assert is_context_overflow(overflow_error(get_profile("claude-sonnet"), 250_000, 0))


# ----------------------------------------------------------------- §2.5 select
def _sizes(sizes):
    return lambda s, e: sum(sizes[s:e])


def select_tail(starts_turn, estimate, tail_turns, budget):
    """§2.5 `select` over a history whose messages start a turn where `starts_turn` is true."""
    return select_from_turns(turn_spans([n for n, flag in enumerate(starts_turn) if flag], len(starts_turn)), estimate, tail_turns, budget)


def test_whole_two_turn_tail():
    # turns [0,3) [3,5) [5,7); the newest two (20 + 20) fit a budget of 100.
    starts = [True, False, False, True, False, True, False]
    choice = select_tail(starts, _sizes([10] * 7), tail_turns=2, budget=100)
    assert (choice.start, choice.reason, choice.whole_turns, choice.split) == (3, "whole-turns", 2, False)


def test_turn_that_does_not_fit_keeps_its_earliest_fitting_suffix():
    starts = [True, False, True, False, False, False]
    sizes = [10, 10, 500, 80, 30, 10]
    # newest turn [2,6) = 620 > 50; suffixes: [3,6) = 120, [4,6) = 40 <= 50 -> start 4.
    choice = select_tail(starts, _sizes(sizes), tail_turns=2, budget=50)
    assert (choice.start, choice.reason, choice.split) == (4, "split-turn", True)
    # After a whole newest turn (20), the older turn [2,6) gets the remaining 80: [3,6) = 120, [4,6) = 40.
    starts = [True, False, True, False, False, False, True, False]
    choice = select_tail(starts, _sizes(sizes + [10, 10]), tail_turns=2, budget=100)
    assert (choice.start, choice.whole_turns, choice.split) == (4, 1, True)


def test_no_tail_at_index_zero_or_when_nothing_fits():
    starts = [True, False, True, False]
    assert select_tail(starts, _sizes([10] * 4), 2, 100).start is None
    assert select_tail(starts, _sizes([10] * 4), 2, 100).reason == "starts-at-index-0"
    # the newest turn alone is one message too big for the budget: no split possible.
    assert select_tail([True, True], _sizes([10, 500]), 2, 100).reason == "nothing-fits"
    assert select_tail(starts, _sizes([10] * 4), 0, 100).reason == "disabled"


# ----------------------------------------------------------------- V2 text and tail (compaction.ts@031a4a9c)
def test_serialization_markers_and_truncation():
    user = Record(0, "user", items=[Item("u", "user", "hi", attachments=(Attachment("image/png", "a.png"),))])
    assert serialize_record(user, 2000) == "[User]: hi\n[Attached image/png: a.png]"
    step = Record(1, "step", items=[
        Item("r", "reasoning", "think", response=0),
        Item("t", "assistant", "reading", response=0),
        Item("c", "tool_call", call_id="k1", tool_name="read", arguments='{"p":1}', response=0),
        Item("c2", "tool_call", call_id="k2", tool_name="bash", arguments='{"cmd":"x"}', response=0),
        Item("c3", "tool_call", call_id="k3", tool_name="bash", arguments="{}", response=0),
    ])
    step.results = {
        "k1": Item("o1", "tool_result", "z" * 2001, call_id="k1"),
        "k2": Item("o2", "tool_result", "boom", call_id="k2", is_error=True),
    }
    assert serialize_record(step, 2000) == (
        "[Assistant reasoning]: think\n[Assistant]: reading\n"
        '[Assistant tool call]: read({"p":1})\n[Tool result]: ' + "z" * 2000 + "\n[truncated]\n"
        '[Assistant tool call]: bash({"cmd":"x"})\n[Tool error]: boom\n'
        "[Assistant tool call]: bash({})"
    )


def tail(kinds: str, sizes: list[int], keep: int, previous_recent: bool = False):
    """`find_tail_start` of entries whose kinds are "u" (a user message) or "a", each `size` tokens long."""
    entries = [(n, kind == "u", "x" * (4 * size)) for n, (kind, size) in enumerate(zip(kinds, sizes, strict=True))]
    found = find_tail_start(entries, len(entries), keep, previous_recent)
    return None if found is None else (found.start, found.reason)


def test_tail_keeps_whole_entries_back_to_a_user_message():
    # newest first: 300, 300 (600), then 500 would make 1,100 > 1,000; the walk stopped at index 3, an
    # assistant: back to the user message at 2 (findTailStart L288-300)
    assert tail("uauaa", [100, 500, 200, 300, 300], 1_000) == (2, "user-boundary")
    # the newest entry is kept even when it alone is over the allowance (L288), and the start moves back from it
    assert tail("uaua", [100, 100, 100, 5_000], 1_000) == (2, "user-boundary")


def test_tail_when_everything_fits_keeps_the_latest_exchange():
    assert tail("uaua", [100, 100, 100, 100], 1_000) == (2, "latest-exchange")  # L302-304
    # one turn only: the walk ends at its user message, the first; without a checkpoint's recent tail
    # everything is summarized and nothing kept, with one everything since the checkpoint is kept (L306-311)
    assert tail("uaaa", [100, 100, 100, 100], 1_000) == (4, "none")
    assert tail("aaa", [100, 100, 100], 1_000, previous_recent=True) == (0, "all-since-checkpoint")
    assert find_tail_start([], 3, 1_000, True) is None  # nothing to compact (L286)


def test_tail_counts_utf16_code_units():
    # 1,000 emoji are 2,000 UTF-16 units: 500 estimated tokens (by characters it would be 250). With 499 the
    # walk stops after the newest entry (back to the user message before it); with 500 everything fits.
    entries = [(0, True, "x"), (1, False, "y"), (2, True, "z"), (3, False, "😀" * 1_000)]
    assert find_tail_start(entries, 4, 499, False) == TailStart(2, "user-boundary")
    assert find_tail_start(entries, 4, 500, False) == TailStart(2, "latest-exchange")


# ----------------------------------------------------------------- the incremental view
def fresh(records):
    """The messages of `records` and the sum of their JSON lengths, computed from scratch."""
    messages = Renderer(2000).render(records)
    return messages, sum(len(json.dumps(model_message_json(m), ensure_ascii=False, separators=(",", ":")).encode("utf-16-le")) // 2
                         for m in messages)


def test_view_follows_created_and_changed_records():
    store = SessionStore()
    view = View(store, Renderer(2000), Estimator())
    store.observe_input(Item("u0", "user", "list the files", turn=0))
    store.add_response([Item("c0", "tool_call", call_id="k0", tool_name="bash", arguments='{"cmd":"ls"}', response=0)], None)
    view.update()
    # the call has no result yet: it is sent as interrupted
    assert (view.messages, view.units) == fresh(store.records)
    assert view.messages[-1].content == "[Tool execution was interrupted]"
    # the result arrives: the step record changed and is rendered again; new records are appended
    store.observe_input(Item("r0", "tool_result", "a.py b.py", call_id="k0", turn=0))
    store.add_response([Item("a0", "assistant", "Two files.", response=1)], None)
    store.observe_input(Item("u1", "user", "thanks", turn=1))
    view.update()
    assert (view.messages, view.units) == fresh(store.records)
    assert [m.content for m in view.messages][2:] == ["a.py b.py", "Two files.", "thanks"]
    # a change far back (prune clears the output) re-renders from that record on
    store.records[1].pruned.add("k0")
    store.touch(store.records[1])
    view.update()
    assert (view.messages, view.units) == fresh(store.records)
    assert view.messages[2].content == "[Old tool result content cleared]"
    # a new sequence: only the records from the second on
    view.reset(store.records[2:])
    store.observe_input(Item("u2", "user", "bye", turn=2))
    view.update()
    assert (view.messages, view.units) == fresh(store.records[2:])
