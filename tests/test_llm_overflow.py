"""A real model's context-overflow refusal is recognized in its own API's words, Gemini's included.

Each local server refuses an over-long prompt as its API does; the client must raise `ContextOverflow`
(an `LLMError`, not retried) carrying the refusal as a `ProviderError` with the API's own message. The
independent check on the Gemini wording: litellm itself classes the server's refusal as a context-window
error (its exception mapping knows Gemini's "exceeds the maximum number of tokens allowed").
"""

from __future__ import annotations

import pytest

from compaction_bench.llm import CallSettings, LLMClient, LLMError, _litellm

LONG = [{"role": "user", "content": "a question far longer than the tiny window of this server, " * 4}]
CASES = [  # (api, model, family, code, the message's start)
    ("gemini", "gemini/gemini-2.5-flash", "gemini", "INVALID_ARGUMENT", "The input token count ("),
    ("openai", "openai/gpt-4o", "openai", "context_length_exceeded", "This model's maximum context length is 10 tokens"),
    ("anthropic", "anthropic/claude-sonnet-4-5", "anthropic", "invalid_request_error", "prompt is too long: "),
]


@pytest.fixture
def keys(monkeypatch):
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.setenv(name, "local-key")


@pytest.mark.parametrize(("api", "model", "family", "code", "start"), CASES)
def test_an_overflow_refusal_is_a_context_overflow_in_the_apis_words(api, model, family, code, start, keys, tmp_path):
    from compaction_bench.llm import ContextOverflow
    from tests.model_servers import ModelServer

    server = ModelServer(api, context_window=10)
    try:
        client = LLMClient(model, CallSettings(api_base=server.base_url, max_retries=3, backoff_seconds=0.0, cache_dir=str(tmp_path)))
        with pytest.raises(ContextOverflow, match="refused the request") as raised:
            client.complete(LONG, max_tokens=50)
        error = raised.value.error
        assert isinstance(raised.value, LLMError) and server.received == 1  # a refusal, not retried
        assert (error.provider, error.status, error.code) == (family, 400, code)
        assert error.message.startswith(start) and error.message == server.rejected[-1]["error"]  # the API's own text
        server.context_window = 400_000
        assert not client.complete(LONG, max_tokens=50).cache_hit  # the refusal was not cached
    finally:
        server.close()


def test_gemini_wording_is_what_litellm_knows_as_an_overflow(keys):
    from compaction_bench.llm import overflow_family
    from tests.model_servers import ModelServer

    server = ModelServer("gemini", context_window=10)
    try:
        litellm = _litellm()
        with pytest.raises(litellm.ContextWindowExceededError):
            litellm.completion(model="gemini/gemini-2.5-flash", messages=LONG, api_base=server.base_url, max_retries=0, timeout=30)
        text = server.rejected[-1]["error"]
        assert text.endswith("exceeds the maximum number of tokens allowed (10).") and overflow_family(text) == "gemini"
        # Google's AI Studio words it without the count; still Gemini's.
        assert overflow_family("The input token count exceeds the maximum number of tokens allowed (1048576).") == "gemini"
    finally:
        server.close()


def test_other_refusals_stay_plain_errors(keys, tmp_path):
    from compaction_bench.llm import ContextOverflow
    from tests.model_servers import ModelServer

    server = ModelServer("gemini")
    try:
        client = LLMClient("gemini/gemini-2.5-flash", CallSettings(api_base=server.base_url, max_retries=0, cache_dir=str(tmp_path)))
        with pytest.raises(LLMError) as raised:
            client.complete([{"role": "user", "content": "hi"}], temperature=5)  # out of Gemini's 0..2
        assert not isinstance(raised.value, ContextOverflow) and "temperature" in str(raised.value)
    finally:
        server.close()


def test_a_summary_the_real_model_refuses_as_too_long_is_a_summary_overflow_the_strategy_handles(keys, tmp_path):
    """The summarizer's map entry (gpt-4o, 128k) admits every summary request, but the server behind it has a
    100-token window and refuses each one as too long. A refusal for length is an overflow, whoever counted
    it (the strategy handles it as it handles an overflow of its own: OpenCode V1 gives up compacting and
    the session goes on), not an error that ends the cell. Right answer, from the server's own log: the
    replay reaches the session's end, each request the server received was refused, and each of them is a
    summary request recorded as overflowed with the server's message; no compaction happened."""
    import compaction_bench as bench
    from compaction_bench.scenarios.synthetic import generate
    from tests.model_servers import ModelServer

    server = ModelServer("openai", context_window=100)
    try:
        client = LLMClient("openai/gpt-4o", CallSettings(api_base=server.base_url, max_retries=0, cache_dir=str(tmp_path)))
        session = generate("short-turns", seed=1, target_tokens=34_000).transcript
        result = bench.replay(session, "opencode-v1", profile="32k", summarizer=client)
        refused = [r for r in result.requests if r.kind == "summary" and r.error and r.error["provider"] == "openai" and
                   r.error["message"].startswith("This model's maximum context length is 100 tokens")]
        assert result.requests[-1].kind == "final" and not result.compactions
        assert server.received >= 1 and len(server.rejected) == server.received == len(refused)
        assert all(r.overflow and r.llm_call is None for r in refused)
    finally:
        server.close()
