"""A real model's replies that carry nothing to score, and retries that never end: found by an audit against a
local OpenAI-compatible server that misbehaves on purpose.

Before, an empty reply that was not cut off at max_tokens, and a reply the provider's content filter stopped, were
accepted: cached, then scored as a wrong answer or a summary that kept nothing, on every re-run too. The backoff
between retries doubled without a bound (16 retries waited 18 hours; 1,030 overflowed), `--max-retries 1000000` and
`--model-timeout 1e308` were accepted, and a `Retry-After` of 1e400 fell back to the backoff. A provider error's
text (a traceback and the raw response) spread the one `error:` line over 16."""

from __future__ import annotations

import logging

import pytest

from compaction_bench.errors import one_line
from compaction_bench.llm import CallSettings, EmptyReply, LLMClient, LLMError, retry_after_seconds

QUESTION = [{"role": "user", "content": "Which module was missing: yaml or toml?"}]
MODELS = {"openai": "openai/gpt-4o", "anthropic": "anthropic/claude-sonnet-4-5"}


@pytest.fixture
def keys(monkeypatch):
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.setenv(name, "local-key")


@pytest.mark.parametrize(("api", "finish", "said"), [
    ("openai", "stop", r"returned no text: an empty reply \(finish_reason 'stop'\)"),
    ("anthropic", "stop", "returned no text: an empty reply"),
    ("openai", "content_filter", "was stopped by the provider's content filter"),
])
def test_a_reply_with_nothing_to_score_is_an_error_never_cached(api, finish, said, keys, tmp_path):
    from tests.model_servers import ModelServer

    server = ModelServer(api, reply=lambda call: "" if finish != "content_filter" else "partial", finish_reason=finish)
    try:
        settings = CallSettings(api_base=server.base_url, max_retries=0, cache_dir=str(tmp_path), record_dir=str(tmp_path / "responses"))
        with pytest.raises(EmptyReply, match=said):
            LLMClient(MODELS[api], settings).complete(QUESTION, purpose="answer")
        assert not (tmp_path / "responses").exists()
        server.reply, server.finish_reason = (lambda call: "yaml"), "stop"
        again = LLMClient(MODELS[api], settings).complete(QUESTION, purpose="answer")
        assert not again.cache_hit and again.text == "yaml" and server.calls == 2  # asked again: nothing was cached
    finally:
        server.close()


def test_the_backoff_between_retries_stops_growing_at_the_longest_wait(keys, tmp_path, caplog):
    """backoff 0.1 s doubling, cut at 0.3 s: the waits are 0.1, 0.2, 0.3, 0.3 (not 0.8)."""
    from tests.model_servers import ModelServer

    server = ModelServer("openai")
    try:
        server.fail(500, times=4)
        settings = CallSettings(api_base=server.base_url, max_retries=4, backoff_seconds=0.1, max_retry_after=0.3, cache_dir=str(tmp_path))
        with caplog.at_level(logging.WARNING, logger="compaction_bench.llm"):
            LLMClient(MODELS["openai"], settings).complete(QUESTION)
        waits = [r.getMessage().rsplit(" in ", 1)[1] for r in caplog.records if "retry " in r.getMessage()]
        assert waits == ["0.1 s", "0.2 s", "0.3 s", "0.3 s"]
        assert all("\n" not in r.getMessage() for r in caplog.records)
    finally:
        server.close()


def test_settings_past_what_a_run_can_wait_are_refused():
    with pytest.raises(LLMError, match=r"--max-retries must be 0 to 100, got 1000000"):
        CallSettings(max_retries=1_000_000)
    with pytest.raises(LLMError, match=r"--model-timeout must be more than 0 and at most 86,400 seconds, got 1e\+308"):
        CallSettings(timeout=1e308)
    assert retry_after_seconds({"Retry-After": "1e400"}) == float("inf")  # cut to the longest wait by the caller
    assert retry_after_seconds({"Retry-After": "nan"}) is None


def test_another_programs_message_is_one_line():
    text = "Traceback (most recent call last):\n  File 'x.py', line 1\n\nValueError: bad\n" + "x" * 1000
    line = one_line(text)
    assert "\n" not in line and line.startswith("Traceback (most recent call last): | File 'x.py', line 1 | ValueError: bad")
    assert len(line) == 500 and line.endswith("…")


def test_a_stored_response_whose_numbers_are_not_numbers_is_refused_before_the_run(tmp_path):
    import json

    path = tmp_path / "responses.jsonl"
    path.write_text(json.dumps({"key": "k", "text": "t", "model": "m", "input_tokens": "lots"}) + "\n")
    with pytest.raises(LLMError, match=r"responses.jsonl:1: not a stored response \('input_tokens' is \"lots\", not a token count\)"):
        CallSettings(responses=str(path))
