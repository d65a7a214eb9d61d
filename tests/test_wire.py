"""The wire adapter: every strategy's summary requests on real transcripts are valid Chat Completions payloads.

The local OpenAI-compatible server (tests/model_servers.py) validates each request as strictly as
the real API; a rejected payload would fail the summarizer call. Hand-built cases check each rule.
"""

from __future__ import annotations

import json

import pytest

from compaction_bench.llm import CallSettings, LLMClient
from compaction_bench.registry import strategy_ids
from compaction_bench.replay import replay
from compaction_bench.request import Message, ToolCall
from compaction_bench.transcript import Attachment
from compaction_bench.wire import chat_messages
from tests.conftest import CORPORA
from tests.model_servers import Invalid, validate_anthropic, validate_openai

REAL = {
    "codex": "codex-rollout-jsonl/MoonLadderStudios__MoonMind/rollout-2025-11-13T18-21-11-019a802a-aab1-7c31-9831-d2510c7a74a2.jsonl",
    "pi": "pi-session-jsonl/badlogic__pi-mono/large-session.jsonl",
    "claude-code": "claude-code-jsonl/Smartagent-so__Personal_AI_Infrastructure/351b5d6c-e802-4339-a2c5-33f48865d8bd.jsonl",
}


def valid(messages: list[dict]) -> None:
    validate_openai({"model": "m", "messages": messages})


def test_internal_shapes_become_chat_messages():
    messages = [
        Message("system", "rules"),
        Message("developer", "be careful"),
        Message("user", "look", attachments=(Attachment("image/png", "shot.png", 1234),)),
        Message("reasoning", ""),  # encrypted only: nothing a Chat model can read
        Message("reasoning", "**Planning** the read"),
        Message("assistant", "reading", tool_calls=(ToolCall("call|1", "read", '{"path": "a.py"}'),), item_ids=("i1",)),
        Message("assistant", tool_calls=(ToolCall("c2", "apply_patch", "*** Begin Patch"),)),
        Message("tool", "print(1)", tool_call_id="call|1", item_ids=("i2",), is_error=True),
        Message("tool", "", tool_call_id="c2"),
        Message("compaction", "opaque summary"),
    ]
    out = chat_messages(messages)
    valid(out)
    assert [m["role"] for m in out] == ["system", "developer", "user", "assistant", "tool", "tool", "user"]
    assert out[3]["content"] == "**Planning** the read\nreading"
    assert out[2]["content"] == [{"type": "text", "text": "look"}, {"type": "text", "text": "[image attachment: shot.png, image/png, 1234 bytes]"}]
    calls = out[3]["tool_calls"]
    assert [c["id"] for c in calls] == ["call_1", "c2"] and all(c["type"] == "function" for c in calls)
    assert calls[1]["function"]["arguments"] == json.dumps({"input": "*** Begin Patch"})
    assert out[4] == {"role": "tool", "tool_call_id": "call_1", "content": "print(1)"}
    assert out[5]["content"] == "(no output)"
    assert all("item_ids" not in m and "is_error" not in m for m in out)
    # Anthropic and OpenAI-compatible servers get no developer role.
    assert [m["role"] for m in chat_messages(messages[:2], provider="anthropic")] == ["system", "system"]


def test_orphans_are_written_as_text_not_sent_as_broken_pairs():
    messages = [
        Message("user", "go"),
        Message("tool", "stale output", tool_call_id="gone", name="grep"),  # its call was dropped
        Message("assistant", "two calls", tool_calls=(ToolCall("a", "ls", "{}"), ToolCall("b", "cat", '{"f": 1}'))),
        Message("tool", "x.py", tool_call_id="a"),
        Message("tool", "dup", tool_call_id="a"),  # a second result for one call
        Message("user", "and?"),
    ]
    out = chat_messages(messages)
    valid(out)
    assert out[1] == {"role": "user", "content": "[result of tool call gone (grep)]\nstale output"}
    assert out[2]["content"] == 'two calls\n[tool call cat({"f": 1}) had no recorded result]'
    assert [c["id"] for c in out[2]["tool_calls"]] == ["a"]
    assert out[4] == {"role": "user", "content": "[result of tool call a]\ndup"}


def test_the_strict_server_refuses_what_the_issue_found():
    """The shapes litellm used to pass through unchanged are refused, with the API's message."""
    with pytest.raises(Invalid, match="Invalid value: 'reasoning'"):
        valid([{"role": "reasoning", "content": "x"}])
    with pytest.raises(Invalid, match="exactly the keys"):
        valid([{"role": "assistant", "content": "", "tool_calls": [{"id": "c", "name": "ls", "arguments": "{}"}]}])
    with pytest.raises(Invalid, match="item_ids"):
        valid([{"role": "user", "content": "x", "item_ids": ["1"]}])
    with pytest.raises(Invalid, match="preceeding message with 'tool_calls'"):
        valid([{"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "c", "content": "y"}])
    with pytest.raises(Invalid, match="did not have response messages: c"):
        valid([{"role": "assistant", "content": None, "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}, {"role": "user", "content": "y"}])
    with pytest.raises(Invalid, match="expected a string, got dict"):
        valid([{"role": "assistant", "content": None, "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "ls", "arguments": {}}}]}])
    with pytest.raises(Invalid, match="non-empty"):
        valid([{"role": "user", "content": ""}])
    with pytest.raises(Invalid, match="corresponding `tool_use` block in the previous message"):
        validate_anthropic({"model": "m", "max_tokens": 5, "messages": [
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "x"}]}]})


@pytest.mark.parametrize("source", sorted(REAL))
def test_every_strategys_summary_requests_are_accepted(source, openai_server, monkeypatch):
    """Real transcript at 64k, every built-in strategy, the summarizer at the strict local server."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local-test")
    path = CORPORA / REAL[source]
    summaries = 0
    for strategy in strategy_ids(builtin_only=True):
        client = LLMClient("openai/summarizer-under-test", CallSettings(api_base=openai_server.base_url, max_retries=0, use_cache=False))
        result = replay(path, strategy, profile="64k", summarizer=client)
        sent = [r for r in result.requests if r.kind == "summary" and not r.overflow]
        summaries += len(sent)
        assert client.calls == len(sent), strategy
    assert openai_server.rejected == [], openai_server.rejected[:1]
    assert openai_server.calls == summaries > 0


def test_anthropic_server_accepts_the_summary_requests_through_litellm(anthropic_server, monkeypatch):
    """litellm translates the Chat payload to Anthropic Messages; the strict Messages server accepts all of it."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-local-test")
    path = CORPORA / REAL["codex"]
    summaries = 0
    for strategy in strategy_ids(builtin_only=True):
        client = LLMClient("anthropic/claude-sonnet-4-5", CallSettings(api_base=anthropic_server.base_url, max_retries=0, use_cache=False))
        result = replay(path, strategy, profile="64k", summarizer=client)
        summaries += sum(1 for r in result.requests if r.kind == "summary" and not r.overflow)
    assert anthropic_server.rejected == [], anthropic_server.rejected[:1]
    assert anthropic_server.calls == summaries > 0


def test_a_reused_call_id_gives_each_call_its_own_wire_id_and_result():
    """Transcripts (tau-bench, SWE-agent) reuse a call id; the wire ids stay unique and each result follows its call."""
    messages = [
        Message("user", "book it"),
        Message("assistant", tool_calls=(ToolCall("call 1", "search", '{"q": "a"}'),)),
        Message("tool", "first", tool_call_id="call 1"),
        Message("assistant", tool_calls=(ToolCall("call 1", "book", '{"q": "b"}'),)),
        Message("tool", "second", tool_call_id="call 1"),
        Message("assistant", "two at once", tool_calls=(ToolCall("x", "ls", "{}"), ToolCall("x", "cat", "{}"))),
        Message("tool", "ls out", tool_call_id="x"),
        Message("tool", "cat out", tool_call_id="x"),
        Message("user", "done?"),
    ]
    out = chat_messages(messages)
    valid(out)
    calls = [(c["id"], c["function"]["name"]) for m in out for c in m.get("tool_calls") or ()]
    assert calls == [("call_1", "search"), ("call_1_1", "book"), ("x", "ls"), ("x_1", "cat")]
    results = {m["tool_call_id"]: m["content"] for m in out if m["role"] == "tool"}
    assert results == {"call_1": "first", "call_1_1": "second", "x": "ls out", "x_1": "cat out"}
    # Anthropic refuses repeated tool_use ids; litellm's translation of this payload is accepted.
    import litellm

    translated = litellm.AnthropicConfig().transform_request(
        model="claude-sonnet-4-5", messages=out, optional_params={"max_tokens": 10}, litellm_params={}, headers={}
    )
    validate_anthropic(translated)


def test_the_anthropic_server_refuses_repeated_or_malformed_tool_use_ids():
    def use(call_id: str) -> dict:
        return {"role": "assistant", "content": [{"type": "tool_use", "id": call_id, "name": "ls", "input": {}}]}

    def result(call_id: str) -> dict:
        return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": "x"}]}

    with pytest.raises(Invalid, match="`tool_use` ids must be unique"):
        validate_anthropic({"model": "m", "max_tokens": 5, "messages": [
            {"role": "user", "content": "go"}, use("a"), result("a"), use("a"), result("a")]})
    with pytest.raises(Invalid, match="should match pattern"):
        validate_anthropic({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "go"}, use("a|b"), result("a|b")]})


def test_the_servers_refuse_what_the_real_apis_refuse():
    """tests/model_servers.py: the parameter and ordering rules of the real APIs."""
    from tests.model_servers import ModelServer

    use = {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "ls", "input": {}}]}
    with pytest.raises(Invalid, match="tool_result blocks must come first"):
        validate_anthropic({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "go"}, use, {"role": "user", "content": [
            {"type": "text", "text": "here"}, {"type": "tool_result", "tool_use_id": "t1", "content": "x"}]}]})
    with pytest.raises(Invalid, match="temperature: range: 0..1"):
        validate_anthropic({"model": "m", "max_tokens": 5, "temperature": 1.5, "messages": [{"role": "user", "content": "go"}]})
    with pytest.raises(Invalid, match="trailing whitespace"):
        validate_anthropic({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "go"}, {"role": "assistant", "content": "so \n"}]})
    question = [{"role": "user", "content": "go"}]
    with pytest.raises(Invalid, match="cannot both be set"):
        validate_openai({"model": "gpt-4o", "max_tokens": 5, "max_completion_tokens": 5, "messages": question})
    with pytest.raises(Invalid, match="'max_tokens' is not supported with this model"):
        validate_openai({"model": "gpt-5-mini", "max_tokens": 5, "messages": question})
    with pytest.raises(Invalid, match="'temperature' does not support 0"):
        validate_openai({"model": "o3", "temperature": 0, "messages": question})
    validate_openai({"model": "gpt-4o", "max_tokens": 5, "temperature": 0, "messages": question})  # older models take both
    for api, needle in (("openai", "you requested"), ("anthropic", "input length and `max_tokens` exceed context limit")):
        server = ModelServer(api, context_window=50)
        try:
            import httpx

            payload = {"model": "gpt-4o" if api == "openai" else "claude", "max_tokens": 45, "messages": [{"role": "user", "content": "a few words"}]}
            path = "/chat/completions" if api == "openai" else "/v1/messages"
            answer = httpx.post(server.base_url + path, json=payload, headers={"authorization": "Bearer k", "x-api-key": "k"})
            assert answer.status_code == 400 and needle in answer.text, answer.text
        finally:
            server.close()


def test_a_final_assistant_message_ends_without_whitespace():
    out = chat_messages([Message("user", "go"), Message("assistant", "Summary:\n\n")], provider="anthropic")
    assert out[-1] == {"role": "assistant", "content": "Summary:"}
    import litellm

    validate_anthropic(litellm.AnthropicConfig().transform_request(
        model="claude-sonnet-4-5", messages=out, optional_params={"max_tokens": 10}, litellm_params={}, headers={}))
