"""Comparing two runs, and gating a change on the comparison (`bench compare`, `bench gate`).

Both runs are matched per (strategy, profile) over the scenarios they share. A gate rule
`METRIC:TOLERANCE` fails when the candidate is worse than the baseline by more than the tolerance
in the metric's bad direction (`presence:0.02`: presence fell by more than 0.02; `integrity:0`:
any new pairing error). For the probe metrics (`presence`, `answered`) the drop must also be
significant: an exact McNemar test on the paired final-point outcomes of the same probes, p < alpha.
The result is a markdown table, ready for a pull-request comment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from compaction_bench.errors import BenchError
from compaction_bench.metrics.aggregate import mcnemar_probes
from compaction_bench.store import load_run

#: metric -> (summary columns summed into it, True when higher is better, how scenarios combine)
METRICS: dict[str, tuple[tuple[str, ...], bool, str]] = {
    "presence": (("presence",), True, "mean"),
    "answered": (("answered",), True, "mean"),
    "integrity": (("integrity_openai_chat", "integrity_openai_responses", "integrity_anthropic"), False, "sum"),
    "overflows": (("overflows",), False, "sum"),
    "silent_loss": (("silent_loss",), False, "sum"),
    "estimate_ape": (("estimate_ape",), False, "mean"),
    "cache_hit_rate": (("cache_hit_rate",), True, "mean"),
    "rebilled_tokens": (("rebilled_tokens",), False, "sum"),
    "cost": (("cost_usd",), False, "sum"),
}
PROBE_METRICS = {"presence": "present", "answered": "correct"}


class GateError(BenchError, ValueError):
    """A gate rule that cannot be read, or runs that share nothing to compare."""


@dataclass(frozen=True)
class Rule:
    metric: str
    tolerance: float

    @classmethod
    def parse(cls, text: str) -> Rule:
        metric, colon, value = text.partition(":")
        if metric not in METRICS:
            raise GateError(f"--fail-on {text!r}: unknown metric {metric!r}; metrics: {', '.join(METRICS)}")
        try:
            tolerance = abs(float(value)) if colon else 0.0
        except ValueError:
            raise GateError(f"--fail-on {text!r}: expected METRIC:TOLERANCE, e.g. presence:0.02") from None
        return cls(metric, tolerance)


def _metric_values(summary: pd.DataFrame, scenarios: set[str]) -> pd.DataFrame:
    frame = summary[summary["scenario"].isin(scenarios)]
    out = {}
    for name, (columns, _, how) in METRICS.items():
        present = [c for c in columns if c in frame.columns]
        if not present:
            continue
        values = frame[present].sum(axis=1, min_count=1)
        grouped = values.groupby([frame["strategy"], frame["profile"]])
        out[name] = grouped.sum() if how == "sum" else grouped.mean()
    return pd.DataFrame(out)


def compare_runs(baseline: str | Path, candidate: str | Path) -> pd.DataFrame:
    """Per (strategy, profile): every metric for both runs and the change (candidate − baseline)."""
    a, b = load_run(baseline)["summary"], load_run(candidate)["summary"]
    shared = set(a["scenario"]) & set(b["scenario"])
    if not shared:
        raise GateError(f"{baseline} and {candidate} share no scenario")
    left, right = _metric_values(a, shared), _metric_values(b, shared)
    both = left.add_suffix("_baseline").join(right.add_suffix("_candidate"), how="inner")
    if both.empty:
        raise GateError(f"{baseline} and {candidate} share no (strategy, profile)")
    for name in left.columns.intersection(right.columns):
        both[f"{name}_change"] = both[f"{name}_candidate"] - both[f"{name}_baseline"]
    return both


def _probe_p_value(baseline: str | Path, candidate: str | Path, strategy: str, profile: str, column: str) -> float | None:
    probes = []
    for label, root in (("baseline", baseline), ("candidate", candidate)):
        frame = load_run(root)["probes"]
        frame = frame[(frame["strategy"] == strategy) & (frame["profile"] == profile)].copy()
        frame["strategy"] = label
        probes.append(frame)
    joined = pd.concat(probes, ignore_index=True)
    if joined.empty or column not in joined:
        return None
    test = mcnemar_probes(joined, "baseline", "candidate", column=column)
    return test.p_value if test.n else None


@dataclass
class GateResult:
    table: pd.DataFrame
    failures: list[str]

    @property
    def passed(self) -> bool:
        return not self.failures

    def markdown(self) -> str:
        lines = ["| strategy | profile | metric | baseline | candidate | change | tolerance | p | verdict |", "|---|---|---|---:|---:|---:|---:|---:|---|"]
        for row in self.table.itertuples(index=False):
            p = "–" if row.p_value is None or pd.isna(row.p_value) else f"{row.p_value:.3g}"
            lines.append(
                f"| {row.strategy} | {row.profile} | {row.metric} | {row.baseline:.4g} | {row.candidate:.4g} | "
                f"{row.change:+.4g} | {row.tolerance:g} | {p} | {'**fail**' if row.failed else 'ok'} |"
            )
        verdict = "passed" if self.passed else f"failed ({len(self.failures)} regression{'s' if len(self.failures) > 1 else ''})"
        return "\n".join([f"**compaction-bench gate: {verdict}**", "", *lines])


def gate(baseline: str | Path, candidate: str | Path, rules: Sequence[Rule], *, alpha: float = 0.05) -> GateResult:
    """Apply the rules to every (strategy, profile) the two runs share."""
    if not rules:
        raise GateError("no --fail-on rule given")
    compared = compare_runs(baseline, candidate)
    rows, failures = [], []
    for (strategy, profile), values in compared.iterrows():
        for rule in rules:
            if f"{rule.metric}_change" not in values:
                raise GateError(f"metric {rule.metric!r} is missing from one of the runs")
            higher_is_better = METRICS[rule.metric][1]
            change = values[f"{rule.metric}_change"]
            worse_by = -change if higher_is_better else change
            p_value = None
            failed = bool(pd.notna(worse_by) and worse_by > rule.tolerance)
            if failed and rule.metric in PROBE_METRICS:
                p_value = _probe_p_value(baseline, candidate, strategy, profile, PROBE_METRICS[rule.metric])
                failed = p_value is not None and p_value < alpha
            row = {
                "strategy": strategy, "profile": profile, "metric": rule.metric,
                "baseline": values[f"{rule.metric}_baseline"], "candidate": values[f"{rule.metric}_candidate"],
                "change": change, "tolerance": rule.tolerance, "p_value": p_value, "failed": failed,
            }
            rows.append(row)
            if failed:
                failures.append(f"{strategy} {profile} {rule.metric}: {change:+.4g}")
    return GateResult(pd.DataFrame(rows), failures)
