"""The joint sign-flip test (`stats.step_down_min_p` of `stats.flip_ranks`: Westfall and Young's step-down min-p over
sign flips shared by every test): its p-values worked by hand, its error rate counted exactly over every sign pattern
the data could have had under no change, its bound by Holm's method, and the best case a test could reach
(`stats.best_case_p`) against the family adjusted again."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

from compaction_bench.metrics.stats import (
    EXACT_FLIPS,
    SAMPLES,
    best_case_p,
    flip_ranks,
    holm,
    shared_signs,
    signflip_p,
    step_down_min_p,
)

ALPHA = 0.05


def joint_signflip_p(changes: np.ndarray, *, two_sided: bool = False) -> np.ndarray:
    """The tests' (rows of `changes`, one column per unit) sign-flip p-values adjusted together, over the units some
    test changed."""
    changed = changes[:, np.any(changes != 0, axis=0)]
    return step_down_min_p(flip_ranks(shared_signs(changed.shape[1]), changed, two_sided=two_sided))


def test_worked_by_hand():
    """- One test: its own sign-flip p (five drops: 1/32).
    - Two identical tests: one assignment of 2^6 makes either extreme, so both keep their own p (Holm: twice it).
    - Two tests on disjoint units, six drops each: 64 of 4096 assignments leave one test's six units unflipped,
      127 one test's or the other's: 127/4096 (Holm: 128/4096).
    - Four tests losing in the same five units and four gaining in them: none flipped makes the losers extreme, all
      five flipped the gainers: 2/32 for the losers, 1 for the gainers (Holm: 8/32).
    - Step-down: A drops in units 0–4 (1/32), B in four of units 5–9 and rises in one (6/32: every drop, or one rise).
      First A: some test at most 1/32 under 32 + 32 − 1 of 1024 assignments, 63/1024; then B alone, 6/32."""
    assert joint_signflip_p(np.array([[-1.0] * 5])) == pytest.approx([1 / 32])
    twins = np.array([[-1, -2, -1, -3, -1, -1.0]] * 2)
    assert joint_signflip_p(twins) == pytest.approx([1 / 64, 1 / 64])
    apart = np.zeros((2, 12))
    apart[0, :6] = apart[1, 6:] = -1
    assert joint_signflip_p(apart) == pytest.approx([127 / 4096, 127 / 4096])
    assert holm([1 / 64, 1 / 64]) == pytest.approx([128 / 4096, 128 / 4096])
    reshuffled = np.array([[-1.0] * 5] * 4 + [[1.0] * 5] * 4)
    assert joint_signflip_p(reshuffled) == pytest.approx([2 / 32] * 4 + [1.0] * 4)
    step = np.zeros((2, 10))
    step[0, :5] = -1
    step[1, 5:] = [-1, -1, -1, -1, 1]
    assert joint_signflip_p(step) == pytest.approx([63 / 1024, 6 / 32])


def test_units_no_test_changed_change_nothing():
    """A unit every test holds at 0 is left out: the p-values are those of the units that changed, and a test that
    changed nothing reads 1."""
    changes = np.array([[-1, -1, -1, -1, -1, 0, 0.0], [0, 0, 0, 0, 0, 0, 0.0]])
    assert joint_signflip_p(changes) == pytest.approx([1 / 32, 1.0])
    assert joint_signflip_p(np.zeros((0, 3))).size == 0


def _error_rate(changes: np.ndarray, null_rows: list[int], null_units: list[int], alpha: float) -> float:
    """The share of sign patterns of `null_units` (every one equally likely when the tests of `null_rows` have no change
    behind them) under which any test of `null_rows` is adjusted below alpha."""
    rejected = 0
    patterns = list(itertools.product((1.0, -1.0), repeat=len(null_units)))
    for pattern in patterns:
        data = changes.copy()
        data[:, null_units] *= np.asarray(pattern)
        rejected += bool(np.any(joint_signflip_p(data)[null_rows] < alpha))
    return rejected / len(patterns)


@pytest.mark.parametrize("alpha", [0.05, 0.1])
def test_no_change_anywhere_fails_at_most_alpha_counted_exactly(alpha):
    """Under no change every sign pattern of the eight units is equally likely (both runs' draws of a session are draws
    of one distribution). Counted over all 256, the share under which any of the five tests is adjusted below alpha is
    at most alpha: tests that share units (rows 0 and 1 are one count in two forms, row 2 another of the same events),
    on disjoint units (row 3) and of unequal sizes (row 4)."""
    rng = np.random.default_rng(7)
    changes = np.zeros((5, 8))
    changes[0] = rng.uniform(0.2, 2.0, 8)
    changes[1] = 3 * changes[0]
    changes[2, :6] = changes[0, :6] + rng.uniform(0, 0.5, 6)
    changes[3, 4:] = rng.uniform(0.1, 1.0, 4)
    changes[4, [0, 2, 4, 6]] = 1.0
    rate = _error_rate(changes, list(range(5)), list(range(8)), alpha)
    assert 0 < rate <= alpha


def test_a_real_drop_elsewhere_does_not_raise_the_error_of_the_rest():
    """Strong control: row 0 drops in all of units 0–5 (a real regression, fixed); rows 1–4 have no change behind
    them, on units 6–11 (every one of their 64 sign patterns equally likely). The share of patterns under which any of
    rows 1–4 is adjusted below alpha is at most alpha (their own p-values, unadjusted, exceed it: 4/64), and row 0
    fails in every one of them."""
    rng = np.random.default_rng(12)
    changes = np.zeros((5, 12))
    changes[0, :6] = -1.0
    changes[1, 6:] = rng.uniform(0.2, 2.0, 6)
    changes[2, 6:10] = rng.uniform(0.2, 2.0, 4)
    changes[3, 7:] = rng.uniform(0.2, 2.0, 5)
    changes[4, [6, 8, 10, 11]] = rng.uniform(0.2, 2.0, 4)
    assert _error_rate(changes, [1, 2, 3, 4], list(range(6, 12)), ALPHA) <= ALPHA
    patterns = itertools.product((1.0, -1.0), repeat=6)
    assert all(joint_signflip_p(np.hstack([changes[:, :6], changes[:, 6:] * np.asarray(p)]))[0] < ALPHA for p in patterns)


def test_never_above_holm_and_never_below_the_test_alone():
    """On random families (1–6 tests, 4–10 units, some shared, some held at 0), each adjusted p lies between the
    test's own sign-flip p and Holm's adjustment of them."""
    rng = np.random.default_rng(3)
    for _ in range(60):
        tests, units = int(rng.integers(1, 7)), int(rng.integers(4, 11))
        changes = rng.normal(-0.3, 1.0, (tests, units)) * (rng.random((tests, units)) < 0.8)
        own = [signflip_p(row.tolist()) for row in changes]
        joint = joint_signflip_p(changes)
        assert np.all(joint >= np.asarray(own) - 1e-12) and np.all(joint <= np.asarray(holm(own)) + 1e-12)


def test_beyond_the_exact_limit_it_is_monte_carlo_counting_the_data_among_its_draws():
    """With more units than `EXACT_FLIPS` the assignments are drawn: twenty units all dropping give p = 1/(samples + 1),
    the observed assignment counted among them, never 0; a test with no drop reads near 1."""
    units = EXACT_FLIPS + 4
    changes = np.vstack([-np.ones(units), np.ones(units)])
    assert joint_signflip_p(changes) == pytest.approx([1 / (SAMPLES + 1), 1.0], abs=1e-3)


def test_sums_that_tie_exactly_tie_after_rounding():
    """The gate's shifted changes are fractions rounded to 12 decimals (`gate.DrawTest.shifted`): six sessions' probes
    lost, scaled by 6/213 draws per probe, plus 0.11 of each session's probes so scaled. Summed in floating point, some
    sign assignments whose exact sums equal the observed one land a few 1e-12 above it; a tie counts as extreme, so
    the p-value is the exact one, 55/64, counted with fractions (an absolute margin of 1e-12 read 54/64)."""
    scale, tolerance = Fraction(6, 213), Fraction(11, 100)
    lost, probes = (0, -1, 3, 1, -6, -5), (33, 4, 27, 30, 31, 35)
    exact = [k * scale + tolerance * m * scale for k, m in zip(lost, probes, strict=True)]
    rounded = [round(round(float(k * scale), 12) + float(tolerance) * float(m * scale), 12) for k, m in zip(lost, probes, strict=True)]
    at_most = sum(sum(s * x for s, x in zip(signs, exact, strict=True)) <= sum(exact) for signs in itertools.product((1, -1), repeat=6))
    assert at_most == 55
    assert signflip_p(rounded) == pytest.approx(55 / 64)
    assert joint_signflip_p(np.array([rounded])) == pytest.approx([55 / 64])


def test_a_change_far_smaller_than_the_others_is_still_a_change():
    """The tie margin is the changes' rounding, not a share of their size: a draw 4e-9 worse beside draws of a few
    units (a cost that moved by a fraction of a cent) still counts, and the p is the exact count, 106/256 (a margin
    of a billionth of the changes' absolute sum read it as 0: 112/256)."""
    changes = [-5.0, 3.0, -2.0, 4.0, -1.0, 2.5, -3.5, -4e-9]
    exact = [Fraction(c) for c in changes]
    at_most = sum(sum(s * x for s, x in zip(signs, exact, strict=True)) <= sum(exact) for signs in itertools.product((1, -1), repeat=8))
    assert at_most == 106
    assert signflip_p(changes) == pytest.approx(106 / 256)


def test_two_sided_counts_a_rise_as_far_from_zero_as_a_drop():
    """Two-sided, five drops and five rises of equal size on the same units are each twice their one-sided 1/32, and
    one assignment of 32 (none flipped, or all) makes both extreme at once: 2/32 for both, as for one test alone."""
    changes = np.array([[-1.0] * 5, [1.0] * 5])
    assert joint_signflip_p(changes, two_sided=True) == pytest.approx([2 / 32, 2 / 32])
    assert joint_signflip_p(changes[:1], two_sided=True) == pytest.approx([2 / 32])


def test_the_best_case_is_the_family_adjusted_again_with_the_test_at_its_worst():
    """`best_case_p` counts only the assignments its p-values up to the best test's own depend on; on random families
    it equals adjusting the whole family again with that test's column replaced (or added)."""
    rng = np.random.default_rng(5)
    for _ in range(100):
        units, tests = int(rng.integers(3, 11)), int(rng.integers(1, 7))
        signs = shared_signs(units)
        ranks = flip_ranks(signs, rng.normal(-0.2, 1.0, (tests, units)) * (rng.random((tests, units)) < 0.7))
        worst = flip_ranks(signs, -(rng.random((1, units)) < 0.6).astype(float))[:, 0]
        test = int(rng.integers(0, tests + 1))
        if test < tests:
            whole = step_down_min_p(np.column_stack([ranks[:, :test], worst, ranks[:, test + 1:]]))[test]
            (best,) = best_case_p(ranks, [(test, worst)])
        else:
            whole = step_down_min_p(np.column_stack([ranks, worst]))[-1]
            (best,) = best_case_p(ranks, [(None, worst)])
        assert best == pytest.approx(whole, abs=1e-12)
