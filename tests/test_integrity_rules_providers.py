"""Each provider's documented or observed tool-pairing rule, on a hand-built context, against the metric.

The expected verdicts follow from the providers' error messages (quoted per test, with a public
report of each): the metric must flag what the API refuses, and nothing the API accepts.

- Chat Completions: "An assistant message with 'tool_calls' must be followed by tool messages
  responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: …"
  (BerriAI/litellm#10083); "Invalid parameter: messages with role 'tool' must be a response to a
  preceeding message with 'tool_calls'." (smarter-sh/smarter#264); "Invalid parameter: 'tool_call_id'
  of '…' not found in 'tool_calls' of previous message." (dapr/dapr-agents#145); "Invalid parameter:
  Duplicate value for 'tool_call_id' of '…', in messages[7] and messages[8]." (agno-agi/agno#5116).
- Responses: "No tool call found for function call output with call_id …" (continuedev/continue#10092)
  and "No tool output found for function call …" (openai/openai-support-agent-demo#12); outputs pair
  with calls by call_id "regardless of position" (deepseek-ai/awesome-deepseek-integration#740, whose
  stricter clone is the exception).
- Anthropic Messages: "`tool_use` ids were found without `tool_result` blocks immediately after: …
  Each `tool_use` block must have a corresponding `tool_result` block in the next message."
  (anthropics/claude-code#2697); "unexpected `tool_use_id` found in `tool_result` blocks: … Each
  `tool_result` block must have a corresponding `tool_use` block in the previous message."
  (anthropics/claude-code#13460); "Did not find 1 tool_result block(s) at the beginning of this
  message. Messages following tool_use blocks must begin with a matching number of tool_result
  blocks." (apify/tester-mcp-client#12); "each tool_use must have a single result. Found multiple
  `tool_result` blocks with id …"; "`tool_use` ids must be unique" (anthropics/claude-code#28515,
  NVIDIA-NeMo/Switchyard#502 for an id reused by a later response).
- Gemini generateContent: "Please ensure that function response turn comes immediately after a
  function call turn." (google-gemini/gemini-cli#14183, langchain-ai/langchain#27799); "Please ensure
  that the number of function response parts is equal to the number of function call parts of the
  function call turn." (google-gemini/gemini-cli#4217, microsoft/vscode#299295); "Please ensure that
  function call turn comes immediately after a user turn or after a function response turn."
  (google-gemini/gemini-cli#11814). Clients merge consecutive same-role messages into one content
  (gemini-cli#3333, #28407; litellm's Gemini adapter), the API checks content by content.
"""

from __future__ import annotations

from compaction_bench.metrics.integrity import Violation, check
from compaction_bench.request import Message, ToolCall

VALID = {"openai_chat": [], "openai_responses": [], "anthropic": [], "gemini": []}


def call(*ids: str, text: str = "") -> Message:
    return Message("assistant", text, tool_calls=tuple(ToolCall(i, "read", "{}") for i in ids))


def result(call_id: str, content: str = "out") -> Message:
    return Message("tool", content, tool_call_id=call_id)


def user(text: str = "go") -> Message:
    return Message("user", text)


def kinds(violations: list[Violation]) -> list[tuple[str, str, tuple[int, ...]]]:
    return sorted((v.kind, v.call_id, v.messages) for v in violations)


def test_parallel_calls_answered_in_another_order():
    """Every id is answered by the tool messages / tool_result blocks / functionResponse parts right
    after the call; the order among them is not a rule of any of the four APIs."""
    assert check([user(), call("a", "b", "c"), result("c"), result("a"), result("b"), Message("assistant", "done")]) == VALID


def test_a_result_after_an_intervening_user_message():
    """Chat: the call is not followed by its tool message; Anthropic: the user text merges into the
    turn and precedes the tool_result ("must begin with … tool_result blocks"); Gemini: the text is
    the content after the call turn ("number of function response parts is equal …"); Responses pairs by id."""
    found = check([user(), call("a"), user("wait"), result("a")])
    assert kinds(found["openai_chat"]) == kinds(found["anthropic"]) == [("misplaced_result", "a", (1, 3))]
    assert kinds(found["gemini"]) == [("misplaced_result", "a", (1, 3))]
    assert found["openai_responses"] == []


def test_a_parallel_result_after_text():
    """Anthropic: the second tool_result comes after text in the next turn (not at its beginning);
    Gemini: one response for two calls in the content after the call turn."""
    found = check([user(), call("a", "b"), result("a"), user("note"), result("b")])
    assert kinds(found["anthropic"]) == kinds(found["openai_chat"]) == [("misplaced_result", "b", (1, 4))]
    assert kinds(found["gemini"]) == [("misplaced_result", "b", (1, 4))]
    assert found["openai_responses"] == []


def test_duplicate_results_for_one_call():
    """Chat "Duplicate value for 'tool_call_id'", Anthropic "each tool_use must have a single result",
    Gemini two responses for one call (or one not after a call turn), adjacent or not."""
    for messages in ([user(), call("a"), result("a"), result("a")], [user(), call("a"), result("a"), user(), result("a")]):
        for fmt in ("openai_chat", "anthropic", "gemini"):
            assert [v.kind for v in check(messages)[fmt]] == ["duplicate_id"], (fmt, messages)


def test_an_id_a_later_response_reuses_is_refused_by_anthropic():
    """Anthropic: "`tool_use` ids must be unique" across the request, even when each use is answered.
    Gemini checks each call turn against the turn after it, and has no such rule."""
    found = check([user(), call("a"), result("a"), user("again"), call("a"), result("a")])
    assert sorted(v.kind for v in found["anthropic"]) == ["duplicate_id", "duplicate_id"]
    assert found["gemini"] == []


def test_an_empty_tool_result_still_answers_its_call():
    """Pairing is by id; an empty output is a content question (the wire sends "(no output)")."""
    assert check([user(), call("a"), result("a", ""), Message("assistant", "done")]) == VALID


def test_orphan_results_after_a_summary_cut():
    """The summary replaced the assistant call; its result is left: refused by all four
    ("must be a response to a preceeding message with 'tool_calls'", "unexpected `tool_use_id`",
    "No tool call found for function call output", "function response turn comes immediately after
    a function call turn")."""
    for summary in (user("summary of earlier work"), Message("compaction", "opaque summary")):
        found = check([Message("system", "rules"), summary, result("a"), result("b"), Message("assistant", "next")])
        for fmt, violations in found.items():
            assert kinds(violations) == [("orphan_result", "a", (2,)), ("orphan_result", "b", (3,))], fmt


def test_a_call_cut_from_its_results_is_refused_everywhere():
    """"did not have response messages", "ids were found without `tool_result` blocks", "No tool output
    found for function call", "number of function response parts is equal to the number of function
    call parts": the results were summarized away, the call kept."""
    found = check([user(), call("a", "b"), user("summary"), Message("assistant", "next")])
    for fmt, violations in found.items():
        assert kinds(violations) == [("orphan_call", "a", (1,)), ("orphan_call", "b", (1,))], fmt


def test_a_result_answering_an_earlier_assistant():
    """Chat: "'tool_call_id' of 'a' not found in 'tool_calls' of previous message"; Anthropic: call a
    has no result in the next message; Gemini: two responses after a turn of one call. Responses
    finds the call by id, earlier in the input."""
    found = check([user(), call("a"), user("more"), call("b"), result("a"), result("b")])
    assert kinds(found["openai_chat"]) == kinds(found["anthropic"]) == [("misplaced_result", "a", (1, 4))]
    assert kinds(found["gemini"]) == [("misplaced_result", "a", (1, 4))]
    assert found["openai_responses"] == []


def test_reasoning_between_a_call_and_its_result():
    """Chat has no reasoning input (not sent); Responses pairs by id; Anthropic and Gemini put the
    thinking in the model turn of the call, and the result is still in the next turn."""
    assert check([user(), call("a"), Message("reasoning", "think"), result("a")]) == VALID
