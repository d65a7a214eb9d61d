"""A summarizer of another model than the session's has a cache of its own.

Providers cache per model: a prompt cached for one model is never read by a request to another (Claude
Code's prompt-caching page: a model switch makes the next turn an uncached one, as each model has its own
cache). So summary requests to the session's own model share the session's cache, and those to another
model neither read the turns' entries nor leave entries the turns read.

The hand-built session (OpenAI rules, `openai/gpt-4o`: 1,024-token minimum, 128-token steps): a system prompt
S (about 1,500 tokens), user message U0, answer A0, user message U1, answer A1. The strategy sends its whole
context as each turn request, and once, before the second turn, a summary request of that context plus a
prompt P (the summary is thrown away). The summarizer answers from a local strict server on 127.0.0.1.
Requests, in order:

- T1 = (S, U0) turn; Q = (S, U0, A0, U1, P) summary; T2 = (S, U0, A0, U1) turn.

Right answers, with tok() the profile's counts and ⌊x⌋ = x floored to 128:

- summarizer `openai/gpt-4o`, the session's model: T1 reads 0; Q reads T1's prefix, ⌊tok(S) + tok(U0)⌋;
  T2 reads Q's prefix, the whole of T2, ⌊tok(S) + tok(U0) + tok(A0) + tok(U1)⌋.
- summarizer `openai/gpt-4o-mini` (another model in litellm's map) or `openai/local-summarizer` (a model the
  map lacks, so the session's rules stand in for its cache): T1 reads 0; Q reads 0 (that model's cache holds
  nothing yet); T2 reads T1's prefix only, ⌊tok(S) + tok(U0)⌋, and every turn's cached, written and re-billed
  tokens are those of the same session replayed with no summary request at all.

(Before: every summary request went through the session's cache, so with either other model Q read
⌊tok(S) + tok(U0)⌋ from T1 and T2 read all of itself from Q.)
"""

from __future__ import annotations

import pytest

import compaction_bench as bench
from compaction_bench.llm import CallSettings, LLMClient
from compaction_bench.profiles import get_profile
from compaction_bench.provider import SimulatedProvider
from compaction_bench.replay import summary_profile
from compaction_bench.request import Message, Request
from compaction_bench.strategies.baselines import NoCompaction
from tests.test_cache_model_refused_summary import two_turn_session

SESSION_MODEL = "openai/gpt-4o"
PROMPT = Message("user", "Summarize the conversation so far.")


class _SummarizesOnce(NoCompaction):
    """Sends one summary request of its whole context before the second turn, and throws the summary away."""

    name = "test-summarizes-once"
    asked = False

    def request(self) -> Request:
        messages = self.messages()
        if len(messages) >= 4 and not self.asked:
            self.asked = True
            self.ctx.summarize(Request((*messages, PROMPT), kind="summary"))
        return Request(messages)


def _floor(tokens: int) -> int:
    return tokens // 128 * 128


@pytest.fixture
def keys(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "local-key")


@pytest.mark.parametrize("summarizer", [SESSION_MODEL, "openai/gpt-4o-mini", "openai/local-summarizer"])
def test_summary_requests_share_the_cache_of_their_own_model_only(summarizer, keys, tmp_path, openai_server):
    client = LLMClient(summarizer, CallSettings(api_base=openai_server.base_url, max_retries=0, cache_dir=str(tmp_path)))
    result = bench.replay(two_turn_session("summarizer-model"), _SummarizesOnce, profile=SESSION_MODEL, summarizer=client)
    assert openai_server.calls == 1 and openai_server.log[0]["model"] == summarizer.partition("/")[2]
    kinds = [r.kind for r in result.requests]
    assert kinds == ["turn", "summary", "turn", "final"]
    first, summary, second = result.requests[:3]
    assert summary.llm_call is not None and not summary.overflow

    tok = SimulatedProvider(get_profile(SESSION_MODEL)).message_tokens
    system, u0, a0, u1 = second.messages
    assert first.cached_tokens == 0
    if summarizer == SESSION_MODEL:
        assert summary.cached_tokens == _floor(tok(system) + tok(u0))
        assert second.cached_tokens == _floor(tok(system) + tok(u0) + tok(a0) + tok(u1))
        return
    assert summary.cached_tokens == 0
    assert second.cached_tokens == _floor(tok(system) + tok(u0))
    # the turns are as if no summary request had been sent
    plain = bench.replay(two_turn_session("summarizer-model"), "none", profile=SESSION_MODEL)
    numbers = [(r.true_tokens, r.cached_tokens, r.cache_write_tokens, r.rebilled_tokens) for r in (first, second)]
    assert numbers == [(r.true_tokens, r.cached_tokens, r.cache_write_tokens, r.rebilled_tokens) for r in plain.turn_requests]


def test_which_summarizers_are_the_sessions_model():
    """The offline summarizers stand in for the session's model; a litellm model is the session's when its map entry
    is the same model of the same provider (a windowed study profile keeps its model); any other is another
    model, with its own profile, or the session's standing in when the map lacks it."""
    session = get_profile("claude-sonnet")
    assert summary_profile(LLMClient("offline/extractive"), session) is None
    assert summary_profile(LLMClient("anthropic/claude-sonnet-4-5", CallSettings(use_cache=False)), session) is None
    assert summary_profile(LLMClient("openai/gpt-5", CallSettings(use_cache=False)), get_profile("64k")) is None
    other = summary_profile(LLMClient("anthropic/claude-haiku-4-5", CallSettings(use_cache=False)), session)
    assert other is not None and other.model == "claude-haiku-4-5"
    assert summary_profile(LLMClient("openai/local-summarizer", CallSettings(use_cache=False)), session) is session
