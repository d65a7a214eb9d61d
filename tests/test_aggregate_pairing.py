"""Pairing in the aggregate tables, by hand: the answerer against its ceiling on the same rows, a
scenario some strategy lacks a repeat of left out for every strategy, and no per-cell interval of
the estimate error over correlated requests."""

from __future__ import annotations

import pandas as pd
import pytest

from compaction_bench.metrics.aggregate import compared_rows, overall, shared_scenarios, summarize, unfinished
from tests.test_metrics_aggregate import probe_row, request_row

# --------------------------------------------------------------------------- 1: answered against its ceiling


def test_a_point_the_answerer_failed_at_leaves_the_ceiling_too():
    # The audit's table: probe a answered right (ceiling right), probe b unscored (the answerer call
    # failed) with a ceiling grade of wrong. answered = 1/1 = 1.0; the ceiling over all rows was
    # (1 + 0) / 2 = 0.5, so answered / ceiling read 2.0. On the same rows (a only): ceiling 1.0, ratio 1.0.
    rows = pd.DataFrame([probe_row("x", "a", True, ceiling_correct=True), probe_row("x", "b", None, ceiling_correct=False)])
    requests = pd.DataFrame([request_row("x", 0, 100, 0)])
    (row,) = summarize(requests, pd.DataFrame(), rows).to_dict("records")
    assert row["answered"] == 1.0 and row["unscored"] == 1
    assert row["answered_ceiling"] == 1.0 and row["answered_rel"] == 1.0
    pooled = overall(rows, requests).set_index("strategy")
    assert pooled.loc["x", "answered_ceiling"] == 1.0 and pooled.loc["x", "answered_rel"] == 1.0


def test_the_ceiling_follows_the_points_paired_across_strategies():
    # x's answerer failed at b, y got b right; the ceiling is wrong at b and right at a. The point b is
    # unscored for both (paired), so its ceiling goes too: both have answered 1.0 (a), ceiling 1.0 (a).
    rows = pd.DataFrame([
        probe_row("x", "a", True, ceiling_correct=True), probe_row("x", "b", None, ceiling_correct=False),
        probe_row("y", "a", True, ceiling_correct=True), probe_row("y", "b", True, ceiling_correct=False),
    ])
    requests = pd.DataFrame([request_row(s, 0, 100, 0) for s in "xy"])
    headline = compared_rows(rows, requests)
    assert headline[headline["probe_id"] == "b"]["ceiling_correct"].isna().all()
    pooled = overall(rows, requests).set_index("strategy")
    for strategy in "xy":
        assert pooled.loc[strategy, "answered"] == 1.0
        assert pooled.loc[strategy, "answered_ceiling"] == 1.0 and pooled.loc[strategy, "answered_rel"] == 1.0


def test_a_point_without_a_ceiling_stays_in_answered_but_not_in_the_ratio():
    # Probe b has no ceiling (the whole transcript up to it is beyond the answerer's window) but the
    # compacted context was answered, wrongly. answered keeps b: (1 + 0) / 2 = 0.5. The ratio is on the
    # rows with both grades (a): answered there 1.0 over ceiling 1.0 = 1.0 (was 0.5 / 1.0 = 0.5).
    rows = pd.DataFrame([probe_row("x", "a", True, ceiling_correct=True), probe_row("x", "b", False, ceiling_correct=None)])
    requests = pd.DataFrame([request_row("x", 0, 100, 0)])
    (row,) = summarize(requests, pd.DataFrame(), rows).to_dict("records")
    assert row["answered"] == 0.5 and row["answered_ceiling"] == 1.0 and row["answered_rel"] == 1.0
    pooled = overall(rows, requests).set_index("strategy")
    assert pooled.loc["x", "answered"] == 0.5 and pooled.loc["x", "answered_rel"] == 1.0


def test_no_ceiling_at_all_leaves_answered_alone():
    rows = pd.DataFrame([probe_row("x", "a", True), probe_row("x", "b", False)])
    requests = pd.DataFrame([request_row("x", 0, 100, 0)])
    (row,) = summarize(requests, pd.DataFrame(), rows).to_dict("records")
    assert row["answered"] == 0.5 and pd.isna(row["answered_ceiling"]) and pd.isna(row["answered_rel"])


# --------------------------------------------------------------------------- 2: failed repeats


def _cells(plan: dict[tuple[str, str], range]) -> pd.DataFrame:
    """One request per (scenario, strategy, repeat) of `plan`."""
    return pd.DataFrame([request_row(strategy, 0, 100, 0, scenario=scenario, repeat=r) for (scenario, strategy), repeats in plan.items() for r in repeats])


def test_a_strategy_missing_a_repeat_takes_the_scenario_out_for_everyone():
    # Scenario s: a finished repeats 0–2, b only repeat 0 (its repeats 1 and 2 failed). Scenario t: both
    # finished all three. Pooling s would weigh b's one repeat against a's three: s is left out.
    requests = _cells({("s", "a"): range(3), ("s", "b"): range(1), ("t", "a"): range(3), ("t", "b"): range(3)})
    assert unfinished(requests) == {("s", "32k"): ["b"]}
    kept = shared_scenarios(requests, unfinished(requests))
    assert set(kept["scenario"]) == {"t"}
    # every strategy short of a repeat another one has is named
    crossed = _cells({("s", "a"): [0, 1], ("s", "b"): [0, 2]})
    assert unfinished(crossed) == {("s", "32k"): ["a", "b"]}


def test_repeats_every_strategy_lacks_compare_alike():
    # Every strategy finished repeats 0 and 1 only: the comparison is on the same repeats, nothing left out.
    requests = _cells({("s", "a"): range(2), ("s", "b"): range(2)})
    assert unfinished(requests) == {}
    # a table without the repeat column (the terminal summary reads three columns) keys on cells as before
    missing = _cells({("s", "a"): range(1), ("t", "a"): range(1), ("t", "b"): range(1)}).drop(columns="repeat")
    assert unfinished(missing) == {("s", "32k"): ["b"]}


def test_the_pooled_table_leaves_out_a_scenario_with_a_failed_repeat():
    # In s, b kept the fact only in its one finished repeat while a lost it in all three; in t both keep it.
    # With s pooled b would read 1.0 against a's 0.5; on t alone both read 1.0.
    requests = _cells({("s", "a"): range(3), ("s", "b"): range(1), ("t", "a"): range(3), ("t", "b"): range(3)})
    probes = pd.DataFrame([
        *(probe_row("a", "p", None, r, present=False, scenario="s") for r in range(3)),
        probe_row("b", "p", None, 0, present=True, scenario="s"),
        *(probe_row(s, "p", None, r, present=True, scenario="t") for s in "ab" for r in range(3)),
    ])
    pooled = overall(probes, requests).set_index("strategy")
    assert pooled.loc["a", "retention"] == 1.0 and pooled.loc["b", "retention"] == 1.0
    assert pooled.loc["a", "paired_probes"] == pooled.loc["b", "paired_probes"] == 1


def test_the_terminal_names_a_scenario_left_out_for_a_failed_repeat(tmp_path, capsys):
    """The terminal's leaderboard reads the run's cells with their repeats: b finished only repeat 0 of s,
    so s is named as left out of the comparison, as the report and the pooled table leave it out."""
    from compaction_bench import cli

    requests = _cells({("s", "a"): range(3), ("s", "b"): range(1), ("t", "a"): range(3), ("t", "b"): range(3)})
    requests.to_parquet(tmp_path / "requests.parquet")
    pd.DataFrame([{"scenario": sc, "strategy": st, "profile": "32k", "cost_usd": 1.0} for sc in "st" for st in "ab"]).to_parquet(
        tmp_path / "summary.parquet")
    cli._print_summary(tmp_path, report=False)
    out = " ".join(capsys.readouterr().out.split())
    assert "left out of the 32k comparison: s, where b did not finish" in out
    assert "comparison: t" not in out


# --------------------------------------------------------------------------- 4: no per-cell interval of the estimate error


def test_the_estimate_error_has_no_interval_over_one_cells_requests():
    # Two requests with an estimate: APE 0.05 and 0.1 → 0.075 over n = 2. Consecutive requests of one
    # replay are not independent draws, so the cell reports the mean and its count, no interval.
    requests = pd.DataFrame([
        request_row("x", 0, 1000, 0),
        request_row("x", 1, 2000, 0, estimate_error=-100, estimate_ape=0.05),
        request_row("x", 2, 3000, 0, estimate_error=300, estimate_ape=0.1),
    ])
    (row,) = summarize(requests, pd.DataFrame(), pd.DataFrame()).to_dict("records")
    assert row["estimate_ape"] == pytest.approx(0.075) and row["estimate_ape_n"] == 2
    assert "estimate_ape_lo" not in row and "estimate_ape_hi" not in row
    # all equal: formerly the point interval [0.1, 0.1]
    equal = pd.DataFrame([request_row("x", k, 1000, 0, estimate_ape=0.1) for k in range(3)])
    (row,) = summarize(equal, pd.DataFrame(), pd.DataFrame()).to_dict("records")
    assert row["estimate_ape"] == pytest.approx(0.1) and "estimate_ape_lo" not in row


def test_the_report_does_not_show_an_older_runs_estimate_interval():
    from compaction_bench.reports.html import scenario_table

    older = pd.DataFrame([{"scenario": "s", "strategy": "x", "profile": "32k", "estimate_ape": 0.1, "estimate_ape_lo": 0.1,
                           "estimate_ape_hi": 0.1, "estimate_ape_n": 3}])
    table = scenario_table(older)
    assert "estimate_ape" in table.header and "estimate_ape_n" in table.header
    assert "estimate_ape_lo" not in table.header and "estimate_ape_hi" not in table.header
