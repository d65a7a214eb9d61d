"""A Gemini-bound payload never opens `contents` with a call turn (`bench/wire.py`, "Gemini's opening turn").

The Gemini API refuses a function call turn that comes neither right after a user turn nor after a function
response turn ("Please ensure that function call turn comes immediately after a user turn or after a function
response turn", gemini-cli #11814), and litellm lifts every system message into `systemInstruction`. Each payload
here goes through litellm's own Gemini conversion (`transform_system_message`, then
`gemini_convert_messages_with_history`, as a call to a Gemini 3 model builds its `contents`) into the project's API
oracle, `tests/test_integrity_gemini.api_accepts`; the last test sends one to the local Gemini server.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from compaction_bench import replay
from compaction_bench.llm import CallSettings, LLMClient, PreparedContext
from compaction_bench.metrics.integrity import check_gemini
from compaction_bench.request import Message, ToolCall
from compaction_bench.scenarios.synthetic import generate
from compaction_bench.wire import OPENING_USER_TURN, chat_messages
from tests.test_integrity_gemini import api_accepts


def call(*ids: str, text: str = "") -> Message:
    return Message("assistant", text, tool_calls=tuple(ToolCall(i, "read", "{}") for i in ids))


def result(call_id: str) -> Message:
    return Message("tool", f"out {call_id}", tool_call_id=call_id, name="read")


def gemini_contents(payload: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The `contents` litellm builds of a Chat Completions payload for a Gemini 3 model."""
    from litellm.llms.vertex_ai.gemini.transformation import gemini_convert_messages_with_history, transform_system_message

    _, rest = transform_system_message(True, copy.deepcopy(payload))
    return [dict(c) for c in gemini_convert_messages_with_history(rest, model="gemini-3-pro-preview")]


OPENING_WITH_CALLS = {
    "system then a call": [Message("system", "rules"), call("a"), result("a"), Message("assistant", "done")],
    "no system": [call("a"), result("a")],
    "reasoning before parallel calls": [Message("system", "rules"), Message("reasoning", "plan"), call("a", "b"), result("a"), result("b")],
    "text with the calls": [Message("developer", "rules"), call("a", text="I will read it."), result("a"), Message("user", "summarize")],
    "two system messages": [Message("system", "rules"), Message("system", "more"), call("a"), result("a"), call("b"), result("b")],
}


@pytest.mark.parametrize("name", list(OPENING_WITH_CALLS))
def test_a_request_that_opens_with_calls_is_accepted_by_gemini(name):
    messages = OPENING_WITH_CALLS[name]
    assert [v.kind for v in check_gemini(messages)][:1] == ["misplaced_call"]  # as the strategy's request stands
    payload = chat_messages(messages, provider="gemini")
    assert api_accepts(gemini_contents(payload)), payload
    opening = next(entry for entry in payload if entry["role"] != "system")
    assert opening == {"role": "user", "content": OPENING_USER_TURN}
    # nothing else changes: the payload any other non-OpenAI provider gets (developer as system), with the one user
    # message in front of the calls
    assert [entry for entry in payload if entry is not opening] == chat_messages(messages, provider="anthropic")


def test_only_gemini_bound_payloads_get_the_opening_user_message():
    messages = OPENING_WITH_CALLS["system then a call"]
    for provider in ("openai", "anthropic", "offline"):
        assert [entry["role"] for entry in chat_messages(messages, provider=provider)] == ["system", "assistant", "tool", "assistant"]
    assert [entry["role"] for entry in chat_messages(messages, provider="vertex_ai")] == ["system", "user", "assistant", "tool", "assistant"]


def test_a_request_that_opens_with_a_user_turn_is_left_as_it_is():
    messages = [Message("system", "rules"), Message("user", "go"), call("a"), result("a")]
    assert chat_messages(messages, provider="gemini") == chat_messages(messages, provider="openai")
    # an opening assistant text (no call) is no function call turn, which is all the rule is about
    texts = [Message("system", "rules"), Message("assistant", "earlier answer"), Message("user", "go on")]
    assert chat_messages(texts, provider="gemini") == chat_messages(texts, provider="openai")


def test_converting_a_converted_payload_again_adds_no_second_placeholder():
    """An answerer's context is converted once (`PreparedContext`, no provider) and again with the question for
    the client's provider: the question joins a context that opens with calls, and one placeholder leads it."""
    context = PreparedContext(OPENING_WITH_CALLS["system then a call"])
    question = [{"role": "user", "content": "Which file was read?"}]
    payload = chat_messages([*context.payload, *question], provider="gemini")
    assert api_accepts(gemini_contents(payload))
    again = chat_messages(payload, provider="gemini")
    assert [entry["role"] for entry in again] == [entry["role"] for entry in payload] == ["system", "user", "assistant", "tool", "assistant", "user"]


def _opencode_summary_request() -> Message:
    """opencode-v1's first summary request on the synthetic `parallel-calls` session at `64k` that the metric flags
    as a Gemini `misplaced_call`: its head starts where the previous compaction's split began the tail, inside a
    turn (README "Tool pairs per wire format")."""
    result = replay(generate("parallel-calls", 2, balanced_facts=True).transcript, "opencode-v1", profile="64k")
    return next(r for r in result.requests if r.kind == "summary" and any(v.kind == "misplaced_call" for v in check_gemini(r.messages)))


def test_opencode_summary_request_that_opens_inside_a_turn_is_accepted_by_gemini():
    request = _opencode_summary_request()
    payload = chat_messages(request.messages, provider="gemini")
    assert api_accepts(gemini_contents(payload))


def test_the_local_gemini_server_answers_the_summary_call(monkeypatch, tmp_path):
    """Through `LLMClient` and litellm's own request to the local Gemini server, which refuses an opening call
    turn as the API does (`tests/model_servers.validate_gemini`)."""
    from tests.model_servers import ModelServer

    monkeypatch.setenv("GEMINI_API_KEY", "local-key")
    request = _opencode_summary_request()
    server = ModelServer("gemini")
    try:
        client = LLMClient("gemini/gemini-2.5-flash", CallSettings(api_base=server.base_url, max_retries=0, cache_dir=str(tmp_path)))
        answer = client.complete(request.messages, max_tokens=100)
        assert answer.text and server.calls == 1 and not server.rejected
    finally:
        server.close()


@pytest.mark.parametrize("model", ["gemini-2.5-flash", "gemini/gemini-2.5-flash", "vertex_ai/gemini-2.5-flash"])
def test_a_model_named_without_its_provider_gets_the_wire_rules_of_the_provider_litellm_sends_it_to(model):
    """litellm sends a bare `gemini-…` to Vertex AI, whose `contents` follow Gemini's rules: the client's payload is
    built for that provider, not for OpenAI's (the s43 note's finding: a bare name's payload opened with the calls)."""
    client = LLMClient(model)
    payload = chat_messages(OPENING_WITH_CALLS["system then a call"], provider=client.provider)
    assert api_accepts(gemini_contents(payload)), (client.provider, payload)


def test_a_bare_claude_model_goes_to_anthropic_and_an_offline_model_to_no_provider():
    assert LLMClient("claude-sonnet-4-5").provider == "anthropic"
    assert LLMClient("gpt-4o").provider == "openai"
    assert LLMClient("offline/extractive").provider == "offline"
