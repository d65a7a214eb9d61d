"""Statistics: 95% bootstrap intervals for aggregates and McNemar's test for paired pass/fail.

The bootstrap is the percentile method with a fixed seed, so a report is reproducible. McNemar's
test uses the exact binomial distribution of the discordant pairs (two-sided), which stays valid
for the small counts a probe suite produces.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

BOOTSTRAP_SAMPLES = 2000
CONFIDENCE = 0.95
SEED = 20251216


def bootstrap_ci(
    values: Sequence[float | None],
    *,
    samples: int = BOOTSTRAP_SAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = SEED,
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean; (nan, nan) for no values."""
    data = np.asarray([v for v in values if v is not None and not np.isnan(v)], dtype=float)
    if data.size == 0:
        return (float("nan"), float("nan"))
    if np.all(data == data[0]):
        return (float(data[0]), float(data[0]))
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, data.size, size=(samples, data.size))].mean(axis=1)
    alpha = (1 - confidence) / 2
    return (float(np.quantile(means, alpha)), float(np.quantile(means, 1 - alpha)))


@dataclass(frozen=True)
class McNemar:
    n: int  # pairs compared
    a_only: int  # pairs where only A passed
    b_only: int  # pairs where only B passed
    p_value: float

    def to_dict(self) -> dict[str, float | int]:
        return {"pairs": self.n, "a_only": self.a_only, "b_only": self.b_only, "p_value": self.p_value}


def mcnemar(a: Sequence[bool], b: Sequence[bool]) -> McNemar:
    """Exact two-sided McNemar test of paired outcomes `a[i]` vs `b[i]`."""
    if len(a) != len(b):
        raise ValueError(f"paired outcomes differ in length: {len(a)} vs {len(b)}")
    a_only = sum(1 for x, y in zip(a, b) if x and not y)
    b_only = sum(1 for x, y in zip(a, b) if y and not x)
    discordant = a_only + b_only
    if discordant == 0:
        return McNemar(len(a), a_only, b_only, 1.0)
    from scipy.stats import binomtest

    p = binomtest(min(a_only, b_only), discordant, 0.5, alternative="two-sided").pvalue
    return McNemar(len(a), a_only, b_only, float(min(p, 1.0)))
