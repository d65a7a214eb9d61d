"""Aggregation: the summary table per (scenario, strategy, profile), the cross-scenario table per
(strategy, profile), and paired differences between strategies.

Headline retention is measured on paired checkpoints (`compaction_bench.metrics.retention`):
the (probe, checkpoint) pairs that exist for every strategy of the (scenario, profile), each
probe weighted equally (its rows are averaged first, then probes are averaged). Columns:
- `retention` (share present, overflowed contexts counting as absent), `retention_lo/_hi` (95%
  bootstrap over probes, clustered by scenario), `retention_kept` + `retention_summary` (the
  answer verbatim outside any summary / only in summary text; they add up to `retention`),
  `retention_summarized_source` (the summary-dependent metric: on the rows whose source item had
  gone into a summary, the share whose answer the summary text carries; a copy of the fact kept
  elsewhere does not count, so this measures the summary alone), `summarized_source_pairs`, `paired_pairs` and `paired_probes` (how many rows and probes),
  `p_best` (the chance this strategy ranks first in retention among the scenario's strategies);
- `answered` (the answerer's correct share on the same rows; unanswered overflowed contexts count
  as wrong), `answered_lo/_hi`, `answered_ceiling` (the answerer on the uncompacted transcript at
  the same rows) and `answered_rel` = answered / ceiling; `unscored`;
- per probe family and fact age: `retention_<kind>`, `retention_age_<bucket>`, `answered_<kind>`;
- diagnostics at the strategy's own compaction points, reported apart: `retention_compaction_points`
  and `compaction_point_rows`;
- requests: `failed_requests` (requests that overflowed and so reached no model), `cannot_serve`
  (some step never got a request through, after the strategy's retries, or the final context
  does not fit), integrity per wire format, estimate error, missed triggers, overflows, cache hit
  rate, cached / re-billed / written tokens, dollars;
- compactions: count, silent losses, premature triggers, summarizer calls, tokens and dollars.
Sums are per repeat (averaged over repeats). Answered votes over repeats: one vote per distinct
answer sample of a probe at a point (a cached reply is the same sample again); a tie does not pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from compaction_bench.metrics.integrity import FORMATS
from compaction_bench.metrics.stats import bootstrap_ci, cluster_bootstrap_ci, p_best

CELL = ["scenario", "strategy", "profile"]
PAIR = ["scenario", "profile"]
#: Fact-age buckets (tokens between the fact's source and the probed context).
AGE_BUCKETS = ((0, 8_000, "lt8k"), (8_000, 32_000, "8k_32k"), (32_000, 128_000, "32k_128k"), (128_000, float("inf"), "ge128k"))
POINT = ["probe_id", "point_kind", "step", "request"]
#: Points of the headline figures (the same for every strategy); compaction points are diagnostics.
HEADLINE_KINDS = ("checkpoint", "final")
VOTED = ("correct", "ceiling_correct")


def _keys(frame: pd.DataFrame) -> list[str]:
    return [k for k in CELL if k in frame.columns]


def _repeats(frame: pd.DataFrame) -> int:
    return max(int(frame["repeat"].nunique()), 1) if "repeat" in frame.columns and len(frame) else 1


def _rate(values: pd.Series, name: str) -> dict[str, Any]:
    values = values.dropna().astype(float)
    low, high = bootstrap_ci(values.tolist())
    return {name: float(values.mean()) if len(values) else float("nan"), f"{name}_lo": low, f"{name}_hi": high, f"{name}_n": int(len(values))}


def _with_point_kind(probes: pd.DataFrame) -> pd.DataFrame:
    """Runs written before paired checkpoints name the point `point` (compaction | final)."""
    if "point_kind" in probes.columns or "point" not in probes.columns:
        return probes
    return probes.rename(columns={"point": "point_kind"})


def votes(probes: pd.DataFrame) -> pd.DataFrame:
    """One row per probe per point: the majority of its distinct scored samples (None if unscored),
    for `correct` and `ceiling_correct`."""
    probes = _with_point_kind(probes)
    keys = [k for k in [*_keys(probes), *POINT] if k in probes.columns]
    sample = "sample" if "sample" in probes.columns else ("repeat" if "repeat" in probes.columns else None)
    frame = probes.drop_duplicates([*keys, sample]) if sample else probes
    first = frame.drop_duplicates(keys).drop(columns=[c for c in VOTED if c in frame.columns])
    groups = [frame[k] for k in keys]
    for column in VOTED:
        if column not in frame.columns:
            continue
        scored = frame[column].notna()
        tally = pd.DataFrame({"n": scored.astype(int), "passed": (scored & frame[column].fillna(False).astype(bool)).astype(int)})
        counts = tally.groupby(groups, dropna=False, sort=False).sum()
        decided = [None if n == 0 else bool(p * 2 > n) for n, p in zip(counts["n"], counts["passed"], strict=True)]
        voted = counts.assign(**{column: pd.Series(decided, index=counts.index, dtype=object)})[[column]].reset_index()
        first = first.merge(voted, on=keys, how="left")
    return first


def paired(voted: pd.DataFrame, strategies: dict[tuple[Any, ...], set[str]] | None = None) -> pd.DataFrame:
    """The headline rows: (probe, checkpoint) pairs present for every strategy of their (scenario, profile).

    `strategies` names the strategies of each (scenario, profile) (from the requests table), so a
    strategy with no probe rows there leaves no pair; by default the strategies with probe rows."""
    rows = voted[voted["point_kind"].isin(HEADLINE_KINDS)]
    if rows.empty:
        return rows
    pair = [k for k in PAIR if k in rows.columns]
    point = [*pair, "probe_id", "point_kind", "step"]
    have = rows.groupby(point, sort=False)["strategy"].transform("nunique")
    if strategies is not None and pair:
        wanted = pd.Series([len(strategies.get(tuple(k), ())) for k in rows[pair].itertuples(index=False)], index=rows.index)
        needed = np.maximum(rows.groupby(pair, sort=False)["strategy"].transform("nunique"), wanted)
    else:
        needed = rows.groupby(pair, sort=False)["strategy"].transform("nunique") if pair else rows["strategy"].nunique()
    return rows[have == needed]


def per_probe(rows: pd.DataFrame, by: Sequence[str] = ()) -> pd.DataFrame:
    """One row per (scenario, strategy, profile, *by, probe): the mean of its rows (each probe then weighs 1).

    Columns: the keys, then the means of `present`, `kept`, `summary`, `in_summary`, `correct` and
    `ceiling` (NaN rows skipped, NaN for none), then `kind` (its first non-null value). Groups are in
    the order of their first row: what `groupby(keys, sort=False, dropna=False).agg(...)` computes,
    in arrays (pandas' cost per call was most of a summary's time).
    """
    keys = [k for k in [*_keys(rows), *by, "probe_id"] if k in rows.columns]
    found = rows["found"] if "found" in rows.columns else None
    present = rows["present"].to_numpy(dtype=float)
    columns = {
        "present": present,
        "kept": (found == "kept").to_numpy(dtype=float) if found is not None else present,
        "summary": (found == "summary").to_numpy(dtype=float) if found is not None else np.zeros(len(rows)),
        "in_summary": rows["in_summary"].to_numpy(dtype=float) if "in_summary" in rows.columns else np.full(len(rows), np.nan),
        "correct": _numeric(rows, "correct"),
        "ceiling": _numeric(rows, "ceiling_correct"),
    }
    group = np.zeros(len(rows), dtype=np.int64)
    for key in keys:  # one code per distinct key tuple, numbered in order of first appearance
        codes, uniques = pd.factorize(rows[key], use_na_sentinel=False)
        group, _ = pd.factorize(group * len(uniques) + codes)
    groups = int(group.max()) + 1 if len(group) else 0
    first = np.full(groups, len(rows), dtype=np.int64)
    np.minimum.at(first, group, np.arange(len(rows)))
    out = pd.DataFrame({key: rows[key].iloc[first].reset_index(drop=True) for key in keys})
    for name, values in columns.items():
        known = ~np.isnan(values)
        counts = np.bincount(group, weights=known, minlength=groups)
        sums = np.bincount(group, weights=np.where(known, values, 0.0), minlength=groups)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[name] = np.where(counts > 0, sums / np.where(counts > 0, counts, 1), np.nan)
    if "kind" in rows.columns:
        named = rows["kind"].notna().to_numpy()
        first_named = np.full(groups, len(rows), dtype=np.int64)
        np.minimum.at(first_named, group[named], np.flatnonzero(named))
        kinds = rows["kind"].reset_index(drop=True).reindex(first_named)  # a group with no kind gets NaN
        out["kind"] = kinds.reset_index(drop=True)
    return out


def _numeric(rows: pd.DataFrame, column: str) -> np.ndarray:
    """A column of booleans, numbers or None as floats (None → NaN); all NaN if it is absent."""
    if column not in rows.columns:
        return np.full(len(rows), np.nan)
    return pd.to_numeric(rows[column], errors="coerce").to_numpy(dtype=float)


def _mean(values: pd.Series) -> float:
    values = values.dropna()
    return float(values.mean()) if len(values) else float("nan")


def _retention(probes: pd.DataFrame, prefix: str = "retention") -> dict[str, Any]:
    """Headline figures of one set of per-probe values (`per_probe` rows), intervals by scenario."""
    clusters = [g.tolist() for _, g in probes.groupby("scenario", sort=False)["present"]] if "scenario" in probes else [probes["present"].tolist()]
    low, high = cluster_bootstrap_ci(clusters)
    out: dict[str, Any] = {
        prefix: _mean(probes["present"]),
        f"{prefix}_lo": low,
        f"{prefix}_hi": high,
        f"{prefix}_kept": _mean(probes["kept"]),
        f"{prefix}_summary": _mean(probes["summary"]),
    }
    return out


def _answered(probes: pd.DataFrame) -> dict[str, Any]:
    scored = probes.dropna(subset=["correct"])
    clusters = [g.tolist() for _, g in scored.groupby("scenario", sort=False)["correct"]] if "scenario" in scored else [scored["correct"].tolist()]
    low, high = cluster_bootstrap_ci(clusters)
    answered, ceiling = _mean(probes["correct"]), _mean(probes["ceiling"])
    return {
        "answered": answered,
        "answered_lo": low,
        "answered_hi": high,
        "answered_ceiling": ceiling,
        "answered_rel": answered / ceiling if ceiling and not np.isnan(ceiling) and not np.isnan(answered) else float("nan"),
    }


@dataclass(frozen=True)
class _ProbeValues:
    """The per-probe means (`per_probe`) a cell's probe metrics are made of, computed for every
    cell at once: of the headline rows, of those whose source was summarized, of the headline rows
    per fact-age bucket (column `age`), and of the compaction-point rows."""

    headline: pd.DataFrame
    summarized: pd.DataFrame
    aged: pd.DataFrame
    points: pd.DataFrame

    @classmethod
    def of(cls, headline: pd.DataFrame, compaction_rows: pd.DataFrame) -> _ProbeValues:
        summarized = headline[headline["source_summarized"].astype(bool)] if "source_summarized" in headline.columns else headline.iloc[:0]
        aged = headline.assign(age=headline["fact_age_tokens"].map(_age_bucket) if len(headline) else [])
        return cls(per_probe(headline), per_probe(summarized), per_probe(aged, by=["age"]), per_probe(compaction_rows))


def _probe_metrics(headline: pd.DataFrame, compaction_rows: pd.DataFrame, values: _ProbeValues) -> dict[str, Any]:
    """A cell's probe metrics from its headline and compaction-point rows and their per-probe `values`."""
    out: dict[str, Any] = {"paired_pairs": int(len(headline))}
    if headline.empty:
        out["paired_probes"] = 0
    else:
        out["paired_probes"] = int(len(values.headline))
        out.update(_retention(values.headline))
        out.update(_answered(values.headline))
        out["unscored"] = int(headline["correct"].isna().sum()) if "correct" in headline.columns else len(headline)
        out["retention_summarized_source"] = _mean(values.summarized["in_summary"]) if len(values.summarized) else float("nan")
        out["summarized_source_pairs"] = int(headline["source_summarized"].astype(bool).sum()) if "source_summarized" in headline.columns else 0
        for kind, group in values.headline.groupby("kind"):
            out[f"retention_{kind}"] = _mean(group["present"])
            out[f"answered_{kind}"] = _mean(group["correct"])
        for name, group in values.aged.groupby("age"):
            out[f"retention_age_{name}"] = _mean(group["present"])
        for column in ("judge_strict", "judge_lenient"):
            if column in headline.columns:
                out[column] = _mean(headline[column].astype(float))
    out["compaction_point_rows"] = int(len(compaction_rows))
    out["retention_compaction_points"] = _mean(values.points["present"]) if len(compaction_rows) else float("nan")
    return out


def _age_bucket(tokens: float) -> str:
    return next(name for low, high, name in AGE_BUCKETS if low <= tokens < high)


def cannot_serve(requests: pd.DataFrame) -> bool:
    """Some step never got a request through (the last attempt overflowed: the strategy gave up or
    could not recover), or the final context does not fit the window."""
    if requests.empty:
        return False
    turns = requests[requests["kind"] == "turn"]
    keys = [k for k in ("repeat", "step") if k in turns.columns]
    if len(turns):
        last = turns.sort_values("request").groupby(keys, sort=False).tail(1)
        if last["overflow"].astype(bool).any():
            return True
    return bool(requests.loc[requests["kind"] == "final", "overflow"].astype(bool).any())


def _request_metrics(requests: pd.DataFrame) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if requests.empty:
        return out
    repeats = _repeats(requests)
    overflowed = requests["overflow"].astype(bool)
    sent = requests[requests["kind"].isin(["turn", "summary"]) & ~overflowed]
    for fmt in FORMATS:
        out[f"integrity_{fmt}"] = int(requests[f"integrity_{fmt}"].sum()) / repeats
        if f"integrity_recorded_{fmt}" in requests.columns:
            out[f"integrity_recorded_{fmt}"] = int(requests[f"integrity_recorded_{fmt}"].sum()) / repeats
    estimates = requests["estimate_error"].dropna()
    out["estimate_error"] = float(estimates.mean()) if len(estimates) else float("nan")
    out.update(_rate(requests["estimate_ape"], "estimate_ape"))
    out["missed_triggers"] = int(requests["missed_trigger"].astype(bool).sum()) / repeats
    out["overflows"] = int((overflowed & (requests["kind"] == "turn")).sum()) / repeats
    out["failed_requests"] = int((overflowed & requests["kind"].isin(["turn", "summary"])).sum()) / repeats
    out["cannot_serve"] = cannot_serve(requests)
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


def _strategies(requests: pd.DataFrame) -> dict[tuple[Any, ...], set[str]]:
    if requests.empty or not set(PAIR) <= set(requests.columns):
        return {}
    return {tuple(k): set(g) for k, g in requests.groupby(PAIR, sort=False)["strategy"]}


def headline_rows(probes: pd.DataFrame, requests: pd.DataFrame | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(paired headline rows, compaction-point rows) of a probes table, votes applied."""
    if probes.empty:
        return probes, probes
    voted = votes(probes)
    strategies = _strategies(requests) if requests is not None else None
    return paired(voted, strategies), voted[voted["point_kind"] == "compaction"]


def _p_best(values: pd.DataFrame, group: list[str]) -> dict[tuple[Any, ...], float]:
    """Per (group…, strategy): the chance it ranks first in retention within its group, from the
    headline rows' per-probe `values` (`per_probe`)."""
    out: dict[tuple[Any, ...], float] = {}
    if values.empty:
        return out
    values = values.copy()  # the caller's frame stays as it is
    values["unit"] = list(zip(values["scenario"], values["probe_id"], strict=True))
    for key, frame in (values.groupby(group, sort=False) if group else [((), values)]):
        key = key if isinstance(key, tuple) else (key,)
        table = frame.pivot_table(index="strategy", columns="unit", values="present", aggfunc="mean").dropna(axis=1)
        scenarios = [unit[0] for unit in table.columns]
        for strategy, chance in zip(table.index, p_best(table.to_numpy(), scenarios), strict=True):
            out[(*key, strategy)] = float(chance)
    return out


def summarize(requests: pd.DataFrame, compactions: pd.DataFrame, probes: pd.DataFrame) -> pd.DataFrame:
    """One row per (scenario, strategy, profile) with every aggregate metric."""
    keys = _keys(requests)
    headline, compaction_rows = headline_rows(probes, requests)
    by_requests, by_compactions = _groups(requests, keys), _groups(compactions, keys)
    by_headline, by_points = _groups(headline, keys), _groups(compaction_rows, keys)
    best: dict[tuple[Any, ...], float] = {}
    if not probes.empty:
        every = _ProbeValues.of(headline, compaction_rows)
        split = {name: _groups(getattr(every, name), keys) for name in ("headline", "summarized", "aged", "points")}
        best = _p_best(every.headline, PAIR)
    rows = []
    for key in sorted(set(by_requests) | set(_groups(probes, keys)), key=str):
        group = by_requests.get(key, pd.DataFrame())
        row: dict[str, Any] = dict(zip(keys, key, strict=True))
        if not probes.empty:
            values = _ProbeValues(**{name: cells.get(key, getattr(every, name).iloc[:0]) for name, cells in split.items()})
            row.update(_probe_metrics(by_headline.get(key, headline.iloc[:0]), by_points.get(key, compaction_rows.iloc[:0]), values))
            row["p_best"] = best.get((row.get("scenario"), row.get("profile"), row.get("strategy")), float("nan"))
        row.update(_request_metrics(group))
        row.update(_compaction_metrics(by_compactions.get(key, pd.DataFrame()), _repeats(group)))
        rows.append(row)
    return pd.DataFrame(rows)


def overall(probes: pd.DataFrame, requests: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per (strategy, profile) over all scenarios: retention (kept, summary), its interval
    (probes clustered by scenario), the summary-dependent retention, answered and its ceiling,
    `paired_pairs`, `paired_probes` and `p_best` among the profile's strategies."""
    headline, _ = headline_rows(probes, requests)
    if headline.empty:
        return pd.DataFrame(columns=["strategy", "profile"])
    values = per_probe(headline)
    best = _p_best(values, ["profile"])
    rows = []
    for (strategy, profile), frame in values.groupby(["strategy", "profile"], sort=False):
        rows_of = headline[(headline["strategy"] == strategy) & (headline["profile"] == profile)]
        summarized = rows_of[rows_of["source_summarized"].astype(bool)] if "source_summarized" in rows_of.columns else rows_of.iloc[:0]
        row: dict[str, Any] = {"strategy": strategy, "profile": profile, "paired_pairs": len(rows_of), "paired_probes": len(frame)}
        row.update(_retention(frame))
        row.update(_answered(frame))
        row["retention_summarized_source"] = _mean(per_probe(summarized)["in_summary"]) if len(summarized) else float("nan")
        row["summarized_source_pairs"] = len(summarized)
        row["p_best"] = best.get((profile, strategy), float("nan"))
        rows.append(row)
    return pd.DataFrame(rows)


def paired_differences(probes: pd.DataFrame, a: str, b: str, *, column: str = "present") -> tuple[float, float, float, int]:
    """Retention of strategy `b` minus strategy `a` on the pairs both have (mean over probes of the
    per-probe difference, its 95% interval clustered by scenario, and the number of pairs)."""
    diffs = probe_differences(probes, a, b, column=column)
    if diffs.empty:
        return (float("nan"), float("nan"), float("nan"), 0)
    clusters = [g.tolist() for _, g in diffs.groupby("scenario", sort=False)["difference"]]
    low, high = cluster_bootstrap_ci(clusters)
    return (float(diffs["difference"].mean()), low, high, int(diffs["pairs"].sum()))


def probe_differences(probes: pd.DataFrame, a: str, b: str, *, column: str = "present", rows: Iterable[str] = HEADLINE_KINDS) -> pd.DataFrame:
    """Per (scenario, profile, probe): the mean over its shared points of b − a (`difference`), and
    the number of points (`pairs`). `column` is `present` or `correct` (unscored rows left out)."""
    voted = votes(probes[probes["strategy"].isin([a, b])])
    voted = voted[voted["point_kind"].isin(tuple(rows))].dropna(subset=[column])
    point = [k for k in [*PAIR, "probe_id", "point_kind", "step"] if k in voted.columns]
    left = voted[voted["strategy"] == a].set_index(point)[column].astype(float)
    right = voted[voted["strategy"] == b].set_index(point)[column].astype(float)
    both = left.to_frame("a").join(right.to_frame("b"), how="inner").reset_index()
    if both.empty:
        return pd.DataFrame(columns=[*PAIR, "probe_id", "difference", "pairs"])
    both["difference"] = both["b"] - both["a"]
    unit = [k for k in [*PAIR, "probe_id"] if k in both.columns]
    return both.groupby(unit, sort=False).agg(difference=("difference", "mean"), pairs=("difference", "size")).reset_index()
