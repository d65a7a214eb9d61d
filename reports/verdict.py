"""The verdict of a run: per profile, strategies ranked by retention with 95% intervals, P(best), and one sentence.

Retention here is the share of probe answers still present in the context at the *paired* probe
points: points every strategy of the profile has for the same probe (the `checkpoint` and `final`
points when the probes table has `point_kind`; otherwise the `final` point, which every strategy
shares). Intervals and P(best) come from one bootstrap that resamples probes (a probe with all its
points is one cluster, so repeated points of one fact are not counted as independent evidence),
the same resamples for every strategy, so differences are paired.

Strategies that cannot serve the window (a scenario whose last turn request still overflowed:
overflows never recovered from; the summary's `cannot_serve` when present) are flagged and ranked
after the others. `finding()` turns the numbers into one sentence and never claims a difference
whose interval includes 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

#: Bootstrap resamples (and seed) of the verdict.
SAMPLES = 2000
SEED = 20261201
INTEGRITY = ("integrity_openai_chat", "integrity_openai_responses", "integrity_anthropic")


@dataclass(frozen=True)
class Difference:
    """Retention of `a` minus retention of `b` (a share, not points) with its 95% interval over `n` paired points."""

    a: str
    b: str
    mean: float
    lo: float
    hi: float
    n: int

    @property
    def detectable(self) -> bool:
        return bool(self.lo > 0 or self.hi < 0)


@dataclass
class StrategyRow:
    strategy: str
    retention: float
    lo: float
    hi: float
    p_best: float
    points: int
    scenarios: int
    cost_usd: float
    cache_hit_rate: float
    rebilled_tokens: float
    failed_requests: float
    overflows: float
    compactions: float
    pair_errors: tuple[float, ...]
    cannot_serve: int

    @property
    def flagged(self) -> bool:
        return self.cannot_serve > 0


@dataclass
class ProfileVerdict:
    profile: str
    rows: list[StrategyRow]
    basis: str
    sentence: str
    difference: Difference | None = None
    notes: list[str] = field(default_factory=list)


def paired_points(probes: pd.DataFrame, profile: str) -> tuple[pd.DataFrame, str]:
    """presence (0/1) per paired point (rows) and strategy (columns), and a phrase naming the points used."""
    frame = probes[probes["profile"] == profile] if "profile" in probes.columns else probes
    if "repeat" in frame.columns and len(frame):
        frame = frame[frame["repeat"] == frame["repeat"].min()]
    if "point_kind" in frame.columns:
        frame = frame[frame["point_kind"].isin(["checkpoint", "final"])]
        keys, basis = ["scenario", "probe_id", "point_kind", "step"], "paired checkpoints and the final context"
    else:
        frame = frame[frame["point"] == "final"]
        keys, basis = ["scenario", "probe_id"], "the final context (the point every strategy shares)"
    if frame.empty:
        return pd.DataFrame(), basis
    matrix = frame.pivot_table(index=keys, columns="strategy", values="present", aggfunc="first")
    return matrix.dropna().astype(float), basis


def bootstrap_means(matrix: pd.DataFrame, samples: int = SAMPLES, seed: int = SEED) -> np.ndarray:
    """Means per strategy over `samples` resamples of probes (clusters: scenario + probe id), shape samples × strategies."""
    if matrix.empty:
        return np.empty((0, matrix.shape[1]))
    clusters = matrix.groupby(level=[0, 1], sort=False)
    sums = clusters.sum().to_numpy()
    counts = clusters.size().to_numpy().astype(float)
    rng = np.random.default_rng(seed)
    out = np.empty((samples, matrix.shape[1]))
    chunk = max(1, min(samples, 4_000_000 // max(len(counts), 1)))
    for start in range(0, samples, chunk):
        size = min(chunk, samples - start)
        picks = rng.integers(0, len(counts), size=(size, len(counts)))
        out[start : start + size] = sums[picks].sum(axis=1) / counts[picks].sum(axis=1)[:, None]
    return out


def p_best(means: np.ndarray) -> np.ndarray:
    """Share of resamples in which each strategy has the highest retention (ties split)."""
    if not len(means):
        return np.full(means.shape[1], np.nan)
    top = means.max(axis=1, keepdims=True)
    winners = np.isclose(means, top)
    return (winners / winners.sum(axis=1, keepdims=True)).mean(axis=0)


def difference(matrix: pd.DataFrame, means: np.ndarray, a: str, b: str) -> Difference:
    columns = list(matrix.columns)
    i, j = columns.index(a), columns.index(b)
    diffs = means[:, i] - means[:, j]
    point = float(matrix[a].mean() - matrix[b].mean())
    lo, hi = (float(np.percentile(diffs, 2.5)), float(np.percentile(diffs, 97.5))) if len(diffs) else (float("nan"), float("nan"))
    return Difference(a, b, point, lo, hi, len(matrix))


def _points(share: float) -> str:
    value = 100 * share
    return f"{value:.1f}" if value != 0 and abs(value) < 1 else f"{value:.0f}"


def _interval(lo: float, hi: float) -> str:
    joiner = " to " if lo < 0 or hi < 0 else "–"
    return f"95% CI {_points(lo)}{joiner}{_points(hi)}"


def _cost_clause(first: StrategyRow, second: StrategyRow) -> str:
    a, b = first.rebilled_tokens, second.rebilled_tokens
    if not (np.isfinite(a) and np.isfinite(b)):
        return ""
    if a > 0 and b > 0:
        return f" at {a / b:.1f}× the re-billed tokens"
    if a == 0 and b == 0:
        return ", neither re-billing any tokens"
    return f", re-billing {a:,.0f} tokens against {b:,.0f}"


def finding(profile: str, rows: list[StrategyRow], diff: Difference | None) -> str:
    """One sentence stating the profile's finding from the numbers; no claim without an interval excluding 0."""
    unserved = [r.strategy for r in rows if r.flagged]
    tail = f" {', '.join(unserved)} cannot serve the {profile} window (overflows never recovered)." if unserved else ""
    if diff is None or not np.isfinite(diff.mean):
        if rows and np.isfinite(rows[0].retention):
            return f"At {profile}, only {rows[0].strategy} can be compared: it keeps {_points(rows[0].retention)}% of the facts." + tail
        return f"At {profile}, no probe points to compare." + tail
    by_name = {r.strategy: r for r in rows}
    first, second = by_name[diff.a], by_name[diff.b]
    if not diff.detectable:
        return (
            f"At {profile}, no detectable difference in retention between {diff.a} and {diff.b} "
            f"({'+' if diff.mean > 0 else ''}{_points(diff.mean)} points, {_interval(diff.lo, diff.hi)}, {diff.n} paired points)." + tail
        )
    if diff.mean < 0:
        first, second = second, first
        diff = Difference(diff.b, diff.a, -diff.mean, -diff.hi, -diff.lo, diff.n)
    return (
        f"At {profile}, {first.strategy} keeps {_points(diff.mean)} points more facts than {second.strategy} "
        f"({_interval(diff.lo, diff.hi)}){_cost_clause(first, second)}." + tail
    )


def _unserved(requests: pd.DataFrame, summary: pd.DataFrame) -> pd.Series:
    """Scenarios per (strategy, profile) whose window the strategy cannot serve."""
    if "cannot_serve" in summary.columns:
        flags = summary["cannot_serve"].fillna(0).astype(float) > 0
        return flags.groupby([summary["strategy"], summary["profile"]]).sum()
    if requests.empty:
        return pd.Series(dtype=float)
    turns = requests[requests["kind"] == "turn"].sort_values("request")
    last = turns.groupby(["scenario", "strategy", "profile", "repeat"], sort=False).tail(1)
    return last["overflow"].astype(bool).groupby([last["strategy"], last["profile"]]).sum()


def verdicts(summary: pd.DataFrame, probes: pd.DataFrame, requests: pd.DataFrame) -> list[ProfileVerdict]:
    """One verdict per profile of the run, strategies ranked (servable first, then by retention)."""
    out: list[ProfileVerdict] = []
    if summary.empty:
        return out
    unserved = _unserved(requests, summary)

    def total(frame: pd.DataFrame, column: str, how: str = "sum") -> float:
        if column not in frame.columns:
            return float("nan")
        values = frame[column].astype(float)
        return float(values.sum() if how == "sum" else values.mean())

    for profile in dict.fromkeys(summary["profile"]):
        matrix, basis = paired_points(probes, profile) if not probes.empty else (pd.DataFrame(), "no probes")
        means = bootstrap_means(matrix)
        best = p_best(means) if len(matrix) else np.array([])
        rows = []
        for strategy, frame in summary[summary["profile"] == profile].groupby("strategy", sort=False):
            strategy = str(strategy)
            if strategy in matrix.columns and len(matrix):
                k = list(matrix.columns).index(strategy)
                retention = float(matrix[strategy].mean())
                lo, hi = float(np.percentile(means[:, k], 2.5)), float(np.percentile(means[:, k], 97.5))
                chance = float(best[k])
            else:
                retention = lo = hi = chance = float("nan")
            rows.append(
                StrategyRow(
                    strategy=strategy, retention=retention, lo=lo, hi=hi, p_best=chance, points=len(matrix),
                    scenarios=int(frame["scenario"].nunique()), cost_usd=total(frame, "cost_usd"),
                    cache_hit_rate=total(frame, "cache_hit_rate", "mean"), rebilled_tokens=total(frame, "rebilled_tokens"),
                    failed_requests=total(frame, "failed_requests"), overflows=total(frame, "overflows"),
                    compactions=total(frame, "compactions"), pair_errors=tuple(total(frame, c) for c in INTEGRITY),
                    cannot_serve=int(unserved.get((strategy, profile), 0)),
                )
            )
        rows.sort(key=lambda r: (r.flagged, -(r.retention if np.isfinite(r.retention) else -1.0), r.strategy))
        servable = [r for r in rows if not r.flagged and np.isfinite(r.retention)] or [r for r in rows if np.isfinite(r.retention)]
        diff = difference(matrix, means, servable[0].strategy, servable[1].strategy) if len(servable) >= 2 else None
        out.append(ProfileVerdict(profile, rows, basis, finding(profile, rows, diff), diff))
    return out
