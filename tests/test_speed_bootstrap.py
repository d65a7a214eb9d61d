"""The two-stage bootstrap finds each cluster's draws by one sort (`stats._draws_by_cluster`): the same
resamples as the definition, `np.nonzero(drawn == k)` per cluster, so every interval and p_best is unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from compaction_bench.metrics import stats


@pytest.mark.parametrize("clusters, samples", [(1, 5), (3, 1), (7, 2000), (40, 37), (300, 50)])
def test_each_cluster_s_draws_are_the_resamples_that_drew_it_in_order(clusters, samples):
    rng = np.random.default_rng(clusters * 1000 + samples)
    drawn = rng.integers(0, clusters, size=(samples, clusters))
    drawn[:, 0] = 0  # with few draws some clusters are never drawn: their list is empty
    found = stats._draws_by_cluster(drawn)
    assert len(found) == clusters
    for k in range(clusters):
        assert np.array_equal(found[k], np.nonzero(drawn == k)[0])


def _resampled_means_by_definition(clusters: list[np.ndarray], samples: int, seed: int) -> np.ndarray:
    """Clusters drawn with replacement, each draw's values resampled, a pass over the draws per cluster."""
    rng = np.random.default_rng(seed)
    sizes = np.asarray([c.size for c in clusters])
    drawn = rng.integers(0, len(clusters), size=(samples, len(clusters)))
    totals = np.zeros(samples)
    for k, values in enumerate(clusters):
        resample = np.nonzero(drawn == k)[0]
        totals += np.bincount(resample, weights=stats._sums(values, resample.size, rng), minlength=samples)
    return totals / sizes[drawn].sum(axis=1)


@pytest.mark.parametrize("seed", range(6))
def test_resampled_means_equal_the_definition_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    clusters = [rng.random(size=int(rng.integers(1, 12))) for _ in range(int(rng.integers(2, 90)))]
    samples = int(rng.integers(1, 500))
    assert np.array_equal(stats._resampled_means(clusters, samples, seed), _resampled_means_by_definition(clusters, samples, seed))
