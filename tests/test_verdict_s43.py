"""The verdict's cost clause for a model without a price that caches nothing (the cost audit's finding 3, forty-third
pass): every input token bills at the one input price there, and no cache could have saved a re-billed token, so the
clause compares the input tokens sent, named so; where a cache read or wrote anything it keeps the re-billed tokens.

Hand case: a and b over three requests in each of eight scenarios, unpriced (cost NaN). Per scenario a sends
3 × 500 = 1,500 input tokens and re-bills 3 × 300 = 900; b sends 3 × 400 = 1,200 and re-bills 3 × 350 = 1,050 (over
the eight, 12,000, 7,200, 9,600 and 8,400). By the input, a costs 1,500 / 1,200 = 1.25× b's; by re-billed tokens it
would read 900 / 1,050 = 0.86×, the other way round (the audit's `pi` and `opencode-v1` at
heroku/claude-4-sonnet@64k: 3,635,990 against 3,640,537 input tokens, 3,516,883 against 3,510,034 re-billed).
a keeps 6 more of 61 probes than b (probe n in scenario s{n % 8}; b loses p0 … p5, one in each of six scenarios):
10 points, a lead the sentence claims (six scenarios differ, all one way: sign-flip p = 2 × 0.5^6 = 2/64).
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest

from compaction_bench.metrics.aggregate import summarize
from compaction_bench.reports.verdict import Difference, StrategyRow, finding, verdicts

INTEGRITY = ("integrity_openai_chat", "integrity_openai_responses", "integrity_anthropic", "integrity_gemini")
LEAD = "At heroku/claude-4-sonnet@64k, a keeps 10 points more facts than b"


SCENARIOS = 8


def _final(strategy: str, probe: str, present: bool) -> dict:
    return {"scenario": f"s{int(probe[1:]) % SCENARIOS}", "strategy": strategy, "profile": "heroku/claude-4-sonnet@64k", "repeat": 0, "probe_id": probe, "kind": "recall",
            "point_kind": "final", "step": 9, "request": 10, "present": present, "correct": None, "sample": 0, "fact_age_tokens": 1000,
            "found": "kept" if present else "absent", "source_summarized": False, "status": "seen", "ceiling_correct": None}


def _request(scenario: str, strategy: str, request: int, true_tokens: int, rebilled: int, cached: int = 0) -> dict:
    row = {"scenario": scenario, "strategy": strategy, "profile": "heroku/claude-4-sonnet@64k", "repeat": 0, "request": request, "step": request,
           "kind": "turn", "overflow": False, "refused": False, "missed_trigger": False, "estimate_error": None, "estimate_ape": None,
           "cached_tokens": cached, "true_tokens": true_tokens, "rebilled_tokens": rebilled, "cache_write_tokens": 0, "output_tokens": 10,
           "cost_usd": float("nan")}
    return row | dict.fromkeys(INTEGRITY, 0) | {column.replace("integrity_", "integrity_recorded_"): 0 for column in INTEGRITY}


def _tables(cached_by_a: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Probes (a keeps p0 … p50, b loses p0 … p5 of them; probe n in scenario s{n % 8}) and requests (the module's
    hand case in every scenario; a's last request there reads `cached_by_a` tokens from a cache)."""
    probes = pd.DataFrame([_final(s, f"p{n}", n < 51 and (s == "a" or n >= 6)) for s in "ab" for n in range(61)])
    requests = []
    for scenario in (f"s{i}" for i in range(SCENARIOS)):
        requests += [_request(scenario, "a", k, 500, 300, cached_by_a if k == 2 else 0) for k in range(3)]
        requests += [_request(scenario, "b", k, 400, 350) for k in range(3)]
    return probes, pd.DataFrame(requests)


def test_an_uncached_unpriced_model_compares_the_input_tokens_named_so():
    probes, requests = _tables()
    (verdict,) = verdicts(summarize(requests, pd.DataFrame(), probes), probes, requests)
    assert verdict.sentence.startswith(LEAD)
    assert verdict.difference is not None
    assert (verdict.difference.probes, verdict.difference.scenarios, verdict.difference.changed) == (61, 8, 6)
    assert verdict.difference.p_value == pytest.approx(2 / 64)
    assert verdict.sentence.endswith(" at 1.25× the input tokens (a model without a price, caching none of them).")
    rows = {r.strategy: r for r in verdict.rows}
    assert (rows["a"].input_tokens, rows["b"].input_tokens, rows["a"].rebilled_tokens, rows["b"].rebilled_tokens) == (
        SCENARIOS * 1500, SCENARIOS * 1200, SCENARIOS * 900, SCENARIOS * 1050)


def test_where_a_cache_read_anything_the_re_billed_tokens_stay():
    """a's last request in each scenario read 100 tokens from a cache: its input did not all cost the input price,
    and re-billed tokens are the ones a cache could have saved. 900 / 1,050 = 0.857."""
    probes, requests = _tables(cached_by_a=100)
    (verdict,) = verdicts(summarize(requests, pd.DataFrame(), probes), probes, requests)
    assert verdict.sentence.startswith(LEAD)
    assert verdict.sentence.endswith(" at 0.86× the re-billed tokens (a model without a price).")


def test_the_clause_from_rows_alone():
    """The sentence from rows: known zeros of cached and written tokens make the input the measure; rows that do not
    say (NaN, a table without those columns) keep the re-billed tokens; a strategy that sent no input is stated."""
    def row(name: str, retention: float, inputs: float, rebilled: float) -> StrategyRow:
        return StrategyRow(strategy=name, retention=retention, lo=retention - 0.05, hi=retention + 0.05, p_best=0.5, points=100, scenarios=1,
                           cost_usd=float("nan"), cache_hit_rate=0.0, rebilled_tokens=rebilled, failed_requests=0, overflows=0, compactions=3,
                           pair_errors=(0, 0, 0), cannot_serve=0, input_tokens=inputs, cached_tokens=0, cache_write_tokens=0)

    diff = Difference("a", "b", 0.1, 0.05, 0.15, 61, 0.03)
    rows = [row("a", 0.8, 1500, 900), row("b", 0.7, 1200, 1050)]
    assert finding("x", rows, diff).endswith(" at 1.25× the input tokens (a model without a price, caching none of them).")
    unknown = [replace(r, cached_tokens=float("nan")) for r in rows]
    assert finding("x", unknown, diff).endswith(" at 0.86× the re-billed tokens (a model without a price).")
    written = [rows[0], replace(rows[1], cache_write_tokens=40)]
    assert finding("x", written, diff).endswith(" at 0.86× the re-billed tokens (a model without a price).")
    none_sent = [replace(rows[0], input_tokens=0), rows[1]]
    assert finding("x", none_sent, diff).endswith(", sending 0 tokens against 1,200 (a model without a price, caching none of them).")
