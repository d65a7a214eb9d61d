"""The comparison report of two runs (`bench compare A B --html OUT`): one self-contained HTML page.

For every (strategy, profile) both runs hold, over the scenarios they share:
- the change in retention (candidate − baseline) at the paired checkpoints with a 95% interval
  (`metrics/aggregate.py::paired_differences`, probes clustered by scenario), and the change in every gate metric
  (`reports/gate.py::compare_runs`; a cost either run cannot know, its model having no price, shows as
  unpriced and its change as "cannot compare"). A row is tagged better or worse only when its interval excludes
  0 and its two-sided p-value by the gate's test (`gate.probe_draw_test`: the sign-flip test of the summary draws'
  changes, a scenario in one repeat), adjusted as the gate adjusts its rows (`gate.JointFamily`: jointly, one flip of
  a draw in every row at once) over all the rows the page tags
  (`retention_changes`), is below 0.05: a
  page of twenty strategies at 5% each would otherwise tag one by chance in most comparisons of two equivalent runs,
  and a sign-flip test of the probes, which treats the probes of a scenario as independent though they share its
  summaries, tagged about one page in five; the page says so;
- the probes that flipped (present in one run and absent in the other at the same point, or
  answered right in one and wrong in the other), with question, expected answer and both replies;
- the compactions that changed (matched by scenario, strategy, profile, repeat and index): step,
  trigger, tokens, item counts or summary differ, or the compaction exists in one run only.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import jinja2
import numpy as np
import pandas as pd

from compaction_bench.atomic import write_output
from compaction_bench.metrics.aggregate import silenced
from compaction_bench.metrics.stats import CLAIM_UNITS
from compaction_bench.reports.gate import (
    METRICS,
    DrawTest,
    JointFamily,
    Run,
    align_plugins,
    change_figure,
    compare_runs,
    metric_figure,
    probe_draw_test,
)
from compaction_bench.reports.html import TEMPLATE_DIR, _clean
from compaction_bench.reports.leaderboard import offline_notes
from compaction_bench.reports.verdict import Difference, difference, few_scenarios_clause

CELL = ["scenario", "strategy", "profile", "repeat"]
POINT = ["scenario", "probe_id", "point_kind", "point", "step"]
#: The level of the page's better and worse tags (`verdict.Difference.detectable`).
TAG_ALPHA = 0.05


def _questions(root: Path) -> dict[tuple[str, str], tuple[str, str]]:
    path = root / "questions.parquet"
    if not path.is_file():
        return {}
    return {(str(r.scenario), str(r.probe_id)): (str(r.question), str(r.answer)) for r in pd.read_parquet(path).itertuples(index=False)}


def retention_change(base: pd.DataFrame, cand: pd.DataFrame, strategy: str, profile: str) -> Difference | None:
    """Candidate − baseline retention of one strategy at one profile, paired by probe point."""
    frames = []
    for label, probes in (("baseline", base), ("candidate", cand)):
        part = probes[(probes["strategy"] == strategy) & (probes["profile"] == profile)].copy()
        part["strategy"] = label
        frames.append(part)
    joined = pd.concat(frames, ignore_index=True)
    if joined.empty or joined["strategy"].nunique() < 2:
        return None
    change = difference(joined, "candidate", "baseline")
    return change if change.n else None


def two_sided_test(base: pd.DataFrame, cand: pd.DataFrame, strategy: str, profile: str, family: int) -> DrawTest | None:
    """The gate's test of a retention change (`gate.probe_draw_test` at tolerance 0, its unit the summary draw: the
    sign-flip test of the draws' changes), two-sided: the share of sign assignments as far from 0 as the observed
    sum or farther. `family` bounds the number of rows adjusted together (the resamples grow with it, as the
    gate's do)."""
    runs = (Run(Path("baseline"), {}, {"probes": base}), Run(Path("candidate"), {}, {"probes": cand}))
    return probe_draw_test(runs, strategy, profile, "retention", TAG_ALPHA, 0.0, family, two_sided=True)


def retention_changes(base: pd.DataFrame, cand: pd.DataFrame, keys: list[tuple[str, str]]) -> dict[tuple[str, str], Difference | None]:
    """`retention_change` of every (strategy, profile) in `keys`, each row's p-value the gate's test (`two_sided_test`),
    adjusted together as the gate's are (`gate.JointFamily`, two-sided): the tags of one page are one family of claims.
    The probes of a scenario in one
    repeat share its summary, so they move together: the test's unit is that summary draw (a sign-flip test of the
    probes counted them as independent and tagged about one page of two equivalent runs in five). A row whose changed
    draws are too few for the two-sided sign-flip test ever to reach 0.05 (2 × 0.5^changed ≥ 0.05; no draw changed,
    say) is no member: it can be tagged neither way, and the test is conditional on which draws changed (Tarone's
    argument), so leaving it out keeps the page's error at 0.05 without diluting the rows that did change."""
    changes = {key: retention_change(base, cand, *key) for key in keys}
    rows = {key: change for key, change in changes.items() if change is not None}
    tests: dict[tuple[str, str], DrawTest] = {}
    for key, change in rows.items():  # the row's test is the gate's: its p and its changed draws replace the scenario-level ones
        test = two_sided_test(base, cand, *key, family=len(keys))
        rows[key] = replace(change, p_value=test.p_value if test else float("nan"), changed=test.changed if test else 0)
        if test is not None and 2 * 0.5**test.changed < TAG_ALPHA:
            tests[key] = test
    for key, adjusted in zip(tests, JointFamily(list(tests.values()), TAG_ALPHA, two_sided=True).adjusted(), strict=True):
        rows[key] = replace(rows[key], p_adjusted=adjusted)
    return {**changes, **rows}


def adjustment_note(changes: dict[tuple[str, str], Difference | None]) -> str | None:
    """What the page's "better" and "worse" tags claim, in words (None without a compared row)."""
    compared = [change for change in changes.values() if change is not None]
    if not compared:
        return None
    rows = sum(change.p_adjusted is not None for change in compared)
    family = (f"adjusted over the {rows} rows whose changed summary draws could reach it (as the gate adjusts its rows)" if rows > 1
              else "of the one row whose changed summary draws could reach it" if rows
              else "of no row: none changed enough summary draws (sessions × repeats) to reach it")
    few = min((change.scenarios for change in compared if change.scenarios), default=CLAIM_UNITS)
    return (
        "note: a retention change is tagged better or worse only when its 95% interval excludes 0 and its two-sided "
        "p-value by the gate's test (the sign-flip test of its summary draws' changes, a draw a session in one repeat), "
        f"{family}, is below 0.05 (the intervals shown are each row's own)"
        + (f". The intervals pool as few as {few} scenario{'' if few == 1 else 's'}: {few_scenarios_clause(few)}." if few < CLAIM_UNITS else ".")
    )


def flipped_probes(base: pd.DataFrame, cand: pd.DataFrame, questions: dict[tuple[str, str], tuple[str, str]]) -> list[dict[str, Any]]:
    """Probe points whose presence or answered grade differs between the runs (first repeat), the grades as the
    tables take them (`silenced`: a run whose answerer answered nothing has none, not even its overflows')."""
    base, cand = silenced(base), silenced(cand)
    keys = [k for k in [*CELL[:3], *POINT[1:]] if k in base.columns and k in cand.columns]
    columns = [c for c in ("present", "correct", "answer") if c in base.columns and c in cand.columns]

    def first(frame: pd.DataFrame) -> pd.DataFrame:
        if "repeat" in frame.columns and len(frame):
            frame = frame[frame["repeat"] == frame["repeat"].min()]
        return frame.drop_duplicates(keys)[[*keys, "kind", *columns]]

    merged = first(base).merge(first(cand), on=[*keys, "kind"], suffixes=("_a", "_b"))
    out = []
    for record in merged.to_dict("records"):
        changes = []
        for column in ("present", "correct"):
            a, b = _clean(record.get(f"{column}_a")), _clean(record.get(f"{column}_b"))
            if a is not None and b is not None and bool(a) != bool(b):
                changes.append(f"{column}: {bool(a)} → {bool(b)}")
        if changes:
            question, answer = questions.get((record["scenario"], record["probe_id"]), ("", ""))
            out.append({
                **{k: record[k] for k in keys}, "point": record.get("point_kind", record.get("point", "")), "kind": record["kind"], "changes": ", ".join(changes), "question": question, "expected": answer,
                "reply_a": str(record.get("answer_a") or ""), "reply_b": str(record.get("answer_b") or ""),
                "lost": any(c.endswith("True → False") for c in changes),
            })
    return out


def _count(value: Any) -> int:
    return 0 if value is None or isinstance(value, float) else len(value)


def changed_compactions(base: pd.DataFrame, cand: pd.DataFrame) -> list[dict[str, Any]]:
    """Compactions that differ between the runs, matched by cell and index; one row per difference."""
    keys = [*CELL, "compaction"]
    fields = ("step", "trigger", "tokens_before", "tokens_after")

    def index(frame: pd.DataFrame) -> dict[tuple, dict[str, Any]]:
        if frame.empty:
            return {}
        return {tuple(r[k] for k in keys): {str(k): v for k, v in r.items()} for r in frame.to_dict("records")}

    a, b = index(base), index(cand)
    out = []
    for key in sorted(set(a) | set(b), key=str):
        left, right = a.get(key), b.get(key)
        row = dict(zip(keys, key, strict=True))
        if left is None or right is None:
            out.append({**row, "what": "only in " + ("candidate" if left is None else "baseline"), "baseline": _describe(left), "candidate": _describe(right),
                        "summary_a": _summary(left)[:4000], "summary_b": _summary(right)[:4000]})
            continue
        diffs = [f for f in fields if _clean(left.get(f)) != _clean(right.get(f))]
        diffs += [f"{n} items" for n in ("kept", "summarized", "dropped") if _count(left.get(f"{n}_ids")) != _count(right.get(f"{n}_ids"))]
        if _summary(left) != _summary(right):
            diffs.append("summary")
        if diffs:
            out.append({**row, "what": ", ".join(diffs), "baseline": _describe(left), "candidate": _describe(right),
                        "summary_a": _summary(left)[:4000], "summary_b": _summary(right)[:4000]})
    return out


def _summary(record: dict[str, Any] | None) -> str:
    """A compaction's summary text; "" for none (a compaction that summarizes nothing stores a missing value, NaN or None)."""
    return str(_clean((record or {}).get("summary")) or "")


def _describe(record: dict[str, Any] | None) -> str:
    if record is None:
        return "–"
    return (f"step {record.get('step')} · {record.get('trigger')} · {record.get('tokens_before'):,} → {record.get('tokens_after'):,} tokens · "
            f"kept {_count(record.get('kept_ids'))}, summarized {_count(record.get('summarized_ids'))}, dropped {_count(record.get('dropped_ids'))}")


def _metric_cell(metric: str, values: pd.Series) -> dict[str, Any]:
    """One gate metric of a (strategy, profile) row: both runs' values and the change, shown as the terminal's
    `bench compare` shows them (`gate.metric_figure`, `gate.change_figure`: a cost by the dollars rule, a count
    whole, a change of an unknown cost as `NOT_COMPARABLE`)."""
    base, cand, change = (values.get(f"{metric}_{part}") for part in ("baseline", "candidate", "change"))
    return {"metric": metric, "baseline": metric_figure(base, metric), "candidate": metric_figure(cand, metric),
            "change": change_figure(change, metric), "better": METRICS[metric][1]}


#: `compared_retention`'s answer, as a caller that showed it already passes it on (the tests are the costly part).
Retention = tuple[list[tuple[str, str]], dict[tuple[str, str], Difference | None]]


def shared_probes(runs: tuple[Run, Run]) -> tuple[list[str], pd.DataFrame, pd.DataFrame]:
    """The scenarios both runs hold, and each run's probe rows in them."""
    a, b = runs[0].tables, runs[1].tables
    shared = sorted(set(a["summary"]["scenario"]) & set(b["summary"]["scenario"]))
    a_probes = a["probes"][a["probes"]["scenario"].isin(shared)] if not a["probes"].empty else a["probes"]
    b_probes = b["probes"][b["probes"]["scenario"].isin(shared)] if not b["probes"].empty else b["probes"]
    return shared, a_probes, b_probes


def compared_retention(a_probes: pd.DataFrame, b_probes: pd.DataFrame, compared: pd.DataFrame) -> Retention:
    """The (strategy, profile) rows of `compare_runs`' table, and each one's paired retention change over the shared
    scenarios' probes (`shared_probes`) with its interval and tag (`retention_changes`): what the page and
    `bench compare`'s terminal show."""
    keys = [(str(k[0]), str(k[1])) for k in (i if isinstance(i, tuple) else (i,) for i in compared.index)]
    return keys, retention_changes(a_probes, b_probes, keys) if not a_probes.empty and not b_probes.empty else {}


def render_compare(baseline: str | Path, candidate: str | Path, *, retention: Retention | None = None) -> str:
    """The page; `retention`: `compared_retention` of the same two runs, when the caller computed it already."""
    a_root, b_root = Path(baseline), Path(candidate)
    runs = (Run.load(a_root), Run.load(b_root))
    align_plugins(*runs)  # a plug-in strategy at another path in each run, as `check_comparable` paired it
    a, b = runs[0].tables, runs[1].tables
    compared = compare_runs(*runs)
    shared, a_probes, b_probes = shared_probes(runs)
    keys, changes = retention if retention is not None else compared_retention(a_probes, b_probes, compared)
    rows = []
    for (strategy, profile), (_, values) in zip(keys, compared.iterrows(), strict=True):
        change = changes.get((strategy, profile))
        metrics = [_metric_cell(m, values) for m in METRICS if f"{m}_change" in values]
        rows.append({"strategy": strategy, "profile": profile, "retention": change, "metrics": metrics})
    questions = {**_questions(a_root), **_questions(b_root)}
    flips = flipped_probes(a_probes, b_probes, questions) if not a_probes.empty and not b_probes.empty else []
    changed = changed_compactions(
        a["compactions"][a["compactions"]["scenario"].isin(shared)] if not a["compactions"].empty else a["compactions"],
        b["compactions"][b["compactions"]["scenario"].isin(shared)] if not b["compactions"].empty else b["compactions"],
    )
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATE_DIR), autoescape=True, undefined=jinja2.StrictUndefined)
    env.filters["points"] = lambda v: "–" if v is None or not np.isfinite(v) else f"{100 * v:+.1f}"
    return env.get_template("compare.html.j2").render(
        baseline=a_root.name, candidate=b_root.name, shared=shared, rows=rows, flips=flips, changed=changed,
        offline_notes=[*offline_notes(a_root, b_root), *filter(None, [adjustment_note(changes)])],
    )


def write_compare(
    baseline: str | Path, candidate: str | Path, out: str | Path, *, replace: bool = False, retention: Retention | None = None
) -> Path:
    """Write the comparison report to `out` (an existing file only with `replace`; `retention` as `render_compare`'s)."""
    return write_output(Path(out), render_compare(baseline, candidate, retention=retention), replace=replace)
