"""Retries obey the provider's `Retry-After`: the client waits what the refusal asks, within a bound.

The local servers answer a 429 with the header set as a provider sets it; no mock of litellm or the
client. The header's meaning is RFC 9110 §10.2.3: a number of seconds, or an HTTP date.
"""

from __future__ import annotations

import calendar
import logging

import pytest

from compaction_bench.llm import CallSettings, LLMClient

QUESTION = [{"role": "user", "content": "Which module was missing: yaml or toml?"}]
MODELS = {"openai": "openai/gpt-4o", "anthropic": "anthropic/claude-sonnet-4-5", "gemini": "gemini/gemini-2.5-flash"}


@pytest.fixture
def keys(monkeypatch):
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.setenv(name, "local-key")


@pytest.mark.parametrize("api", ["openai", "anthropic", "gemini"])
def test_a_429_with_retry_after_is_retried_after_that_wait(api, keys, tmp_path, caplog):
    from tests.model_servers import ModelServer

    server = ModelServer(api)
    try:
        server.fail(429, retry_after="1")
        client = LLMClient(MODELS[api], CallSettings(api_base=server.base_url, max_retries=2, backoff_seconds=0.0, cache_dir=str(tmp_path)))
        with caplog.at_level(logging.WARNING, logger="compaction_bench.llm"):
            reply = client.complete(QUESTION)
        assert reply.text.startswith("reply ") and server.received == 2 and server.calls == 1
        waited = server.received_at[1] - server.received_at[0]  # between the refused request and the retry, as the server saw them
        assert 1.0 <= waited < 8.0  # our own backoff here is 0 s: only the header explains the second
        assert any("Retry-After 1 s" in r.getMessage() for r in caplog.records)
    finally:
        server.close()


def test_a_long_retry_after_is_cut_to_the_bound_and_logged(keys, tmp_path, caplog):
    from tests.model_servers import ModelServer

    server = ModelServer("openai")
    try:
        server.fail(429, retry_after="3600")
        settings = CallSettings(api_base=server.base_url, max_retries=1, backoff_seconds=0.0, max_retry_after=0.3, cache_dir=str(tmp_path))
        with caplog.at_level(logging.WARNING, logger="compaction_bench.llm"):
            LLMClient(MODELS["openai"], settings).complete(QUESTION)
        assert server.received == 2 and 0.3 <= server.received_at[1] - server.received_at[0] < 8.0
        assert any("Retry-After 3600 s, cut to 0.3 s" in r.getMessage() for r in caplog.records)
    finally:
        server.close()


def test_without_the_header_the_own_backoff_applies(keys, tmp_path):
    from tests.model_servers import ModelServer

    server = ModelServer("openai")
    try:
        server.fail(429, retry_after=None)
        LLMClient(MODELS["openai"], CallSettings(api_base=server.base_url, max_retries=1, backoff_seconds=0.0,
                                                 cache_dir=str(tmp_path))).complete(QUESTION)
        assert server.received == 2 and server.received_at[1] - server.received_at[0] < 1.0
    finally:
        server.close()


def test_retry_after_reads_seconds_dates_and_milliseconds():
    from compaction_bench.llm import retry_after_seconds

    # RFC 9110's example date, 120 s after `now`; the Unix time computed without the parser under test.
    stamp = calendar.timegm((1994, 11, 6, 8, 49, 37, 0, 0, 0))
    assert retry_after_seconds({"Retry-After": "Sun, 06 Nov 1994 08:49:37 GMT"}, now=stamp - 120) == pytest.approx(120)
    assert retry_after_seconds({"retry-after": "Sun, 06 Nov 1994 08:49:37 GMT"}, now=stamp + 5) is None  # already past
    assert retry_after_seconds({"Retry-After": "7"}) == 7
    assert retry_after_seconds({"retry-after-ms": "250", "retry-after": "7"}) == pytest.approx(0.25)  # OpenAI's finer header first
    for useless in ("0", "-3", "soon", "nan", ""):
        assert retry_after_seconds({"Retry-After": useless}) is None, useless
    assert retry_after_seconds(None) is None and retry_after_seconds({}) is None
