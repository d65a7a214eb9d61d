"""A real summarizer's call is priced with the cache reads the agent's session would give it.

The replay sends turn requests to no model, so a real summarizer's own cache never holds the session's prefix and
the usage it reports reads nothing from it; the agent, whose turns did reach the model, reads that prefix in a
summary request that shares it (Claude Code 2.1's summary fork exists for this, spec §8). The simulated provider
gives the summary request those reads, so the call is priced on the tokens the model reported, that many of them
at the cache-read price.

Right answer, by hand from Anthropic's price list for Claude Sonnet 4.5: $3 per million input tokens, $0.30 per
million cache reads, $3.75 per million 5-minute cache writes, $15 per million output tokens. (Before: every
summary call cost input × $3 + output × $15, the reads the replay showed for it unpaid for, which turned the
order of claude-code and claude-code-2.1's summary cost round on a real summarizer.)
"""

from __future__ import annotations

import pytest

import compaction_bench as bench
from compaction_bench.llm import CallSettings, LLMClient
from compaction_bench.metrics.measure import measure_cell
from compaction_bench.request import Message, Request
from compaction_bench.strategies.baselines import NoCompaction
from tests.test_cache_model_refused_summary import two_turn_session

MODEL = "anthropic/claude-sonnet-4-5"
INPUT, READ, WRITE, OUTPUT = 3e-6, 0.3e-6, 3.75e-6, 15e-6
PROMPT = Message("user", "Summarize the conversation so far.")


class _SummarizesAlongside(NoCompaction):
    """Asks for a summary of its whole context plus a prompt before each request, and carries on unchanged."""

    name = "test-summarizes-alongside"

    def request(self) -> Request:
        messages = self.messages()
        self.ctx.summarize(Request((*messages, PROMPT), kind="summary"))
        return Request(messages)


def test_a_summary_call_pays_the_cache_read_price_for_the_session_prefix_it_shares(monkeypatch, tmp_path):
    from tests.model_servers import ModelServer

    monkeypatch.setenv("ANTHROPIC_API_KEY", "local-key")
    server = ModelServer("anthropic")
    try:
        summarizer = LLMClient(MODEL, CallSettings(api_base=server.base_url, max_retries=0, cache_dir=str(tmp_path)))
        result = bench.replay(two_turn_session("priced-summaries"), _SummarizesAlongside, profile=MODEL, summarizer=summarizer)
    finally:
        server.close()
    rows = [row for row in measure_cell(result, [], answerer=None).requests if row["kind"] == "summary"]
    summaries = [r for r in result.requests if r.kind == "summary"]
    assert len(rows) == len(summaries) == 3
    reading = 0
    for row, request in zip(rows, summaries, strict=True):
        call = request.llm_call
        assert call is not None and call.input_tokens > 0
        cached = min(request.cached_tokens, call.input_tokens)
        written = min(request.cache_write_tokens, call.input_tokens - cached)
        by_hand = (call.input_tokens - cached - written) * INPUT + cached * READ + written * WRITE + call.output_tokens * OUTPUT
        assert row["cost_usd"] == pytest.approx(by_hand, rel=1e-9)
        reading += cached > 1_000
    assert reading >= 2  # the later summaries read the system prompt and the turns the session cached
