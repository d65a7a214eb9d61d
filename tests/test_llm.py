"""LLM access: offline models through litellm, the persistent cache, errors never cached."""

from __future__ import annotations

import pytest

from compaction_bench.llm import LLMClient, LLMError

QUESTION = [{"role": "user", "content": "The build failed: ModuleNotFoundError: No module named 'yaml'.\nAll else fine."},
            {"role": "user", "content": "Which module was missing?"}]


def test_offline_models_answer_without_network(no_network):
    reader = LLMClient("offline/reader")
    assert "No module named 'yaml'" in reader.complete(QUESTION).text
    summary = LLMClient("offline/extractive").complete(
        [{"role": "user", "content": "Never edit setup.py.\nRan pytest: FAILED tests/test_io.py"},
         {"role": "user", "content": "Summarize.\n## Constraints\n## Errors"}],
        max_tokens=200,
    )
    assert "## Constraints\n- Never edit setup.py." in summary.text
    assert "FAILED tests/test_io.py" in summary.text.split("## Errors")[1]
    assert summary.cost == 0.0


def test_remote_responses_are_cached_and_errors_are_not(tmp_path, no_network, monkeypatch):
    import litellm

    replies = iter(["yaml", "second sample", RuntimeError("provider down"), "ok"])
    sent = []

    def fake_completion(**kwargs):
        sent.append(kwargs["messages"])
        reply = next(replies)
        if isinstance(reply, Exception):
            raise reply
        return litellm.ModelResponse(choices=[{"message": {"role": "assistant", "content": reply}, "index": 0}])

    client = LLMClient("openai/gpt-4o-mini", cache_dir=tmp_path, max_retries=0)
    monkeypatch.setattr(litellm, "completion", fake_completion)
    first = client.complete(QUESTION)
    assert first.text == "yaml" and not first.cache_hit
    again = client.complete(QUESTION)
    assert again.text == "yaml" and again.cache_hit and len(sent) == 1  # served from the cache
    other_sample = client.complete(QUESTION, sample=1)  # a repeat is a new sample, not a cache hit
    assert other_sample.text == "second sample" and not other_sample.cache_hit
    failing = [{"role": "user", "content": "fails"}]
    with pytest.raises(LLMError, match="provider down"):
        client.complete(failing)
    # The failure left nothing in the cache: the same request is sent again and succeeds.
    assert client.complete(failing).text == "ok" and len(sent) == 4
    # A new client on the same folder (a later run) reads the persistent cache.
    assert LLMClient("openai/gpt-4o-mini", cache_dir=tmp_path).complete(QUESTION).cache_hit
