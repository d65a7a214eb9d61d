"""Aggregation and statistics on the paired design: intervals, paired tests, P(best), repeat voting,
the summary table by hand, and the synthetic suite."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import compaction_bench as bench
from compaction_bench.metrics import aggregate
from compaction_bench.metrics.aggregate import overall, paired_differences, per_probe, summarize, votes
from compaction_bench.metrics.integrity import FORMATS
from compaction_bench.metrics.measure import measure_cell
from compaction_bench.metrics.stats import (
    DIFFERENCE,
    agreement_interval,
    bootstrap_ci,
    cluster_bootstrap_ci,
    min_units,
    p_best,
    signflip_p,
)


def test_bootstrap_interval_brackets_the_mean_and_is_reproducible():
    values = [1.0] * 30 + [0.0] * 10
    low, high = bootstrap_ci(values)
    assert low < 0.75 < high and 0.55 < low and high < 0.9
    assert bootstrap_ci(values) == (low, high)
    assert cluster_bootstrap_ci([values]) == (low, high)  # one scenario: the probe bootstrap


def test_probes_that_all_agree_get_the_exact_binomial_interval_not_a_point():
    # Every probe present: a percentile bootstrap can only return 1.0. With n agreeing probes a share
    # 1 − 0.025^(1/n) may still differ (Clopper–Pearson): 96 probes → [0.962, 1]; 2 probes → [0.158, 1].
    assert cluster_bootstrap_ci([[1.0] * 50, [1.0] * 46]) == pytest.approx((0.025 ** (1 / 96), 1.0))
    assert bootstrap_ci([1.0, 1.0]) == pytest.approx((0.025**0.5, 1.0))
    assert bootstrap_ci([0.0] * 10) == pytest.approx((0.0, 1 - 0.025**0.1))
    # a paired difference ranges over [−1, 1]: one probe gained is no evidence of a difference
    low, high = cluster_bootstrap_ci([[1.0]], bounds=DIFFERENCE)
    assert low < 0 < high and (low, high) == pytest.approx((-0.95, 1.0))
    assert agreement_interval(0.0, 96, DIFFERENCE) == pytest.approx((-(1 - 0.025 ** (1 / 96)), 1 - 0.025 ** (1 / 96)))
    assert bootstrap_ci([0.2, 0.2], bounds=None) == (0.2, 0.2)  # an unbounded metric: the value itself


def _two_stage_reference(clusters: list[list[float]], samples: int, seed: int) -> np.ndarray:
    """The documented resampling written plainly: draw scenarios with replacement, then for every
    scenario drawn an independent resample of its probes; the mean of all values drawn."""
    rng = np.random.default_rng(seed)
    arrays = [np.asarray(c) for c in clusters]
    means = []
    for _ in range(samples):
        drawn = [arrays[k][rng.integers(0, arrays[k].size, arrays[k].size)] for k in rng.integers(0, len(arrays), len(arrays))]
        means.append(np.concatenate(drawn).mean())
    return np.asarray(means)


def test_the_two_stage_bootstrap_resamples_a_scenario_drawn_twice_independently():
    # Three scenarios of 40 probes with the same retention: the spread is the probes' own, and a
    # scenario drawn twice must not count one resample of its probes twice (which widens the interval).
    rng = np.random.default_rng(1)
    clusters = [(rng.random(40) < 0.5).astype(float).tolist() for _ in range(3)]
    expected = np.quantile(_two_stage_reference(clusters, 20_000, 5), [0.025, 0.975])
    assert cluster_bootstrap_ci(clusters, samples=20_000) == pytest.approx(tuple(expected), abs=0.01)
    # P(best) resamples the same way, paired: two strategies, one ahead in every scenario by one probe
    a = np.asarray(clusters)
    b = a.copy()
    b[:, 0] = 1 - b[:, 0]
    values = np.stack([a.ravel(), b.ravel()])
    labels = [k for k in range(3) for _ in range(40)]
    diffs = (values[0] - values[1]).reshape(3, 40).tolist()
    reference = _two_stage_reference(diffs, 20_000, 6)
    chance = p_best(values, labels, samples=20_000)
    expected_a = np.mean(reference > 0) + np.mean(reference == 0) / 2
    assert chance[0] == pytest.approx(expected_a, abs=0.02) and chance.sum() == pytest.approx(1.0)


def test_probe_level_interval_keeps_its_coverage_when_checkpoints_are_correlated():
    # 30 probes × 6 checkpoints; a probe's rows share its fate (the correlation the issue measured).
    # Averaging each probe first, the interval covers the true mean about 95% of the time.
    rng = np.random.default_rng(7)
    covered = 0
    trials = 150
    for trial in range(trials):
        fate = rng.random(30) < 0.6
        rows = np.where(rng.random((30, 6)) < 0.9, fate[:, None], ~fate[:, None]).astype(float)
        low, high = cluster_bootstrap_ci([rows.mean(axis=1).tolist()], samples=800, seed=trial)
        true_mean = 0.6 * 0.9 + 0.4 * 0.1
        covered += low <= true_mean <= high
    assert covered / trials >= 0.88


def test_signflip_is_the_exact_one_sided_sign_test_with_one_checkpoint():
    # 5 probes lost, none gained: p = 0.5^5 = 1/32 (one-sided).
    assert signflip_p([-1, -1, -1, -1, -1, 0, 0]) == pytest.approx(1 / 32)
    assert signflip_p([1, 1, 1]) == 1.0  # a candidate that only gains is never "worse"
    assert signflip_p([0, 0]) == 1.0
    assert signflip_p([-1, -1, -1, -1, 1]) == pytest.approx(6 / 32)  # P(at most one + of 5) = 6/32
    assert min_units(0.05) == 5  # 0.5^5 = 0.031 < 0.05 < 0.5^4
    # two-sided: twice the one-sided tail; 6 probes all one way are the fewest that reach 0.05
    assert signflip_p([1] * 6, two_sided=True) == pytest.approx(2 / 64) and signflip_p([-1] * 5, two_sided=True) == pytest.approx(2 / 32)
    assert min_units(0.05, two_sided=True) == 6


def _lost(sessions: int, probes: int, lost: int) -> pd.DataFrame:
    """`sessions` scenarios of `probes` probes each; a keeps every probe, b loses the first `lost` of each scenario."""
    return pd.DataFrame([{"scenario": f"s{s}", "strategy": strategy, "profile": "32k", "repeat": 0, "probe_id": f"p{n}", "point_kind": "final",
                          "step": 9, "request": 9, "present": strategy == "a" or n >= lost}
                         for s in range(sessions) for strategy in "ab" for n in range(probes)])


def test_a_paired_difference_flips_each_scenario_whole():
    """One session's probes are read from one context and one summary, so the sign-flip test's unit is the scenario:
    b losing 20 of one scenario's 40 probes is one unit that differs, p = 1 (two-sided, 2 × 0.5), no claim (counted
    as 20 independent probes it read p = 2 × 0.5^20); the same loss in 8 scenarios of 5 probes (2 each) is 8 units all
    one way, p = 2 × 0.5^8, and the interval is clear of 0: a claim."""
    one = paired_differences(_lost(1, 40, 20), "a", "b")
    assert one.mean == -0.5 and (one.probes, one.scenarios, one.changed) == (40, 1, 1) and one.p_value == 1.0 and not one.detectable
    eight = paired_differences(_lost(8, 5, 2), "a", "b")
    assert eight.mean == pytest.approx(-0.4) and (eight.probes, eight.scenarios, eight.changed) == (40, 8, 8)
    assert eight.p_value == pytest.approx(2 / 256) and eight.hi < 0 and eight.detectable


def test_p_best_is_one_for_a_strategy_that_wins_every_probe_and_shared_for_identical_ones():
    values = np.array([[1, 1, 1, 1, 0], [0, 0, 1, 0, 0], [0, 0, 1, 0, 0]], dtype=float)
    chance = p_best(values, ["s"] * 5)
    assert chance[0] == pytest.approx(1.0, abs=0.02) and chance.sum() == pytest.approx(1.0)
    tied = p_best(np.array([[1, 0], [1, 0]], dtype=float), ["s", "s"])
    assert tied.tolist() == [0.5, 0.5]



def test_p_best_per_group_is_p_best_of_each_groups_table_of_the_probes_every_strategy_has():
    """Two scenarios; per scenario a table of strategies (sorted) by probes (sorted by scenario, then id), each cell the
    mean `present` of the strategy at the probe; a probe some strategy has no value for (no row, or only NaN) is left out."""
    rows = [
        # scenario s1: b wins p1 and p3; c has no row at p2 and only NaN at p3, so only p1 counts for s1
        ("s1", "b", "p1", 1.0), ("s1", "b", "p1", 0.0), ("s1", "a", "p1", 0.0), ("s1", "c", "p1", 0.0),
        ("s1", "a", "p2", 1.0), ("s1", "b", "p2", 0.0),
        ("s1", "a", "p3", 0.0), ("s1", "b", "p3", 1.0), ("s1", "c", "p3", np.nan),
        # scenario s0: a and b at q2 and q10 (sorted as text: "q10" before "q2")
        ("s0", "b", "q2", 1.0), ("s0", "a", "q2", 0.0), ("s0", "a", "q10", 1.0), ("s0", "b", "q10", 1.0),
    ]
    values = pd.DataFrame(rows, columns=["scenario", "strategy", "probe_id", "present"]).assign(profile="32k")
    found = aggregate._p_best(values, ["scenario", "profile"])
    s1 = p_best(np.array([[0.0], [0.5], [0.0]]), ["s1"])  # a, b, c at p1 (b's two rows averaged)
    s0 = p_best(np.array([[1.0, 0.0], [1.0, 1.0]]), ["s0", "s0"])  # a, b at q10, q2
    assert found == {("s1", "32k", "a"): s1[0], ("s1", "32k", "b"): s1[1], ("s1", "32k", "c"): s1[2], ("s0", "32k", "a"): s0[0], ("s0", "32k", "b"): s0[1]}
    # without c, a and b over both scenarios: s0's q10 and q2, then s1's p1, p2 and p3
    overall_chance = p_best(np.array([[1.0, 0.0, 0.0, 1.0, 0.0], [1.0, 1.0, 0.5, 0.0, 1.0]]), ["s0", "s0", "s1", "s1", "s1"])
    assert aggregate._p_best(values[values["strategy"] != "c"], ["profile"]) == {("32k", "a"): overall_chance[0], ("32k", "b"): overall_chance[1]}
    # with a test of the lead, a group whose lead it refuses is withheld, and only that group
    refused = aggregate._p_best(values, ["scenario", "profile"], lead_claimed=lambda labels, *_: labels[0] != "s1")
    assert all(np.isnan(refused[("s1", "32k", s)]) for s in "abc") and refused[("s0", "32k", "a")] == s0[0]


def probe_row(strategy: str, probe_id: str, correct, sample: int = 0, present: bool = True, kind: str = "recall",
              age: int = 100, point: str = "final", step: int = 9, **kw) -> dict:
    row = {
        "scenario": "s", "strategy": strategy, "profile": "32k", "repeat": sample, "sample": sample, "probe_id": probe_id,
        "kind": kind, "point_kind": point, "step": step, "request": 20, "present": present, "correct": correct,
        "fact_age_tokens": age, "found": "kept" if present else "absent", "source_summarized": False, "status": "seen",
        "ceiling_correct": None,
    }
    row.update(kw)
    return row


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


def test_repeats_average_presence_at_each_point_and_count_it_once():
    # Each repeat replays the cell anew (with a real summarizer the contexts differ, and so can the
    # request at which a checkpoint falls): x has the fact in repeats 1 and 2, not in 0.
    rows = [
        probe_row("x", "p", True, 0, present=False, request=20),
        probe_row("x", "p", True, 1, present=True, request=23),
        probe_row("x", "p", False, 2, present=True, request=25, found="summary"),
        *(probe_row("y", "p", True, r, present=True, request=20) for r in range(3)),
    ]
    requests = pd.DataFrame([request_row(s, 0, 100, 0, repeat=r) for s in "xy" for r in range(3)])
    summary = summarize(requests, pd.DataFrame(), pd.DataFrame(rows)).set_index("strategy")
    assert summary.loc["x", "retention"] == pytest.approx(2 / 3) and summary.loc["x", "paired_pairs"] == 1
    assert summary.loc["x", "retention_kept"] == pytest.approx(1 / 3) and summary.loc["x", "retention_summary"] == pytest.approx(1 / 3)
    assert summary.loc["x", "answered"] == 1.0  # two of three samples right
    table = overall(pd.DataFrame(rows), requests).set_index("strategy")
    assert table.loc["x", "retention"] == pytest.approx(2 / 3) and table.loc["y", "paired_pairs"] == 1


def _repeated(lost_by_repeat: list[set[int]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One scenario, 4 probes, a repeat per entry of `lost_by_repeat`: x keeps every probe in every repeat, y loses
    the probes the entry names in that repeat."""
    rows = [probe_row(strategy, f"p{n}", None, r, present=strategy == "x" or n not in lost)
            for r, lost in enumerate(lost_by_repeat) for strategy in "xy" for n in range(4)]
    requests = pd.DataFrame([request_row(s, 0, 100, 0, repeat=r) for s in "xy" for r in range(len(lost_by_repeat))])
    return pd.DataFrame(rows), requests


def test_a_scenarios_p_best_counts_its_summary_draws_and_a_deterministic_repeat_once():
    """Within one scenario the independent units are its summary draws (the repeats): y loses another probe in each of
    six repeats, so x leads in all six draws (two-sided sign-flip p = 2 × 0.5^6 = 0.031), and x's P(best) is shown. The
    same loss in every repeat, as a deterministic summarizer gives, is one draw repeated: no claim, P(best) withheld; so
    is one repeat. Each probe alone varies between the repeats and stays a draw's, never six independent probes."""
    sampled, _ = summary_of(_repeated([{n % 4} for n in range(6)]))
    assert sampled["x"] == pytest.approx(1.0, abs=0.01) and sampled["y"] == pytest.approx(0.0, abs=0.01)
    for lost in ([{0, 1}] * 6, [{0, 1, 2}]):
        repeated, retention = summary_of(_repeated(lost))
        assert np.isnan(repeated["x"]) and np.isnan(repeated["y"]) and retention["x"] == 1.0


def test_a_scenarios_leader_must_lead_on_the_draws_both_strategies_hold():
    """A leader by every repeat must lead on the repeats both strategies hold: x keeps 10 or 11 of 20 probes in repeats
    0-5 and all 20 in repeat 6, y keeps one more than x in each of 0-5 and has no repeat 6 (it failed): x ranks first
    (0.59 against 0.575), yet trails in every repeat both have, so no P(best) is x's (the s46 audit's case read 71.7%
    for x, from six draws that all favour y)."""
    rows = [probe_row(strategy, f"p{n}", None, r, present=n < kept)
            for r in range(6) for strategy, kept in (("x", 10 + r % 2), ("y", 11 + r % 2)) for n in range(20)]
    rows += [probe_row("x", f"p{n}", None, 6, present=True) for n in range(20)]
    requests = pd.DataFrame([request_row("x", 0, 100, 0, repeat=r) for r in range(7)] + [request_row("y", 0, 100, 0, repeat=r) for r in range(6)])
    trailing, retention = summary_of((pd.DataFrame(rows), requests))
    assert retention["x"] > retention["y"] and np.isnan(trailing["x"]) and np.isnan(trailing["y"])


def summary_of(tables: tuple[pd.DataFrame, pd.DataFrame]) -> tuple[dict[str, float], dict[str, float]]:
    """The per-scenario P(best) and retention of each strategy, from `summarize`."""
    probes, requests = tables
    summary = summarize(requests, pd.DataFrame(), probes).set_index("strategy")
    return summary["p_best"].to_dict(), summary["retention"].to_dict()


def test_answered_compares_strategies_on_the_points_every_one_has_a_grade_at():
    # x's answerer failed at probe b (no grade); y answered it right. On the points both have a grade
    # (a alone), both are wrong: 0 and 0, not x 0 against y 0.5.
    rows = [
        probe_row("x", "a", False), probe_row("x", "b", None),
        probe_row("y", "a", False), probe_row("y", "b", True),
    ]
    requests = pd.DataFrame([request_row(s, 0, 100, 0) for s in "xy"])
    table = overall(pd.DataFrame(rows), requests).set_index("strategy")
    assert table.loc["x", "answered"] == table.loc["y", "answered"] == 0.0
    summary = summarize(requests, pd.DataFrame(), pd.DataFrame(rows)).set_index("strategy")
    assert summary.loc["y", "answered"] == 0.0 and summary.loc["y", "unscored"] == 1
    assert table.loc["y", "retention"] == 1.0 and table.loc["y", "paired_pairs"] == 2  # presence keeps every point


def request_row(strategy: str, request: int, true: int, cached: int, **kw) -> dict:
    row = {
        "scenario": "s", "strategy": strategy, "profile": "32k", "repeat": 0, "request": request, "step": request, "kind": "turn",
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
            request_row("x", 4, 2000, 0, step=3, attempt=1),  # the retry of step 3 got through
        ]
    )
    compactions = pd.DataFrame(
        [{"scenario": "s", "strategy": "x", "profile": "32k", "repeat": 0, "silent_loss": 3, "premature": True,
          "llm_calls": 1, "llm_input_tokens": 500, "llm_output_tokens": 50, "llm_cost_usd": 0.001}]
    )
    probes = pd.DataFrame(
        [probe_row("x", "a", True, ceiling_correct=True), probe_row("x", "b", False, present=False, kind="error", age=50_000, ceiling_correct=True)]
    )
    (row,) = summarize(requests, compactions, probes).to_dict("records")
    assert row["cache_hit_rate"] == pytest.approx((1024 + 1920 + 0) / (2000 + 3000 + 2000))
    assert row["retention"] == 0.5 and row["answered"] == 0.5 and row["paired_pairs"] == 2
    assert row["answered_ceiling"] == 1.0 and row["answered_rel"] == 0.5
    assert row["retention_recall"] == 1.0 and row["retention_error"] == 0.0
    assert row["retention_age_lt8k"] == 1.0 and row["retention_age_32k_128k"] == 0.0
    assert row["integrity_anthropic"] == 2 and row["integrity_openai_chat"] == 0
    assert row["estimate_error"] == 100 and row["estimate_ape"] == pytest.approx(0.075)
    assert row["missed_triggers"] == 1 and row["overflows"] == 1 and row["premature_triggers"] == 1
    assert row["failed_requests"] == 1 and row["cannot_serve"] is False  # step 3 recovered on its retry
    assert row["silent_loss"] == 3 and row["summarizer_tokens"] == 550 and row["compactions"] == 1
    assert row["cost_usd"] == pytest.approx(0.04) and row["input_tokens"] == 8000


def test_each_probe_weighs_one_and_only_pairs_every_strategy_has_count():
    rows = [
        # probe a: asked at 3 checkpoints, present at the first only; probe b: once, present.
        probe_row("x", "a", None, point="checkpoint", step=2, present=True),
        probe_row("x", "a", None, point="checkpoint", step=5, present=False),
        probe_row("x", "a", None, point="final", step=9, present=False),
        probe_row("x", "b", None, point="final", step=9, present=True, found="summary"),
        # y lacks a's checkpoint at step 5 (its cell lost it): that pair leaves the headline for both.
        probe_row("y", "a", None, point="checkpoint", step=2, present=True),
        probe_row("y", "a", None, point="final", step=9, present=True),
        probe_row("y", "b", None, point="final", step=9, present=True),
        # a compaction point: a diagnostic row, never in the headline.
        probe_row("x", "a", None, point="compaction", step=4, present=False),
    ]
    requests = pd.DataFrame([request_row("x", 0, 100, 0), request_row("y", 0, 100, 0)])
    summary = summarize(requests, pd.DataFrame(), pd.DataFrame(rows)).set_index("strategy")
    # x: probe a = mean(1, 0) over the shared pairs (steps 2 and 9) = 0.5, probe b = 1 → 0.75 (pooled rows would say 2/3).
    assert summary.loc["x", "retention"] == pytest.approx(0.75)
    assert summary.loc["x", "retention_kept"] == pytest.approx(0.25) and summary.loc["x", "retention_summary"] == pytest.approx(0.5)
    assert summary.loc["x", "paired_pairs"] == summary.loc["y", "paired_pairs"] == 3
    assert summary.loc["y", "retention"] == 1.0
    assert summary.loc["x", "compaction_point_rows"] == 1 and summary.loc["x", "retention_compaction_points"] == 0.0
    assert np.isnan(summary.loc["y", "p_best"]) and np.isnan(summary.loc["x", "p_best"])  # two probes: no lead the tests may claim
    change = paired_differences(pd.DataFrame(rows), "y", "x")
    assert change.mean == pytest.approx(-0.25) and change.pairs == 3 and change.probes == 2 and change.lo <= change.mean <= change.hi
    assert not change.detectable  # two probes: the sign-flip test cannot reject
    table = overall(pd.DataFrame(rows), requests).set_index("strategy")
    assert table.loc["x", "retention"] == pytest.approx(0.75) and table.loc["x", "paired_pairs"] == 3


def test_per_probe_is_the_mean_of_each_probes_rows():
    """`per_probe` (arrays) against pandas' groupby of the same definition: NaN keys form their own
    group, NaN values are skipped, `kind` is the first non-null, groups keep the order of first rows."""
    rows = pd.DataFrame([
        {"scenario": "s", "strategy": "x", "profile": "32k", "probe_id": "b", "kind": None, "present": True, "found": "kept", "in_summary": False, "correct": None, "ceiling_correct": True},
        {"scenario": "s", "strategy": "x", "profile": "32k", "probe_id": "a", "kind": "recall", "present": False, "found": "absent", "in_summary": False, "correct": False, "ceiling_correct": None},
        {"scenario": "s", "strategy": "x", "profile": "32k", "probe_id": "b", "kind": "error", "present": True, "found": "summary", "in_summary": True, "correct": True, "ceiling_correct": False},
        {"scenario": "s", "strategy": "y", "profile": "32k", "probe_id": "b", "kind": "error", "present": False, "found": "absent", "in_summary": False, "correct": None, "ceiling_correct": None},
        {"scenario": None, "strategy": "x", "profile": "32k", "probe_id": "b", "kind": None, "present": True, "found": "kept", "in_summary": False, "correct": True, "ceiling_correct": True},
        {"scenario": "s", "strategy": "x", "profile": "32k", "probe_id": "b", "kind": "recall", "present": False, "found": "absent", "in_summary": False, "correct": False, "ceiling_correct": True},
    ])
    frame = pd.DataFrame({
        "scenario": rows["scenario"], "strategy": rows["strategy"], "profile": rows["profile"], "probe_id": rows["probe_id"], "kind": rows["kind"],
        "present": rows["present"].astype(float), "kept": (rows["found"] == "kept").astype(float), "summary": (rows["found"] == "summary").astype(float),
        "in_summary": rows["in_summary"].astype(float), "correct": pd.to_numeric(rows["correct"], errors="coerce"),
        "ceiling": pd.to_numeric(rows["ceiling_correct"], errors="coerce"),
    })
    frame["correct_at_ceiling"] = frame["correct"].where(frame["ceiling"].notna())  # the rows with both grades
    expected = frame.groupby(["scenario", "strategy", "profile", "probe_id"], sort=False, dropna=False).agg(
        {**{c: "mean" for c in ("present", "kept", "summary", "in_summary", "correct", "ceiling", "correct_at_ceiling")}, "kind": "first"}
    ).reset_index()
    got = per_probe(rows)
    pd.testing.assert_frame_equal(got, expected, check_dtype=False)
    first = got.iloc[0]  # s/x/b: three rows; kind is the first one named
    assert (first["probe_id"], first["kind"], first["present"], first["summary"], first["correct"]) == ("b", "error", pytest.approx(2 / 3), pytest.approx(1 / 3), 0.5)
    assert pd.isna(got.iloc[3]["scenario"]) and pd.isna(got.iloc[2]["correct"])  # the NaN scenario's own group; y/b never scored
    # s/x/b: both grades on rows 3 (correct 1) and 6 (correct 0); row 1 has a ceiling but no answer grade
    assert first["correct_at_ceiling"] == 0.5 and pd.isna(got.iloc[1]["correct_at_ceiling"])  # s/x/a: no ceiling
    aged = per_probe(rows.assign(age=["old", "new", "old", "old", "old", "new"]), by=["age"])
    assert list(aged["age"]) == ["old", "new", "old", "old", "new"] and aged.iloc[4]["present"] == 0.0


def test_a_step_that_never_got_through_means_the_strategy_cannot_serve():
    requests = pd.DataFrame(
        [request_row("none", 0, 100, 0), request_row("none", 1, 40_000, 0, overflow=True), request_row("none", 2, 100, 0, kind="final")]
    )
    (row,) = summarize(requests, pd.DataFrame(), pd.DataFrame()).to_dict("records")
    assert row["cannot_serve"] is True and row["failed_requests"] == 1


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
    assert len(none) and none["present"].all() and (none["found"] == "kept").all()
    rows = summary[summary.strategy == "none"]
    assert len(rows) == 7 and (rows["cache_hit_rate"] > 0.9).all() and (rows["retention"] == 1.0).all()
    assert not rows["cannot_serve"].any() and (rows["failed_requests"] == 0).all()


@pytest.mark.slow
def test_synthetic_suite_truncate_loses_facts_but_never_breaks_pairs(suite_summary):
    _, summary = suite_summary
    rows = summary[summary.strategy == "truncate"]
    assert len(rows) == 7 and (rows["retention"] < 1.0).all()
    assert (rows["retention_summary"] == 0).all()  # truncate writes no summary: all it keeps is verbatim
    # its window opens at a user message, so not even Gemini's rule on a call turn's place is broken
    for fmt in FORMATS:
        assert (rows[f"integrity_{fmt}"] == 0).all(), fmt
