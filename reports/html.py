"""The run report: `report.html`, self-contained (inline CSS, SVG and a little JavaScript; no network).

Order: the verdict per profile (`reports/verdict.py`), figures that compare strategies, the
leaderboard and the per-scenario table (sortable, filterable, a column picker, a glossary of every
column), the browser of every compaction (no row cap; each opens a drill-down with the kept,
summarized and silently dropped items themselves, the summary and the probes that went absent at
it, or "–" and why where no probe point measured that (`_unmeasured`), side by side with the other
strategies' compactions nearest the same step), the integrity
findings the strategy caused with a transcript excerpt around the orphan (the recorded session's own
orphans counted apart, `Findings`), and per scenario the context timelines as small multiples. The
glossary describes each leaderboard header by its column (`HEADERS`), so the two never differ.

Transcript-derived text reaches the page only through jinja2's autoescape or as JSON inside
`<script type="application/json">` (with `<`, `>` and `&` escaped) that the script puts into the
page with `textContent`, never as markup. A run whose page would pass `SINGLE_FILE_LIMIT` bytes (or
has more than `SINGLE_FILE_SCENARIOS` scenarios) becomes a folder: `report.html` is the index and
`report/<n>-<scenario>.html` one page per scenario.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import numpy as np
import pandas as pd
from markupsafe import Markup

from compaction_bench.arrow_lists import RowTexts
from compaction_bench.atomic import atomic_write_text
from compaction_bench.metrics.aggregate import overall
from compaction_bench.metrics.cost import DOLLAR_COLUMNS, format_dollars
from compaction_bench.reports import figures
from compaction_bench.reports.drawings import CACHE_FIGURE, Drawings
from compaction_bench.reports.leaderboard import (
    COLUMNS,
    HEADLINE,
    format_chance,
    format_value,
    leaderboard,
    offline_note,
    provider_note,
)
from compaction_bench.reports.report_files import LISTING_ID, PAGES, listed_pages, page_name, pages_folder, remove_pages
from compaction_bench.reports.verdict import ProfileVerdict, servable, verdicts
from compaction_bench.store import ID_COLUMNS, load_run_with_manifest, read_manifest

TEMPLATE_DIR = Path(__file__).parent / "templates"
#: A single-file report larger than this becomes a folder (index + one page per scenario).
SINGLE_FILE_LIMIT = 12_000_000
SINGLE_FILE_SCENARIOS = 60
#: Characters of each item's text stored in the page (the rest stays in items.parquet).
ITEM_CHARS = 2_000
SUMMARY_CHARS = 40_000
#: Integrity findings shown with an excerpt per page (all are counted; all are in requests.parquet).
MAX_FINDINGS = 300

ReportProgress = Callable[[int, int, str], None]


def json_script(data: Any) -> str:
    """JSON safe inside `<script type="application/json">`: no `<`, `>` or `&` can close the element."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=str)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def _clean(value: Any) -> Any:
    """A table's value as plain Python: None for a missing one (NaN, infinite, pandas' NA), numpy scalars unwrapped."""
    if value is pd.NA or (isinstance(value, float) and not math.isfinite(value)):
        return None
    if isinstance(value, np.generic):
        return _clean(value.item())
    return value


# --------------------------------------------------------------------------- glossary
GLOSSARY: dict[str, str] = {
    "scenario": "the transcript file the scenario came from (with the session's number when a file holds several); hover for the session id",
    "strategy": "the compaction strategy (an `ID@KEY=VALUE` variant runs a strategy with other options)",
    "profile": "the model profile: context window, tokenizer, cache rules and prices",
    "scenarios": "scenarios the row combines",
    "retention": "share of probe answers still present in the context at the paired probe points",
    "retention_lo": "lower end of the 95% interval of retention",
    "retention_hi": "upper end of the 95% interval of retention",
    "retention_kept": "share of probe answers present verbatim in a message that is not a summary, at the paired probe points (with the summary part it adds up to retention)",
    "retention_summary": "share of probe answers present only in summary text (in no message that is not a summary), at the paired probe points (with the kept part it adds up to retention)",
    "retention_summarized_source": "on the paired points whose fact's source went into a summary (and is not itself in the context), the share whose answer the summary text carries (a copy kept elsewhere does not count)",
    "paired_pairs": "paired (probe, checkpoint) points the retention is computed on",
    "paired_probes": "probes behind the paired points (each probe weighs one)",
    "summarized_source_pairs": "paired points whose fact's source had been summarized",
    "compaction_point_rows": "probe rows at the points right after a compaction (a diagnostic, not paired)",
    "retention_compaction_points": "retention at the points right after a compaction (a diagnostic, not paired)",
    "window": "whether the strategy serves the window: `cannot serve (n of m)` when a request never got through (it "
              "overflowed, or the agent would not send it) and it never recovered in n of m scenarios",
    "retention [95% CI]": "retention at the paired checkpoints with its 95% interval (probes clustered by scenario)",
    "p_best": "probability that the strategy has the highest retention (bootstrap), among the strategies that serve the window (those the "
              "verdict's sentence compares; – for a strategy flagged as unable to serve the window or breaking tool pairs in every wire format, "
              "unless every one is); a resample in which several tie for the highest counts a share for each, so a strategy that never beats the "
              "leader on any probe can still read above 0; >99.9% and <0.1% for shares a rounding would show as 100% or 0%; "
              "– (withheld) where the difference between the two highest retentions is not detectable (its interval includes 0, or the sign-flip test does not reject, "
              "as with fewer than six scenarios that differ: a scenario's probes move together): the tests cannot tell which is best, and the verdict's notes say why; "
              "per scenario (summary.parquet), judged on the scenario's summary draws, its repeats, so – with one repeat or a deterministic summarizer",
    "failed_requests": "turn and summary requests that reached no model: the provider refused them as too long (overflows), or "
                       "the agent itself did (refused_requests); tool-call pairing "
                       "violations are not counted here but in the pair errors columns (integrity_<wire format>)",
    "cannot_serve": "some step's last request never got through (it did not fit, or the agent would not send it) or the "
                    "final context would not: the strategy never recovered",
    "answered_ceiling": "answered share of the same answerer given the whole transcript at the same points: the best it can do",
    "answered_rel": "answered relative to the ceiling",
    "presence": "share of probe answers still verbatim in the context at every probe point (after each compaction and at the end)",
    "answered": "share of probe questions the answerer model got right from the context (where some answers failed, each graded point weighs for the failed points asked of the same strategies: README, Statistics)",
    "unscored": "probe points without an answered grade: no answerer, the answerer or the judge failed (at that point for some strategy, or at every question of the cell, whose overflowed contexts then go ungraded too), or a `judge` probe run without `--judge` (those are never counted as wrong)",
    "judge_strict": "share the judge model accepted under the strict rubric",
    "judge_lenient": "share the judge model accepted under the lenient rubric",
    "estimate_error": "mean signed error of the strategy's own token estimate at decision time: estimate minus the true count, in tokens "
                      "(negative: it under-counts), over the requests its rule checked (those with a threshold)",
    "estimate_ape": "mean absolute percentage error of the strategy's token estimate at decision time: |estimate − true| ÷ true over the "
                    "requests its rule checked (those with a threshold; not one sent unchecked right after a compaction), shown as a percentage",
    "missed_triggers": "requests over the strategy's threshold by the true count where its estimate did not trigger",
    "overflows": "turn requests that did not fit the window (the provider's overflow error)",
    "refused_requests": "turn and summary requests the agent itself did not send (a limit of its own, such as Claude Code "
                        "2.1's blocking limit): they reached no model, and no provider refused them",
    "cache_hit_rate": "cached input tokens over input tokens of the requests sent, after each cell's first request; over several scenarios the ratio of the sums",
    "cache_eligible_tokens": "input tokens of the requests the cache hit rate is a share of (sent, after each cell's first)",
    "cached_tokens": "input tokens served from the prompt cache",
    "rebilled_tokens": "uncached input tokens the cell had already sent as the same messages in one of its recent cache entries (a "
                       "cache hit could have saved them only where the provider caches, the entry was live and the prefix long enough; "
                       "on a model that caches nothing they are the history sent again; history sent again inside a new text, such "
                       "as a serialized summary input, is not counted)",
    "cache_write_tokens": "tokens written to the cache, where the provider bills writes (Anthropic; OpenAI's GPT-5.6 and later, up to "
                          "the breakpoint OpenAI places at a request's newest system, user or tool message)",
    "input_tokens": "input tokens of the requests sent",
    "output_tokens": "output tokens of the requests sent",
    "tokens_per_task": "input plus output tokens",
    "cost_usd": "dollars for all requests sent, summaries included, at the profile's prices (a priced summarizer model's calls at its own); "
                "unpriced: the model (or the summarizer model) has no price in litellm's map, so the dollars are unknown",
    "requests": "requests sent (turns and summaries; overflowed ones are not sent)",
    "compactions": "compactions made (masking rewrites included)",
    "silent_loss": "items a compaction removed without keeping or summarizing them",
    "premature_triggers": "compactions decided on the token threshold although the true count was under it (compactions on a "
                          "step or event count, an agent's request, an overflow or a user's command are never premature)",
    "summarizer_calls": "summarizer model calls",
    "summarizer_tokens": "input plus output tokens of the summary requests, the tokens their cost is priced on: a priced "
                         "model's own usage, else the profile's count of each request (always so for the offline summarizer)",
    "summarizer_cost_usd": "dollars spent on summaries: a summarizer model litellm prices at its own prices ($0 if listed as free), the offline "
                           "summarizer's and a model litellm does not know at the profile's, as that model would bill them; unpriced: a "
                           "model whose map entry states no price",
    "pair errors": "tool-call/result pairing violations the strategy caused, per wire format (chat / responses / anthropic / gemini)",
}
AGES = {"lt8k": "under 8k", "8k_32k": "8k–32k", "32k_128k": "32k–128k", "ge128k": "128k or more"}
PATTERNS: tuple[tuple[str, str], ...] = (
    (r"^(presence|answered|retention)_(lo|hi)$", "{1} end of the 95% interval of {0}"),
    (r"^(presence|answered|estimate_ape|retention)_n$", "observations behind {0}"),
    (r"^(presence|answered|retention)_age_(.+)$", "{0} for facts whose source lies {1} tokens before the probed context"),
    (r"^integrity_recorded_(.+)$", "pairing violations the recorded session already had ({0} wire rules)"),
    (r"^integrity_(.+)$", "pairing violations the strategy caused ({0} wire rules)"),
    (r"^(presence|answered|retention)_(.+)$", "{0} for probes of the {1} family"),
)


#: A leaderboard header means what its column means.
HEADERS = {header: column for header, column, *_ in (*HEADLINE, *COLUMNS)}


def describe(column: str) -> str:
    """What a summary or leaderboard column means (a leaderboard header: its column's meaning)."""
    name = HEADERS.get(column, column)
    key = name.replace(" ", "_")
    if name in GLOSSARY or key in GLOSSARY:
        return GLOSSARY.get(name, GLOSSARY.get(key, ""))
    for pattern, text in PATTERNS:
        match = re.match(pattern, key)
        if match:
            groups = [{"lo": "lower", "hi": "upper"}.get(g, AGES.get(g, g.replace("_", " "))) for g in match.groups()]
            return text.format(*groups)
    return "a column of summary.parquet (see docs)"


# --------------------------------------------------------------------------- tables
#: Columns of names: the page sorts them as text, never by digits a name starts with (a session id "703e4528-…").
NAME_COLUMNS = ("scenario", "strategy", "profile", "trigger")


@dataclass
class Table:
    """A table for the template: header, cell texts (the page sorts a column of names as text, `names`, any other by
    the number a cell starts with, else as text) and which columns start visible."""

    id: str
    header: list[str]
    rows: list[list[str]]
    visible: list[bool]
    titles: list[str] = field(default_factory=list)

    @property
    def names(self) -> list[bool]:
        """Per column, whether it holds names (`NAME_COLUMNS`), sorted as text."""
        return [h in NAME_COLUMNS for h in self.header]


def leaderboard_table(summary: pd.DataFrame, probes: pd.DataFrame, requests: pd.DataFrame, pooled: pd.DataFrame,
                      serving: dict[str, set[str]]) -> Table:
    header, rows = leaderboard(summary, probes, requests, pooled=pooled, serving=serving)
    return Table("leaderboard", header, rows, [True] * len(header), [describe(h) for h in header])


DEFAULT_COLUMNS = ("scenario", "strategy", "profile", "retention", "retention_lo", "retention_hi", "p_best", "answered", "compactions",
                   "overflows", "refused_requests", "failed_requests", "cannot_serve", "silent_loss", "cache_hit_rate", "rebilled_tokens", "cost_usd")


#: Columns older runs' summary tables have that the report no longer shows: a per-cell interval of the
#: estimate error, which resampled one replay's consecutive (correlated) requests as if independent
WITHDRAWN = ("estimate_ape_lo", "estimate_ape_hi")


#: Summary columns that hold a fraction their name calls a percentage: shown as one, as the leaderboard's "estimate error %" is.
PERCENT = ("estimate_ape",)


def _figure_format(column: str, value: float | None) -> str:
    """The per-scenario table's format of a number: a percentage for `PERCENT` columns, whole numbers
    with separators for whole or large values, else three decimals."""
    if column in PERCENT:
        return "{:.1%}"
    return "{:,.0f}" if value is None or float(value).is_integer() or abs(value) >= 1000 else "{:.3f}"


def scenario_table(summary: pd.DataFrame) -> Table:
    columns = [c for c in summary.columns if c not in WITHDRAWN]
    rows = []
    for record in summary.to_dict("records"):
        row = []
        for column in columns:
            value = _clean(record[column])
            if column in DOLLAR_COLUMNS and (value is not None or _clean(record.get("requests")) is not None):
                row.append(format_dollars(value))  # a cell that sent requests: missing dollars are unknown
            elif value is None or isinstance(value, (bool, str)):
                row.append("–" if value is None else str(value))
            elif isinstance(value, (int, float)):
                row.append(format_value(value, _figure_format(column, value), column))
            else:
                row.append(str(value))
        rows.append(row)
    return Table("scenarios", columns, rows, [c in DEFAULT_COLUMNS for c in columns], [describe(c) for c in columns])


# --------------------------------------------------------------------------- compactions
def _ranges(positions: Sequence[int]) -> list[list[int]]:
    """The positions sorted, as runs of consecutive positions, `[first, last]` each (a position given
    twice starts a run of its own). In arrays: a run's compactions list thousands of ids."""
    if not positions:
        return []
    ordered = np.sort(np.asarray(positions, dtype=np.int64))
    breaks = np.flatnonzero(np.diff(ordered) != 1) + 1
    firsts = ordered[np.concatenate(([0], breaks))]
    lasts = ordered[np.concatenate((breaks - 1, [len(ordered) - 1]))]
    return np.column_stack((firsts, lasts)).tolist()


def _id_lists(record: dict[str, Any], where: dict[str, int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("kept", "summarized", "dropped"):
        ids = record.get(f"{name}_ids")
        ids = [] if ids is None or isinstance(ids, float) else [str(i) for i in ids]
        positions = list(map(where.get, ids))
        known = [p for p in positions if p is not None]
        other = [i for i, p in zip(ids, positions, strict=True) if p is None][:200] if len(known) < len(ids) else []
        out[name] = {"n": len(ids), "ranges": _ranges(known), "other": other}
    return out


def _flips(probes: pd.DataFrame, questions: dict[tuple[str, str], tuple[str, str]]) -> dict[tuple, list[list[str]]]:
    """(scenario, strategy, profile, repeat, compaction) -> probes absent at that compaction's point that were present
    at their previous point, or asked there for the first time (its source came after the previous point, so the
    context the compaction started from held it). A point is a request: a checkpoint at the same request as a
    compaction point reads the same context, so it is that point, never the one before it. Not counted: a point whose
    request overflowed (`status` `not_seen`: its context reached no model; absent is what retention calls it, not
    what the compaction kept)."""
    if probes.empty or "compaction" not in probes.columns:
        return {}
    keys = ["scenario", "strategy", "profile", "repeat", "probe_id"]
    frame = probes.sort_values("request", kind="stable").reset_index(drop=True)
    contexts = frame.drop_duplicates([*keys, "request"])[[*keys, "request", "present"]]
    contexts = contexts.assign(previous=contexts.groupby(keys, sort=False)["present"].shift(1)).drop(columns="present")
    points = frame[frame["compaction"].notna()].drop_duplicates([*keys, "compaction"]).merge(contexts, on=[*keys, "request"], how="left")
    seen = points["status"] != "not_seen" if "status" in points.columns else pd.Series(True, index=points.index)
    went = points[~points["present"].astype(bool) & points["previous"].fillna(True).astype(bool) & seen]
    out: dict[tuple, list[list[str]]] = {}
    for row in went.itertuples(index=False):
        question, answer = questions.get((str(row.scenario), str(row.probe_id)), ("", ""))
        key = (str(row.scenario), str(row.strategy), str(row.profile), int(str(row.repeat)), int(float(str(row.compaction))))
        out.setdefault(key, []).append([str(row.probe_id), str(row.kind), question, answer])
    return out


#: Why the facts a compaction lost are not measured, by the code the drill-down's data carries (`_script.html.j2`'s
#: `UNMEASURED` words it): no probe was asked right after it, or its point's request reached no model, or the run
#: was written before `compactions.parquet` said which compactions have a probe point (`probed`).
NO_POINT, NOT_SEEN, UNKNOWN = "no-point", "not-seen", "unknown"


def _points_seen(probes: pd.DataFrame) -> dict[tuple, bool]:
    """(scenario, strategy, profile, repeat, compaction) -> whether the probe rows at that compaction's point read a
    context that reached a model (`status` other than `not_seen`; a run without `status` read every one), for the
    compactions with probe rows at their point: what `_flips` counts at them is measured where this is True."""
    if probes.empty or "compaction" not in probes.columns:
        return {}
    rows = probes[probes["compaction"].notna()]
    seen = rows["status"] != "not_seen" if "status" in rows.columns else pd.Series(True, index=rows.index)
    keys = ("scenario", "strategy", "profile", "repeat", "compaction")
    grouped = seen.groupby([rows[c] for c in keys], sort=False).any().reset_index()
    return {(str(s), str(t), str(p), int(r), int(c)): bool(v) for s, t, p, r, c, v in grouped.itertuples(index=False)}


def _unmeasured(record: Mapping[str, Any], key: tuple, flips: Mapping[tuple, Any], seen: Mapping[tuple, bool]) -> str | None:
    """Why what compaction `record` (`key`) lost is not measured (`NO_POINT`, `NOT_SEEN`, `UNKNOWN`), or None where it
    is, so the report never shows an unmeasured compaction as having lost nothing. A compaction has a probe point only
    if the replay gave it one (`probed`, `metrics.measure._probe_points`); where the run has no `probed` (written
    before it), one with probe rows at its point had one, and any other is unknown. A point whose request overflowed
    counts no loss (`_flips`): not measured either."""
    if key in flips:
        return None
    point = seen.get(key)
    if point is not None:
        return None if point else NOT_SEEN
    probed = _clean(record.get("probed"))
    if probed is None:
        return UNKNOWN
    return None if probed else NO_POINT


@dataclass
class Scenario:
    """One scenario of the run: its name, session id, items and page."""

    index: int
    name: str
    session_id: str
    page: str
    items: pd.DataFrame

    @property
    def anchor(self) -> str:
        return f"s{self.index}"


def _item_payload(items: pd.DataFrame) -> list[list[Any]]:
    out = []
    for row in items.itertuples(index=False):
        text = row.text if isinstance(row.text, str) else ""
        out.append([str(row.id), str(row.kind), text[:ITEM_CHARS], len(text)])
    return out


# --------------------------------------------------------------------------- integrity
@dataclass
class Findings:
    """One scenario's pairing violations: those the strategy caused (`caused`, the `integrity_<format>`
    columns), the first `MAX_FINDINGS` of them listed with an excerpt around the call id, and those the
    recorded session already had (`recorded`, the `integrity_recorded_<format>` columns: counted apart,
    never listed as the strategy's), each counted in every request sent that holds it (the final context,
    never sent, left out) and per repeat, so a mean over repeats when they differ. `unmarked`: violations
    of a run measured before each was marked as one or the other, in a request holding both kinds, so
    neither list can claim them."""

    listed: list[dict[str, Any]]
    caused: float
    recorded: float
    unmarked: int


def _is_recorded(violation: dict[str, Any], row: Mapping[Any, Any]) -> bool | None:
    """Whether the recorded session already had the violation (its mark, `metrics.measure`); for a run
    measured before violations were marked, the request's counts of its format when one is 0, else None."""
    if "recorded" in violation:
        return bool(violation["recorded"])
    fmt = violation.get("format", "")
    caused, recorded = row.get(f"integrity_{fmt}") or 0, row.get(f"integrity_recorded_{fmt}") or 0
    return False if not recorded else True if not caused else None


def integrity_findings(requests: pd.DataFrame, items: pd.DataFrame, scenario: str) -> Findings:
    """One scenario's pairing violations (`Findings`): the strategy's own listed, each with an excerpt around the call id."""
    own = requests[requests["scenario"] == scenario] if not requests.empty else requests
    if "kind" in own.columns:  # the requests sent: a final context is only probed, never sent to an API
        own = own[own["kind"] != "final"]
    caused_columns = [c for c in own.columns if c.startswith("integrity_") and not c.startswith("integrity_recorded_") and c != "integrity_detail"]
    recorded_columns = [c for c in own.columns if c.startswith("integrity_recorded_")]
    # per repeat, as the leaderboard counts them: a repeated replay finds its violations again
    repeats = max(1, own["repeat"].nunique()) if "repeat" in own.columns else 1
    caused, recorded = (float(own[columns].fillna(0).to_numpy().sum()) / repeats for columns in (caused_columns, recorded_columns))
    found = Findings([], caused, recorded, 0)
    if not caused:
        return found
    items = items[items["scenario"] == scenario] if not items.empty else items
    # each item's (kind, call id, text) by id, read once for the scenario: looking each up in the frame cost
    # seconds of a report whose requests hold thousands of items
    by_id = dict(zip(items["id"], zip(items["kind"], items["call_id"], items["text"], strict=True), strict=True)) if not items.empty else {}
    for row in own[own[caused_columns].sum(axis=1) > 0].to_dict("records"):
        try:
            detail = json.loads(row.get("integrity_detail") or "[]")
        except ValueError:
            detail = []
        for violation in detail:
            whose = _is_recorded(violation, row)
            if whose is None:
                found.unmarked += 1
            if whose is not False or len(found.listed) >= MAX_FINDINGS:
                continue
            call_id = str(violation.get("call_id", ""))
            found.listed.append({
                "strategy": row["strategy"], "profile": row["profile"], "request": row.get("request"), "step": row.get("step"),
                "format": violation.get("format", ""), "kind": violation.get("kind", ""), "call_id": call_id,
                "excerpt": _excerpt(by_id, items["id"], call_id, row.get("item_ids")),
            })
    return found


def _excerpt(by_id: Mapping[Any, tuple[Any, Any, Any]], transcript_ids: Iterable[Any], call_id: str, request_ids: Any = None) -> dict[str, Any]:
    """Items around the orphan: from the request's own item ids when the run stored them, else from the transcript's
    (`transcript_ids`, in order); `by_id` holds each item's (kind, call id, text)."""
    if not by_id:
        return {"source": "no items stored in this run", "rows": []}
    if request_ids is not None and not isinstance(request_ids, float) and len(request_ids):
        sequence, source = [str(i) for i in request_ids], "the request"
    else:
        sequence, source = [str(i) for i in transcript_ids], "the transcript"
    hits = [n for n, i in enumerate(sequence) if i in by_id and by_id[i][1] == call_id]
    if not hits:
        return {"source": source, "rows": []}
    window = range(max(0, hits[0] - 2), min(len(sequence), hits[-1] + 3))
    rows = []
    for n in window:
        item = by_id.get(sequence[n])
        text = "" if item is None or not isinstance(item[2], str) else item[2]
        rows.append({"id": sequence[n], "kind": "" if item is None else item[0], "text": text[:600] + ("…" if len(text) > 600 else ""),
                     "hit": n in hits})
    return {"source": source, "rows": rows}


# --------------------------------------------------------------------------- rendering
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATE_DIR), autoescape=True, undefined=jinja2.StrictUndefined)
    env.filters["json_script"] = lambda data: Markup(json_script(data))
    env.filters["pct"] = lambda v: "–" if v is None or not np.isfinite(v) else f"{100 * v:.1f}%"
    env.filters["chance"] = lambda v: "–" if v is None else format_chance(v)
    env.filters["num"] = lambda v, fmt="{:,.0f}": "–" if v is None or (isinstance(v, float) and not np.isfinite(v)) else format_value(v, fmt)
    env.filters["dollars"] = format_dollars
    env.globals["describe"] = describe  # a header's title is the glossary's words for its column, never words of its own
    return env


def _verdict_points(verdict: ProfileVerdict) -> pd.DataFrame:
    return pd.DataFrame(
        [{"strategy": r.strategy, "retention": r.retention, "lo": r.lo, "hi": r.hi, "cost_usd": r.cost_usd, "rebilled_tokens": r.rebilled_tokens,
          "flagged": r.flagged}
         for r in verdict.rows]
    ).set_index("strategy")


#: The manifest fields the report's pages show.
REPORT_FIELDS = ("run_id", "created", "config", "scenarios", "cells")


def render_pages(
    run_dir: str | Path, progress: ReportProgress | None = None, *, jobs: int = 1, drawings: Drawings | None = None
) -> dict[str, str]:
    """Every page of the report: {"report.html": …} or, for a large run, the index plus `report/<page>.html`.

    The figures that read the tables alone (the scenarios' context timelines, the overview's) are
    drawn by `drawings` if given (already drawing, e.g. while the run was summarized; closed here),
    else by `jobs` processes, this one included (0: one per core; `Drawings`) while the rest is built."""
    root = Path(run_dir)
    tables = load_run_with_manifest(root, python_lists=False)[0]  # the compactions' lists of ids read a row at a time (`_render`)
    manifest = read_manifest(root, required=REPORT_FIELDS)
    with drawings or Drawings(tables["requests"], tables["compactions"], tables["probes"], manifest, jobs) as drawn:
        return _render(root, manifest, tables, drawn, progress)


def _render(
    root: Path, manifest: dict[str, Any], tables: dict[str, pd.DataFrame], drawn: Drawings, progress: ReportProgress | None
) -> dict[str, str]:
    requests, compactions, summary, probes = tables["requests"], tables["compactions"], tables["summary"], tables["probes"]
    items = pd.read_parquet(root / "items.parquet") if (root / "items.parquet").is_file() else pd.DataFrame(columns=["scenario", "position", "id", "kind", "call_id", "text"])
    questions_frame = pd.read_parquet(root / "questions.parquet") if (root / "questions.parquet").is_file() else pd.DataFrame()
    questions = {(str(r.scenario), str(r.probe_id)): (str(r.question), str(r.answer)) for r in questions_frame.itertuples(index=False)}
    order = drawn.order
    sessions = {s["name"]: s.get("session_id", s["name"]) for s in manifest.get("scenarios", [])}
    recorded = list(requests["scenario"].unique()) if "scenario" in requests else []
    names = list(dict.fromkeys([s["name"] for s in manifest.get("scenarios", [])] + recorded))
    present = {*recorded, *(summary["scenario"].unique() if "scenario" in summary else ())}
    names = [n for n in names if n in present]
    report = progress or (lambda done, total, label: None)
    steps = len(names) + 2

    report(0, steps, "verdict")
    scenario_names = [s["name"] for s in manifest.get("scenarios", [])]
    # the verdict's and the leaderboard's figures, P(best) among the strategies the verdict ranks as serving the window
    serving = servable(summary, requests, scenario_names)
    pooled = overall(probes, requests, contenders=serving) if not probes.empty else pd.DataFrame()
    verdict_list = verdicts(summary, probes, requests, pooled=pooled, strategies=manifest.get("config", {}).get("strategies", ()),
                            scenarios=scenario_names)
    report(1, steps, "figures")
    overview = []
    for verdict in verdict_list:
        drawn_figures = drawn.overview(verdict.profile)  # the ones that read the tables alone
        cache = drawn_figures.pop(CACHE_FIGURE, None)
        figs = list(drawn_figures.items())
        points = _verdict_points(verdict)
        if points["retention"].notna().any():  # unpriced dollars: the re-billed tokens alone (`figures.retention_vs_cost`)
            figs.append(("Retention against cost", figures.retention_vs_cost(points, f"retention against cost · {verdict.profile}", order)))
        if cache is not None:
            figs.append((CACHE_FIGURE, cache))
        overview.append({"profile": verdict.profile, "figures": figs})

    # Compactions: one global id per row, in a stable order. Their lists of ids kept as Arrow (`load_run_with_manifest`) are
    # read a row at a time (`RowTexts`, by the row's place in the table): a masking run lists 33 M of them.
    id_rows = {name: RowTexts(compactions[name]) for name in ID_COLUMNS if name in compactions and isinstance(compactions[name].dtype, pd.ArrowDtype)}
    placed = np.arange(len(compactions))  # each row's place in `compactions`, in the report's order
    if not compactions.empty:
        keys = [c for c in ("scenario", "strategy", "profile", "repeat", "compaction") if c in compactions.columns]
        placed = compactions[keys].reset_index(drop=True).sort_values(keys).index.to_numpy()
    flips = _flips(probes, questions)
    seen = _points_seen(probes)
    scenarios: list[Scenario] = []
    items_of = _by_scenario(items)
    for n, name in enumerate(names):
        own_items = items_of.get(name, items.iloc[:0]).sort_values("position")
        scenarios.append(Scenario(n, name, str(sessions.get(name, name)), page_name(n, name), own_items))
    by_name = {s.name: s for s in scenarios}

    browser_rows = []
    rows_by_scenario: dict[str, list[dict[str, Any]]] = {s.name: [] for s in scenarios}
    data_by_scenario: dict[str, dict[str, Any]] = {s.name: {} for s in scenarios}
    where_by_scenario = {s.name: {str(i): int(p) for i, p in zip(s.items["id"], s.items["position"], strict=True)} for s in scenarios}
    records: list[dict[str, Any]] = [{str(k): v for k, v in r.items()} for r in compactions.drop(columns=list(id_rows)).take(placed).to_dict("records")]
    for cid, record in enumerate(records):
        scenario = by_name.get(record["scenario"])
        if scenario is None:
            continue
        key = (record["scenario"], record["strategy"], record["profile"], int(record.get("repeat", 0)), int(record.get("compaction", 0)))
        lost = flips.get(key, [])
        why = _unmeasured(record, key, flips, seen)
        lists = _id_lists({**record, **{name: texts[int(placed[cid])] for name, texts in id_rows.items()}}, where_by_scenario[scenario.name])
        summary_text = str(record["summary"]) if isinstance(record.get("summary"), str) else ""
        data_by_scenario[scenario.name][str(cid)] = {
            "strategy": record["strategy"], "profile": record["profile"], "repeat": key[3], "step": _clean(record.get("step")),
            "trigger": str(record.get("trigger", "")), "before": _clean(record.get("tokens_before")), "after": _clean(record.get("tokens_after")),
            "premature": bool(record.get("premature", False)), "summary": summary_text[:SUMMARY_CHARS],
            "summary_len": len(summary_text), "lists": lists, "flips": None if why else lost, **({"unmeasured": why} if why else {}),
        }
        browser_rows.append(row := {
            "id": cid, "scenario": scenario, "strategy": record["strategy"], "profile": record["profile"], "step": _clean(record.get("step")),
            "trigger": str(record.get("trigger", "")), "before": _clean(record.get("tokens_before")), "after": _clean(record.get("tokens_after")),
            "kept": lists["kept"]["n"], "summarized": lists["summarized"]["n"], "dropped": lists["dropped"]["n"],
            "flips": None if why else len(lost),  # "–": not measured, never 0
        })
        rows_by_scenario[scenario.name].append(row)

    env = _environment()
    sections = []
    findings_total = recorded_total = 0.0
    requests_of = _by_scenario(requests)
    for scenario in scenarios:
        report(2 + scenario.index, steps, scenario.name)
        findings = integrity_findings(requests_of.get(scenario.name, requests.iloc[:0]), scenario.items, scenario.name)
        findings_total += findings.caused
        recorded_total += findings.recorded
        sections.append({
            "scenario": scenario, "timelines": drawn.timelines(scenario.name), "findings": findings,
            "rows": rows_by_scenario[scenario.name],
            "data": {"scenario": scenario.name, "compactions": data_by_scenario[scenario.name], "items": _item_payload(scenario.items)},
        })

    context = {
        "manifest": manifest, "verdicts": verdict_list, "overview": overview, "leaderboard": leaderboard_table(summary, probes, requests, pooled, serving), "offline_note": offline_note(root), "provider_note": provider_note(root),
        "import_problems": [s for s in manifest.get("scenarios", []) if s.get("import_problem_count")],
        "scenario_table": scenario_table(summary), "glossary": _glossary(summary), "browser_rows": browser_rows,
        "n_compactions": len(compactions), "findings_total": findings_total, "recorded_total": recorded_total, "order": order,
        "triggers": sorted({r["trigger"] for r in browser_rows}), "profiles": sorted({r["profile"] for r in browser_rows}),
    }
    # each scenario's body (its timelines, findings and drill-down data) rendered once: the single page and the
    # scenario pages both show it; a single page holds every body, so bodies over the limit need no single page rendered
    # to know it would pass it
    body = env.get_template("_macros.html.j2").module.scenario_body  # type: ignore[attr-defined]
    for section in sections:
        section["body"] = body(section)
    bodies = sum(len(str(section["body"]).encode("utf-8")) for section in sections)
    if len(scenarios) <= SINGLE_FILE_SCENARIOS and bodies <= SINGLE_FILE_LIMIT:
        single = env.get_template("report.html.j2").render(**context, sections=sections, folder=None, listed=None)
        if len(single.encode("utf-8")) <= SINGLE_FILE_LIMIT:
            report(steps, steps, "report.html")
            return {"report.html": single}
    listed = {"id": LISTING_ID, "pages": sorted(s.page for s in scenarios)}  # what a later report removes (`report_files`)
    pages = {"report.html": env.get_template("report.html.j2").render(**context, sections=sections, folder=PAGES, listed=listed)}
    page_template = env.get_template("scenario.html.j2")
    for section, scenario in zip(sections, scenarios, strict=True):
        pages[f"{PAGES}/{scenario.page}"] = page_template.render(manifest=manifest, section=section, index="../report.html",
                                                                offline_note=context["offline_note"])
    report(steps, steps, f"report.html + {len(sections)} pages")
    return pages


def _by_scenario(frame: pd.DataFrame) -> dict[Any, pd.DataFrame]:
    """`frame`'s rows by scenario, split once (a report of hundreds of scenarios filtered its tables once per scenario)."""
    return dict(iter(frame.groupby("scenario", sort=False))) if "scenario" in frame.columns and not frame.empty else {}


def _glossary(summary: pd.DataFrame) -> list[tuple[str, str]]:
    header, _ = leaderboard(summary)
    columns = list(dict.fromkeys([*header, *(c for c in summary.columns if c not in WITHDRAWN), "p_best", "pair errors"]))
    return [(c, describe(c)) for c in columns]


def write_report(
    run_dir: str | Path, progress: ReportProgress | None = None, *, jobs: int = 1, drawings: Drawings | None = None
) -> Path:
    """Write `report.html` (and `report/` for a large run, its pages listed in `report.html`; the pages of an
    earlier report it does not have are removed, and nothing else, `report_files.remove_pages`) and return its path.
    `jobs` and `drawings` as in `render_pages`."""
    root = Path(run_dir)
    pages_folder(root)  # refused before the rendering
    pages = render_pages(root, progress, jobs=jobs, drawings=drawings)
    remove_pages(root, keep={Path(name).name for name in pages if name.startswith(f"{PAGES}/")})
    for name, html in pages.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, html)
    return root / "report.html"


def page_sizes(run_dir: str | Path) -> dict[str, int]:
    """Bytes of every written report page (for the scale benchmark): `report.html` and the pages it lists."""
    root = Path(run_dir)
    paths: Sequence[Path] = [root / "report.html", *(root / PAGES / name for name in sorted(listed_pages(root)))]
    return {str(p.relative_to(root)): p.stat().st_size for p in paths if p.is_file()}
