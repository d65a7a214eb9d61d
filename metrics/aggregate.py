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
  `p_best` (the chance this strategy ranks first in retention among the scenario's strategies that
  serve it, as the verdict ranks them: a cell that cannot serve the window or whose requests break tool
  pairs in every wire format (`_flagged`) is no choice and gets NaN, unless every cell of the scenario is
  flagged; NaN, withheld, where the two highest retentions it ranks differ by no difference the tests
  may claim: `stats.difference_claimed` over the scenario's summary draws, its repeats, so NaN with one
  repeat or a deterministic summarizer; the module docstring of `stats` says why);
- `answered` (the answerer's correct share on the same rows; unanswered overflowed contexts count
  as wrong, unless none of the cell's questions to the answerer got a grade: then it has none, `silenced`; where
  some answers failed, each graded point weighs for the failed points of its kind, `answer_weights`), `answered_lo/_hi`, `answered_ceiling` (the answerer on the uncompacted transcript at
  the same rows) and `answered_rel` = answered / ceiling, both on the rows that have an answer grade
  and a ceiling grade (a point without a ceiling, past the answerer's window for the whole
  transcript, stays in `answered` but not in the ratio); `unscored`; `judge_strict` and
  `judge_lenient` (the judge's verdicts on `judge` probes, aggregated as `answered` is: each probe
  weighs one, on the paired points, voted over repeats; an overflowed context is rejected by both);
- per probe family and fact age: `retention_<kind>`, `retention_age_<bucket>`, `answered_<kind>`;
- diagnostics at the strategy's own compaction points, reported apart: `retention_compaction_points`
  and `compaction_point_rows`;
- requests: `failed_requests` (requests that reached no model: the provider refused them as too long, or the
  agent itself did, `refused_requests`), `overflows` (turn requests the provider refused), `cannot_serve`
  (some step never got a request through, after the strategy's retries, or the final context
  does not fit or would not be sent), integrity per wire format, estimate error at decision time (`estimate_ape`
  and its count `estimate_ape_n`, the requests with an error: those the strategy's rule checked, `metrics.accuracy`;
  no interval: one cell's requests are not independent), missed triggers, cache hit
  rate, cached / re-billed / written tokens, dollars (NaN, not $0, for a model without a price: `cost.UNPRICED`);
- compactions: count, silent losses, premature triggers, summarizer calls, tokens and dollars.
The request and compaction metrics of each repeat alone, one summary draw (`draw_metrics`), are what the gate
tests them on when a model writes the summaries.
The cross-scenario table (`overall`) pools only the scenarios in which every strategy of the
profile finished its cell, every repeat of it (`shared_scenarios`): a failed cell, or a failed
repeat, takes its scenario out of every strategy's pooled figures. Sums are per repeat (averaged over repeats). Answered votes over repeats: one vote per distinct
answer sample of a probe at a point (a cached reply is the same sample again); a tie does not pass.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from compaction_bench.metrics.cost import DOLLAR_COLUMNS
from compaction_bench.metrics.integrity import FORMATS
from compaction_bench.metrics.stats import (
    DIFFERENCE,
    cluster_bootstrap_ci,
    detectable,
    difference_claimed,
    p_best,
    signflip_p,
    unit_sums,
)

CELL = ["scenario", "strategy", "profile"]
PAIR = ["scenario", "profile"]
#: Fact-age buckets (tokens between the fact's source and the probed context).
AGE_BUCKETS = ((0, 8_000, "lt8k"), (8_000, 32_000, "8k_32k"), (32_000, 128_000, "32k_128k"), (128_000, float("inf"), "ge128k"))
POINT = ["probe_id", "point_kind", "step", "request"]
#: Points of the headline figures (the same for every strategy); compaction points are diagnostics.
HEADLINE_KINDS = ("checkpoint", "final")
#: The judge's verdicts on a `judge` probe (None on other probes, and without a judge): strict (what `correct` is) and lenient.
JUDGED = ("judge_strict", "judge_lenient")
#: Grades a point some strategy lacks is unscored at for every strategy (`paired`), each on its own.
PAIRED_GRADES = ("correct", *JUDGED)
VOTED = ("correct", "ceiling_correct", *JUDGED)
#: Each grade an answer can get, with the columns taken back with it where none was given (`silenced`).
ANSWER_GRADES = {"correct": ("correct", "score", "ceiling_correct"), "judge_strict": ("judge_strict",), "judge_lenient": ("judge_lenient",)}


def _keys(frame: pd.DataFrame) -> list[str]:
    return [k for k in CELL if k in frame.columns]


def _with_point_kind(probes: pd.DataFrame) -> pd.DataFrame:
    """Runs written before paired checkpoints name the point `point` (compaction | final)."""
    if "point_kind" in probes.columns or "point" not in probes.columns:
        return probes
    return probes.rename(columns={"point": "point_kind"})


def _asked_rows(probes: pd.DataFrame) -> pd.Series:
    """Which rows hold a question put to the answerer: a reply (`answer`) or its failure (`answer_error`, a refused call
    or a context beyond the answerer's window). The others were graded without a question (a context that reached no
    model) or not at all. `probes` has both columns."""
    return probes["answer"].notna() | probes["answer_error"].notna()


def _failed_answers(rows: pd.DataFrame, grade: str) -> np.ndarray:
    """Which rows hold a question whose answer failed: an `answer_error` and no `grade`; all False for a table without
    those columns."""
    if "answer_error" not in rows.columns or grade not in rows.columns:
        return np.zeros(len(rows), dtype=bool)
    return (rows["answer_error"].notna() & rows[grade].isna()).to_numpy()


def _first_rows(group: np.ndarray, groups: int) -> np.ndarray:
    """The position of each group's first row, for `group` numbering the rows' groups 0…`groups` − 1."""
    first = np.full(groups, len(group), dtype=np.int64)
    np.minimum.at(first, group, np.arange(len(group)))
    return first


def silent_answerers(probes: pd.DataFrame, grade: str = "correct") -> np.ndarray:
    """Which rows of `probes` belong to a group of questions put to the answerer (a row with `answer` or
    `answer_error`) none of which came back with a `grade`: every call failed (a refused call, a context beyond the
    answerer's own window, a judge that failed), or no reply was graded (a judge that never wrote a verdict). A group
    is a cell's repeat, its `judge` probes apart from the others (the judge grades those). All False for a table
    without the answer columns."""
    if probes.empty or grade not in probes.columns or "answer_error" not in probes.columns or "answer" not in probes.columns:
        return np.zeros(len(probes), dtype=bool)
    asked = _asked_rows(probes)
    graded = asked & probes[grade].notna()
    if (graded == asked).all():  # every question graded (or none asked)
        return np.zeros(len(probes), dtype=bool)
    by = [probes[k] for k in (*CELL, "repeat") if k in probes.columns]
    if "match" in probes.columns:
        by.append(probes["match"] == "judge")
    return (asked.groupby(by, dropna=False, sort=False).transform("any") & ~graded.groupby(by, dropna=False, sort=False).transform("any")).to_numpy()


def silenced(probes: pd.DataFrame) -> pd.DataFrame:
    """`probes` with each grade taken back (None, with the columns `ANSWER_GRADES` names) from the groups that were
    asked and given none of it (`silent_answerers`). Their only grades would be the rows no model was asked about,
    the contexts that reached no model and count as wrong ("failure is a result"), and `answered` (or a judge's
    rubric) would read 0 with an interval for an answerer that never answered, and rank its strategy (or, in the
    gate, its run) last by it. Ungraded, their points are unscored for every strategy of the (scenario, profile)
    (`paired`), and a run whose every question failed reports the metric missing (`missing_metrics`). A group that
    got some grades keeps them; the points it failed at are unscored, as `paired` says."""
    if probes.empty or "answer_error" not in probes.columns or "answer" not in probes.columns:
        return probes
    unasked = ~_asked_rows(probes).to_numpy()
    taken: dict[str, pd.Series] = {}
    for grade, columns in ANSWER_GRADES.items():
        if grade not in probes.columns:
            continue
        given = probes[grade].notna().to_numpy()
        if not (given & unasked).any():  # only a grade given without a question can be taken back
            continue
        silent = silent_answerers(probes, grade)
        if (silent & given).any():
            taken.update({column: probes[column].astype(object).where(~silent, None) for column in columns if column in probes.columns})
    return probes.assign(**taken) if taken else probes


def votes(probes: pd.DataFrame) -> pd.DataFrame:
    """One row per probe per point (probe, point kind, step; a repeat that reaches a point twice,
    two compaction points in one step, has two), over the repeats of its cell: each repeat replays
    the cell anew, so with a real summarizer its context can differ. `present` and `in_summary` are
    then the mean over the repeats and `found` is replaced by the shares `kept_share` and `summary_share`;
    `correct`, `ceiling_correct` and the judge's verdicts (`JUDGED`) are each the majority of the
    distinct scored samples (None if unscored; a tie does not pass). Other columns are the first
    repeat's. With one sample per point the rows are the table's own (`present` stays boolean)."""
    probes = _with_point_kind(probes)
    sample = "sample" if "sample" in probes.columns else ("repeat" if "repeat" in probes.columns else None)
    frame = probes.drop_duplicates([k for k in [*_keys(probes), *POINT, sample] if k in probes.columns]) if sample else probes
    frame = frame.reset_index(drop=True)
    at = [k for k in [*_keys(probes), *POINT[:-1]] if k in frame.columns]
    within = [*at, sample] if sample else at
    in_order = frame.sort_values([*within, "request"], kind="stable") if "request" in frame.columns else frame
    # the n-th time a repeat reaches the point, in request order (the rows keep the table's order)
    frame = frame.assign(occurrence=in_order.groupby(within, sort=False, dropna=False).cumcount() if within else 0)
    keys = [*at, "occurrence"]
    first = frame.drop_duplicates(keys).drop(columns=[c for c in VOTED if c in frame.columns])
    groups = [frame[k] for k in keys]
    if sample and len(first) < len(frame):  # some point has several samples: the context measures are shares
        shares = pd.DataFrame({
            "present": frame["present"].astype(float),
            "kept_share": (frame["found"] == "kept").astype(float) if "found" in frame.columns else frame["present"].astype(float),
            "summary_share": (frame["found"] == "summary").astype(float) if "found" in frame.columns else 0.0,
            **({"in_summary": pd.to_numeric(frame["in_summary"], errors="coerce")} if "in_summary" in frame.columns else {}),
        })
        averaged = shares.groupby(groups, dropna=False, sort=False).mean().reset_index()
        first = first.drop(columns=[c for c in ("present", "found", "in_summary") if c in first.columns]).merge(averaged, on=keys, how="left")
    for column in VOTED:
        if column not in frame.columns:
            continue
        scored = frame[column].notna()
        tally = pd.DataFrame({"n": scored.astype(int), "passed": (scored & frame[column].fillna(False).astype(bool)).astype(int)})
        counts = tally.groupby(groups, dropna=False, sort=False).sum()
        decided = [None if n == 0 else bool(p * 2 > n) for n, p in zip(counts["n"], counts["passed"], strict=True)]
        voted = counts.assign(**{column: pd.Series(decided, index=counts.index, dtype=object)})[[column]].reset_index()
        first = first.merge(voted, on=keys, how="left")
    return first.drop(columns="occurrence").reset_index(drop=True)


#: An `answer_error` of a question put to no model, its context being beyond the answerer's own window (`beyond_window`
#: writes it): a restriction known before any call, not a failure that might have gone either way
BEYOND_WINDOW = re.compile(r"a context of [\d,]+ tokens is beyond .+'s window")


def beyond_window(tokens: int, model: str) -> str:
    """The `answer_error` of a question whose context of `tokens` is beyond `model`'s window (`BEYOND_WINDOW`)."""
    return f"a context of {tokens:,} tokens is beyond {model}'s window"


def beyond_window_errors(errors: pd.Series) -> np.ndarray:
    """Which of `errors` (an `answer_error` column) say a context was beyond the answerer's window (`BEYOND_WINDOW`)."""
    return np.asarray([isinstance(error, str) and BEYOND_WINDOW.fullmatch(error) is not None for error in errors], dtype=bool)


#: The columns of `per_probe` whose means weigh each row by its `ANSWER_WEIGHT`: the answer grades
WEIGHED = frozenset({"correct", "ceiling", "correct_at_ceiling", *JUDGED})
#: The column `paired` adds where some answer failed: each row's weight in the means of the answer grades (`answer_weights`)
ANSWER_WEIGHT = "answer_weight"


def answer_weights(rows: pd.DataFrame, point: Sequence[str], within: Sequence[str], grade: str = "correct") -> np.ndarray | None:
    """Per row of `rows` (the rows of the strategies compared at the points each of them holds), its weight in a mean
    of the answer grades: at a graded point its group's points over its graded ones, 0 at a point that failed, NaN at a
    point that counts in no group (below); None where no answer failed (every weight 1).

    A failed answer (`answer_error`, its `grade` None) leaves its point ungraded for every strategy, but a context that
    reached no model is graded wrong without a call and cannot fail: the points where fewer strategies were asked survive
    failures more often, and on their own they rank the strategy that overflowed there as if it overflowed more (half of
    all answers failing ranked a strategy of true `answered` 0.50 at 0.33, below one of 0.45 at 0.40; README,
    Statistics). So the points are grouped by what decided their chance to survive, before any call: the set of
    strategies asked there, whether the probe is a `judge` probe (two calls, not one), and `within` (the scenario and
    profile; the gate adds the repeat); and each surviving point weighs the points of its group over those that
    survived (post-stratification: N/n). With each failure as likely at every point of a group, the weighted means are
    those every answer would have given, and every strategy at a point gets the same weight, so they stay paired.
    A point lost without a failure (a `judge` probe run without a judge, a cell the answerer never answered: `silenced`)
    counts in no group, nor does one where some context was beyond the answerer's own window (`BEYOND_WINDOW`: no
    call, so no chance either way; `answered` covers the points every context fits, and no other point stands for
    them); a group whose every point failed leaves its points out, as before. `point` names a point's columns,
    `within` among them."""
    if rows.empty or not {"answer", "answer_error", grade, "strategy"} <= set(rows.columns):
        return None
    failed = _failed_answers(rows, grade)
    if not failed.any():
        return None
    beyond = beyond_window_errors(rows["answer_error"])
    failed = failed & ~beyond
    if not failed.any():
        return None
    codes = rows.groupby(list(point), sort=False, dropna=False).ngroup().to_numpy()
    points = int(codes.max()) + 1
    lost = np.bincount(codes, weights=rows[grade].isna().to_numpy(), minlength=points) > 0
    restricted = np.bincount(codes, weights=beyond, minlength=points) > 0
    counted = ~lost | ((np.bincount(codes, weights=failed, minlength=points) > 0) & ~restricted)
    asked = _asked_rows(rows).to_numpy()
    strategy, names = pd.factorize(rows["strategy"])
    asked_by = np.zeros((points, len(names)), dtype=bool)  # which strategies were asked at each point
    asked_by[codes[asked], strategy[asked]] = True
    first = _first_rows(codes, points)
    groups = rows.iloc[first][list(within)].reset_index(drop=True).assign(
        asked_by=np.unique(asked_by, axis=0, return_inverse=True)[1].reshape(-1),
        judged=(rows["match"].iloc[first] == "judge").to_numpy() if "match" in rows.columns else False,
    )
    group = groups.groupby(list(groups.columns), sort=False, dropna=False).ngroup().to_numpy()
    everyone = np.bincount(group, weights=counted, minlength=int(group.max()) + 1)
    survived = np.bincount(group, weights=~lost, minlength=int(group.max()) + 1)
    weight = np.where(counted, 0.0, np.nan)  # a point that failed stands for nothing; one in no group is not counted
    weight[~lost] = everyone[group[~lost]] / survived[group[~lost]]
    return weight[codes]


def paired(voted: pd.DataFrame, strategies: dict[tuple[Any, ...], set[str]] | None = None) -> pd.DataFrame:
    """The headline rows: (probe, checkpoint) pairs present for every strategy of their (scenario, profile).

    `strategies` names the strategies of each (scenario, profile) (from the requests table), so a
    strategy with no probe rows there leaves no pair; by default the strategies with probe rows.
    `answered` is paired the same way: a point some strategy has no grade at (its answerer call
    failed) is unscored for every strategy, so each one's `answered` covers the same points; so is
    each of the judge's verdicts (`JUDGED`), on its own (a judge that wrote no lenient verdict for one
    strategy's reply unscores the lenient rubric there for all). The ceiling follows: a row without an
    answer grade loses its `ceiling_correct` too, so the ceiling is never averaged over points the
    answer is not (`answered_rel` divides means of the same rows). Where an answer failed, the rows get
    `ANSWER_WEIGHT`, each graded point's weight for the points of its kind that failed (`answer_weights`), which
    `per_probe` weighs the answer grades by."""
    rows = voted[voted["point_kind"].isin(HEADLINE_KINDS)]
    if rows.empty:
        return rows
    pair = [k for k in PAIR if k in rows.columns]
    point = [*pair, "probe_id", "point_kind", "step"]
    have = rows.groupby(point, sort=False)["strategy"].transform("nunique")
    if strategies is not None and pair:
        counts = pd.DataFrame([(*key, len(names)) for key, names in strategies.items()], columns=[*PAIR, "wanted"])
        wanted = rows[pair].merge(counts, on=pair, how="left")["wanted"].fillna(0).to_numpy() if pair == PAIR and len(counts) else 0
        needed = np.maximum(rows.groupby(pair, sort=False)["strategy"].transform("nunique"), wanted)
    else:
        needed = rows.groupby(pair, sort=False)["strategy"].transform("nunique") if pair else rows["strategy"].nunique()
    rows = rows[have == needed]
    for grade in PAIRED_GRADES:
        if grade in rows.columns and rows[grade].isna().any() and rows[grade].notna().any():
            ungraded = rows[grade].isna().groupby([rows[k] for k in point], sort=False).transform("any")
            if (ungraded & rows[grade].notna()).any():
                rows = rows.assign(**{grade: rows[grade].astype(object).where(~ungraded, None)})
    if "correct" in rows.columns and "ceiling_correct" in rows.columns:
        unanswered = rows["correct"].isna()
        if (unanswered & rows["ceiling_correct"].notna()).any():
            rows = rows.assign(ceiling_correct=rows["ceiling_correct"].astype(object).where(~unanswered, None))
    weights = answer_weights(rows, point, pair)
    return rows if weights is None else rows.assign(**{ANSWER_WEIGHT: weights})


def per_probe(rows: pd.DataFrame, by: Sequence[str] = ()) -> pd.DataFrame:
    """One row per (scenario, strategy, profile, *by, probe): the mean of its rows (each probe then weighs 1).

    Columns: the keys, then the means of `present`, `kept`, `summary`, `in_summary`, `correct` and
    `ceiling` (NaN rows skipped, NaN for none), `correct_at_ceiling` (the mean of `correct` over the
    rows that have both grades: the numerator of `answered_rel`), the means of the judge's verdicts
    (`JUDGED`, where `rows` has them), then `kind` (its first non-null value). The answer grades' means
    (`correct`, `ceiling`, `correct_at_ceiling`, the verdicts) weigh each row by its `ANSWER_WEIGHT` where `rows`
    has one (`paired` adds it where answers failed), the others each row by one; the probe then gets an
    `ANSWER_WEIGHT` too: its graded rows' weights over its rows that count (`answer_weights`), what it weighs among the
    probes in the answer grades' means (`_weighted_mean`), so that a probe whose points failed counts for the points it
    lost. Groups are in
    the order of their first row: what `groupby(keys, sort=False, dropna=False).agg(...)` computes,
    in arrays (pandas' cost per call was most of a summary's time).
    """
    keys = [k for k in [*_keys(rows), *by, "probe_id"] if k in rows.columns]
    present = rows["present"].to_numpy(dtype=float)
    if "kept_share" in rows.columns:  # several samples per point, averaged by `votes`
        kept, summary = _numeric(rows, "kept_share"), _numeric(rows, "summary_share")
    elif "found" in rows.columns:
        kept, summary = (rows["found"] == "kept").to_numpy(dtype=float), (rows["found"] == "summary").to_numpy(dtype=float)
    else:
        kept, summary = present, np.zeros(len(rows))
    columns = {
        "present": present,
        "kept": kept,
        "summary": summary,
        "in_summary": rows["in_summary"].to_numpy(dtype=float) if "in_summary" in rows.columns else np.full(len(rows), np.nan),
        "correct": _numeric(rows, "correct"),
        "ceiling": _numeric(rows, "ceiling_correct"),
    }
    columns["correct_at_ceiling"] = np.where(np.isnan(columns["ceiling"]), np.nan, columns["correct"])
    columns.update({verdict: _numeric(rows, verdict) for verdict in JUDGED if verdict in rows.columns})
    group = np.zeros(len(rows), dtype=np.int64)
    for key in keys:  # one code per distinct key tuple, numbered in order of first appearance
        codes, uniques = pd.factorize(rows[key], use_na_sentinel=False)
        group, _ = pd.factorize(group * len(uniques) + codes)
    groups = int(group.max()) + 1 if len(group) else 0
    first = _first_rows(group, groups)
    out = pd.DataFrame({key: rows[key].iloc[first].reset_index(drop=True) for key in keys})
    weighted = rows[ANSWER_WEIGHT].to_numpy(dtype=float) if ANSWER_WEIGHT in rows.columns else None
    if weighted is not None:  # a row of a point that counts in no group (NaN) weighs nothing and is none of its probe's points
        counted = ~np.isnan(weighted)
        weighted = np.where(counted, weighted, 0.0)
    for name, values in columns.items():
        weight = weighted if weighted is not None and name in WEIGHED else 1.0
        known = ~np.isnan(values)
        counts = np.bincount(group, weights=known * weight, minlength=groups)
        sums = np.bincount(group, weights=np.where(known, values, 0.0) * weight, minlength=groups)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[name] = np.where(counts > 0, sums / np.where(counts > 0, counts, 1), np.nan)
    if weighted is not None:  # a probe weighs the share of its points its graded ones stand for (`_weighted_mean`)
        known = ~np.isnan(columns["correct"])
        stand_for = np.bincount(group, weights=np.where(known, weighted, 0.0), minlength=groups)
        points = np.bincount(group, weights=counted, minlength=groups)
        out[ANSWER_WEIGHT] = np.where(points > 0, stand_for / np.where(points > 0, points, 1), 0.0)
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


#: One cell's rows as arrays by column (`_Cells.cell`)
Cell = Mapping[str, np.ndarray]
#: A table's columns by name: a DataFrame, or one cell's arrays
Columns = pd.DataFrame | Cell


def _known(values: Any) -> np.ndarray:
    """The values as floats, None and NaN left out."""
    values = np.asarray(values, dtype=float)
    return values[~np.isnan(values)]


def _mean(values: Any) -> float:
    """The mean of the known values; NaN for none."""
    known = _known(values)
    return float(known.mean()) if len(known) else float("nan")


def _weighted_mean(probes: Columns, column: str, mask: np.ndarray | None = None) -> float:
    """The mean of an answer grade's per-probe values (`per_probe` rows, or `probe_differences`' rows), each probe
    weighing its `ANSWER_WEIGHT` where answers failed and one otherwise: so weighed, the mean over the points that
    count, each probe's points weighing one probe in all and every graded point standing for the failed points of its
    kind (`answer_weights`)."""
    values = np.asarray(probes[column], dtype=float)
    weights = np.asarray(probes[ANSWER_WEIGHT], dtype=float) if ANSWER_WEIGHT in probes else np.ones(len(values))
    if mask is not None:
        values, weights = values[mask], weights[mask]
    known = ~np.isnan(values) & (weights > 0)
    return float(np.average(values[known], weights=weights[known])) if known.any() else float("nan")


def _clusters(probes: Columns, column: str) -> list[list[float]]:
    """`column`'s values grouped by scenario, scenarios in order of first appearance (one group without a scenario column)."""
    values = np.asarray(probes[column], dtype=float)
    if "scenario" not in probes:
        return [values.tolist()]
    codes, scenarios = pd.factorize(np.asarray(probes["scenario"], dtype=object))
    return [values[codes == code].tolist() for code in range(len(scenarios))]


def _retention(probes: Columns, prefix: str = "retention") -> dict[str, Any]:
    """Headline figures of one set of per-probe values (`per_probe` rows), intervals by scenario."""
    low, high = cluster_bootstrap_ci(_clusters(probes, "present"))
    out: dict[str, Any] = {
        prefix: _mean(probes["present"]),
        f"{prefix}_lo": low,
        f"{prefix}_hi": high,
        f"{prefix}_kept": _mean(probes["kept"]),
        f"{prefix}_summary": _mean(probes["summary"]),
    }
    return out


def _answered(probes: Columns) -> dict[str, Any]:
    weighed = _clusters(probes, ANSWER_WEIGHT) if ANSWER_WEIGHT in probes else None
    # the unscored values are left out of each cluster
    low, high = cluster_bootstrap_ci(_clusters(probes, "correct"), weights=weighed)
    answered = _weighted_mean(probes, "correct")
    # the ratio's two means are over the same rows: those with an answer grade and a ceiling grade
    # (`paired` already drops the ceiling where the answer is ungraded; a point past the answerer's own
    # window for the whole transcript has no ceiling, and stays in `answered`)
    both = ~np.isnan(np.asarray(probes["correct_at_ceiling"], dtype=float))
    ceiling, reached = _weighted_mean(probes, "ceiling", both), _weighted_mean(probes, "correct_at_ceiling", both)
    return {
        "answered": answered,
        "answered_lo": low,
        "answered_hi": high,
        "answered_ceiling": ceiling,
        "answered_rel": reached / ceiling if ceiling and not np.isnan(ceiling) and not np.isnan(reached) else float("nan"),
    }


def _by(labels: np.ndarray) -> list[tuple[Any, np.ndarray]]:
    """(label, mask) per distinct known label, labels sorted (what `groupby(labels)` iterates)."""
    known = ~pd.isna(labels)
    return [(label, known & (labels == label)) for label in sorted(set(labels[known]))]


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


#: The per-probe columns the cell metrics read (`_ProbeValues`), and those of the headline rows themselves
VALUE_COLUMNS = ("scenario", "kind", "age", "present", "kept", "summary", "in_summary", "correct", "ceiling", "correct_at_ceiling", *JUDGED,
                 ANSWER_WEIGHT)
HEADLINE_COLUMNS = ("probe_id", "correct", "source_summarized")


def _probe_metrics(headline: Cell, compaction_rows: int, values: Mapping[str, Cell]) -> dict[str, Any]:
    """A cell's probe metrics from its headline rows, its number of compaction-point rows and its
    per-probe `values` (`_ProbeValues`' four tables by name), each as its `_Cells` arrays."""
    pairs = len(headline["probe_id"])
    out: dict[str, Any] = {"paired_pairs": pairs}
    if not pairs:
        out["paired_probes"] = 0
    else:
        probes, aged = values["headline"], values["aged"]
        out["paired_probes"] = len(probes["present"])
        out.update(_retention(probes))
        out.update(_answered(probes))
        out["unscored"] = int(np.sum(pd.isna(headline["correct"]))) if "correct" in headline else pairs
        summarized = values["summarized"]["in_summary"]
        out["retention_summarized_source"] = _mean(summarized) if len(summarized) else float("nan")
        out["summarized_source_pairs"] = int(headline["source_summarized"].astype(bool).sum()) if "source_summarized" in headline else 0
        for kind, mask in _by(probes["kind"]) if "kind" in probes else ():
            out[f"retention_{kind}"] = _mean(probes["present"][mask])
            out[f"answered_{kind}"] = _weighted_mean(probes, "correct", mask)
        for name, mask in _by(aged["age"]):
            out[f"retention_age_{name}"] = _mean(aged["present"][mask])
        for verdict in JUDGED:  # as `answered`: each probe weighs one, on the paired points (`paired`), voted over repeats
            if verdict in probes:
                out[verdict] = _weighted_mean(probes, verdict)
    out["compaction_point_rows"] = compaction_rows
    out["retention_compaction_points"] = _mean(values["points"]["present"]) if compaction_rows else float("nan")
    return out


def _age_bucket(tokens: float) -> str:
    return next(name for low, high, name in AGE_BUCKETS if low <= tokens < high)


class _Cells:
    """A table's columns as arrays with its rows in cell order (a stable sort: each cell's rows keep
    their order, so a cell's sums add the same values in the same order as its pandas group would),
    and each cell's key and row range. The per-cell metrics read these slices: a pandas filter per
    cell and metric was most of a summary's time."""

    def __init__(self, frame: pd.DataFrame, keys: list[str], columns: Iterable[str]) -> None:
        if keys and len(frame):
            codes = frame.groupby(keys, sort=True, dropna=False).ngroup().to_numpy()
            order = np.argsort(codes, kind="stable")
            counts = np.bincount(codes)
        else:
            order, counts = np.arange(len(frame)), np.asarray([len(frame)] if len(frame) else [], dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        read = [name for name in columns if name in frame.columns]
        # the columns read alone (not a run's lists of ids)
        ordered = frame[[name for name in dict.fromkeys([*keys, *read]) if name in frame.columns]].iloc[order]
        self.columns = {name: _array(ordered[name]) for name in read}
        firsts = ordered[keys].iloc[starts[:-1]].itertuples(index=False, name=None) if keys and len(frame) else [() for _ in counts]
        self.ranges = {tuple(key): (int(a), int(b)) for key, a, b in zip(firsts, starts[:-1], starts[1:], strict=True)}

    def cell(self, key: tuple[Any, ...]) -> Cell:
        """The cell's arrays (empty ones for a cell without rows)."""
        start, end = self.ranges.get(key, (0, 0))
        return {name: values[start:end] for name, values in self.columns.items()}

    def size(self, key: tuple[Any, ...]) -> int:
        start, end = self.ranges.get(key, (0, 0))
        return end - start


def _array(column: pd.Series) -> np.ndarray:
    """A column as a NumPy array; a column of pandas' nullable booleans or numbers (`load_run` types the answer
    grades so) as floats with NaN for NA, as the metrics read None in a run's own tables."""
    if isinstance(column.dtype, pd.api.extensions.ExtensionDtype) and column.dtype.kind in "biuf":
        return column.to_numpy(dtype=float, na_value=np.nan)
    return column.to_numpy()


def _repeats(cell: Cell) -> int:
    """How many repeats a cell's rows come from (at least 1)."""
    repeat = cell.get("repeat")
    return max(len(np.unique(repeat)), 1) if repeat is not None and len(repeat) else 1


def _cannot_serve(cell: Cell) -> bool:
    """Some step never got a request through (the last attempt overflowed: the strategy gave up or
    could not recover), or the final context does not fit the window."""
    kind, overflow = cell["kind"], cell["overflow"].astype(bool)
    turns = kind == "turn"
    if turns.any():
        levels = [cell[k][turns] for k in ("repeat", "step") if k in cell]
        order = np.lexsort((cell["request"][turns], *reversed(levels)))  # by repeat, step, then request
        same_next = np.ones(len(order) - 1, dtype=bool)
        for level in levels:
            same_next &= level[order][1:] == level[order][:-1]
        last = np.append(~same_next, True)  # the last request of each (repeat, step)
        if overflow[turns][order][last].any():
            return True
    return bool(overflow[kind == "final"].any())


def _request_metrics(cell: Cell) -> dict[str, Any]:
    """A cell's request metrics from its `_Cells` arrays (rows in table order)."""
    out: dict[str, Any] = {}
    if not len(cell["kind"]):
        return out
    repeats = _repeats(cell)
    kind, overflowed = cell["kind"], cell["overflow"].astype(bool)
    asked = (kind == "turn") | (kind == "summary")
    sent = asked & ~overflowed
    for fmt in FORMATS:  # a format added after a run was measured has no column in its tables
        # of the requests sent (a rejected one too): the final context is only probed, never sent to an API
        if f"integrity_{fmt}" in cell:
            out[f"integrity_{fmt}"] = int(cell[f"integrity_{fmt}"][asked].sum()) / repeats
        if f"integrity_recorded_{fmt}" in cell:
            out[f"integrity_recorded_{fmt}"] = int(cell[f"integrity_recorded_{fmt}"][asked].sum()) / repeats
    out["estimate_error"] = _mean(cell["estimate_error"])
    # no interval: a cell's requests are consecutive contexts of one replay, not independent draws
    apes = _known(cell["estimate_ape"])
    out.update(estimate_ape=_mean(apes), estimate_ape_n=len(apes))
    out["missed_triggers"] = int(cell["missed_trigger"].astype(bool).sum()) / repeats
    # a request the agent refused itself reached no model too, without the provider refusing it
    refused = cell["refused"].astype(bool) if "refused" in cell else np.zeros(len(kind), dtype=bool)
    out["overflows"] = int((overflowed & ~refused & (kind == "turn")).sum()) / repeats
    out["refused_requests"] = int((refused & asked).sum()) / repeats
    out["failed_requests"] = int((overflowed & asked).sum()) / repeats
    out["cannot_serve"] = _cannot_serve(cell)
    # the cache hit rate leaves out each repeat's first request (nothing can be cached for it yet)
    request = cell["request"][sent]
    if "repeat" in cell:
        repeat = cell["repeat"][sent]
        first = {r: request[repeat == r].min() for r in np.unique(repeat)}
        later = request != np.asarray([first[r] for r in repeat], dtype=request.dtype)
    else:
        later = np.arange(len(request)) != (np.argmin(request) if len(request) else -1)
    cached, true = cell["cached_tokens"][sent], cell["true_tokens"][sent]
    out["cache_hit_rate"] = float(cached[later].sum() / true[later].sum()) if true[later].sum() else float("nan")
    out["cache_eligible_tokens"] = int(true[later].sum()) / repeats  # what the hit rate is a share of
    out["cached_tokens"] = int(cached.sum()) / repeats
    out["rebilled_tokens"] = int(cell["rebilled_tokens"][sent].sum()) / repeats
    out["cache_write_tokens"] = int(cell["cache_write_tokens"][sent].sum()) / repeats
    out["input_tokens"] = int(true.sum()) / repeats
    out["output_tokens"] = int(cell["output_tokens"][sent].sum()) / repeats
    out["tokens_per_task"] = out["input_tokens"] + out["output_tokens"]
    out["cost_usd"] = float(np.sum(cell["cost_usd"])) / repeats  # an unpriced request (NaN) leaves the sum unknown
    out["requests"] = int(sent.sum()) / repeats
    return out


#: The summary's pair-error columns, one per wire format (`integrity.FORMATS`).
INTEGRITY_COLUMNS = tuple(f"integrity_{fmt}" for fmt in FORMATS)
REQUEST_COLUMNS = (
    "repeat", "request", "step", "kind", "overflow", "refused", "missed_trigger", "estimate_error", "estimate_ape", "cached_tokens", "true_tokens",
    "rebilled_tokens", "cache_write_tokens", "output_tokens", "cost_usd",
    *(f"integrity{part}_{fmt}" for fmt in FORMATS for part in ("", "_recorded")),
)
COMPACTION_COLUMNS = ("silent_loss", "premature", "llm_calls", "llm_input_tokens", "llm_output_tokens", "llm_cost_usd")


def _compaction_metrics(cell: Cell | None, repeats: int) -> dict[str, Any]:
    """A cell's compaction metrics from its `_Cells` arrays (None: the cell compacted nothing)."""
    if cell is None:
        return {"compactions": 0, "silent_loss": 0, "premature_triggers": 0, "summarizer_calls": 0, "summarizer_tokens": 0, "summarizer_cost_usd": 0.0}
    return {
        "compactions": len(cell["llm_calls"]) / repeats,
        "silent_loss": int(cell["silent_loss"].sum()) / repeats,
        "premature_triggers": int(cell["premature"].astype(bool).sum()) / repeats,
        "summarizer_calls": int(cell["llm_calls"].sum()) / repeats,
        "summarizer_tokens": int((cell["llm_input_tokens"] + cell["llm_output_tokens"]).sum()) / repeats,
        "summarizer_cost_usd": float(np.sum(cell["llm_cost_usd"])) / repeats,
    }


#: The request columns `_request_metrics` reads in every run (`refused` and the wire formats' only where a run has them).
REQUEST_METRIC_COLUMNS = (
    "request", "kind", "overflow", "missed_trigger", "estimate_error", "estimate_ape", "cached_tokens", "true_tokens", "rebilled_tokens",
    "cache_write_tokens", "output_tokens", "cost_usd",
)


def lacking_draw_columns(requests: pd.DataFrame, compactions: pd.DataFrame) -> list[str]:
    """The columns `draw_metrics` reads that these tables lack (a run written by an earlier version, or by hand, loads
    with its required columns only: its summary's figures were computed when it was written)."""
    needed: list[tuple[str, pd.DataFrame, tuple[str, ...]]] = [("requests", requests, ("repeat", *REQUEST_METRIC_COLUMNS))]
    if len(compactions):
        needed.append(("compactions", compactions, ("repeat", *COMPACTION_COLUMNS)))
    return [f"{name}.{column}" for name, frame, columns in needed for column in columns if column not in frame.columns]


def draw_metrics(requests: pd.DataFrame, compactions: pd.DataFrame) -> pd.DataFrame:
    """One row per (scenario, strategy, profile, repeat): the request and compaction metrics of that repeat
    alone, as `summarize` computes them for a cell (whose sums are these rows' mean over its repeats). A model
    summarizer writes each repeat's summaries afresh, and a summary's length moves later compactions,
    overflows and costs, so a repeat is one draw of these metrics too (the gate tests them per draw)."""
    keys = [*_keys(requests), "repeat"]
    if lacking := lacking_draw_columns(requests, compactions):
        raise ValueError(f"no metrics per summary draw without {', '.join(lacking)}")
    by_requests = _Cells(requests, keys, REQUEST_COLUMNS)
    by_compactions = _Cells(compactions, keys, COMPACTION_COLUMNS) if len(compactions) else None
    rows = []
    for key in by_requests.ranges:
        row: dict[str, Any] = dict(zip(keys, key, strict=True))
        row.update(_request_metrics(by_requests.cell(key)))
        compacted = by_compactions.cell(key) if by_compactions is not None and key in by_compactions.ranges else None
        row.update(_compaction_metrics(compacted, 1))
        rows.append(row)
    return pd.DataFrame(rows, columns=None if rows else keys)


#: Rates of the summary whose value over several scenarios is the pooled ratio, each scenario's rate
#: weighted by what it is a share of (the tokens of the requests that could hit the cache; the requests
#: with an estimate error, those decided on their estimate), not the mean of the scenarios' rates, which weighs
#: a short scenario like a long one.
RATE_WEIGHTS = {"cache_hit_rate": "cache_eligible_tokens", "estimate_ape": "estimate_ape_n"}


def combine(frame: pd.DataFrame, column: str, how: str) -> float:
    """`column` of several summary rows (scenarios, of one strategy and profile) as one figure: their
    sum (`how` "sum"; dollars with an unpriced part stay unknown, NaN), or their mean; for a rate of `RATE_WEIGHTS`, the pooled ratio (tables written
    before the weights existed: the mean)."""
    if column not in frame.columns:
        return float("nan")
    values = pd.to_numeric(frame[column], errors="coerce")
    if how == "sum":
        return float(values.sum(skipna=column not in DOLLAR_COLUMNS))
    weight = RATE_WEIGHTS.get(column)
    if weight is not None and weight in frame.columns:
        weights = pd.to_numeric(frame[weight], errors="coerce").fillna(0)
        usable = values.notna() & (weights > 0)
        return float((values[usable] * weights[usable]).sum() / weights[usable].sum()) if usable.any() else float("nan")
    return float(values.mean())


def _strategies(requests: pd.DataFrame) -> dict[tuple[Any, ...], set[str]]:
    if requests.empty or not set(PAIR) <= set(requests.columns):
        return {}
    cells = requests[[*PAIR, "strategy"]].drop_duplicates()  # a row per strategy and pair, not per request
    return {tuple(k): set(g) for k, g in cells.groupby(PAIR, sort=False)["strategy"]}


def unfinished(requests: pd.DataFrame | None, scenarios: Sequence[Any] = ()) -> dict[tuple[Any, Any], list[str]]:
    """Per (scenario, profile), profile by profile: the strategies of the profile without a finished
    cell there (no requests: the cell, or one of its repeats, failed). A strategy lacks a repeat when
    another strategy of the profile has requests in that repeat of the scenario and it has none (with
    no `repeat` column, cells are compared whole). The pooled figures (`overall`, the verdict, the
    leaderboard) leave such a scenario out for every strategy (`shared_scenarios`), so they compare
    strategies on the same scenarios and repeats: a strategy whose cell failed would otherwise look
    cheaper, by a scenario's cost, and one short of repeats would be averaged over fewer of them.
    `scenarios` are the run's own (its manifest's): one without a request at a profile, where every
    strategy's cell failed, lacks every strategy of the profile; the tables alone never show it."""
    if requests is None or requests.empty or not set(PAIR) <= set(requests.columns):
        return {}
    level = [*PAIR, "repeat"] if "repeat" in requests.columns else PAIR
    cells = requests[[*level, "strategy"]].drop_duplicates()  # a row per cell (and repeat), not per request
    present = {tuple(k): set(g) for k, g in cells.groupby(level, sort=False, dropna=False)["strategy"]}
    everyone: dict[Any, set[str]] = {}
    for key, names in present.items():
        everyone.setdefault(key[1], set()).update(names)
    missing: dict[tuple[Any, Any], set[str]] = {}
    for key, names in present.items():
        lacking = everyone[key[1]] - names
        if lacking:
            missing.setdefault((key[0], key[1]), set()).update(lacking)
    requested = {key[:2] for key in present}
    for profile, names in everyone.items():
        missing.update(((scenario, profile), names) for scenario in scenarios if (scenario, profile) not in requested)
    return {key: sorted(names) for key, names in missing.items()}


def shared_scenarios(frame: pd.DataFrame, left_out: Mapping[tuple[Any, Any], Any]) -> pd.DataFrame:
    """`frame`'s rows of the scenarios every strategy of their profile finished (`left_out` is `unfinished(requests)`)."""
    if not left_out or frame.empty:
        return frame
    return frame[~pd.MultiIndex.from_frame(frame[["scenario", "profile"]]).isin(list(left_out))]


def headline_rows(probes: pd.DataFrame, requests: pd.DataFrame | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(paired headline rows, compaction-point rows) of a probes table, votes applied."""
    if probes.empty:
        return probes, probes
    voted = votes(silenced(probes))
    strategies = _strategies(requests) if requests is not None else None
    return paired(voted, strategies), voted[voted["point_kind"] == "compaction"]


def compared_rows(probes: pd.DataFrame, requests: pd.DataFrame | None = None) -> pd.DataFrame:
    """The probe rows every pooled figure compares (`overall`, the verdict, the report's figures): of
    the scenarios every strategy of the profile finished (`shared_scenarios`), the paired headline
    rows with votes applied (`headline_rows`)."""
    return headline_rows(shared_scenarios(probes, unfinished(requests)), requests)[0]


#: Whether a leader's lead over the runner-up in one group of `_p_best` may be claimed: (the group's labels, the
#: leader, the runner-up, the (scenario, probe_id) of the probes compared) → bool.
LeadTest = Callable[[tuple[Any, ...], Any, Any, Sequence[tuple[Any, Any]]], bool]


def _p_best(values: pd.DataFrame, group: list[str], *, lead_claimed: LeadTest | None = None) -> dict[tuple[Any, ...], float]:
    """Per (group…, strategy): the chance it ranks first in retention within its group, from the
    headline rows' per-probe `values` (`per_probe`): over the probes every strategy of the group has a
    value for, each strategy's mean `present` per probe (strategies and probes in sorted order).
    `lead_claimed`: NaN for every strategy of a group whose leader's lead over the runner-up (the two highest
    means) it says may not be claimed; without it, the bootstrap's share as it is, for a caller that judges
    the lead itself (`overall`)."""
    out: dict[tuple[Any, ...], float] = {}
    if values.empty:
        return out
    # every group's means at once, and their strategies and probes numbered in sorted order once (a run of hundreds of
    # scenarios has as many groups); each group's rows are contiguous in the sorted means
    keys = list(dict.fromkeys([*group, "strategy", "scenario", "probe_id"]))
    means = values.groupby(keys, sort=True, dropna=False)["present"].mean().reset_index()
    strategy_codes, strategies = pd.factorize(means["strategy"], sort=True)
    unit_codes, units = pd.factorize(pd.MultiIndex.from_arrays([means["scenario"], means["probe_id"]]), sort=True)
    present = means["present"].to_numpy(dtype=float)
    groups = means.groupby(group, sort=False, dropna=False).ngroup().to_numpy() if group else np.zeros(len(means), dtype=np.int64)
    bounds = [0, *(np.flatnonzero(np.diff(groups)) + 1), len(means)]
    labels = means[group].to_numpy(dtype=object) if group else np.empty((len(means), 0), dtype=object)
    for start, end in itertools.pairwise(bounds):
        own, rows = np.unique(strategy_codes[start:end], return_inverse=True)
        probes, columns = np.unique(unit_codes[start:end], return_inverse=True)
        table = np.full((len(own), len(probes)), np.nan)
        table[rows, columns] = present[start:end]
        every = ~np.isnan(table).any(axis=0)  # the probes every strategy of the group has a mean for
        scenarios = [units[code][0] for code in probes[every]]
        withheld = False
        if lead_claimed is not None and len(own) >= 2:
            leader, runner_up = np.argsort(-table[:, every].mean(axis=1), kind="stable")[:2]
            compared = [units[code] for code in probes[every]]
            withheld = not lead_claimed(tuple(labels[start]), strategies[own[leader]], strategies[own[runner_up]], compared)
        chances = np.full(len(own), np.nan) if withheld else p_best(table[:, every], scenarios)
        for strategy, chance in zip(strategies[own], chances, strict=True):
            out[(*labels[start], strategy)] = float(chance)
    return out


#: Per-probe means closer than this are the same.
TIE = 1e-12


def _draw_lead_test(probes: pd.DataFrame, headline: pd.DataFrame) -> LeadTest:
    """The test of a leader's lead within one scenario (`summarize`'s P(best), groups of `PAIR`): its independent
    units are the scenario's summary draws, the repeats of its cells (one scenario is one session, a single unit of
    the pooled test), each a cluster of per-probe leads (the leader's mean `present` over the probe's headline
    points, `headline`'s, in that repeat minus the runner-up's in the same repeat), `stats.difference_claimed`.
    Draws that are all the same (one repeat, a deterministic summarizer, strategies that summarize nothing there)
    are one unit: repeating what cannot vary adds no evidence. One unit is never a claim. Draws that differ at all
    come from a summarizer that samples, and each counts, a repeat of another's leads too (under no difference its
    sign is as likely flipped: the s46 audit's null shows P(best) in 2.5–4% of trials). The leader must lead on the
    draws both hold: with a failed repeat the leader by every repeat can trail in each repeat both have (the s46
    audit), and no claim is the leader's then."""
    probes = _with_point_kind(probes)
    if "repeat" not in probes.columns or probes["repeat"].nunique() < 2 or headline.empty:
        return lambda *_: False
    point = [k for k in [*PAIR, "probe_id", "point_kind", "step"] if k in headline.columns]
    raw = probes[probes["point_kind"].isin(HEADLINE_KINDS)].merge(headline[point].drop_duplicates(), on=point)
    draws = per_probe(raw, by=["repeat"]).set_index([*PAIR, "strategy"]).sort_index()

    def claimed(labels: tuple[Any, ...], leader: Any, runner_up: Any, compared: Sequence[tuple[Any, Any]]) -> bool:
        wanted = [probe for _, probe in compared]

        def table(strategy: Any) -> pd.DataFrame:
            rows = draws.loc[[(*labels, strategy)]]
            return rows.pivot_table(index="repeat", columns="probe_id", values="present", aggfunc="first").reindex(columns=wanted)

        lead = table(leader).sub(table(runner_up)).dropna(how="all").to_numpy(dtype=float, copy=True)
        lead[np.abs(lead) < TIE] = 0.0
        same = all(np.array_equal(row, lead[0], equal_nan=True) for row in lead)
        return bool(np.nansum(lead) > 0) and difference_claimed([row.tolist() for row in (lead[:1] if same else lead)])

    return claimed


def leading_pair(retention: Mapping[str, float]) -> tuple[str, str] | None:
    """The strategies with the two highest retentions, the leader first (ties in name order); None for fewer than two."""
    ranked = sorted((name for name, value in retention.items() if np.isfinite(value)), key=lambda name: (-retention[name], name))
    return (ranked[0], ranked[1]) if len(ranked) >= 2 else None


def every_format_broken(pair_errors: Iterable[float]) -> bool:
    """Whether requests break tool call/result pairs in every wire format measured (`pair_errors`: one count
    per format, NaN for a format not measured): no API would accept them (HTTP 400)."""
    measured = [e for e in pair_errors if np.isfinite(e)]
    return bool(measured) and all(e > 0 for e in measured)


def _flagged(row: Mapping[str, Any]) -> bool:
    """Whether a summary row's cell is no choice, as the verdict flags a strategy (`reports.verdict`): it cannot
    serve the window, or its requests break tool pairs in every wire format measured (`every_format_broken`)."""
    return bool(row.get("cannot_serve", False)) or every_format_broken(float(row.get(f"integrity_{fmt}", np.nan)) for fmt in FORMATS)


def _ranked(values: pd.DataFrame, keys: Sequence[str], contenders: Iterable[tuple[Any, ...]]) -> pd.DataFrame:
    """The rows of `values` whose `keys` are one of `contenders`."""
    return values[pd.MultiIndex.from_frame(values[list(keys)]).isin(list(contenders))] if len(values) else values


def _contending_cells(rows: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> list[tuple[Any, ...]]:
    """The cells (`keys` of summary `rows`) that P(best) ranks: per (scenario, profile), those not `_flagged`,
    or every one where each is, as the verdict ranks strategies."""
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault(tuple(row.get(k) for k in PAIR), []).append(row)
    cells = []
    for group in groups.values():
        serving = [row for row in group if not _flagged(row)] or group
        cells += [tuple(row.get(k) for k in keys) for row in serving]
    return cells


def summarize(requests: pd.DataFrame, compactions: pd.DataFrame, probes: pd.DataFrame) -> pd.DataFrame:
    """One row per (scenario, strategy, profile) with every aggregate metric."""
    keys = _keys(requests)
    headline, compaction_rows = headline_rows(probes, requests)
    by_requests, by_compactions = _Cells(requests, keys, REQUEST_COLUMNS), _Cells(compactions, keys, COMPACTION_COLUMNS)
    cells = set(by_requests.ranges)
    if not probes.empty:
        every = _ProbeValues.of(headline, compaction_rows)
        by_headline, by_points = _Cells(headline, keys, HEADLINE_COLUMNS), _Cells(compaction_rows, keys, ())
        split = {name: _Cells(getattr(every, name), keys, VALUE_COLUMNS) for name in ("headline", "summarized", "aged", "points")}
        cells |= set(_Cells(probes, keys, ()).ranges)
    rows = []
    for key in sorted(cells, key=str):
        row: dict[str, Any] = dict(zip(keys, key, strict=True))
        if not probes.empty:
            values = {name: part.cell(key) for name, part in split.items()}
            row.update(_probe_metrics(by_headline.cell(key), by_points.size(key), values))
            row["p_best"] = float("nan")  # its place among the columns; its value once every cell's flags are known (below)
        requested = by_requests.cell(key) if key in by_requests.ranges else None
        row.update(_request_metrics(requested) if requested is not None else {})
        repeats = _repeats(requested) if requested is not None else 1
        row.update(_compaction_metrics(by_compactions.cell(key) if key in by_compactions.ranges else None, repeats))
        rows.append(row)
    if not probes.empty:  # among the cells each scenario ranks: a flagged one is no choice
        best = _p_best(_ranked(every.headline, keys, _contending_cells(rows, keys)), PAIR, lead_claimed=_draw_lead_test(probes, headline))
        for row in rows:
            row["p_best"] = best.get((row.get("scenario"), row.get("profile"), row.get("strategy")), float("nan"))
    return pd.DataFrame(rows)


#: Per profile, the strategies P(best) ranks (`overall`'s `contenders`).
Contenders = Mapping[str, Iterable[str]]


def overall(probes: pd.DataFrame, requests: pd.DataFrame | None = None, *, contenders: Contenders | None = None) -> pd.DataFrame:
    """One row per (strategy, profile) over all scenarios: retention (kept, summary), its interval
    (probes clustered by scenario), the summary-dependent retention, answered and its ceiling,
    `paired_pairs`, `paired_probes` and `p_best`, over the scenarios every strategy of the profile
    finished (`shared_scenarios`). `p_best` ranks the profile's `contenders` (the strategies the
    verdict ranks as serving the window, `reports.verdict.servable`; every strategy of a profile it
    does not name, or without it) and is NaN for the others, and for every strategy of a profile
    where the difference between the two highest retentions it ranks (`leading_pair`) is not
    `detectable`: the verdict's own test (`paired_differences` on the same rows), so the two never disagree."""
    return overall_of(compared_rows(probes, requests), contenders=contenders)


def overall_of(headline: pd.DataFrame, *, contenders: Contenders | None = None) -> pd.DataFrame:
    """`overall` of the rows it compares, `headline` (`compared_rows`), for a caller that needs those rows too."""
    if headline.empty:
        return pd.DataFrame(columns=["strategy", "profile"])
    values = per_probe(headline)
    named = {str(profile): set(names) for profile, names in (contenders or {}).items()}

    def ranks(strategy: str, profile: str) -> bool:
        return str(profile) not in named or strategy in named[str(profile)]

    pairs = values[["strategy", "profile"]].drop_duplicates().itertuples(index=False, name=None)
    best = _p_best(_ranked(values, ["strategy", "profile"], [pair for pair in pairs if ranks(*pair)]), ["profile"])
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
    for profile in dict.fromkeys(row["profile"] for row in rows):
        own = [row for row in rows if row["profile"] == profile and ranks(row["strategy"], profile)]
        pair = leading_pair({row["strategy"]: row["retention"] for row in own})
        if pair and not paired_differences(headline[headline["profile"] == profile], pair[1], pair[0]).detectable:
            for row in own:
                row["p_best"] = float("nan")
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class PairedDifference:
    """`column` of strategy `b` minus strategy `a` on the probe points both have: the mean over probes
    of each probe's mean difference (each probe weighs one), its 95% interval (probes clustered by
    scenario), the two-sided sign-flip p-value over the scenarios (each scenario's probes flip together:
    `stats.difference_claimed`), and how many points, probes and scenarios it covers, and how many of those
    scenarios differ (`changed`: the sign-flip test's sample, whose size alone bounds its p from below).
    `detectable` only when the interval excludes 0 and the test rejects at 5%."""

    mean: float
    lo: float
    hi: float
    p_value: float
    pairs: int
    probes: int
    changed: int = 0
    scenarios: int = 0

    @property
    def detectable(self) -> bool:
        return detectable(self.lo, self.hi, self.p_value)


def paired_differences(probes: pd.DataFrame, a: str, b: str, *, column: str = "present") -> PairedDifference:
    """`column` of strategy `b` minus strategy `a` on the pairs both have (`PairedDifference`), at one profile.

    The sign-flip test's unit is the scenario (a session): its probes are read from one context and summarized by
    one summary, so they move together, and a test that counted them as independent claimed differences that one
    summary's luck makes (the module `stats` says more); repeats are averaged within their scenario (`votes`).
    Rows of `a` and `b` at more than one profile are a ValueError naming them: each probe would count once per
    profile, its copies taken as independent by the interval and the test, while the verdict compares the
    strategies per profile (`reports/verdict.py`, `verdicts`: `difference(paired[paired["profile"] == profile], …)`;
    README, Statistics)."""
    if "profile" in probes.columns and "strategy" in probes.columns:
        compared = probes.loc[probes["strategy"].isin([a, b]), "profile"]
        profiles = sorted({str(p) for p in pd.unique(compared)})
        if len(profiles) > 1:
            raise ValueError(
                f"paired_differences({a!r}, {b!r}): the rows hold {len(profiles)} profiles ({', '.join(profiles)}), and a probe "
                "at two profiles is not two independent probes; compare at one profile, e.g. "
                f"paired_differences(probes[probes.profile == {profiles[0]!r}], {a!r}, {b!r}), once per profile")
    diffs = probe_differences(probes, a, b, column=column)
    if diffs.empty:
        return PairedDifference(float("nan"), float("nan"), float("nan"), 1.0, 0, 0)
    clusters = [g.tolist() for _, g in diffs.groupby("scenario", sort=False)["difference"]]
    weighed = [g.tolist() for _, g in diffs.groupby("scenario", sort=False)[ANSWER_WEIGHT]] if ANSWER_WEIGHT in diffs else None
    low, high = cluster_bootstrap_ci(clusters, weights=weighed, bounds=DIFFERENCE)
    # where answers failed, a scenario's probes flip together as its weighted sum (the mean's numerator)
    sums = unit_sums(clusters if weighed is None else [np.multiply(c, w) for c, w in zip(clusters, weighed, strict=True)])
    return PairedDifference(_weighted_mean(diffs, "difference"), low, high, signflip_p(sums.tolist(), two_sided=True),
                            int(diffs["pairs"].sum()), len(diffs), int(np.count_nonzero(sums)), len(clusters))


def probe_differences(probes: pd.DataFrame, a: str, b: str, *, column: str = "present", rows: Iterable[str] = HEADLINE_KINDS) -> pd.DataFrame:
    """Per (scenario, profile, probe): the mean over its shared points of b − a (`difference`), and
    the number of points (`pairs`). `column` is `present` or `correct` (unscored rows left out); where an answer
    failed, an answer grade's points are weighed and each probe gets its `ANSWER_WEIGHT` (`answer_weights`)."""
    return voted_differences(votes(silenced(probes[probes["strategy"].isin([a, b])])), a, b, column=column, rows=rows)


def voted_differences(voted: pd.DataFrame, a: str, b: str, *, column: str = "present", rows: Iterable[str] = HEADLINE_KINDS) -> pd.DataFrame:
    """`probe_differences` of rows already voted (`votes`), for a caller that needs the votes too. Each point of `b`
    is matched to the same point of `a` by integer codes (the gate's simulations and the verdict's pairs call this
    thousands of times); where a strategy holds a point twice, the pairs are every combination, as a join makes them."""
    voted = voted[voted["point_kind"].isin(tuple(rows))]
    point = [k for k in [*PAIR, "probe_id", "point_kind", "step"] if k in voted.columns]
    unit = [k for k in [*PAIR, "probe_id"] if k in voted.columns]
    mine = voted[voted["strategy"].isin([a, b])]
    held = held_weights(mine, point, unit, column)
    if held is not None:  # some answer failed: each graded point weighs for the failed points of its kind
        return _joined_differences(mine.assign(**{ANSWER_WEIGHT: held[0]}).dropna(subset=[column]), a, b, column, point, unit, held[1])
    mine = mine.dropna(subset=[column])
    is_b = (mine["strategy"] == b).to_numpy()
    codes = mine.groupby(point, sort=False, dropna=False).ngroup().to_numpy()
    left, right = codes[~is_b], codes[is_b]
    if np.unique(left).size < left.size or np.unique(right).size < right.size:
        return _joined_differences(mine, a, b, column, point, unit)
    where = np.full(codes.max(initial=-1) + 1, -1, dtype=np.int64)
    where[right] = np.flatnonzero(is_b)
    a_rows = np.flatnonzero(~is_b)
    match = where[codes[a_rows]]
    kept = a_rows[match >= 0]
    if kept.size == 0:
        return pd.DataFrame(columns=[*PAIR, "probe_id", "difference", "pairs"])
    values = mine[column].to_numpy(dtype=float)
    difference = values[match[match >= 0]] - values[kept]
    paired_rows = mine.iloc[kept]
    group = paired_rows.groupby(unit, sort=False, dropna=False).ngroup().to_numpy()
    groups = int(group.max()) + 1
    first = _first_rows(group, groups)
    counts = np.bincount(group, minlength=groups)
    out = pd.DataFrame({k: paired_rows[k].iloc[first].reset_index(drop=True) for k in unit})
    out["difference"] = np.bincount(group, weights=difference, minlength=groups) / counts
    out["pairs"] = counts.astype(np.int64)
    return out


def _joined_differences(voted: pd.DataFrame, a: str, b: str, column: str, point: list[str], unit: list[str],
                        points: pd.Series | None = None) -> pd.DataFrame:
    """`voted_differences` by a join on the point: every pair of `a`'s and `b`'s rows at a point both hold. With
    `points` (per unit, the points both hold that count: `held_weights`), the rows' `ANSWER_WEIGHT` weighs each
    point's difference, and each probe gets its `ANSWER_WEIGHT` (`per_probe` says what it is)."""
    left = voted[voted["strategy"] == a].set_index(point)[[column, *([ANSWER_WEIGHT] if points is not None else [])]].astype(float)
    right = voted[voted["strategy"] == b].set_index(point)[column].astype(float)
    both = left.rename(columns={column: "a"}).join(right.to_frame("b"), how="inner").reset_index()
    if both.empty:
        return pd.DataFrame(columns=[*PAIR, "probe_id", "difference", "pairs"])
    both["difference"] = both["b"] - both["a"]
    if points is None:
        return both.groupby(unit, sort=False).agg(difference=("difference", "mean"), pairs=("difference", "size")).reset_index()
    both["weighed"] = both["difference"] * both[ANSWER_WEIGHT]
    out = both.groupby(unit, sort=False).agg(weighed=("weighed", "sum"), weight=(ANSWER_WEIGHT, "sum"), pairs=("difference", "size"))
    out["difference"] = out["weighed"] / out["weight"]
    out[ANSWER_WEIGHT] = out["weight"] / points.reindex(out.index).to_numpy()
    return out.drop(columns=["weighed", "weight"])[["difference", "pairs", ANSWER_WEIGHT]].reset_index()


def held_weights(rows: pd.DataFrame, point: list[str], unit: list[str], column: str, within: Sequence[str] | None = None) -> tuple[np.ndarray, pd.Series] | None:
    """For two strategies' (or runs') `rows`: each row's `answer_weights` among the points both hold (1 at a point one
    holds alone, which pairs with nothing), grouped `within` (by default the scenario and profile), and per `unit` (a
    probe) the number of points both hold that count, graded or failed; None for a `column` no answer grades
    (`present`) or where no answer failed."""
    if column not in PAIRED_GRADES or not _failed_answers(rows, column).any():
        return None
    both = (rows.groupby(point, sort=False, dropna=False)["strategy"].transform("nunique") == 2).to_numpy()
    weights = answer_weights(rows[both], point, [k for k in PAIR if k in point] if within is None else within, column)
    if weights is None:
        return None
    out = np.ones(len(rows))
    out[both] = weights
    held = rows[both][~np.isnan(weights)]  # the points that count (`answer_weights`)
    points = held.drop_duplicates(point).groupby(unit, sort=False, dropna=False).size()
    return out, points
