"""Tool-pair integrity per wire format, on hand-built layouts whose verdicts follow from each API's rules."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from compaction_bench.metrics.integrity import CHECKS, RequestChecks, Violation, check, unanswered_calls
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
    st.sampled_from([Message("user", "u"), Message("assistant", "a"), Message("reasoning", "r"), Message("system", "s"),
                     Message("compaction", "c"), Message("developer", "d")]),
    st.lists(st.sampled_from("abc"), min_size=1, max_size=3, unique=True).map(lambda ids: call(*ids)),
    st.sampled_from("abcz").map(result),
)


@settings(max_examples=1500, deadline=None)
@given(st.lists(MESSAGES, max_size=12))
def test_the_fast_path_reports_what_every_format_reports(messages):
    """Where the one-pass reading accepts a layout, each format's full check finds exactly its
    unanswered calls, as orphans, in order (and nothing for a layout without one)."""
    unanswered = unanswered_calls(messages)
    if unanswered is not None:
        for fmt, check_format in CHECKS.items():
            assert check_format(messages) == [Violation(fmt, "orphan_call", i, (n,)) for i, n in unanswered], fmt


def test_the_fast_path_agrees_with_the_full_checks_on_replayed_requests():
    """Replays that keep, cut and summarize around aborted calls (the synthetic session whose
    recording has them): `check` equals the four full checks (on every third request), the checks
    of a cell's requests in order (`RequestChecks`, which resumes where the request before ended)
    equal `check` of each request alone, and the fast path took most of them."""
    from compaction_bench import replay
    from compaction_bench.scenarios.synthetic import generate

    transcript = generate("aborted-calls", 3, balanced_facts=True).transcript
    fast = total = 0
    for strategy in ("none", "truncate", "claude-code", "opencode-v1"):
        in_order = RequestChecks()
        for request in replay(transcript, strategy, profile="64k").requests:
            total += 1
            fast += unanswered_calls(request.messages) is not None
            alone = check(request.messages)
            assert in_order.check(request.messages) == alone, (strategy, request.index)
            if request.index % 3 == 0:
                assert alone == {fmt: CHECKS[fmt](request.messages) for fmt in CHECKS}, (strategy, request.index)
    assert fast > total / 2


def test_checks_in_order_resume_only_where_a_request_extends_the_one_before():
    """A request that drops, rewrites or reorders what the one before held is read from its start."""
    opening = [Message("user", "go"), call("a")]
    answered = [*opening, result("a"), Message("user", "next")]
    rewritten = [Message("user", "go"), call("b"), result("b")]
    orphaned = [*opening, Message("user", "next"), call("c")]
    checks = RequestChecks()
    for messages in (opening, answered, rewritten, orphaned, [*orphaned, result("c")], [result("c")], opening):
        assert checks.check(messages) == check(messages), messages


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
