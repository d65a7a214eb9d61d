"""The Gemini wire format of the integrity metric (`metrics/integrity.py`, format ``gemini``).

Each expected verdict follows from the rules the Gemini API enforces on ``contents`` (quoted in the
module's docstring with their sources): a turn of function responses right after the call turn, as
many responses as calls, no call turn without a user turn before it; clients merge consecutive
messages of one role, every system message is the ``systemInstruction``. The cross-check runs the
same layouts through litellm's own Gemini conversion and applies those rules to the contents it
builds; the last tests replay a recorded Claude Code session and a synthetic one.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from compaction_bench import replay
from compaction_bench.importing import load_transcripts
from compaction_bench.metrics.integrity import ANY_KIND, FORMATS, Violation, check, check_gemini, recorded_orphans
from compaction_bench.metrics.measure import measure_cell
from compaction_bench.request import Message, ToolCall
from compaction_bench.transcript import Item, Transcript
from tests.conftest import CORPORA


def call(*ids: str, text: str = "", name: str = "read") -> Message:
    return Message("assistant", text, tool_calls=tuple(ToolCall(i, name, "{}") for i in ids))


def result(call_id: str | None, content: str = "out", name: str | None = "read") -> Message:
    return Message("tool", content, tool_call_id=call_id, name=name)


def user(text: str = "go") -> Message:
    return Message("user", text)


def system(text: str = "rules") -> Message:
    return Message("system", text)


def kinds(violations: list[Violation]) -> list[tuple[str, str, tuple[int, ...]]]:
    return sorted((v.kind, v.call_id, v.messages) for v in violations)


def gemini(messages: list[Message]) -> list[tuple[str, str, tuple[int, ...]]]:
    """The Gemini verdict through `check` (the fast path included), which must agree with `check_gemini`."""
    found = check(messages)
    assert set(found) == set(FORMATS) and "gemini" in found
    assert kinds(found["gemini"]) == kinds(check_gemini(messages))
    return kinds(found["gemini"])


# --------------------------------------------------------------------------- hand-built layouts
def test_each_call_answered_by_the_next_turn_is_valid():
    assert gemini([system(), user(), call("a"), result("a"), Message("assistant", "done")]) == []
    # a step after a step: the response turn is the user turn before the next call turn
    assert gemini([system(), user(), call("a"), result("a"), call("b"), result("b"), Message("assistant", "done")]) == []


def test_parallel_calls_answered_in_one_turn_in_any_order():
    """One call turn of three calls, one response turn of three responses: the counts agree and every id is answered."""
    assert gemini([user(), call("a", "b", "c"), result("c"), result("a"), result("b"), Message("assistant", "done")]) == []


def test_a_parallel_step_answered_across_two_turns_is_a_count_mismatch():
    """User text between the two responses: litellm sends [fr a], [text], [fr b] as three user contents, so the
    call turn of two calls is answered by one response ("number of function response parts is equal …")."""
    assert gemini([user(), call("a", "b"), result("a"), user("note"), result("b")]) == [("misplaced_result", "b", (1, 4))]


def test_an_orphan_call():
    """The results were summarized away, the call kept: the turn after it holds no response."""
    assert gemini([user(), call("a", "b"), user("summary"), Message("assistant", "next")]) == [
        ("orphan_call", "a", (1,)), ("orphan_call", "b", (1,)),
    ]
    # a missing response of a parallel step: two calls, one response
    assert gemini([user(), call("a", "b"), result("a"), Message("assistant", "next")]) == [("orphan_call", "b", (1,))]


def test_an_orphan_result():
    """The call was summarized away, its response kept: "function response turn comes immediately after a
    function call turn" (the turn before it is the summary)."""
    for summary in (user("summary of earlier work"), Message("compaction", "opaque summary")):
        found = gemini([system(), summary, result("a"), result("b"), Message("assistant", "next")])
        assert found == [("orphan_result", "a", (2,)), ("orphan_result", "b", (3,))]


def test_a_response_not_directly_after_its_call_turn():
    # user text opens the turn after the call turn: litellm sends it as a content of its own
    assert gemini([user(), call("a"), user("wait"), result("a")]) == [("misplaced_result", "a", (1, 3))]
    # the response sits after a later call turn, whose turn then holds two responses for one call
    assert gemini([user(), call("a"), user("more"), call("b"), result("a"), result("b")]) == [("misplaced_result", "a", (1, 4))]
    # the response comes before its call
    assert gemini([user(), result("a"), call("a")]) == [("misplaced_result", "a", (2, 1))]


def test_a_response_for_another_id_does_not_answer_the_call():
    """Gemini 3 matches responses to calls by id (litellm forwards the ids "for strict tool-call matching")."""
    assert gemini([user(), call("a"), result("b"), Message("assistant", "x")]) == [("orphan_call", "a", (1,)), ("orphan_result", "b", (2,))]


def test_two_responses_for_one_call_is_a_count_mismatch():
    assert gemini([user(), call("a"), result("a"), result("a")]) == [("duplicate_id", "a", (2, 3))]
    assert gemini([user(), call("a"), result("a"), user(), result("a")]) == [("duplicate_id", "a", (2, 4))]


def test_contents_that_open_with_a_call_turn():
    """"Please ensure that function call turn comes immediately after a user turn or after a function response
    turn" (gemini-cli#11814): the system message is the systemInstruction, so the call turn comes first."""
    assert gemini([system(), call("a"), result("a"), Message("assistant", "done")]) == [("misplaced_call", "a", (1,))]
    # reasoning or text before the call is the same model turn
    assert gemini([system(), Message("reasoning", "plan"), call("a", "b"), result("a"), result("b")]) == [
        ("misplaced_call", "a", (2,)), ("misplaced_call", "b", (2,)),
    ]
    # any user turn before it will do
    assert gemini([system(), user(), call("a"), result("a")]) == []


def test_what_merges_into_one_turn_does_not_separate_a_pair():
    """Messages of one side make one turn, system messages leave the contents: assistant text or reasoning after
    the calls is part of the call turn, a mid-conversation system message is no turn at all."""
    assert gemini([user(), call("a"), Message("assistant", "note"), result("a")]) == []
    assert gemini([user(), call("a"), Message("reasoning", "think"), result("a")]) == []
    assert gemini([system(), user(), call("a"), system("reminder"), Message("developer", "more rules"), result("a")]) == []
    # user text after the responses is harmless: litellm sends it as the next content, gemini-cli merges it behind them
    assert gemini([user(), call("a", "b"), result("a"), result("b"), user("and now?")]) == []


def test_calls_without_ids_are_answered_by_name_then_in_order():
    """`FunctionCall.id` is optional; a response without an id answers a call without one of its name."""
    anonymous = Message("assistant", tool_calls=(ToolCall("", "read", "{}"), ToolCall("", "grep", "{}")))
    assert gemini([user(), anonymous, result("", name="grep"), result(None, name="read")]) == []
    assert gemini([user(), anonymous, result("", name=None), result("", name=None)]) == []
    assert gemini([user(), Message("assistant", tool_calls=(ToolCall("", "read", "{}"),)), result("", name="write")]) == [
        ("orphan_call", "", (1,)), ("orphan_result", "", (2,)),
    ]


def test_an_id_reused_by_a_later_step_is_no_gemini_error():
    """Each call turn is checked against the turn after it; Anthropic alone wants ids unique in the request."""
    found = check([user(), call("a"), result("a"), user("again"), call("a"), result("a")])
    assert found["gemini"] == [] and {v.kind for v in found["anthropic"]} == {"duplicate_id"}


# --------------------------------------------------------------------------- litellm's own contents
def as_openai(messages: list[Message]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in messages:
        entry: dict[str, Any] = {"role": m.role, "content": m.content or None}
        if m.tool_calls:
            entry["tool_calls"] = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in m.tool_calls]
        if m.role == "tool":
            entry.update(tool_call_id=m.tool_call_id, name=m.name or "read", content=m.content)
        out.append(entry)
    return out


def litellm_contents(messages: list[Message]) -> list[dict[str, Any]]:
    """The `contents` litellm sends to a Gemini 3 model (ids forwarded) for these messages."""
    from litellm.llms.vertex_ai.gemini.transformation import gemini_convert_messages_with_history, transform_system_message

    _, rest = transform_system_message(True, as_openai(messages))
    return [dict(c) for c in gemini_convert_messages_with_history(rest, model="gemini-3-pro-preview")]


def api_accepts(contents: list[dict[str, Any]]) -> bool:
    """The three rules of the Gemini API, content by content, with Gemini 3's id matching."""
    for k, content in enumerate(contents):
        calls = [p["function_call"] for p in content["parts"] if "function_call" in p]
        responses = [p["function_response"] for p in content["parts"] if "function_response" in p]
        before = contents[k - 1] if k else None
        if calls:
            if before is None or before["role"] != "user":
                return False  # "function call turn comes immediately after a user turn or … function response turn"
            after = contents[k + 1] if k + 1 < len(contents) else None
            answered = [p["function_response"] for p in after["parts"] if "function_response" in p] if after else []
            if len(answered) != len(calls) or sorted(str(r.get("id")) for r in answered) != sorted(str(c.get("id")) for c in calls):
                return False  # "number of function response parts is equal to the number of function call parts"
        if responses and (before is None or not any("function_call" in p for p in before["parts"])):
            return False  # "function response turn comes immediately after a function call turn"
    return True


LAYOUTS = {
    "pair": [system(), user(), call("a"), result("a"), Message("assistant", "done")],
    "parallel in another order": [user(), call("a", "b", "c"), result("c"), result("a"), result("b"), Message("assistant", "done")],
    "parallel split by text": [user(), call("a", "b"), result("a"), user("note"), result("b")],
    "orphan call": [user(), call("a"), user("summary"), Message("assistant", "next")],
    "orphan results": [system(), user("summary"), result("a"), result("b"), Message("assistant", "next")],
    "text before the response": [user(), call("a"), user("wait"), result("a")],
    "response after a later call": [user(), call("a"), user("more"), call("b"), result("a"), result("b")],
    "response for another id": [user(), call("a"), result("b"), Message("assistant", "x")],
    "two responses": [user(), call("a"), result("a"), result("a")],
    "opening call turn": [system(), call("a"), result("a"), Message("assistant", "done")],
    "mid-conversation system message": [system(), user(), call("a"), system("reminder"), result("a"), Message("assistant", "ok")],
    "assistant text between": [user(), call("a"), Message("assistant", "note"), result("a"), Message("assistant", "ok")],
    "reused id": [user(), call("a"), result("a"), user("again"), call("a"), result("a"), Message("assistant", "ok")],
    "text after the responses": [user(), call("a"), result("a"), user("and now?")],
}


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_the_metric_agrees_with_the_api_rules_on_litellm_s_contents(name):
    messages = LAYOUTS[name]
    contents = litellm_contents(messages)
    assert api_accepts(contents) == (check_gemini(messages) == []), json.dumps(contents, default=str)


# --------------------------------------------------------------------------- replays
@pytest.mark.corpora
def test_a_recorded_claude_code_session_replayed_unchanged_breaks_nothing_but_its_own_orphan():
    """A real Claude Code session (parallel tool calls, one call interrupted before its result), replayed
    with `none`: under Gemini's rules every request is valid but for the recording's own orphan."""
    path = CORPORA / "claude-code-jsonl" / "Smartagent-so__Personal_AI_Infrastructure" / "d6a37ffc-384d-4d2a-832a-78cdd493af69.jsonl"
    transcript = load_transcripts(path)[0]
    items = transcript.items
    assert any(a.kind == b.kind == "tool_call" and a.response == b.response for a, b in zip(items, items[1:], strict=False))
    result = replay(transcript, "none", profile="1m")
    recorded = recorded_orphans(transcript)
    seen = 0
    for request in result.requests:
        for v in check(request.messages)["gemini"]:
            assert (v.kind, v.call_id) in recorded or (ANY_KIND, v.call_id) in recorded, (request.index, v)
            seen += 1
    assert seen > 0  # the interrupted call is in the requests after it, flagged and marked as the recording's
    rows = measure_cell(result, [], answerer=None).requests
    assert all(r["integrity_gemini"] == 0 for r in rows) and sum(r["integrity_recorded_gemini"] for r in rows) == seen


def test_a_recording_that_opens_with_a_call_is_its_own_fault():
    """A subagent's log begins with the model's response (its prompt is not in the file): every replayed
    request opens with that call turn, which the recording, not the strategy, put there."""
    items = (
        Item("s", "system", "rules"),
        Item("c", "tool_call", call_id="c1", tool_name="read", arguments="{}", response=0, turn=0),
        Item("r", "tool_result", "out", call_id="c1", turn=0),
        Item("a", "assistant", "done", response=1, turn=0),
    )
    transcript = Transcript("opens-with-a-call", items)
    assert ("misplaced_call", "c1") in recorded_orphans(transcript)
    rows = measure_cell(replay(transcript, "none", profile="1m"), [], answerer=None).requests
    assert all(r["integrity_gemini"] == 0 for r in rows) and rows[-1]["integrity_recorded_gemini"] == 1


@pytest.mark.slow
def test_truncate_opens_every_window_at_a_user_message_and_breaks_no_format():
    """truncate drops the rest of a turn whose user message it dropped, so no window opens with the call turn
    Gemini refuses ("function call turn comes immediately after a user turn ..."), and no pair is broken in any format."""
    from compaction_bench.scenarios.synthetic import default_suite

    result = replay(default_suite()[1].transcript, "truncate", profile="32k")
    assert result.compactions
    for request in result.requests:
        first = next(m for m in request.messages if m.role not in ("system", "developer"))
        assert first.role == "user", request.index
        found = check(request.messages)
        assert all(found[fmt] == [] for fmt in FORMATS), request.index
