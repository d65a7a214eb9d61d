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


def p_best(
    values: np.ndarray, clusters: Sequence[object], *, samples: int = BOOTSTRAP_SAMPLES, seed: int = SEED
) -> np.ndarray:
    """Probability that each strategy (row of `values`, one column per paired probe) has the highest
    mean, over two-stage resamples of the probes (`clusters[j]` is probe j's scenario); ties share."""
    strategies, probes = values.shape
    if strategies == 0:
        return np.zeros(0)
    if probes == 0:
        return np.full(strategies, 1.0 / strategies)
    labels = list(dict.fromkeys(clusters))
    members = [np.asarray([j for j, c in enumerate(clusters) if c == label]) for label in labels]
    rng = np.random.default_rng(seed)
    wins = np.zeros(strategies)
    if len(members) == 1:
        means = values[:, rng.integers(0, probes, size=(samples, probes))].mean(axis=2)  # (strategies, samples)
        top = np.isclose(means, means.max(axis=0, keepdims=True))
        return (top / top.sum(axis=0, keepdims=True)).mean(axis=1)
    for _ in range(samples):
        chosen = [members[k] for k in rng.integers(0, len(members), size=len(members))]
        picked = np.concatenate([m[rng.integers(0, m.size, size=m.size)] for m in chosen])
        means = values[:, picked].mean(axis=1)
        best = np.flatnonzero(np.isclose(means, means.max()))
        wins[best] += 1.0 / best.size
    return wins / samples


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
