"""Statistics on the paired design: clustered bootstrap intervals, paired differences, the chance
each strategy ranks first, and a one-sided paired test clustered by probe.

The unit of resampling is the probe (its rows at several checkpoints are correlated, so they are
first averaged into one value per probe); probes are clustered by scenario: a resample draws
scenarios with replacement, then probes within each drawn scenario (a two-stage bootstrap; with one
scenario it is the probe bootstrap). Percentile intervals, fixed seed: a report is reproducible.

The gate's test is a sign-flip permutation test of the per-probe differences (exact up to
`EXACT_FLIPS` probes with a difference, Monte Carlo with `SAMPLES` flips beyond), one-sided; with
one checkpoint per probe it is the exact one-sided sign (McNemar) test. `min_detectable_change`
is the smallest drop the test can detect at all for a suite's size.
"""

from __future__ import annotations

import itertools
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


def _clean(values: Sequence[float | None]) -> np.ndarray:
    return np.asarray([v for v in values if v is not None and not np.isnan(v)], dtype=float)


def bootstrap_ci(
    values: Sequence[float | None],
    *,
    samples: int = BOOTSTRAP_SAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = SEED,
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of independent values; (nan, nan) for none."""
    return cluster_bootstrap_ci([values], samples=samples, confidence=confidence, seed=seed)


def _resampled_means(clusters: Sequence[np.ndarray], samples: int, seed: int) -> np.ndarray:
    """Means of `samples` two-stage resamples (clusters, then values within each drawn cluster)."""
    rng = np.random.default_rng(seed)
    sizes = np.asarray([c.size for c in clusters])
    # Per cluster and resample: the sum of one within-cluster resample.
    inner = np.stack([c[rng.integers(0, c.size, size=(samples, c.size))].sum(axis=1) for c in clusters])
    if len(clusters) == 1:
        return inner[0] / sizes[0]
    drawn = rng.integers(0, len(clusters), size=(samples, len(clusters)))
    columns = np.arange(samples)[:, None]
    totals = inner[drawn, columns].sum(axis=1)
    counts = sizes[drawn].sum(axis=1)
    return totals / counts


def cluster_bootstrap_ci(
    clusters: Sequence[Sequence[float | None]],
    *,
    samples: int = BOOTSTRAP_SAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = SEED,
) -> tuple[float, float]:
    """Percentile interval of the mean of all values (one value per probe), clusters = scenarios."""
    data = [c for c in (_clean(values) for values in clusters) if c.size]
    if not data:
        return (float("nan"), float("nan"))
    flat = np.concatenate(data)
    if np.all(flat == flat[0]):
        return (float(flat[0]), float(flat[0]))
    means = _resampled_means(data, samples, seed)
    alpha = (1 - confidence) / 2
    return (float(np.quantile(means, alpha)), float(np.quantile(means, 1 - alpha)))


def _inner_sums(values: np.ndarray, members: np.ndarray, samples: int, rng: np.random.Generator) -> np.ndarray:
    """(strategies, samples): each strategy's sum over one resample of a cluster's probes, the same
    resample for every strategy (paired), drawn in chunks to bound memory."""
    out = np.empty((values.shape[0], samples))
    chunk = max(1, CHUNK_CELLS // max(members.size * values.shape[0], 1))
    for start in range(0, samples, chunk):
        stop = min(samples, start + chunk)
        picked = members[rng.integers(0, members.size, size=(stop - start, members.size))]
        out[:, start:stop] = values[:, picked].sum(axis=2)
    return out


def p_best(
    values: np.ndarray, clusters: Sequence[object], *, samples: int = BOOTSTRAP_SAMPLES, seed: int = SEED
) -> np.ndarray:
    """Probability that each strategy (row of `values`, one column per paired probe) has the highest
    mean, over two-stage resamples of the probes (`clusters[j]` is probe j's scenario); ties share.
    Above `MANY_CLUSTERS` scenarios only the scenarios are resampled (the within stage adds little)."""
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
        means = _inner_sums(values, members[0], samples, rng) / sizes[0]
    else:
        drawn = rng.integers(0, len(members), size=(samples, len(members)))
        weights = np.stack([np.bincount(row, minlength=len(members)) for row in drawn]).astype(float)  # (samples, clusters)
        if len(members) > MANY_CLUSTERS:
            totals = np.stack([values[:, m].sum(axis=1) for m in members], axis=1) @ weights.T
        else:
            inner = np.stack([_inner_sums(values, m, samples, rng) for m in members])  # (clusters, strategies, samples)
            totals = np.einsum("bk,ksb->sb", weights, inner)
        means = totals / (weights @ sizes)
    top = np.isclose(means, means.max(axis=0, keepdims=True))
    return (top / top.sum(axis=0, keepdims=True)).mean(axis=1)


def signflip_p(differences: Sequence[float], *, samples: int = SAMPLES, seed: int = SEED) -> float:
    """One-sided p-value that the mean per-probe difference is below 0 (candidate worse).

    Under the null each probe's difference is as likely negated: p = P(mean of randomly signed
    differences ≤ the observed mean). 1.0 when nothing differs."""
    d = _clean(differences)
    d = d[d != 0]
    if d.size == 0:
        return 1.0
    observed = d.sum()
    if d.size <= EXACT_FLIPS:
        signs = np.asarray(list(itertools.product((1.0, -1.0), repeat=d.size)))
        totals = signs @ d
        return float(np.mean(totals <= observed + 1e-12))
    rng = np.random.default_rng(seed)
    signs = rng.choice((1.0, -1.0), size=(samples, d.size))
    totals = signs @ d
    return float((1 + np.sum(totals <= observed + 1e-12)) / (1 + samples))


def min_detectable_change(probes: int, alpha: float) -> float:
    """The smallest drop in retention (share of probes) the one-sided sign-flip test can call
    significant: k probes losing their fact and none gaining, with 0.5^k < alpha, over `probes`."""
    if probes <= 0:
        return float("nan")
    k = math.floor(math.log(alpha) / math.log(0.5)) + 1
    return k / probes if k <= probes else float("inf")
