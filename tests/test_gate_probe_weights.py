"""A probe metric's test is of the change the gate shows, each probe weighing one (`gate.draw_changes`), not of the
sessions' mean change, each session weighing one (the forty-ninth pass's audit, F3); and the row shows its draws'
means, what the test is of: for `answered` with repeats their mean grade, not their majority (the fiftieth's, F1).

The right answers are counted by hand from the probes: the change shown is the candidate's probes kept minus the
baseline's over all probes (a session's repeats averaged), and a rule must pass a candidate whose expected change is
exactly its tolerance. Until the fiftieth pass each draw's change was the mean of its probes, so a drop concentrated in
the small sessions read as a drop beyond the tolerance whenever the change shown was."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from compaction_bench.reports.gate import Rule, Run, gate, probe_test
from tests.test_verdict_audit_gate import write_run

ALPHA, PROFILE = 0.05, "32k"


def _rows(kept: dict[tuple[str, int], int], size: dict[str, int]) -> pd.DataFrame:
    """One run's probe rows: in session s, repeat r, the first `kept[s, r]` of its `size[s]` probes present at the end."""
    return pd.DataFrame([
        {"scenario": scenario, "strategy": "x", "profile": PROFILE, "repeat": repeat, "sample": repeat, "probe_id": f"p{n}",
         "point_kind": "final", "step": 9, "request": 20, "present": n < count}
        for (scenario, repeat), count in kept.items() for n in range(size[scenario])
    ])


def _runs(baseline: dict[tuple[str, int], int], candidate: dict[tuple[str, int], int], size: dict[str, int]) -> tuple[Run, Run]:
    return Run(Path("."), {}, {"probes": _rows(baseline, size)}), Run(Path("."), {}, {"probes": _rows(candidate, size)})


def test_the_draws_mean_is_the_change_shown_with_sessions_of_unequal_size_and_repeats() -> None:
    # session a: 10 probes, two repeats, the candidate losing 1 and 3 of them; b: 30 probes, one repeat, losing 3.
    # Each probe weighing one: a's probes lose (1 + 3) / 2 = 2 on average over its repeats, b's 3: (2 + 3) / 40 = 0.125.
    size = {"a": 10, "b": 30}
    test = probe_test(_runs({("a", 0): 10, ("a", 1): 10, ("b", 0): 30}, {("a", 0): 9, ("a", 1): 7, ("b", 0): 27}, size),
                      "x", PROFILE, "retention", ALPHA, 0.1)
    assert test is not None
    assert test.change == pytest.approx(-0.125)
    assert np.mean([change for *_, change in test.changes]) == pytest.approx(-0.125)  # the sessions' mean was 1/6
    # the tolerance each draw takes is its share of the probes: a's repeats 10 / 2 each, b's 30, of 40, times 3 draws
    assert test.weights == pytest.approx((0.375, 0.375, 2.25))
    assert sum(change for *_, change in test.shifted) == pytest.approx(3 * (-0.125 + 0.1))


def test_a_drop_of_the_tolerance_in_the_small_sessions_fails_at_most_alpha_of_its_patterns() -> None:
    # Seven sessions of 5 probes each lose 1 or 2 by a coin, one of 40 loses 1 or 3: in all (7 × 1.5 + 2) / 75 = 1/6
    # on average, exactly the tolerance, which the rule must pass. The small sessions' own drop, 0.3 a probe, is beyond
    # it; the large one's, 0.05, is inside. Each session's probes lost less its share of the tolerance (5/6 and 20/3 of
    # them) are (−2/3, −7/6) in the small ones and (+17/3, +11/3) in the large one: a test of the change shown cannot
    # find them beyond the tolerance. A test of the sessions' mean drop, 0.27, failed every pattern whose change
    # shown was beyond 1/6: 128 of the 256.
    tolerance = 1 / 6
    size = {f"s{k}": 5 if k < 7 else 40 for k in range(8)}
    baseline = {(scenario, 0): count for scenario, count in size.items()}
    failed = beyond = 0
    for coins in itertools.product((0, 1), repeat=8):
        lost = [(1 + coin) if k < 7 else (1 + 2 * coin) for k, coin in enumerate(coins)]
        candidate = {(f"s{k}", 0): size[f"s{k}"] - loss for k, loss in enumerate(lost)}
        test = probe_test(_runs(baseline, candidate, size), "x", PROFILE, "retention", ALPHA, tolerance)
        assert test is not None and test.change == pytest.approx(-sum(lost) / 75)
        beyond += test.change < -tolerance
        failed += test.p_value < ALPHA and test.change < -tolerance
    assert beyond == 128  # 13 or more of the 75 probes lost: the large session's coin decides
    assert failed <= 12


def test_answered_with_repeats_shows_the_repeats_mean_it_tests_not_their_majority():
    # One session of three probes in two repeats: the baseline answers all three in both, the candidate misses p0 in
    # repeat 0. Averaged over the repeats p0 is answered half the time: a change of −0.5 / 3 = −1/6, what the draws'
    # changes (0 and −1/3 a probe, scaled) average. A majority of the two grades (a tie does not pass) would read p0
    # as lost, −1/3: a majority moves by another amount than its repeats' mean, and judged on it the row failed 38% of
    # rows at its boundary with two repeats and low accuracies (the fiftieth pass's audit).
    def rows(missed: set[tuple[int, int]]) -> pd.DataFrame:
        return pd.DataFrame([
            {"scenario": "a", "strategy": "x", "profile": PROFILE, "repeat": repeat, "sample": repeat, "probe_id": f"p{n}",
             "point_kind": "final", "step": 9, "request": 20, "present": True, "correct": (repeat, n) not in missed}
            for repeat in (0, 1) for n in range(3)
        ])
    runs = Run(Path("."), {}, {"probes": rows(set())}), Run(Path("."), {}, {"probes": rows({(0, 0)})})
    test = probe_test(runs, "x", PROFILE, "answered", ALPHA)
    assert test is not None
    assert (test.baseline, test.candidate, test.change) == pytest.approx((1.0, 5 / 6, -1 / 6))
    assert test.change == pytest.approx(np.mean([change for *_, change in test.changes]))
    assert test.lost == ("a/p0",)  # the flipped probes are still the voted ones


def test_a_repeat_one_run_lacks_is_left_out_and_named(tmp_path: Path) -> None:
    # Session a in two repeats in the baseline, only repeat 0 in the candidate (its repeat 1 failed); b in one repeat in
    # both. The row is shown and tested on the draws both hold: a's repeat 0 (the candidate losing 2 of 10) and b's
    # (none of 10): −2 / 20 = −0.1; the baseline's repeat 1 of a, which lost nothing either way, is named as left out.
    size = {"a": 10, "b": 10}
    runs = _runs({("a", 0): 10, ("a", 1): 10, ("b", 0): 10}, {("a", 0): 8, ("b", 0): 10}, size)
    test = probe_test(runs, "x", PROFILE, "retention", ALPHA)
    assert test is not None and test.draws == 2
    assert test.change == pytest.approx(-0.1)
    assert test.unshared == ("a repeat 1 (baseline only)",)
    stored = {"kind": "recall", "in_summary": False, "correct": None, "ceiling_correct": None, "source_summarized": False}
    folders = [write_run(tmp_path / label, _rows(kept, size).assign(found=lambda r: r["present"].map({True: "kept", False: "absent"}), **stored)
                         .to_dict("records")) for label, kept in
               (("baseline", {("a", 0): 10, ("a", 1): 10, ("b", 0): 10}), ("candidate", {("a", 0): 8, ("b", 0): 10}))]
    result = gate(*folders, [Rule.parse("retention:0")])
    assert any("x 32k retention: shown and tested on the summary draws both runs hold" in note and "a repeat 1 (baseline only)" in note
               for note in result.notes)
