"""The simulated provider's cache against the providers' documented rules (docs/specs/evaluation.md §7), on
hand-made request sequences whose right answers are worked out in each test's docstring.

Rules used:
- a cache entry lives for the TTL after its last use (OpenAI: cleared after 5 to 10 minutes of
  inactivity, `ttl_seconds` 600; Anthropic: 5 minutes, refreshed on each use, 300): a read refreshes the
  prefix it read, not the rest of the entry; an entry that has expired is gone, but another one that has
  not still serves its prefix;
- a provider keeps every prefix it cached until that prefix expires: how many other requests came
  after it does not matter;
- Anthropic serves the longest cached prefix that ends at a breakpoint of an earlier request, is at
  least the model's minimum long and lies within the lookback of a breakpoint of the new request,
  whichever earlier request wrote it; everything after it up to the last breakpoint (the request's
  end) is written at 1.25× the input price;
- OpenAI serves the longest common prefix of at least 1,024 tokens in whole 128-token steps, with no
  write fee;
- a request the provider refused reached no model: it costs nothing and caches nothing.
"""

from __future__ import annotations

import pytest

import compaction_bench as bench
from compaction_bench.llm import LLMClient, LLMResult
from compaction_bench.metrics.cost import request_cost
from compaction_bench.metrics.measure import measure_cell
from compaction_bench.profiles import get_profile
from compaction_bench.provider import MESSAGE_OVERHEAD, SimulatedProvider
from compaction_bench.request import Message, Request
from compaction_bench.strategies.baselines import NoCompaction
from compaction_bench.strategy import SummaryOverflow
from compaction_bench.transcript import Item, Transcript

S = Message("system", "rules " * 1500)  # about 1,500 tokens: over the 1,024-token minimum of both providers
A = Message("user", "alpha " * 200)
B = Message("user", "beta " * 200)
C = Message("user", "next question")


def _at(seconds: int) -> str:
    """An ISO timestamp `seconds` after 2025-01-01T00:00:00Z (the form the importers store)."""
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    return f"2025-01-01T{hour:02d}:{minute:02d}:{second:02d}Z"


# ------------------------------------------------------------------ TTL, per entry
def test_anthropic_an_expired_entry_leaves_a_live_one_serving_its_prefix():
    """claude-sonnet (5-minute TTL, 1,024-token minimum, breakpoints at the system prompt's end and on the
    last messages).

    - t=0: R1 = (S, A) writes entries at the ends of S and of A.
    - t=250: R2 = (S, B) reads S from R1 (250 s ≤ 300 s: alive), which refreshes it; R2's own entries
      end at S and at B.
    - t=400: R3 = (S, A, C). R1's entry at the end of A has expired (400 s > 300 s since its last use);
      R2's entry at the end of S was used 150 s ago and is alive. Right answer: R3 reads tok(S) and
      writes the rest, total − tok(S). (Before: the entry sharing the longest prefix, R1, was chosen
      first and found expired, so nothing was read.)"""
    provider = SimulatedProvider(get_profile("claude-sonnet"))
    tok = provider.message_tokens
    provider.send(Request((S, A)), timestamp=_at(0))
    second = provider.send(Request((S, B)), timestamp=_at(250))
    assert second.cached_tokens == tok(S)
    third = provider.send(Request((S, A, C)), timestamp=_at(400))
    total = tok(S) + tok(A) + tok(C)
    assert third.true_tokens == total
    assert (third.cached_tokens, third.cache.cache_write_tokens) == (tok(S), total - tok(S))


def test_openai_an_expired_entry_leaves_a_live_one_serving_its_prefix():
    """gpt-5 (entries cleared after 10 minutes of inactivity, `ttl_seconds` 600).

    - t=0: R1 = (S, A); t=500: R2 = (S, B); t=700: R3 = (S, A, C).
    - R1 was last used 700 s ago (> 600 s): gone. R2, 200 s ago, is alive; R3 shares with it S and,
      inside the differing user message, its framing (`MESSAGE_OVERHEAD` tokens: same role, and
      "alpha" and "beta" differ at their first token). Right answer: (tok(S) + 4) floored to 128.
      (Before: 0, R1 was chosen and found expired.)"""
    provider = SimulatedProvider(get_profile("gpt-5"))
    tok = provider.message_tokens
    provider.send(Request((S, A)), timestamp=_at(0))
    provider.send(Request((S, B)), timestamp=_at(500))
    third = provider.send(Request((S, A, C)), timestamp=_at(700))
    assert third.cache.prefix_tokens == tok(S) + MESSAGE_OVERHEAD
    assert third.cached_tokens == (tok(S) + MESSAGE_OVERHEAD) // 128 * 128 >= 1024


def test_anthropic_a_read_refreshes_the_prefix_it_read_and_only_that():
    """claude-sonnet (TTL 300 s, refreshed on each use).

    - t=0: R1 = (S, A) writes entries at the ends of S and of A.
    - t=200: R2 = (S, A, D1, D2, D3, D4) reads R1's entry at the end of A (200 s: alive), which refreshes it.
      R2's own breakpoints are the end of S and its last three messages: none at the end of A.
    - t=400: R3 = (S, A, C). R1 was written 400 s ago, but its entry at the end of A was used 200 s ago: alive.
      Right answer: R3 reads tok(S) + tok(A). (Before: R1 had expired, and R2 holds only S at a breakpoint
      inside the prefix, so R3 read tok(S).)
    - t=650: R4 = (S, A, C, D1). The read at 400 came from R1 (its entry at the end of A, now used 250 s ago) or
      R3 (written 250 s ago): tok(S) + tok(A) + tok(C), R3's breakpoint at the end of C.
    And a read refreshes only what it read: at t=0 R1 = (S, A, B), t=250 R2 = (S, C) reads S alone; t=400
    R3 = (S, A, B, C) finds R1's entries at the ends of A and B unused for 400 s and reads tok(S)."""
    d = [Message("user", f"step {n} " * 50) for n in range(1, 5)]
    provider = SimulatedProvider(get_profile("claude-sonnet"))
    tok = provider.message_tokens
    provider.send(Request((S, A)), timestamp=_at(0))
    assert provider.send(Request((S, A, *d)), timestamp=_at(200)).cached_tokens == tok(S) + tok(A)
    third = provider.send(Request((S, A, C)), timestamp=_at(400))
    assert (third.cached_tokens, third.cache.cache_write_tokens) == (tok(S) + tok(A), tok(C))
    assert provider.send(Request((S, A, C, d[0])), timestamp=_at(650)).cached_tokens == tok(S) + tok(A) + tok(C)

    provider = SimulatedProvider(get_profile("claude-sonnet"))
    provider.send(Request((S, A, B)), timestamp=_at(0))
    assert provider.send(Request((S, C)), timestamp=_at(250)).cached_tokens == tok(S)
    assert provider.send(Request((S, A, B, C)), timestamp=_at(400)).cached_tokens == tok(S)


def test_ttl_boundary_and_sessions_without_timestamps():
    """claude-sonnet: an entry used exactly 300 s before is alive (expired means *more* than the TTL),
    301 s is gone; without timestamps nothing ever expires (the gap between requests is unknown, and
    every request of a step is sent at once)."""
    for gap, cached in ((300, True), (301, False)):
        provider = SimulatedProvider(get_profile("claude-sonnet"))
        provider.send(Request((S, A)), timestamp=_at(0))
        second = provider.send(Request((S, A, C)), timestamp=_at(gap))
        assert second.cached_tokens == (provider.message_tokens(S) + provider.message_tokens(A) if cached else 0), gap
    provider = SimulatedProvider(get_profile("claude-sonnet"))
    provider.send(Request((S, A)))
    assert provider.send(Request((S, A, C))).cached_tokens == provider.message_tokens(S) + provider.message_tokens(A)


# ------------------------------------------------------------------ Anthropic: which earlier request serves
def test_anthropic_reads_the_longest_breakpoint_entry_of_any_kept_request():
    """claude-sonnet, no timestamps. H1, H2 are history messages, P1–P3 a summary prompt's three messages.

    - T = (S, H1), a turn: entries at the ends of S and of H1.
    - Q = (S, H1, H2, P1, P2, P3), a summary request: its breakpoints are the end of S and the ends of
      its last three messages (P1, P2, P3); it reads T's entry at the end of H1.
    - R = (S, H1, H2, X). Q shares more tokens with R (S, H1, H2) than T does (S, H1), but of Q's entries
      only the one at the end of S lies inside that prefix, while T's at the end of H1 lies inside its
      own: the provider holds both and serves the longest, tok(S) + tok(H1) (H1 is one of R's
      breakpoints, so the lookback finds it). Right answer: read tok(S) + tok(H1), write the rest.
      (Before: the entry with the longest raw prefix, Q, was chosen, and only tok(S) was read.)"""
    provider = SimulatedProvider(get_profile("claude-sonnet"))
    tok = provider.message_tokens
    h1, h2 = Message("assistant", "gamma " * 300), Message("user", "delta " * 300)
    p1, p2, p3 = Message("user", "Summarize."), Message("assistant", "Which part?"), Message("user", "All of it.")
    x = Message("assistant", "epsilon " * 50)
    provider.send(Request((S, h1)))
    summary = provider.send(Request((S, h1, h2, p1, p2, p3), kind="summary"))
    assert summary.cached_tokens == tok(S) + tok(h1)
    third = provider.send(Request((S, h1, h2, x)))
    total = tok(S) + tok(h1) + tok(h2) + tok(x)
    assert (third.cached_tokens, third.cache.cache_write_tokens) == (tok(S) + tok(h1), total - tok(S) - tok(h1))


# ------------------------------------------------------------------ a fork that writes no cache of its own
def test_anthropic_a_skip_cache_write_fork_writes_nothing_after_the_message_before_its_last():
    """claude-sonnet, no timestamps. Claude Code's summary fork (`skipCacheWrite`, claude-code.md §8.4) puts its
    one message breakpoint on the message before its last (upstream `addCacheBreakpoints`: `markerIndex =
    skipCacheWrite ? messages.length - 2 : messages.length - 1`), "so the fork doesn't leave its own tail".

    - T = (S, A), a turn: entries at the ends of S and of A.
    - F = (S, A, B, P), the fork: reads tok(S) + tok(A) from T and writes up to its breakpoint at the end of
      B: tok(B). Without the flag it writes tok(B) + tok(P).
    - G = (S, A, B, P, C) next: F left no entry at the end of P, so G reads tok(S) + tok(A) + tok(B) (the
      entry F wrote at B's end) and writes tok(P) + tok(C). Without the flag G reads through P."""
    tok = SimulatedProvider(get_profile("claude-sonnet")).message_tokens
    p = Message("user", "Summarize the conversation. " * 40)
    outcomes = {}
    for skip in (True, False):
        provider = SimulatedProvider(get_profile("claude-sonnet"))
        provider.send(Request((S, A)))
        fork = provider.send(Request((S, A, B, p), kind="summary", skip_cache_write=skip))
        after = provider.send(Request((S, A, B, p, C)))
        outcomes[skip] = [(o.cached_tokens, o.cache.cache_write_tokens) for o in (fork, after)]
    read = tok(S) + tok(A)
    assert outcomes[True] == [(read, tok(B)), (read + tok(B), tok(p) + tok(C))]
    assert outcomes[False] == [(read, tok(B) + tok(p)), (read + tok(B) + tok(p), tok(C))]


def test_openai_caches_a_skip_cache_write_fork_as_any_request():
    """gpt-5: OpenAI caches every prefix by itself, with no breakpoint to move, so the flag changes nothing:
    the same sequence as above gives the same outcomes with and without it."""
    outcomes = {}
    for skip in (True, False):
        provider = SimulatedProvider(get_profile("gpt-5"))
        provider.send(Request((S, A)))
        fork = provider.send(Request((S, A, B, Message("user", "Summarize. " * 200)), kind="summary", skip_cache_write=skip))
        after = provider.send(Request((S, A, B, Message("user", "Summarize. " * 200), C)))
        outcomes[skip] = [(o.cached_tokens, o.cache.cache_write_tokens, o.cache.prefix_tokens) for o in (fork, after)]
    assert outcomes[True] == outcomes[False]
    assert outcomes[True][1][0] > outcomes[True][0][0]  # the next request read the fork's whole prefix


# ------------------------------------------------------------------ entries are not evicted by count
@pytest.mark.parametrize("profile", ["gpt-5", "claude-sonnet"])
def test_summary_calls_do_not_evict_the_turns_cache_entry(profile):
    """A strategy that makes two summary calls after a turn (Aider's recursive summary, with its own
    prompt that shares nothing with the turn) and then sends the next turn, which extends the first.

    - T1 = (S, A) turn; Q1 = (P, A), Q2 = (P, B) summary calls (P: the summarizer's system prompt);
      T2 = (S, A, X, C) turn, all within seconds (no timestamps here).
    - The provider holds T1's prefix for its TTL whatever was sent after it. Right answer for T2:
      OpenAI: tok(S) + tok(A) floored to 128; Anthropic: T1's entry at the end of A, tok(S) + tok(A).
      (Before: only the two newest requests were kept, Q1 and Q2, and T2 read nothing.)"""
    provider = SimulatedProvider(get_profile(profile))
    tok = provider.message_tokens
    prompt = Message("system", "You summarize conversations. " * 300)
    provider.send(Request((S, A)))
    provider.send(Request((prompt, A), kind="summary"))
    provider.send(Request((prompt, B), kind="summary"))
    second = provider.send(Request((S, A, Message("assistant", "done"), C)))
    shared = tok(S) + tok(A)
    assert second.cached_tokens == (shared // 128 * 128 if profile == "gpt-5" else shared)


# ------------------------------------------------------------------ minimums and steps
@pytest.mark.parametrize(("profile", "minimum", "step"), [("gpt-5", 1024, 128), ("claude-opus", 4096, None), ("claude-sonnet", 1024, None)])
def test_a_prefix_below_the_models_minimum_reads_nothing(profile, minimum, step):
    """A 2,000-token system prompt, sent twice with different user messages: the common prefix is the
    system prompt (plus the user message's framing). OpenAI (1,024 minimum, 128-token steps) reads it
    floored to 128; Claude Sonnet 4.5 (1,024 minimum) reads the entry at the end of the system prompt;
    Claude Opus 4.5 (4,096 minimum) reads nothing and, the request being under 4,096 tokens as well,
    writes nothing."""
    provider = SimulatedProvider(get_profile(profile))
    tok = provider.message_tokens
    system = Message("system", "policy " * 2000)
    assert 1024 < tok(system) < 4096
    provider.send(Request((system, A)))
    second = provider.send(Request((system, B)))
    if tok(system) < minimum:
        assert (second.cached_tokens, second.cache.cache_write_tokens) == (0, 0)
    elif step:
        assert second.cached_tokens == (tok(system) + MESSAGE_OVERHEAD) // step * step
    else:
        assert (second.cached_tokens, second.cache.cache_write_tokens) == (tok(system), tok(B))


# ------------------------------------------------------------------ dollars
def test_request_cost_by_hand():
    """claude-sonnet-4-5 in litellm's map: input $3/M, cache read $0.30/M (0.1×), 5-minute cache write
    $3.75/M (1.25×), output $15/M. 10,000 input tokens of which 6,000 read and 4,000 written, 500 out:
    6,000 × 0.30 + 4,000 × 3.75 + 500 × 15 = 1,800 + 15,000 + 7,500 = 24,300 µ$ = $0.0243.
    gpt-5: input $1.25/M, cached $0.125/M (0.1×), output $10/M, no write fee: 10,000 input of which
    6,000 cached, 500 out: 4,000 × 1.25 + 6,000 × 0.125 + 500 × 10 = 5,000 + 750 + 5,000 = $0.01075."""
    claude = request_cost(get_profile("claude-sonnet"), input_tokens=10_000, cached_tokens=6_000, cache_write_tokens=4_000, output_tokens=500)
    assert claude == pytest.approx(0.0243)
    gpt = request_cost(get_profile("gpt-5"), input_tokens=10_000, cached_tokens=6_000, cache_write_tokens=0, output_tokens=500)
    assert gpt == pytest.approx(0.01075)


def test_an_overflowed_request_costs_nothing_and_caches_nothing():
    """A request over the window is refused: cached 0, written 0, and the cache the next request reads is
    the one before it (the next request, the first one again, reads all of it: tok(S) + tok(A) on
    Anthropic, an entry at the end of A)."""
    provider = SimulatedProvider(get_profile("anthropic.claude-sonnet-4-20250514-v1:0"))  # refuses input + max_tokens over 200,000
    tok = provider.message_tokens
    provider.send(Request((S, A)))
    refused = provider.send(Request((S, B), max_output_tokens=provider.profile.context_window))
    assert refused.overflow and (refused.cached_tokens, refused.cache.cache_write_tokens) == (0, 0)
    again = provider.send(Request((S, A, C)))
    assert again.cached_tokens == tok(S) + tok(A)


# ------------------------------------------------------------------ a summary that reaches no model
class _SmallSummarizer(LLMClient):
    """A summarizer model whose own window (2,000 tokens) is smaller than the session's."""

    def __init__(self) -> None:
        super().__init__("offline/extractive")

    @property  # type: ignore[override]
    def limits(self):
        return get_profile("openai/gpt-4o@2k")

    def complete(self, messages, **kwargs) -> LLMResult:  # never reached: the request does not fit
        raise AssertionError("a request over the summarizer's window reached it")


class _SummarizesEarly(NoCompaction):
    """Asks for a summary of its whole context before each request (the summary is thrown away)."""

    name = "test-summarizes-early"

    def request(self) -> Request:
        messages = self.messages()
        try:
            self.ctx.summarize(Request((*messages, Message("user", "Summarize.")), kind="summary"))
        except SummaryOverflow:
            pass
        return Request(messages)


def test_a_summary_over_the_summarizers_own_window_caches_nothing():
    """The summary request does not fit the summarizer's 2,000-token window: it reached no model, so it
    must cost nothing, read and write nothing, and leave no cache entry. Right answer: its row has
    cached 0 and written 0, and the turn after it (which extends the turn before it) reads from that
    turn only."""
    items = (
        Item("sys", "system", "rules " * 2500),  # every summary request is over 2,000 tokens
        Item("u0", "user", "alpha " * 200, turn=0),
        Item("a0", "assistant", "first", response=0, turn=0),
        Item("u1", "user", "beta", turn=1),
        Item("a1", "assistant", "second", response=1, turn=1),
    )
    result = bench.replay(Transcript("hand", items), _SummarizesEarly, profile="claude-sonnet", summarizer=_SmallSummarizer())
    summaries = [r for r in result.requests if r.kind == "summary"]
    assert summaries and all(r.overflow for r in summaries)
    assert all((r.cached_tokens, r.cache_write_tokens) == (0, 0) for r in summaries)
    rows = measure_cell(result, [], answerer=None).requests
    assert all(r["cost_usd"] == 0 for r in rows if r["kind"] == "summary")
    # Without the summary's entry, the second turn reads the first turn's entries only.
    turns = [r for r in result.requests if r.kind == "turn"]
    provider = SimulatedProvider(get_profile("claude-sonnet"))
    expected = [provider.send(Request(r.messages)).cached_tokens for r in turns]
    assert [r.cached_tokens for r in turns] == expected


def test_a_one_hour_anthropic_cache_writes_at_twice_the_input_price():
    """Anthropic bills a write to the 5-minute cache at 1.25× the input price (the map's
    `cache_creation_input_token_cost`, $3.75/M for Sonnet 4.5) and to the 1-hour cache at 2× ($6/M). A
    policy with the 1-hour TTL: 4,000 written tokens of a 10,000-token request with 6,000 read, no
    output: 6,000 × 0.30 + 4,000 × 6 = 1,800 + 24,000 µ$ = $0.0258. (Before: the map's 5-minute price,
    $0.0168.)"""
    from dataclasses import replace

    profile = get_profile("claude-sonnet")
    hour = replace(profile, cache=replace(profile.cache, ttl_seconds=3600))
    assert request_cost(hour, input_tokens=10_000, cached_tokens=6_000, cache_write_tokens=4_000, output_tokens=0) == pytest.approx(0.0258)
    assert request_cost(profile, input_tokens=10_000, cached_tokens=6_000, cache_write_tokens=4_000, output_tokens=0) == pytest.approx(0.0168)
