"""Audit of the intervals and the verdict against answers worked out apart from the code: the exact
binomial (Clopper–Pearson) interval where probes sit at the ends of the range, Monte Carlo
p-values, ties in the ranking, and what the verdict's sentence says its numbers rest on."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from compaction_bench.metrics.stats import bootstrap_ci, cluster_bootstrap_ci
from compaction_bench.reports.verdict import verdicts


def clopper_pearson(successes: int, n: int) -> tuple[float, float]:
    low = 0.0 if successes == 0 else float(scipy_stats.beta.ppf(0.025, successes, n - successes + 1))
    high = 1.0 if successes == n else float(scipy_stats.beta.ppf(0.975, successes + 1, n - successes))
    return low, high


# ---------------------------------------------------------------------------- intervals near the ends of the range
def test_one_lost_probe_never_raises_the_lower_bound():
    """96 probes all kept give [0.962, 1] (a share 1 − 0.025^(1/96) may still be lost). Keeping 95 of
    them is worse evidence, so its lower bound must not be higher; the exact binomial interval of
    95 of 96 is [0.943, 0.9997]. A percentile bootstrap sees the one loss drawn about Poisson(1)
    times and gave [0.969, 1]: narrower than all 96 kept, and above the exact bound."""
    all_kept = bootstrap_ci([1.0] * 96)
    one_lost = bootstrap_ci([1.0] * 95 + [0.0])
    assert one_lost[0] <= all_kept[0]
    assert one_lost[0] == pytest.approx(clopper_pearson(95, 96)[0], abs=1e-9)
    # the same split over four scenarios, the loss in one: clustering never makes it narrower than that
    clustered = cluster_bootstrap_ci([[1.0] * 24, [1.0] * 24, [1.0] * 24, [1.0] * 23 + [0.0]])
    assert clustered[0] <= clopper_pearson(95, 96)[0] + 1e-9


@pytest.mark.parametrize("kept, n", [(1, 30), (2, 50), (48, 50), (199, 200)])
def test_the_interval_of_probes_kept_or_lost_contains_the_exact_binomial_one(kept, n):
    """Per-probe values of 0 and 1 are binomial counts: whatever the resampling, the interval holds
    the Clopper–Pearson interval of `kept` of `n`."""
    low, high = bootstrap_ci([1.0] * kept + [0.0] * (n - kept))
    exact = clopper_pearson(kept, n)
    assert low <= exact[0] + 1e-9 and high >= exact[1] - 1e-9
    # Away from the ends (half of three scenarios' probes kept) the clustered bootstrap is the wider
    # of the two and stays as it was: the floor only matters where few probes sit away from an end.
    rng = np.random.default_rng(3)
    clusters = [(rng.random(40) < 0.5).astype(float).tolist() for _ in range(3)]
    low, high = cluster_bootstrap_ci(clusters)
    exact = clopper_pearson(int(sum(map(sum, clusters))), 120)
    assert low < exact[0] and high > exact[1]


def test_holm_adjusts_as_worked_by_hand():
    from compaction_bench.metrics.stats import holm

    # sorted 0.01, 0.03, 0.04, 0.2 → 4×0.01, 3×0.03, max(2×0.04, 0.09), max(0.2, 0.09)
    assert holm([0.04, 0.01, 0.2, 0.03]) == pytest.approx([0.09, 0.04, 0.2, 0.09])
    assert holm([]) == [] and holm([0.3]) == [0.3] and holm([0.6, 0.7]) == [1.0, 1.0]


# ---------------------------------------------------------------------------- the verdict
def _final(scenario: str, strategy: str, probe: str, present: bool) -> dict:
    return {"scenario": scenario, "strategy": strategy, "profile": "64k", "repeat": 0, "probe_id": probe, "kind": "recall",
            "point_kind": "final", "step": 9, "request": 10, "present": present, "correct": None, "sample": 0, "fact_age_tokens": 1000}


def _tables(probes: list[dict]) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    frame = pd.DataFrame(probes)
    cells = frame[["scenario", "strategy", "profile"]].drop_duplicates().reset_index(drop=True)
    summary = cells.assign(cost_usd=1.0, rebilled_tokens=1.0)
    requests = cells.assign(repeat=0, request=0, kind="turn", overflow=False)
    return summary, frame, requests


def test_strategies_with_the_same_retention_share_a_rank():
    """a and b keep the same number of facts (different ones: 3 of 4 in each scenario), c fewer.
    Nothing orders a before b but their names: they share rank 1 and c is 3rd (competition
    ranking), instead of ranks 1, 2, 3 that read as an order."""
    probes = []
    for scenario in ("s", "t"):
        probes += [_final(scenario, "a", f"p{n}", n != 0) for n in range(4)]
        probes += [_final(scenario, "b", f"p{n}", n != 3) for n in range(4)]
        probes += [_final(scenario, "c", f"p{n}", n < 1) for n in range(4)]
    (verdict,) = verdicts(*_tables(probes))
    ranks = {r.strategy: r.rank for r in verdict.rows}
    assert ranks == {"a": 1, "b": 1, "c": 3}


def test_the_sentence_names_the_probes_and_scenarios_its_claim_rests_on():
    """Eight scenarios of 5 probes (probe n in scenario s{n % 8}), each probe asked at three checkpoints:
    120 paired points, but the tests resample 40 probes in 8 scenarios, and the sentence must not let 120
    read as the sample. b loses p0 … p19, two or three in every scenario, so all 8 scenarios differ one way:
    a claim (50 points, sign-flip p = 2 × 0.5^8 = 1/128 over the scenarios)."""
    probes = []
    for n in range(40):
        for step in (3, 6, 9):
            for strategy, kept in (("a", True), ("b", n >= 20)):
                probes.append(dict(_final(f"s{n % 8}", strategy, f"p{n}", kept), point_kind="checkpoint", step=step, request=step))
    (verdict,) = verdicts(*_tables(probes))
    assert verdict.difference is not None and verdict.difference.n == 120
    assert (verdict.difference.probes, verdict.difference.scenarios, verdict.difference.changed) == (40, 8, 8)
    assert verdict.difference.p_value == pytest.approx(2 * 0.5**8)
    assert verdict.sentence.startswith("At 64k, a keeps 50 points more facts than b")
    assert "40 probes in 8 scenarios" in verdict.sentence
    one = [p for p in probes if p["scenario"] == "s0"]
    (verdict,) = verdicts(*_tables(one))
    assert "15 paired points of 5 probes in 1 scenario: a test or an interval that holds for other sessions needs 6 scenarios)" in verdict.sentence
