"""A summary the simulated provider accepted but the real model refused as too long leaves no cache entry.

The summarizer is the session's own model, served by a local strict server on 127.0.0.1 (tests/model_servers.py)
whose window is 100 tokens: the model's map entry admits every summary request, so the simulated provider
accepts it, and then the server refuses it in its API's words (`ContextOverflow`). The model never processed
that prompt, so nothing of it was cached and nothing is billed.

The hand-built session: a system prompt S (about 1,500 tokens), user message U0, answer A0, user message U1,
answer A1. The strategy asks for a summary of its whole context plus a prompt P before each request and
carries on without it when refused. Requests, in order:

- Q1 = (S, U0, P) summary, refused by the server; T1 = (S, U0) turn;
- Q2 = (S, U0, A0, U1, P) summary, refused; T2 = (S, U0, A0, U1) turn;
- a third summary, refused, before the final context (which is not sent).

Right answer: only the turns ever reached the model, so each turn reads what a provider that saw only the
turns would give it. T1 is the first request processed: it reads nothing. T2 reads T1's prefix: OpenAI
(gpt-4o: 1,024-token minimum, 128-token steps) tok(S) + tok(U0) floored to 128; Anthropic (Sonnet 4.5) T1's
entry at the end of U0, tok(S) + tok(U0). The refused summaries read, wrote and re-billed nothing, have no
usage and cost nothing. (Before: each refused summary kept its entry, so T1 read S and U0 from Q1, which never
ran, and T2 read U1 as well from Q2.)
"""

from __future__ import annotations

import pytest

import compaction_bench as bench
from compaction_bench.llm import CallSettings, LLMClient
from compaction_bench.metrics.measure import measure_cell
from compaction_bench.profiles import get_profile
from compaction_bench.provider import MESSAGE_OVERHEAD, SimulatedProvider
from compaction_bench.request import Message, Request
from compaction_bench.strategies.baselines import NoCompaction
from compaction_bench.strategy import SummaryOverflow
from compaction_bench.transcript import Item, Transcript

PROMPT = Message("user", "Summarize the conversation so far.")


class _SummarizesFirst(NoCompaction):
    """Asks for a summary of its whole context before each request and carries on without it when refused."""

    name = "test-summarizes-first"

    def request(self) -> Request:
        messages = self.messages()
        try:
            self.ctx.summarize(Request((*messages, PROMPT), kind="summary"))
        except SummaryOverflow:
            pass
        return Request(messages)


def two_turn_session(name: str = "refused-summaries") -> Transcript:
    """A long system prompt and two short turns: a summary request shares the turns' cacheable prefix."""
    items = (
        Item("sys", "system", "rules " * 1500),
        Item("u0", "user", "alpha " * 300, turn=0),
        Item("a0", "assistant", "first answer", response=0, turn=0),
        Item("u1", "user", "beta " * 300, turn=1),
        Item("a1", "assistant", "second answer", response=1, turn=1),
    )
    return Transcript(name, items)


@pytest.fixture
def keys(monkeypatch):
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.setenv(name, "local-key")


@pytest.mark.parametrize(("api", "model"), [("openai", "openai/gpt-4o"), ("anthropic", "anthropic/claude-sonnet-4-5")])
def test_a_summary_the_model_refused_caches_nothing(api, model, keys, tmp_path):
    from tests.model_servers import ModelServer

    server = ModelServer(api, context_window=100)
    try:
        summarizer = LLMClient(model, CallSettings(api_base=server.base_url, max_retries=0, cache_dir=str(tmp_path)))
        result = bench.replay(two_turn_session(), _SummarizesFirst, profile=model, summarizer=summarizer)
    finally:
        server.close()
    summaries = [r for r in result.requests if r.kind == "summary"]
    turns = [r for r in result.requests if r.kind == "turn"]
    # one summary before each turn and one before the final context, every one refused by the server
    assert (len(summaries), len(turns)) == (3, 2) and len(server.rejected) == server.received == 3
    assert all(r.overflow and r.error is not None and r.llm_call is None for r in summaries)
    assert all((r.cached_tokens, r.cache_write_tokens, r.rebilled_tokens, r.usage) == (0, 0, 0, None) for r in summaries)
    rows = measure_cell(result, [], answerer=None).requests
    assert all(row["cost_usd"] == 0 for row in rows if row["kind"] == "summary")

    # By hand: T1 reads nothing; T2 reads T1's prefix (S and U0).
    provider = SimulatedProvider(get_profile(model))
    tok = provider.message_tokens
    system, u0 = turns[0].messages
    shared = tok(system) + tok(u0)
    assert turns[0].cached_tokens == 0
    assert turns[1].cached_tokens == (shared // 128 * 128 if api == "openai" else shared)
    # and the same as a provider that only ever saw the turns (cache writes and re-billed tokens too)
    alone = [provider.send(Request(r.messages)) for r in turns]
    assert [(r.cached_tokens, r.cache_write_tokens, r.rebilled_tokens) for r in turns] == [
        (o.cached_tokens, o.cache.cache_write_tokens, o.cache.rebilled_tokens) for o in alone
    ]


def test_withdraw_restores_the_entries_the_refused_request_pushed_out():
    """Provider level, gpt-5 (OpenAI rules). The provider keeps the two newest requests and the newest turn's.
    T = (S, U0) turn, then summaries Q1 = (P1, U0) and Q2 = (P2, U0) (another system prompt each, sharing nothing
    with T or each other at the start): Q2 pushes nothing out yet (T is the turn entry). A third summary
    Q3 = (S, U1), accepted and then withdrawn, would have pushed Q1 out; after the withdrawal a request (P1, U0)
    again reads all of Q1, and a request (S, U1) reads only S (floored to 128 with U1's framing), not Q3."""
    provider = SimulatedProvider(get_profile("gpt-5"))
    tok = provider.message_tokens
    system = Message("system", "rules " * 1500)
    p1, p2 = Message("system", "first summarizer prompt " * 400), Message("system", "second summarizer prompt " * 400)
    u0, u1 = Message("user", "alpha " * 300), Message("user", "beta " * 300)
    provider.send(Request((system, u0)))
    provider.send(Request((p1, u0), kind="summary"))
    provider.send(Request((p2, u0), kind="summary"))
    provider.send(Request((system, u1), kind="summary"))
    provider.withdraw()
    with pytest.raises(RuntimeError):
        provider.withdraw()  # only the last accepted request, once
    again = provider.send(Request((p1, u0), kind="summary"))
    assert again.cached_tokens == (tok(p1) + tok(u0)) // 128 * 128
    assert provider.send(Request((system, u1))).cached_tokens == (tok(system) + MESSAGE_OVERHEAD) // 128 * 128
