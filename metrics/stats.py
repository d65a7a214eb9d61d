"""Statistics on the paired design: clustered bootstrap intervals, paired differences, the chance
each strategy ranks first, and the sign-flip test that guards every claimed difference.

The unit of resampling is the probe (its rows at several checkpoints are correlated, so they are
first averaged into one value per probe); probes are clustered by scenario: a resample draws
scenarios with replacement, then, for every scenario drawn, an independent resample of its probes
(a two-stage bootstrap; with one scenario it is the probe bootstrap). Percentile intervals, fixed
seed: a report is reproducible.

When every probe has the same value the bootstrap cannot vary, and a percentile interval would be
that value alone however few the probes. The interval is then the agreement interval: with n probes
all agreeing, the exact binomial (Clopper–Pearson) bound lets a share u = 1 − (α/2)^(1/n) of probes
differ, each by as much as the metric's range allows (`agreement_interval`; 96 probes all present give
[0.962, 1], one probe with a difference of +1 gives [−0.95, 1]).

The same weakness remains when only a few probes differ from an end of the range: the resamples
draw the one lost probe of 96 about Poisson(1) times, and the percentile interval [0.969, 1] was
narrower than that of all 96 kept, its lower bound above the exact one (0.943). So an interval is
never narrower than its `binomial_floor`: with k of n probes away from an end, the share of such
probes may be as large as the Clopper–Pearson upper bound of k of n, the unseen ones as far as the
range allows. For values of 0 and 1 that is the Clopper–Pearson interval itself; with every value
at an end it is the agreement interval; with about half the probes at each end it lies inside the
bootstrap's and changes nothing. For probes kept at some of their checkpoints only it is
conservative (an unseen probe may be lost at all of them): on the synthetic suite at 64k it moved
codex-local's lower bound (7 of 71 probes not kept throughout) from 0.878 to 0.840, as much as the
same count of probes lost outright would. This floor is for shares (retention, answered); a paired
difference's interval keeps the bootstrap's, and no difference is claimed without the exact sign-flip
test of its units (below), which a few changed probes, or a few scenarios, never pass.

A difference is claimed only when its interval excludes 0 **and** the sign-flip test of its independent
units rejects at α (`signflip_p`, two-sided for a verdict, one-sided for a gate; `difference_claimed`).
The unit is what varies independently, never the probe: the probes of one session are read from one
context, summarized by one summary, so they move together. A verdict pools sessions, and its test
flips the sign of each scenario's whole difference (the sum over its probes, so the statistic has the
sign of the probe-weighted mean shown); within one scenario its units are the repeats, the summary
draws, where they differ; a gate compares two runs of one strategy draw by draw. The test needs
`min_units(α)` units changed in one direction at the least (5 one-sided and 6 two-sided at 0.05), so a
few sessions can never make a claim, however many probes they hold and whatever their bootstrap
interval (with few clusters the clustered bootstrap is too narrow, and a probe-level test counts one
summary's luck many times: in the forty-fifth pass's simulation of a sampling summarizer, the gate's
probe-level test failed an unchanged prompt in about 15% of trials on one session, 7–10% on two to five).

`p_best` is the bootstrap's share of resamples in which a strategy ranks first. It has the bootstrap's
small-sample weakness and no floor: five probes that differ, all one way, give the leader 0.996,
where no test could claim it. So it is shown only where the leader's lead
over the runner-up (the two highest means) is a difference that may be claimed (`difference_claimed`,
applied by `compaction_bench.metrics.aggregate`); elsewhere it is withheld (NaN): the tests cannot
tell which strategy is best, and a share near 1 would say they can.

Where one decision rests on several tests (a gate's rows, the rows `bench compare` tags), their
p-values are adjusted together, so the chance that any of the claims is wrong stays at α, not α per
test: by Holm's step-down method (`holm`), or, for sign-flip tests of units the tests share (a gate's
rows are all tested on the same summary draws), by the joint sign-flip test (`step_down_min_p` of
`flip_ranks`: Westfall and Young's step-down min-p, one sign assignment flipping a unit in every test at once).
Holm's method assumes nothing of how the tests depend on each other and pays for each test as if it
were independent; the joint test reads their dependence from the data, so tests that count the same
events (a failed request is often an overflow too) cost about one test, and independent ones about
what Holm's method costs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

BOOTSTRAP_SAMPLES = 2000
CONFIDENCE = 0.95
SEED = 20251216
EXACT_FLIPS = 16
#: Above this many scenarios, P(best) resamples scenarios only (the within-scenario stage adds little).
MANY_CLUSTERS = 30
#: Array cells one resampling chunk may hold (bounds memory for large suites).
CHUNK_CELLS = 4_000_000
SAMPLES = 20_000
#: How far a change may be off its exact value (the gate rounds its changes to 12 decimals, after float arithmetic),
#: per unit of the change's size where it is larger than 1: two sums of n such changes whose exact values are equal
#: differ by at most 2 × n times this, and are counted as ties (`tie_margin`): a tie is as extreme as the observed sum.
ROUNDED = 1e-12
#: The range of a share (retention, answered) and of a paired difference of shares.
SHARE = (0.0, 1.0)
DIFFERENCE = (-1.0, 1.0)


def _clean(values: Sequence[float | None]) -> np.ndarray:
    return np.asarray([v for v in values if v is not None and not np.isnan(v)], dtype=float)


def bootstrap_ci(
    values: Sequence[float | None],
    *,
    samples: int = BOOTSTRAP_SAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = SEED,
    bounds: tuple[float, float] | None = SHARE,
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of independent values; (nan, nan) for none."""
    return cluster_bootstrap_ci([values], samples=samples, confidence=confidence, seed=seed, bounds=bounds)


def _sums(values: np.ndarray, rows: int, rng: np.random.Generator) -> np.ndarray:
    """`rows` sums of independent resamples (with replacement) of `values` along its last axis, drawn in chunks to
    bound memory; a 2-D `values` (values × weights, weights) is resampled by columns, each row summed (2 × `rows`)."""
    size = values.shape[-1]
    out = np.empty((*values.shape[:-1], rows))
    chunk = max(1, CHUNK_CELLS // max(size, 1))
    for start in range(0, rows, chunk):
        stop = min(rows, start + chunk)
        out[..., start:stop] = values[..., rng.integers(0, size, size=(stop - start, size))].sum(axis=-1)
    return out


def _resampled_means(clusters: Sequence[np.ndarray], samples: int, seed: int, weights: Sequence[np.ndarray] | None = None) -> np.ndarray:
    """Means of `samples` two-stage resamples: clusters drawn with replacement, then an independent
    resample of the values of every cluster drawn (one drawn twice is resampled twice); with `weights` (one
    array per cluster, as its values), each resample's weighted mean, a value drawn with its weight."""
    rng = np.random.default_rng(seed)
    sizes = np.asarray([c.size for c in clusters])
    data = list(clusters) if weights is None else [np.stack([v * w, w]) for v, w in zip(clusters, weights, strict=True)]
    if len(clusters) == 1:
        sums = _sums(data[0], samples, rng)
        return sums / sizes[0] if weights is None else sums[0] / sums[1]
    drawn = rng.integers(0, len(clusters), size=(samples, len(clusters)))
    totals = np.zeros((1 if weights is None else 2, samples))
    for values, resample in zip(data, _draws_by_cluster(drawn), strict=True):
        sums = np.atleast_2d(_sums(values, resample.size, rng))
        totals += np.stack([np.bincount(resample, weights=row, minlength=samples) for row in sums])
    return totals[0] / sizes[drawn].sum(axis=1) if weights is None else totals[0] / totals[1]


def _draws_by_cluster(drawn: np.ndarray) -> list[np.ndarray]:
    """For each cluster k of `drawn` (resamples × draws, each a cluster index in `range(draws)`), the resample
    each of its draws belongs to, in resample order: `np.nonzero(drawn == k)[0]`. Found by one stable sort
    of the draws rather than a pass over all of them per cluster, which grew with the square of the number
    of clusters (2.5 s for each interval of a run of 732 scenarios, 38 s of one of 3,000)."""
    flat = drawn.ravel()
    resamples = np.argsort(flat, kind="stable") // drawn.shape[1]  # flat positions by cluster, in order within each
    ends = np.cumsum(np.bincount(flat, minlength=drawn.shape[1]))
    return np.split(resamples, ends[:-1])


def agreement_interval(value: float, units: int, bounds: tuple[float, float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The interval of `units` values that all equal `value` in a metric ranging over `bounds`: a
    share u = 1 − (α/2)^(1/units) of the population may differ (the exact binomial bound when none
    of `units` did), each difference as large as the range allows."""
    share = 1 - ((1 - confidence) / 2) ** (1 / units)
    low, high = bounds
    return (value - share * (value - low), value + share * (high - value))


def cluster_bootstrap_ci(
    clusters: Sequence[Sequence[float | None]],
    *,
    weights: Sequence[Sequence[float]] | None = None,
    samples: int = BOOTSTRAP_SAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = SEED,
    bounds: tuple[float, float] | None = SHARE,
) -> tuple[float, float]:
    """Percentile interval of the mean of all values (one value per probe), clusters = scenarios;
    when all values are equal, their `agreement_interval` over `bounds` (the metric's range; None:
    unbounded, the single value). With `weights` (one per value, as `clusters` holds them), of the weighted mean:
    each value is drawn with its weight (`aggregate.per_probe`'s probe weights where answers failed)."""
    if weights is None:
        data = [c for c in (_clean(values) for values in clusters) if c.size]
        weighed = None
    else:
        pairs = [(np.asarray(v, dtype=float), np.asarray(w, dtype=float)) for v, w in zip(clusters, weights, strict=True)]
        kept = [(v[~np.isnan(v)], w[~np.isnan(v)]) for v, w in pairs]
        data, weighed = [v for v, _ in kept if v.size], [w for v, w in kept if v.size]
    if not data:
        return (float("nan"), float("nan"))
    flat = np.concatenate(data)
    if np.all(flat == flat[0]):
        value = float(flat[0])
        return agreement_interval(value, flat.size, bounds, confidence) if bounds else (value, value)
    means = _resampled_means(data, samples, seed, weighed)
    alpha = (1 - confidence) / 2
    low, high = float(np.quantile(means, alpha)), float(np.quantile(means, 1 - alpha))
    if bounds and bounds[0] >= 0:  # a share; a difference's claims rest on the exact sign-flip test instead
        floor_low, floor_high = binomial_floor(flat, bounds, confidence)
        low, high = min(low, floor_low), max(high, floor_high)
    return (low, high)


def _binomial_upper(count: int, units: int, confidence: float) -> float:
    """The Clopper–Pearson upper bound (one side at (1 − confidence)/2) of a share observed `count` times in `units`."""
    if count >= units:
        return 1.0
    from scipy.special import betaincinv  # imported when first needed (a quarter of a second)

    return float(betaincinv(count + 1, units - count, 1 - (1 - confidence) / 2))


def binomial_floor(values: np.ndarray, bounds: tuple[float, float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The narrowest interval the values' mean may be given, from how many of them sit away from each
    end of `bounds`: with k of n values below the top, the share of such values may be up to the
    Clopper–Pearson upper bound of k of n, each unseen one as low as the range allows (and the same
    for the bottom). Values of 0 and 1 give the Clopper–Pearson interval; all at an end, the
    agreement interval; values between the ends, a conservative one."""
    low, high = bounds
    units = values.size
    span = high - low
    mean = float(values.mean())
    below_top, above_bottom = int(np.sum(values < high)), int(np.sum(values > low))
    return (
        mean - span * max(0.0, _binomial_upper(below_top, units, confidence) - below_top / units),
        mean + span * max(0.0, _binomial_upper(above_bottom, units, confidence) - above_bottom / units),
    )


def p_best(
    values: np.ndarray, clusters: Sequence[object], *, samples: int = BOOTSTRAP_SAMPLES, seed: int = SEED
) -> np.ndarray:
    """Probability that each strategy (row of `values`, one column per paired probe) has the highest
    mean, over two-stage resamples of the probes (`clusters[j]` is probe j's scenario; every scenario
    drawn gets an independent resample of its probes, the same for every strategy: paired); ties share.
    Above `MANY_CLUSTERS` scenarios only the scenarios are resampled (the within stage adds little).
    The bootstrap's share as it is: whoever shows it shows it only where `difference_claimed` holds
    for the leader's lead (the module's docstring says why)."""
    strategies, probes = values.shape
    if strategies == 0:
        return np.zeros(0)
    if probes == 0:
        return np.full(strategies, 1.0 / strategies)
    grouped: dict[object, list[int]] = {}
    for j, label in enumerate(clusters):
        grouped.setdefault(label, []).append(j)
    members = [np.asarray(js) for js in grouped.values()]
    sizes = np.asarray([m.size for m in members], dtype=float)
    rng = np.random.default_rng(seed)
    if len(members) == 1:
        means = _paired_sums(values, members[0], np.arange(samples), samples, rng) / sizes[0]
    else:
        drawn = rng.integers(0, len(members), size=(samples, len(members)))
        if len(members) > MANY_CLUSTERS:
            weights = np.stack([np.bincount(row, minlength=len(members)) for row in drawn]).astype(float)  # (samples, clusters)
            totals = np.stack([values[:, m].sum(axis=1) for m in members], axis=1) @ weights.T
        else:
            totals = sum((_paired_sums(values, m, resample, samples, rng) for m, resample in zip(members, _draws_by_cluster(drawn), strict=True)), np.zeros((strategies, samples)))
        means = totals / sizes[drawn].sum(axis=1)
    top = np.isclose(means, means.max(axis=0, keepdims=True))
    return (top / top.sum(axis=0, keepdims=True)).mean(axis=1)


def _paired_sums(values: np.ndarray, members: np.ndarray, resample: np.ndarray, samples: int, rng: np.random.Generator) -> np.ndarray:
    """(strategies, samples): for every entry of `resample` (the resample a draw of this cluster
    belongs to), each strategy's sum over one independent resample of the cluster's probes, the same
    probes for every strategy (paired), added into its resample's column; drawn in chunks."""
    out = np.zeros((values.shape[0], samples))
    chunk = max(1, CHUNK_CELLS // max(members.size * values.shape[0], 1))
    for start in range(0, resample.size, chunk):
        rows = resample[start : start + chunk]
        picked = members[rng.integers(0, members.size, size=(rows.size, members.size))]
        sums = values[:, picked].sum(axis=2)  # (strategies, rows)
        for s in range(values.shape[0]):
            out[s] += np.bincount(rows, weights=sums[s], minlength=samples)
    return out


def tie_margin(changes: np.ndarray) -> float:
    """How close two signed sums of `changes` must be to count as one (`ROUNDED`): 2 × ROUNDED per change not 0, times
    the largest change's size where it is above 1. A change far smaller than that is still a change."""
    held = changes[changes != 0]
    return 2.0 * ROUNDED * held.size * max(1.0, float(np.abs(held).max(initial=0.0)))


def signflip_p(differences: Sequence[float], *, two_sided: bool = False, samples: int = SAMPLES, seed: int = SEED) -> float:
    """p-value of the sum of independent units' differences (a scenario's, a summary draw's) under random
    signs: one-sided that it is below 0 (candidate worse), or two-sided that it differs from 0.

    Under the null each unit's difference is as likely negated: p = P(sum of randomly signed
    differences ≤ the observed sum), or P(|…| ≥ |observed|) two-sided; exact up to `EXACT_FLIPS`
    units with a difference, Monte Carlo beyond. 1.0 when nothing differs."""
    d = _clean(differences)
    d = d[d != 0]
    if d.size == 0:
        return 1.0
    observed, tie = d.sum(), tie_margin(d)
    exact = d.size <= EXACT_FLIPS
    totals = (_all_signs(d.size) if exact else np.random.default_rng(seed).choice((1.0, -1.0), size=(samples, d.size))) @ d
    extreme = np.abs(totals) >= abs(observed) - tie if two_sided else totals <= observed + tie
    return float(np.mean(extreme)) if exact else float((1 + np.sum(extreme)) / (1 + samples))


def shared_signs(units: int, *, samples: int = SAMPLES, seed: int = SEED) -> np.ndarray:
    """The sign assignments of a joint sign-flip test of `units` shared units, one per row, the identity (no unit
    flipped) first: all 2^units of them up to `EXACT_FLIPS` units (an exact test), else the identity and `samples`
    drawn at random (a Monte Carlo test that counts the observed assignment among its own)."""
    if units <= EXACT_FLIPS:
        return _all_signs(units)
    drawn = np.random.default_rng(seed).choice((1.0, -1.0), size=(samples, units))
    return np.vstack([np.ones((1, units)), drawn])


def flip_ranks(signs: np.ndarray, changes: np.ndarray, *, two_sided: bool = False) -> np.ndarray:
    """(assignments × tests): for each test (a row of `changes`: its change per unit in the columns of `signs`, 0 for
    a unit it does not hold) and each sign assignment (a row of `signs`), how many assignments give that test a sum at
    or below the one this assignment gives it (`two_sided`: as far from 0 or farther): the p (one-sided, candidate
    worse) the assignment's data would get, times the number of assignments. Row 0, the identity, holds the observed
    data's counts."""
    totals = signs @ np.asarray(changes, dtype=float).T  # (assignments, tests)
    if two_sided:
        totals = -np.abs(totals)
    rows = np.atleast_2d(np.asarray(changes, dtype=float))
    ranks = np.empty(totals.shape, dtype=np.int32)
    for test in range(totals.shape[1]):
        ordered = np.sort(totals[:, test])
        ranks[:, test] = np.searchsorted(ordered, totals[:, test] + tie_margin(rows[test]), side="right")
    return ranks


def step_down_min_p(ranks: np.ndarray, observed: np.ndarray | None = None, assignments: int | None = None) -> np.ndarray:
    """The tests' p-values at the identity (row 0 of `flip_ranks`), adjusted together by Westfall and Young's step-down
    min-p method: with the tests ordered by their own p, the i-th smallest becomes the share of sign assignments under
    which the smallest p of the tests from the i-th on is at most its own, made non-decreasing along the order. The
    chance that any test with no change behind it is adjusted below α is at most α, however the tests depend on each
    other within a unit (every assignment flips a unit in all of them), and no adjusted p is above Holm's.

    `observed` (the identity's counts) and `assignments` (how many there are) are for a caller that passes only some
    of the assignments' rows: the tests' p-values up to a count c are exact when every assignment under which some
    test's count is at most c is among them."""
    if ranks.shape[1] == 0:
        return np.zeros(0)
    observed = ranks[0] if observed is None else observed
    order = np.argsort(observed, kind="stable")
    later_min = np.minimum.accumulate(ranks[:, order][:, ::-1], axis=1)[:, ::-1]  # per assignment: min over tests from i on
    adjusted = np.maximum.accumulate((later_min <= observed[order]).sum(axis=0) / (assignments or ranks.shape[0]))
    out = np.empty(ranks.shape[1])
    out[order] = adjusted
    return out


def best_case_p(ranks: np.ndarray, cases: Sequence[tuple[int | None, np.ndarray]]) -> list[float]:
    """For each case (a test, a column of `ranks`, or None for one outside the family; and its `best` counts:
    `flip_ranks` of its units all dropping), the adjusted p (`step_down_min_p`) the test would get with those counts in
    place of its own (or added to the family), the other tests as observed. Counted over the assignments under which
    some test's count is at most the best test's own, the only ones the p-values up to its own depend on."""
    at_most: dict[int, np.ndarray] = {}  # a count -> per assignment, how many of the tests are at or below it
    out = []
    for test, best in cases:
        threshold = int(best[0])
        if threshold not in at_most:
            at_most[threshold] = (ranks <= threshold).sum(axis=1)
        others = at_most[threshold] - (ranks[:, test] <= threshold if test is not None else 0)
        rows = np.flatnonzero((best <= threshold) | (others > 0))
        sub, observed = ranks[rows], ranks[0].copy()
        if test is None:
            sub, observed, test = np.column_stack([sub, best[rows]]), np.append(observed, threshold), ranks.shape[1]
        else:
            sub[:, test], observed[test] = best[rows], threshold
        out.append(float(step_down_min_p(sub, observed, ranks.shape[0])[test]))
    return out


def _all_signs(size: int) -> np.ndarray:
    """Every assignment of signs to `size` values, one per row, in `itertools.product((1.0, -1.0), repeat=size)`'s
    order (row r's bits, the first value's most significant, 1 for a minus): built in arrays, as the tuples of 16
    values took 65 ms, per scenario when P(best) is judged."""
    bits = (np.arange(2**size)[:, None] >> np.arange(size - 1, -1, -1)) & 1
    return 1.0 - 2.0 * bits


def detectable(lo: float, hi: float, p_value: float, confidence: float = CONFIDENCE) -> bool:
    """Whether a difference may be claimed: its interval excludes 0 and its sign-flip test rejects."""
    return bool((lo > 0 or hi < 0) and p_value < 1 - confidence)


def difference_claimed(clusters: Sequence[Sequence[float | None]], confidence: float = CONFIDENCE) -> bool:
    """Whether paired differences, one group per independent unit (`clusters`: a scenario's probes, or
    one summary draw's), make a difference that may be claimed (`detectable`): their clustered interval
    excludes 0 and the two-sided sign-flip test of the units' sums rejects (a unit's probes flip together).
    Checked cheapest first: fewer than `min_units` units that differ never reject, and the sign-flip test
    is run only for an interval clear of 0."""
    data = [_clean(values) for values in clusters]
    sums = unit_sums(data)
    if np.count_nonzero(sums) < min_units(1 - confidence, two_sided=True):
        return False
    lo, hi = cluster_bootstrap_ci(clusters, confidence=confidence, bounds=DIFFERENCE)
    if not (lo > 0 or hi < 0):
        return False
    return detectable(lo, hi, signflip_p(sums.tolist(), two_sided=True), confidence)


def unit_sums(clusters: Sequence[Sequence[float] | np.ndarray]) -> np.ndarray:
    """Each unit's sum of its probes' differences, the value the sign-flip test flips, rounded to 12 decimals (a sum
    of thirds that cancels is 0, no difference; the sign-flip test leaves zeros out)."""
    return np.asarray([float(np.sum(values)) for values in clusters], dtype=float).round(12)


def min_units(alpha: float, *, two_sided: bool = False) -> int:
    """The fewest independent units (scenarios, summary draws) that must change, all in one direction,
    before the sign-flip test can reach p < alpha: k with 0.5^k (twice that, two-sided) below alpha.
    Necessary, not sufficient: the change must also be clear of 0 in the clustered interval."""
    return math.floor(math.log(alpha / (2 if two_sided else 1)) / math.log(0.5)) + 1


#: The fewest units (scenarios, sessions) that must differ before the two-sided sign-flip test can claim a difference at
#: 95% (6). Below it no claim is possible, and the clustered bootstrap's interval resamples little but the units it
#: pools: it describes them, not others like them (the verdict's, `bench compare`'s and `bench calibrate`'s notes).
CLAIM_UNITS = min_units(1 - CONFIDENCE, two_sided=True)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of p-values tested together (in their order; NaN stays NaN and is
    not counted): the i-th smallest of m becomes max over j ≤ i of (m − j + 1) × p_(j), at most 1. A
    test whose adjusted p is below α may be claimed with the chance that any claim of the family is
    wrong at most α."""
    p = np.asarray(p_values, dtype=float)
    known = np.flatnonzero(~np.isnan(p))
    out = p.copy()
    if known.size:
        order = known[np.argsort(p[known], kind="stable")]
        factors = known.size - np.arange(known.size)
        out[order] = np.minimum(1.0, np.maximum.accumulate(factors * p[order]))
    return [float(v) for v in out]
