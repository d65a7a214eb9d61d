"""A model litellm calls through OpenAI's Responses API, end to end through the project's client.

litellm's bundled map marks some OpenAI models `mode: responses` (gpt-5-codex, o3-pro, gpt-5-pro, ...):
`litellm.completion` sends them to `POST /v1/responses`, not Chat Completions. The local OpenAI server's
strict Responses handler checks the converted request; the cost is litellm's own for the usage.
"""

from __future__ import annotations

import pytest

from compaction_bench.llm import CallSettings, LLMClient, _litellm
from compaction_bench.profiles import bundled_cost_map

MODEL = "openai/gpt-5-codex"
CONVERSATION = [
    {"role": "system", "content": "You summarize coding sessions."},
    {"role": "user", "content": "List the files."},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "setup.py\nREADME.md"},
    {"role": "assistant", "content": "Two files."},
    {"role": "user", "content": "Summarize the session."},
]


def test_a_responses_only_model_goes_through_v1_responses(openai_server, monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    assert bundled_cost_map()["gpt-5-codex"]["mode"] == "responses"  # litellm's data: Responses only
    client = LLMClient(MODEL, CallSettings(api_base=openai_server.base_url, max_retries=0, cache_dir=str(tmp_path)))
    reply = client.complete(CONVERSATION, max_tokens=200, purpose="summary")
    assert openai_server.rejected == [] and openai_server.paths == ["/v1/responses"]
    assert reply.text.startswith("reply ") and reply.text.endswith("Summarize the session.")
    sent = openai_server.log[-1]
    assert sent["max_output_tokens"] == 200 and "temperature" not in sent  # gpt-5 models take no temperature there
    assert [item.get("type") for item in sent["input"]] == ["message", "message", "function_call", "function_call_output", "message", "message"]
    litellm = _litellm()
    usage = litellm.Usage(prompt_tokens=reply.input_tokens, completion_tokens=reply.output_tokens,
                          total_tokens=reply.input_tokens + reply.output_tokens)
    assert reply.input_tokens > 0 and reply.cost == pytest.approx(sum(litellm.cost_per_token(model=MODEL, usage_object=usage)), rel=1e-9)
    again = LLMClient(MODEL, CallSettings(api_base=openai_server.base_url, max_retries=0, cache_dir=str(tmp_path)))
    assert again.complete(CONVERSATION, max_tokens=200).cache_hit and openai_server.calls == 1


def test_a_responses_overflow_is_a_context_overflow(openai_server, monkeypatch, tmp_path):
    from compaction_bench.llm import ContextOverflow

    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    openai_server.context_window = 10
    client = LLMClient(MODEL, CallSettings(api_base=openai_server.base_url, max_retries=2, cache_dir=str(tmp_path)))
    with pytest.raises(ContextOverflow) as raised:
        client.complete(CONVERSATION, max_tokens=200)
    assert raised.value.error.code == "context_length_exceeded" and openai_server.received == 1
    assert raised.value.error.message.startswith("Your input exceeds the context window of this model")


def test_the_responses_handler_is_strict(openai_server):
    """Requests the real Responses API refuses (its error texts), sent as raw HTTP."""
    import json
    import urllib.error
    import urllib.request

    def post(body: dict) -> tuple[int, str]:
        request = urllib.request.Request(f"{openai_server.base_url}/responses", data=json.dumps(body).encode(), method="POST",
                                         headers={"authorization": "Bearer sk-local", "content-type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.status, ""
        except urllib.error.HTTPError as refused:
            return refused.code, json.loads(refused.read())["error"]["message"]

    ok = {"model": "gpt-5-codex", "input": "hello"}
    assert post(ok) == (200, "")
    assert post({**ok, "max_tokens": 50}) == (400, "Unsupported parameter: 'max_tokens'. In the Responses API, this parameter has "
                                                  "moved to 'max_output_tokens'.")
    assert post({**ok, "max_output_tokens": 10})[1].startswith("Invalid 'max_output_tokens': integer below minimum value")
    orphan = {"model": "gpt-5-codex", "input": [{"role": "user", "content": "x"},
                                                {"type": "function_call_output", "call_id": "call_9", "output": "done"}]}
    assert post(orphan) == (400, "No tool call found for function call output with call_id call_9.")
    unanswered = {"model": "gpt-5-codex", "input": [{"type": "function_call", "call_id": "call_2", "name": "ls", "arguments": "{}"}]}
    assert post(unanswered) == (400, "No tool output found for function call call_2.")
    assert post({**ok, "temperature": 0})[0] == 400
