"""Aggregation: the summary table per (scenario, strategy, profile), and paired comparisons.

`summarize` reads the three per-cell tables (as stored by the runner, with its scenario,
strategy, profile and repeat columns) and returns one row per (scenario, strategy, profile):
presence and answered retention with 95% bootstrap intervals, both by probe family and by fact
age; judge verdicts (strict and lenient); integrity violations per wire format (caused by the
strategy, and replayed from the recording separately); silent losses;
estimate error; premature and missed triggers; overflows; cache hit rate; re-billed and written
tokens; dollars; compactions and summarizer effort. Sums are per repeat (averaged over repeats).

Answered retention votes over repeats: one vote per distinct answer sample of a probe at a point
(a cached reply is the same sample again, never a new vote); a tie does not pass.

`compare` puts two summaries side by side with deltas; `mcnemar_probes` / `paired_tests` test
paired pass/fail outcomes of two strategies on the same probes at the final point.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from compaction_bench.metrics.integrity import FORMATS
from compaction_bench.metrics.stats import McNemar, bootstrap_ci, mcnemar

CELL = ["scenario", "strategy", "profile"]
PAIR = ["scenario", "profile"]
#: Fact-age buckets (tokens between the fact's source and the probed context).
AGE_BUCKETS = ((0, 8_000, "lt8k"), (8_000, 32_000, "8k_32k"), (32_000, 128_000, "32k_128k"), (128_000, float("inf"), "ge128k"))
PROBE_POINT = ["probe_id", "point", "step", "request"]


def _keys(frame: pd.DataFrame) -> list[str]:
    return [k for k in CELL if k in frame.columns]


def _repeats(frame: pd.DataFrame) -> int:
    return max(int(frame["repeat"].nunique()), 1) if "repeat" in frame.columns and len(frame) else 1


def _rate(values: pd.Series, name: str) -> dict[str, Any]:
    values = values.dropna().astype(float)
    low, high = bootstrap_ci(values.tolist())
    return {name: float(values.mean()) if len(values) else float("nan"), f"{name}_lo": low, f"{name}_hi": high, f"{name}_n": int(len(values))}


def votes(probes: pd.DataFrame) -> pd.DataFrame:
    """One row per probe per point: the majority of its distinct scored samples (None if unscored)."""
    keys = [k for k in [*_keys(probes), *PROBE_POINT] if k in probes.columns]
    sample = "sample" if "sample" in probes.columns else ("repeat" if "repeat" in probes.columns else None)
    frame = probes.drop_duplicates([*keys, sample]) if sample else probes

    scored = frame["correct"].notna()
    tally = pd.DataFrame(
        {"n": scored.astype(int), "passed": (scored & frame["correct"].fillna(False).astype(bool)).astype(int)}
    )
    counts = tally.groupby([frame[k] for k in keys], dropna=False, sort=False).sum()
    decided = [None if n == 0 else bool(p * 2 > n) for n, p in zip(counts["n"], counts["passed"])]
    voted = counts.assign(correct=pd.Series(decided, index=counts.index, dtype=object))[["correct"]].reset_index()
    first = frame.drop_duplicates(keys)[[*keys, "kind", "present", "fact_age_tokens"]]
    return first.merge(voted, on=keys, how="left")


def _age_bucket(tokens: float) -> str:
    return next(name for low, high, name in AGE_BUCKETS if low <= tokens < high)


def _probe_metrics(probes: pd.DataFrame) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if probes.empty:
        return out
    voted = votes(probes)
    out.update(_rate(voted["present"], "presence"))
    out.update(_rate(voted["correct"], "answered"))
    out["unscored"] = int(voted["correct"].isna().sum())
    for kind, group in voted.groupby("kind"):
        out[f"presence_{kind}"] = float(group["present"].astype(float).mean())
        scored = group["correct"].dropna()
        out[f"answered_{kind}"] = float(scored.astype(float).mean()) if len(scored) else float("nan")
    buckets = voted["fact_age_tokens"].map(_age_bucket)
    for name, group in voted.groupby(buckets):
        out[f"presence_age_{name}"] = float(group["present"].astype(float).mean())
        scored = group["correct"].dropna()
        out[f"answered_age_{name}"] = float(scored.astype(float).mean()) if len(scored) else float("nan")
    for column in ("judge_strict", "judge_lenient"):
        if column in probes.columns:
            judged = probes[column].dropna()
            out[column] = float(judged.astype(float).mean()) if len(judged) else float("nan")
    return out


def _request_metrics(requests: pd.DataFrame) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if requests.empty:
        return out
    repeats = _repeats(requests)
    sent = requests[requests["kind"].isin(["turn", "summary"]) & ~requests["overflow"].astype(bool)]
    for fmt in FORMATS:
        out[f"integrity_{fmt}"] = int(requests[f"integrity_{fmt}"].sum()) / repeats
        if f"integrity_recorded_{fmt}" in requests.columns:
            out[f"integrity_recorded_{fmt}"] = int(requests[f"integrity_recorded_{fmt}"].sum()) / repeats
    estimates = requests["estimate_error"].dropna()
    out["estimate_error"] = float(estimates.mean()) if len(estimates) else float("nan")
    out.update(_rate(requests["estimate_ape"], "estimate_ape"))
    out["missed_triggers"] = int(requests["missed_trigger"].astype(bool).sum()) / repeats
    out["overflows"] = int((requests["overflow"].astype(bool) & (requests["kind"] == "turn")).sum()) / repeats
    cell = [c for c in ("repeat",) if c in sent.columns]
    later = sent.sort_values("request")
    later = later[later.groupby(cell)["request"].transform("min") != later["request"]] if cell else later.iloc[1:]
    out["cache_hit_rate"] = float(later["cached_tokens"].sum() / later["true_tokens"].sum()) if later["true_tokens"].sum() else float("nan")
    out["cached_tokens"] = int(sent["cached_tokens"].sum()) / repeats
    out["rebilled_tokens"] = int(sent["rebilled_tokens"].sum()) / repeats
    out["cache_write_tokens"] = int(sent["cache_write_tokens"].sum()) / repeats
    out["input_tokens"] = int(sent["true_tokens"].sum()) / repeats
    out["output_tokens"] = int(sent["output_tokens"].sum()) / repeats
    out["tokens_per_task"] = out["input_tokens"] + out["output_tokens"]
    out["cost_usd"] = float(requests["cost_usd"].sum()) / repeats
    out["requests"] = int(len(sent)) / repeats
    return out


def _compaction_metrics(compactions: pd.DataFrame, repeats: int) -> dict[str, Any]:
    if compactions.empty:
        return {"compactions": 0, "silent_loss": 0, "premature_triggers": 0, "summarizer_calls": 0, "summarizer_tokens": 0, "summarizer_cost_usd": 0.0}
    return {
        "compactions": len(compactions) / repeats,
        "silent_loss": int(compactions["silent_loss"].sum()) / repeats,
        "premature_triggers": int(compactions["premature"].astype(bool).sum()) / repeats,
        "summarizer_calls": int(compactions["llm_calls"].sum()) / repeats,
        "summarizer_tokens": int((compactions["llm_input_tokens"] + compactions["llm_output_tokens"]).sum()) / repeats,
        "summarizer_cost_usd": float(compactions["llm_cost_usd"].sum()) / repeats,
    }


def _groups(frame: pd.DataFrame, keys: list[str]) -> dict[tuple, pd.DataFrame]:
    if frame.empty or not keys:
        return {(): frame} if not keys else {}
    return {k if isinstance(k, tuple) else (k,): g for k, g in frame.groupby(keys, dropna=False, sort=True)}


def summarize(requests: pd.DataFrame, compactions: pd.DataFrame, probes: pd.DataFrame) -> pd.DataFrame:
    """One row per (scenario, strategy, profile) with every aggregate metric."""
    keys = _keys(requests)
    by_requests, by_compactions, by_probes = _groups(requests, keys), _groups(compactions, keys), _groups(probes, keys)
    rows = []
    for key in sorted(set(by_requests) | set(by_probes), key=str):
        group = by_requests.get(key, pd.DataFrame())
        row: dict[str, Any] = dict(zip(keys, key))
        row.update(_probe_metrics(by_probes.get(key, pd.DataFrame())))
        row.update(_request_metrics(group))
        row.update(_compaction_metrics(by_compactions.get(key, pd.DataFrame()), _repeats(group)))
        rows.append(row)
    return pd.DataFrame(rows)


def compare(summary_a: pd.DataFrame, summary_b: pd.DataFrame) -> pd.DataFrame:
    """Two summaries side by side per (scenario, profile): `<metric>_a`, `<metric>_b`, `<metric>_delta` (b − a)."""
    keys = [k for k in PAIR if k in summary_a.columns and k in summary_b.columns]
    merged = summary_a.merge(summary_b, on=keys, suffixes=("_a", "_b"))
    numeric = [c for c in summary_a.columns if c not in CELL and pd.api.types.is_numeric_dtype(summary_a[c]) and c in summary_b.columns]
    for column in numeric:
        merged[f"{column}_delta"] = merged[f"{column}_b"] - merged[f"{column}_a"]
    return merged


def mcnemar_probes(probes: pd.DataFrame, strategy_a: str, strategy_b: str, *, column: str = "correct") -> McNemar:
    """Paired test of two strategies' final-point outcomes (`correct` or `present`) on the same probes."""
    voted = votes(probes) if column == "correct" else probes.drop_duplicates([*_keys(probes), *PROBE_POINT])
    final = voted[(voted["point"] == "final") & voted[column].notna()]
    pair = [k for k in [*PAIR, "probe_id"] if k in final.columns]
    a = final[final["strategy"] == strategy_a].set_index(pair)[column]
    b = final[final["strategy"] == strategy_b].set_index(pair)[column]
    both = a.to_frame("a").join(b.to_frame("b"), how="inner")
    return mcnemar(both["a"].astype(bool).tolist(), both["b"].astype(bool).tolist())


def paired_tests(probes: pd.DataFrame, baseline: str, strategies: Sequence[str] | None = None, *, column: str = "correct") -> pd.DataFrame:
    """McNemar of every strategy against `baseline` (one row per strategy)."""
    others = [s for s in (strategies or sorted(probes["strategy"].unique())) if s != baseline]
    return pd.DataFrame(
        [{"baseline": baseline, "strategy": s, "metric": column, **mcnemar_probes(probes, baseline, s, column=column).to_dict()} for s in others]
    )
