"""A rule's tolerance is tested by the sign-flip test of the draws' changes shifted by it (`gate.draw_test`), alone and
in the gate's joint family (`gate.JointFamily`).

The right answers are counted by hand, or over every sign pattern of the shifted changes: a candidate whose draws'
changes are symmetric about a drop of exactly the tolerance is one the rule must pass, and the patterns that fail it
may be at most alpha of them. The clustered bootstrap that tested the tolerance until the forty-ninth pass failed 19
of the 256 patterns of the first such test (12 allowed)."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from compaction_bench.metrics.stats import signflip_p
from compaction_bench.reports.gate import JointFamily, _family_p_values, draw_test, family_members

ALPHA = 0.05


def frame(changes: list[float] | np.ndarray) -> pd.DataFrame:
    """One summary draw per session (repeat 0), with these changes in the metric's good direction."""
    return pd.DataFrame({"scenario": [f"s{k}" for k in range(len(changes))], "repeat": 0, "change": list(changes)})


def fails(test_p: float, changes: np.ndarray, tolerance: float) -> bool:
    """The gate's rule for a row: its p below alpha and its mean drop beyond the tolerance."""
    return test_p < ALPHA and float(np.mean(changes)) < -tolerance


def test_the_tolerance_shifts_the_changes_the_sign_flip_test_flips():
    """Seven sessions each lose 0.1 and one is unchanged. A drop at all: seven changed draws, all down, p = 1/128.
    Against a tolerance of 0.05 the shifted changes are seven of −0.05 and one of +0.05; in units of 0.05 a sign
    pattern's sum is s7 ± 1 (s7 = 7 − 2j with j of the seven flipped), the observed −6: with the +0.05 kept, s7 ≤ −7
    (1 pattern), flipped, s7 ≤ −5 (j ≥ 6: 7 + 1): 9 of 256, and the rule fails. Against 0.08 (shifted −0.02 seven
    times and +0.08, the observed sum −0.06): with +0.08 kept, s7 ≤ −7 (1), flipped, s7 ≤ 1 (j ≥ 3: 35 + 35 + 21 + 7
    + 1 = 99): 100 of 256, and the drop of 0.0875, beyond the tolerance, is not shown to be."""
    changes = [-0.1] * 7 + [0.0]
    assert draw_test(frame(changes), ALPHA).p_value == pytest.approx(1 / 128)
    assert draw_test(frame(changes), ALPHA, 0.05).p_value == pytest.approx(9 / 256)
    beyond = draw_test(frame(changes), ALPHA, 0.08)
    assert beyond.p_value == pytest.approx(100 / 256) and beyond.tolerance == 0.08
    # the tolerance's sample holds the unchanged draw too (+0.08): eight; at tolerance 0, the seven that changed
    assert beyond.changed == 8 and draw_test(frame(changes), ALPHA).changed == 7
    # a drop of exactly the tolerance in a draw is 0 once shifted (sums of tenths rounded): only two draws are in the
    # tolerance's sample, and the row can be no lower than 1/4
    assert draw_test(frame([-0.3, -0.1, -0.1, -0.2]), ALPHA, 0.1).changed == 2


def test_a_two_sided_test_takes_no_tolerance():
    with pytest.raises(ValueError, match="no tolerance"):
        draw_test(frame([-0.1] * 6), ALPHA, 0.05, two_sided=True)


#: eight draws' distances from the boundary (no two sign patterns give one sum)
MAGNITUDES = np.array([0.031, 0.012, 0.047, 0.004, 0.022, 0.058, 0.016, 0.039])


def test_a_drop_of_exactly_the_tolerance_fails_at_most_alpha_of_its_symmetric_patterns():
    """Eight draws whose changes are −0.05 ± the magnitudes: symmetric about a drop of exactly the tolerance, 0.05,
    which the rule must pass. Of the 256 sign patterns, those that fail are the 12 with the lowest sums (floor(0.05 ×
    256)): the test's size, exactly. The old clustered bootstrap failed 19."""
    tolerance = 0.05
    failed = []
    for signs in itertools.product((1.0, -1.0), repeat=MAGNITUDES.size):
        changes = np.asarray(signs) * MAGNITUDES - tolerance
        failed.append(fails(draw_test(frame(changes), ALPHA, tolerance).p_value, changes, tolerance))
    sums = np.asarray(list(itertools.product((1.0, -1.0), repeat=MAGNITUDES.size))) @ MAGNITUDES
    assert sum(failed) == 12
    assert {i for i, f in enumerate(failed) if f} == set(np.argsort(sums, kind="stable")[:12].tolist())


def test_rows_with_tolerances_adjusted_together_fail_at_most_alpha_of_their_joint_patterns():
    """Two rules read from the same eight draws (their shifted changes flip together: one sign pattern per draw for
    both), each symmetric about a drop of exactly its tolerance, and a third row with tolerance 0 and no change behind
    it. Over the 256 joint patterns the family fails some row in at most 12: the joint adjustment holds with the
    tolerances shifted in. Adjusted one by one, without the family, more patterns fail some row."""
    second = np.array([0.2, 0.5, 0.1, 0.7, 0.3, 0.05, 0.6, 0.4])  # another metric's scale, moving with the first
    third = np.array([0.3, -0.2, 0.1, 0.25, -0.05, 0.15, -0.35, 0.2])
    tolerances = (0.05, 0.4, 0.0)
    family_failed = alone_failed = 0
    for signs in itertools.product((1.0, -1.0), repeat=MAGNITUDES.size):
        s = np.asarray(signs)
        rows = [s * MAGNITUDES - tolerances[0], s * second - tolerances[1], s * third]
        tests = [draw_test(frame(changes), ALPHA, tolerance, family=3) for changes, tolerance in zip(rows, tolerances, strict=True)]
        adjusted = JointFamily(tests, ALPHA).adjusted()
        family_failed += any(fails(p, changes, tol) for p, changes, tol in zip(adjusted, rows, tolerances, strict=True))
        alone_failed += any(fails(t.p_value, changes, tol) for t, changes, tol in zip(tests, rows, tolerances, strict=True))
    assert family_failed <= 12 < alone_failed


def test_an_unchanged_draw_only_makes_the_tolerance_test_stricter():
    """A draw the candidate left unchanged is +tolerance once shifted, on whichever side the assignment puts it: with
    W the other draws' flipped sum and S their observed one, its p is ½ P(W ≤ S) + ½ P(W ≤ S + 2 × tolerance), never
    below the others' alone. Five draws of −0.5 against a tolerance of 0.02: 1/32 alone, and with three unchanged
    draws beside them still 1/32 (every pattern that keeps the five, 8 of 256); a row of three changed draws and five
    unchanged is in the family (eight draws in its shifted sample) but cannot fail: its drop at all is at least 1/8."""
    five = draw_test(frame([-0.5] * 5), ALPHA, 0.02)
    padded = draw_test(frame([-0.5] * 5 + [0.0] * 3), ALPHA, 0.02)
    assert five.p_value == pytest.approx(1 / 32) and padded.p_value == pytest.approx(1 / 32) and padded.changed == 8
    few = draw_test(frame([-0.5] * 3 + [0.0] * 5), ALPHA, 0.02)
    assert few.changed == 8 and few.p_value >= 1 / 8
    rng = np.random.default_rng(5)
    for _ in range(50):
        changes = rng.normal(-0.05, 0.05, 6).round(3)
        alone = draw_test(frame(changes), ALPHA, 0.05).p_value
        assert draw_test(frame([*changes, 0.0, 0.0]), ALPHA, 0.05).p_value >= alone - 1e-12


def test_membership_does_not_follow_the_signs_a_tolerance_test_flips():
    """A candidate that, in each of eight sessions, either loses 0.2 of retention or fails one request more (a sum
    metric: the draw's change scaled by 8 sessions, −8): against tolerances of 0.1 and 4, with each session's side a fair
    coin, both rows sit exactly at their boundary, and their shifted changes (±0.1 and ∓4) flip together. Over the 256
    patterns the family must fail some row in at most 12. Taking members by the draws that changed (as a first draft
    did) left out whichever row changed in fewer than five sessions, and the other then failed on its own p: 18 of 256
    (the forty-ninth pass's audit). By their non-zero shifted changes both rows are always members: 2 of 256."""
    units = frame(np.zeros(8))
    failed = 0
    for sides in itertools.product((0, 1), repeat=8):
        side = np.asarray(sides)
        changes = [np.where(side == 0, -0.2, 0.0), np.where(side == 1, -8.0, 0.0)]
        tolerances = (0.1, 4.0)
        tests = [draw_test(units.assign(change=c), ALPHA, t, family=2) for c, t in zip(changes, tolerances, strict=True)]
        rows = [{"test": t, "status": None, "worsenable": t.worsenable} for t in tests]
        members = family_members(rows, ALPHA)
        adjusted, _ = _family_p_values(rows, members, ALPHA)
        failed += any(fails(adjusted.get(k, t.p_value), c, tol) for k, (t, c, tol) in enumerate(zip(tests, changes, tolerances, strict=True)))
    assert failed == 2


def test_the_best_case_outweighs_every_draw_that_cannot_get_worse():
    """A row's best case (`DrawTest.all_worse`) sets each draw that can get worse so far worse that flipping it
    outweighs the draws that cannot, together, which stay at their share of the tolerance. Five draws that can worsen
    beside three stuck ones weighing 2 each (a probe metric's large sessions), against a tolerance of 0.5: the stuck
    draws' shifted changes sum to 3, and only the assignments keeping all five worse reach the observed sum, 8 of 256,
    so the row's best p is 1/32 (with the five at −1 instead, an assignment flipping one of them back and the stuck ones
    too would read as extreme: 93/256)."""
    draws = frame([-0.1] * 5 + [0.0] * 3).assign(weight=[0.4] * 5 + [2.0] * 3, stuck=[False] * 5 + [True] * 3)
    test = draw_test(draws, ALPHA, 0.5)
    best = [change for *_, change in test.all_worse]
    assert best[5:] == [1.0, 1.0, 1.0] and all(change < -6 for change in best[:5])
    assert signflip_p(best) == pytest.approx(1 / 32)
    assert JointFamily([test], ALPHA).best_case([(0, test.all_worse)]) == pytest.approx([1 / 32])
    assert signflip_p([-1.0] * 5 + best[5:]) == pytest.approx(93 / 256)
