"""The gate's and `bench compare`'s numbers from hand-built tables with known answers: when a drop
is significant (clustered by scenario, and enough summary draws, scenarios × repeats, for the sign-flip
test), how flipped probes are named, what "retention" pools, and which cells the other metrics compare.
The tests' unit is the summary draw (s45 audit G1), so the tables that test significance hold two
repeats of three scenarios: six draws (three could never reach 0.05: 0.5^3 = 0.125)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from compaction_bench.metrics.aggregate import overall
from compaction_bench.reports.gate import GateError, Rule, Run, compare_runs, probe_test


def probes(losses: dict[str, set[int]], *, strategy: str = "x", scenarios: int = 3, per_scenario: int = 10, repeats: int = 1) -> pd.DataFrame:
    """Every probe present at the final point, except probe `n` of scenario `s` for n in losses[s] (in every repeat)."""
    return pd.DataFrame(
        [
            {"scenario": f"s{k}", "strategy": strategy, "profile": "32k", "repeat": r, "sample": r, "probe_id": f"p{n}", "kind": "recall",
             "point_kind": "final", "step": 9, "request": 20, "present": n not in losses.get(f"s{k}", set()), "found": "kept",
             "in_summary": None, "correct": None, "source_summarized": False}
            for r in range(repeats)
            for k in range(scenarios)
            for n in range(per_scenario)
        ]
    )


def run(probe_rows: pd.DataFrame, summary: pd.DataFrame | None = None) -> Run:
    cells = probe_rows[["scenario", "strategy", "profile"]].drop_duplicates()
    requests = cells.assign(repeat=0, request=0, kind="turn", overflow=False)
    if summary is None:
        summary = cells.assign(cost_usd=1.0)
    return Run(Path("."), {}, {"probes": probe_rows, "requests": requests, "summary": summary, "compactions": pd.DataFrame()})


def test_a_drop_confined_to_one_scenario_is_not_significant():
    # Five probes lost, all in s0 of three scenarios, in both repeats: the sign-flip test of the two changed draws
    # gives 1/4 (both must keep their sign), so the change is not shown to be below 0.
    test = probe_test((run(probes({}, repeats=2)), run(probes({"s0": {0, 1, 2, 3, 4}}, repeats=2))), "x", "32k", "retention", 0.05)
    assert test is not None and test.change == pytest.approx(-5 / 30)
    assert test.p_value == pytest.approx(1 / 4) and test.changed == 2


def test_a_drop_in_every_scenario_is_significant():
    test = probe_test((run(probes({}, repeats=2)), run(probes({f"s{k}": {0, 1} for k in range(3)}, repeats=2))), "x", "32k", "retention", 0.05)
    assert test is not None and test.p_value < 0.05 and test.min_draws == 5 and test.draws == 6
    assert test.p_value >= 0.5**6  # never below the sign-flip test's own p for six draws that lost
    # the same losses in one repeat are three draws, which can never reach 0.05 (the probes of a draw share its summary)
    once = probe_test((run(probes({})), run(probes({f"s{k}": {0, 1} for k in range(3)}))), "x", "32k", "retention", 0.05)
    assert once is not None and once.draws == 3 and once.p_value >= 0.5**3


def test_four_probes_can_never_fail_a_rule():
    test = probe_test((run(probes({})), run(probes({f"s{k}": {0} for k in range(3)} | {"s0": {0, 1}}))), "x", "32k", "retention", 0.05)
    assert test is not None and test.probes == 30 and test.p_value >= 0.5**4 > 0.05


def test_the_two_sided_test_doubles_the_smaller_side():
    # A gain in every scenario and repeat: the one-sided test of a drop cannot reject (p near 1); the same test with
    # the runs swapped sees the drop and rejects; two-sided, `bench compare`'s test is twice the smaller of the two.
    base, cand = run(probes({f"s{k}": {0, 1} for k in range(3)}, repeats=2)), run(probes({}, repeats=2))
    drop = probe_test((base, cand), "x", "32k", "retention", 0.05)
    rise = probe_test((cand, base), "x", "32k", "retention", 0.05)
    both = probe_test((base, cand), "x", "32k", "retention", 0.05, two_sided=True)
    assert drop is not None and rise is not None and both is not None
    assert drop.p_value > 0.9 and rise.p_value < 0.05
    assert both.p_value == pytest.approx(2 * rise.p_value) and both.change == drop.change == pytest.approx(6 / 30)


def test_flipped_probes_are_named_by_scenario_and_probe():
    # The same probe id lost in two scenarios is two flipped probes.
    test = probe_test((run(probes({})), run(probes({"s0": {3}, "s1": {3}}))), "x", "32k", "retention", 0.05)
    assert test is not None and test.lost == ("s0/p3", "s1/p3") and test.gained == ()


def test_compare_pools_retention_as_the_run_does_and_compares_shared_cells():
    # s0 has one probe (lost), s1 ten (kept): each probe weighs one, as in the run's leaderboard:
    # retention 10/11, not the mean of the scenarios' 0 and 1.
    rows = pd.concat([probes({"s0": {0}}, scenarios=1, per_scenario=1), probes({}, scenarios=2, per_scenario=10).query("scenario == 's1'")])
    baseline = run(rows)
    table = compare_runs(baseline, baseline)
    assert table.loc[("x", "32k"), "retention_baseline"] == pytest.approx(10 / 11)
    assert table.loc[("x", "32k"), "retention_baseline"] == overall(rows, baseline.tables["requests"])["retention"].iloc[0]
    # the candidate lacks x's cell in s1: the baseline's s1 leaves the comparison too (cost 1, not 2 against 1)
    candidate = run(rows[rows["scenario"] == "s0"])
    table = compare_runs(baseline, candidate)
    assert table.loc[("x", "32k"), "cost_baseline"] == table.loc[("x", "32k"), "cost_candidate"] == 1.0
    with pytest.raises(GateError, match="share no cell"):
        compare_runs(baseline, run(probes({}, strategy="y")))


def test_a_share_metric_refuses_a_tolerance_in_points():
    with pytest.raises(GateError, match="is a share"):
        Rule.parse("retention:2")
    assert Rule.parse("retention:0.02").tolerance == 0.02 and Rule.parse("cost:2").tolerance == 2.0
