"""Aggregation and statistics: bootstrap intervals, McNemar, repeat voting, the summary table, the synthetic suite."""

from __future__ import annotations

import pandas as pd
import pytest

import compaction_bench as bench
from compaction_bench.metrics.aggregate import compare, mcnemar_probes, summarize, votes
from compaction_bench.metrics.integrity import FORMATS
from compaction_bench.metrics.measure import measure_cell
from compaction_bench.metrics.stats import bootstrap_ci, mcnemar


def test_bootstrap_interval_brackets_the_mean_and_is_reproducible():
    values = [1.0] * 30 + [0.0] * 10
    low, high = bootstrap_ci(values)
    assert low < 0.75 < high and 0.55 < low and high < 0.9
    assert bootstrap_ci(values) == (low, high)
    assert bootstrap_ci([1.0, 1.0]) == (1.0, 1.0)


def test_mcnemar_exact_by_hand():
    # 6 discordant pairs, all won by B: p = 2 × 0.5^6 = 0.03125.
    a = [True] * 4 + [False] * 6
    b = [True] * 10
    result = mcnemar(a, b)
    assert (result.a_only, result.b_only) == (0, 6)
    assert result.p_value == pytest.approx(0.03125)
    assert mcnemar([True, False], [True, False]).p_value == 1.0


def probe_row(strategy: str, probe_id: str, correct, sample: int, present: bool = True, kind: str = "recall", age: int = 100) -> dict:
    return {
        "scenario": "s", "strategy": strategy, "profile": "32k", "repeat": sample, "sample": sample, "probe_id": probe_id,
        "kind": kind, "point": "final", "step": 9, "request": 20, "present": present, "correct": correct, "fact_age_tokens": age,
    }


def test_votes_take_the_majority_of_distinct_samples():
    rows = [
        probe_row("x", "p", True, 0),
        probe_row("x", "p", False, 1),
        probe_row("x", "p", False, 1),  # the same sample again (a cache hit): not a new vote
        probe_row("x", "p", True, 2),
        probe_row("x", "q", True, 0),
        probe_row("x", "q", False, 1),  # a tie does not pass
        probe_row("x", "r", None, 0),  # unscored
    ]
    voted = votes(pd.DataFrame(rows)).set_index("probe_id")["correct"]
    assert bool(voted["p"]) is True
    assert bool(voted["q"]) is False
    assert voted["r"] is None


def request_row(strategy: str, request: int, true: int, cached: int, **kw) -> dict:
    row = {
        "scenario": "s", "strategy": strategy, "profile": "32k", "repeat": 0, "request": request, "kind": "turn",
        "true_tokens": true, "cached_tokens": cached, "cache_write_tokens": 0, "rebilled_tokens": 0, "output_tokens": 10,
        "overflow": False, "estimate_error": None, "estimate_ape": None, "missed_trigger": False, "cost_usd": 0.01,
    }
    row.update({f"integrity_{fmt}": 0 for fmt in FORMATS})
    row.update(kw)
    return row


def test_summary_by_hand():
    requests = pd.DataFrame(
        [
            request_row("x", 0, 1000, 0),  # the first request can never hit: left out of the hit rate
            request_row("x", 1, 2000, 1024, estimate_error=-100, estimate_ape=0.05),
            request_row("x", 2, 3000, 1920, estimate_error=300, estimate_ape=0.1, missed_trigger=True, integrity_anthropic=2),
            request_row("x", 3, 3000, 0, overflow=True, cost_usd=0.0),
        ]
    )
    compactions = pd.DataFrame(
        [{"scenario": "s", "strategy": "x", "profile": "32k", "repeat": 0, "silent_loss": 3, "premature": True,
          "llm_calls": 1, "llm_input_tokens": 500, "llm_output_tokens": 50, "llm_cost_usd": 0.001}]
    )
    probes = pd.DataFrame(
        [probe_row("x", "a", True, 0), probe_row("x", "b", False, 0, present=False, kind="error", age=50_000)]
    )
    (row,) = summarize(requests, compactions, probes).to_dict("records")
    assert row["cache_hit_rate"] == pytest.approx((1024 + 1920) / (2000 + 3000))
    assert row["presence"] == 0.5 and row["answered"] == 0.5
    assert row["presence_recall"] == 1.0 and row["presence_error"] == 0.0
    assert row["presence_age_lt8k"] == 1.0 and row["presence_age_32k_128k"] == 0.0
    assert row["answered_age_lt8k"] == 1.0 and row["answered_age_32k_128k"] == 0.0
    assert row["integrity_anthropic"] == 2 and row["integrity_openai_chat"] == 0
    assert row["estimate_error"] == 100 and row["estimate_ape"] == pytest.approx(0.075)
    assert row["missed_triggers"] == 1 and row["overflows"] == 1 and row["premature_triggers"] == 1
    assert row["silent_loss"] == 3 and row["summarizer_tokens"] == 550 and row["compactions"] == 1
    assert row["cost_usd"] == pytest.approx(0.03) and row["input_tokens"] == 6000


def test_compare_and_paired_test_between_strategies():
    rows = [probe_row("a", f"p{i}", True, 0) for i in range(6)] + [probe_row("b", f"p{i}", i < 1, 0) for i in range(6)]
    probes = pd.DataFrame(rows)
    result = mcnemar_probes(probes, "a", "b")
    assert (result.n, result.a_only, result.b_only) == (6, 5, 0)
    assert result.p_value == pytest.approx(2 * 0.5**5)
    requests = pd.DataFrame([request_row("a", 0, 100, 0), request_row("b", 0, 100, 0, cost_usd=0.05)])
    summary = summarize(requests, pd.DataFrame(), probes)
    diff = compare(summary[summary.strategy == "a"], summary[summary.strategy == "b"])
    assert diff["answered_delta"].iloc[0] == pytest.approx(1 / 6 - 1)
    assert diff["cost_usd_delta"].iloc[0] == pytest.approx(0.04)


@pytest.fixture(scope="module")
def suite_summary():
    from compaction_bench.scenarios.synthetic import default_suite

    requests, compactions, probes = [], [], []
    for scenario in default_suite():
        for strategy, profile in (("none", "1m"), ("truncate", "32k")):
            result = bench.replay(scenario.transcript, strategy, profile=profile)
            cell = measure_cell(result, list(scenario.probes), answerer=None)
            extra = {"scenario": scenario.name, "strategy": strategy, "profile": profile, "repeat": 0}
            requests += [r | extra for r in cell.requests]
            compactions += [r | extra for r in cell.compactions]
            probes += [r | extra for r in cell.probes]
    return pd.DataFrame(probes), summarize(pd.DataFrame(requests), pd.DataFrame(compactions), pd.DataFrame(probes))


@pytest.mark.slow
def test_synthetic_suite_none_keeps_everything_and_hits_the_cache(suite_summary):
    probes, summary = suite_summary
    none = probes[probes.strategy == "none"]
    assert len(none) and none["present"].all()
    rows = summary[summary.strategy == "none"]
    assert len(rows) == 7 and (rows["cache_hit_rate"] > 0.9).all()


@pytest.mark.slow
def test_synthetic_suite_truncate_loses_facts_but_never_breaks_pairs(suite_summary):
    _, summary = suite_summary
    rows = summary[summary.strategy == "truncate"]
    assert len(rows) == 7 and (rows["presence"] < 1.0).all()
    for fmt in FORMATS:
        assert (rows[f"integrity_{fmt}"] == 0).all(), fmt
