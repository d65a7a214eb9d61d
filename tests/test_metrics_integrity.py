"""Tool-pair integrity per wire format, on hand-built layouts whose verdicts follow from each API's rules."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from compaction_bench.metrics.integrity import CHECKS, Violation, check, strictly_paired
from compaction_bench.request import Message, ToolCall


def call(*ids: str) -> Message:
    return Message("assistant", tool_calls=tuple(ToolCall(i, "read", "{}") for i in ids))


def result(call_id: str) -> Message:
    return Message("tool", f"output of {call_id}", tool_call_id=call_id)


def kinds(violations: list[Violation]) -> list[tuple[str, str, tuple[int, ...]]]:
    return sorted((v.kind, v.call_id, v.messages) for v in violations)


def test_result_split_by_reasoning_is_chat_valid_but_anthropic_invalid():
    # Chat Completions has no reasoning input, so the two tool messages follow their call directly.
    # Anthropic puts the reasoning into an assistant turn between the two tool_result turns, so
    # call b is not answered in the very next turn.
    # Gemini likewise: the reasoning is a model turn between the two response turns.
    messages = [Message("user", "go"), call("a", "b"), result("a"), Message("reasoning", "thinking"), result("b")]
    found = check(messages)
    assert found["openai_chat"] == []
    assert found["openai_responses"] == []
    assert kinds(found["anthropic"]) == kinds(found["gemini"]) == [("misplaced_result", "b", (1, 4))]


def test_user_text_between_call_and_result_breaks_chat_and_anthropic_not_responses():
    messages = [Message("user", "go"), call("a"), Message("user", "wait"), result("a")]
    found = check(messages)
    assert kinds(found["openai_chat"]) == [("misplaced_result", "a", (1, 3))]
    # Anthropic merges the two user turns; the tool_result then comes after text. Gemini: the text is
    # the turn after the call turn, and the response does not open it.
    assert kinds(found["anthropic"]) == kinds(found["gemini"]) == [("misplaced_result", "a", (1, 3))]
    assert found["openai_responses"] == []


def test_orphans_and_duplicates_with_indices():
    messages = [Message("system", "rules"), call("a"), result("a"), result("a"), result("z"), call("c")]
    expected = [("duplicate_id", "a", (2, 3)), ("orphan_call", "c", (5,)), ("orphan_result", "z", (4,))]
    found = check(messages)
    for fmt in ("openai_chat", "openai_responses", "anthropic"):
        assert kinds(found[fmt]) == expected, fmt
    # Gemini also refuses contents that open with a call turn (the system message is the systemInstruction).
    assert kinds(found["gemini"]) == sorted([*expected, ("misplaced_call", "a", (1,))])


def test_result_before_its_call():
    messages = [Message("user", "go"), result("a"), call("a")]
    found = check(messages)
    for fmt in ("openai_responses", "openai_chat", "anthropic", "gemini"):
        assert kinds(found[fmt]) == [("misplaced_result", "a", (2, 1))], fmt


def test_parallel_calls_answered_in_any_order_are_valid_everywhere():
    messages = [Message("system", "rules"), Message("user", "go"), call("a", "b"), result("b"), result("a"), Message("assistant", "done")]
    assert check(messages) == {"openai_chat": [], "openai_responses": [], "anthropic": [], "gemini": []}


def test_a_mid_conversation_system_message_breaks_the_pair_for_chat_and_anthropic():
    # Chat: a system message is a wire message of its own between call and result. Anthropic: only
    # leading system messages become the `system` parameter; a later one is user text before the result.
    # Gemini: every system message goes to the systemInstruction, so the response follows its call turn.
    messages = [Message("system", "rules"), Message("user", "go"), call("a"), Message("system", "reminder"), result("a")]
    found = check(messages)
    assert kinds(found["openai_chat"]) == [("misplaced_result", "a", (2, 4))]
    assert kinds(found["anthropic"]) == [("misplaced_result", "a", (2, 4))]
    assert found["openai_responses"] == []
    assert found["gemini"] == []


MESSAGES = st.one_of(
    st.sampled_from([Message("user", "u"), Message("assistant", "a"), Message("reasoning", "r"), Message("system", "s")]),
    st.lists(st.sampled_from("abc"), min_size=1, max_size=3, unique=True).map(lambda ids: call(*ids)),
    st.sampled_from("abcz").map(result),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(MESSAGES, max_size=10))
def test_the_fast_path_only_passes_layouts_every_format_accepts(messages):
    if strictly_paired(messages):
        for fmt, check_format in CHECKS.items():
            assert check_format(messages) == [], fmt


def test_a_call_id_the_recording_reused_is_not_blamed_on_the_strategy():
    """SWE-agent demo trajectories reuse one call id for two calls; replaying that is inherited."""
    from compaction_bench import replay
    from compaction_bench.metrics.measure import measure_cell
    from compaction_bench.transcript import Item, Transcript

    items = (
        Item("u", "user", "fix it", turn=0),
        Item("c1", "tool_call", call_id="same", tool_name="bash", arguments="{}", response=0, turn=0),
        Item("r1", "tool_result", "first", call_id="same", turn=0),
        Item("c2", "tool_call", call_id="same", tool_name="bash", arguments="{}", response=1, turn=0),
        Item("r2", "tool_result", "second", call_id="same", turn=0),
        Item("a", "assistant", "done", response=2, turn=0),
    )
    tables = measure_cell(replay(Transcript("dup", items), "none", profile="1m"), [], answerer=None)
    last = tables.requests[-1]
    assert last["integrity_openai_chat"] == 0 and last["integrity_anthropic"] == 0
    assert last["integrity_recorded_openai_chat"] > 0 and last["integrity_recorded_anthropic"] > 0
    # Gemini checks each call turn against the turn after it: a reused id breaks nothing there
    assert last["integrity_gemini"] == 0 and last["integrity_recorded_gemini"] == 0
