"""The leaderboard: one row per (strategy, profile), ordered as the verdict ranks them: the strategies that serve the
window first (`verdict.servable`), then those it flags (a step never got a request through, or every wire format's
pairing broken), each group by headline retention (a strategy without retention last, ties by name).

Shared by the terminal summary of `bench run` and the HTML report, so both show the same numbers; the
terminal shows the columns that fit its width with every cell whole, most telling first
(`terminal_columns`), and names the others.
Within each group, strategies are ordered by retention at the paired checkpoints
(`compaction_bench.metrics.aggregate`: pairs every strategy has, each probe weighted equally;
overflowed contexts count as absent), with its 95% interval (probes clustered by scenario), the
kept and summary parts, the summary-dependent retention, the number of pairs, P(best) (among the
strategies the verdict ranks as serving the window, `verdict.servable`; "–" for a flagged one, and where
`aggregate.overall` withholds it: the two highest retentions it ranks differ by no detectable difference;
a share of resamples as a percentage that never rounds onto 0% or 100%, `format_chance`), failed
requests next to it, and a mark on strategies that cannot serve the window (some step never got a
request through). With the probes table the figures pool all scenarios' probes; from the summary
alone they are probe-weighted means of the scenario rows, with an interval only for one scenario.
Counts, tokens and dollars are summed over scenarios (each a cell's mean over its repeats; dollars with an
unknown part, a model without a price in litellm's map, show as `unpriced`, never as $0); the cache hit
rate and the estimate error are pooled (each scenario's rate weighted by what it is a share of,
`aggregate.combine`). Given the
requests table, every column covers the scenarios in which each strategy of the profile finished
its cell (`aggregate.shared_scenarios`), as the verdict does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd

from compaction_bench.errors import BenchError
from compaction_bench.llm import DEFAULT_ANSWERER, DEFAULT_SUMMARIZER, is_offline
from compaction_bench.metrics.aggregate import combine, overall, shared_scenarios, unfinished
from compaction_bench.metrics.cost import DOLLAR_COLUMNS, format_dollars
from compaction_bench.registry import strategy_class
from compaction_bench.reports.verdict import servable
from compaction_bench.store import read_manifest

#: The headline columns, from `aggregate.overall` (or the summary): (header, column, format).
HEADLINE = (
    ("kept", "retention_kept", "{:.3f}"),
    ("summary", "retention_summary", "{:.3f}"),
    ("summarized-source retention", "retention_summarized_source", "{:.3f}"),
    ("pairs", "paired_pairs", "{:,.0f}"),
    ("P(best)", "p_best", ""),  # a share of resamples: `format_value` shows it by `format_chance`'s own rule
    ("answered", "answered", "{:.3f}"),
    ("answerer ceiling", "answered_ceiling", "{:.3f}"),
    ("answered / ceiling", "answered_rel", "{:.2f}"),
)
#: (header, summary column, format, how scenarios combine)
COLUMNS = (
    ("failed requests", "failed_requests", "{:.0f}", "sum"),
    ("compactions", "compactions", "{:.0f}", "sum"),
    ("overflows", "overflows", "{:.0f}", "sum"),
    ("refused by agent", "refused_requests", "{:.0f}", "sum"),
    ("pair errors chat", "integrity_openai_chat", "{:.0f}", "sum"),
    ("pair errors responses", "integrity_openai_responses", "{:.0f}", "sum"),
    ("pair errors anthropic", "integrity_anthropic", "{:.0f}", "sum"),
    ("pair errors gemini", "integrity_gemini", "{:.0f}", "sum"),
    ("silent loss", "silent_loss", "{:.0f}", "sum"),
    ("estimate error %", "estimate_ape", "{:.1%}", "mean"),
    ("premature", "premature_triggers", "{:.0f}", "sum"),
    ("cache hit", "cache_hit_rate", "{:.3f}", "mean"),
    ("re-billed tokens", "rebilled_tokens", "{:,.0f}", "sum"),
    ("summarizer tokens", "summarizer_tokens", "{:,.0f}", "sum"),
    ("cost $", "cost_usd", "", "sum"),  # dollars: `format_value` formats them by `cost.format_dollars`' own rule
)
CANNOT_SERVE = "cannot serve"
#: The terminal's choice among the columns, most telling first (`terminal_columns`); the others follow in table order.
TERMINAL_PRIORITY = (
    "strategy", "profile", "retention [95% CI]", "window", "P(best)", "answered", "pair errors chat", "pair errors responses",
    "pair errors anthropic", "pair errors gemini", "overflows", "failed requests", "compactions", "silent loss", "cost $", "scenarios", "pairs",
)


def format_value(value: object, fmt: str, column: str = "") -> str:
    """A number formatted for a table; missing values as an en dash, dollars (`column` one of
    `DOLLAR_COLUMNS`) by `cost.format_dollars`'s own rule, whatever `fmt` (unknown ones as `unpriced`),
    and P(best) (`CHANCE_COLUMNS`) by `format_chance`."""
    if column in DOLLAR_COLUMNS:
        return format_dollars(value)
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return "–"
    if column in CHANCE_COLUMNS:
        return format_chance(float(cast(float, value)))
    try:
        return count_text(value, fmt) if fmt in WHOLE_FORMATS else fmt.format(value)
    except (ValueError, TypeError):
        return str(value)


#: Formats of whole numbers: counts and token totals.
WHOLE_FORMATS = ("{:.0f}", "{:,.0f}")
#: Columns holding a bootstrap's share of resamples (`format_chance`).
CHANCE_COLUMNS = ("p_best",)
#: The finest step `format_chance` shows (one decimal of a percentage).
CHANCE_STEP = 0.001


def format_chance(value: float) -> str:
    """A share of bootstrap resamples (P(best)) as a percentage with one decimal, never rounded onto a bound it did
    not reach: 0.9996 is ">99.9%" (not "100.0%": some resamples ranked another strategy first) and 0.0004 "<0.1%";
    exactly 0 and 1 (no resample, or every one; a strategy alone) are "0%" and "100%"; NaN (withheld) is "–"."""
    if not np.isfinite(value):
        return "–"
    if value in (0.0, 1.0):
        return f"{value:.0%}"
    if value > 1 - CHANCE_STEP:
        return f">{1 - CHANCE_STEP:.1%}"
    if value < CHANCE_STEP:
        return f"<{CHANCE_STEP:.1%}"
    return f"{value:.1%}"


def count_text(value: Any, fmt: str = "{:,.0f}") -> str:
    """A count in a whole-number format, unless it is a mean over repeats that is not whole: then its fraction
    shows (one decimal; two significant digits below 0.1), as a count of 0.5 printed "0" would say a failure never
    happened. Past 1,000 a fraction changes nothing a reader compares, and the count shows whole."""
    if isinstance(value, (float, np.floating)):
        number = float(value)
        if not number.is_integer() and abs(number) < 1000:
            return f"{number:.2g}" if abs(number) < 0.1 else f"{number:,.1f}"
    return fmt.format(value)


def _from_summary(frame: pd.DataFrame) -> dict[str, float]:
    """Headline figures of one (strategy, profile) from its scenario rows: probe-weighted means."""
    out: dict[str, float] = {}
    weights = frame["paired_probes"].fillna(0) if "paired_probes" in frame.columns else pd.Series(1.0, index=frame.index)
    for column in ["retention", *(c for _, c, _ in HEADLINE)]:
        if column not in frame.columns:
            continue
        values = frame[column]
        if column == "paired_pairs":
            out[column] = float(values.sum())
            continue
        usable = values.notna() & (weights > 0)
        out[column] = float((values[usable] * weights[usable]).sum() / weights[usable].sum()) if usable.any() else float("nan")
    if len(frame) == 1:
        out.update({k: float(frame[k].iloc[0]) for k in ("retention_lo", "retention_hi", "p_best") if k in frame.columns})
    else:
        out["p_best"] = float("nan")  # ranks across scenarios need the probes table
    return out


def _interval(values: dict[str, float]) -> str:
    if "retention" not in values or pd.isna(values["retention"]):
        return "–"
    low, high = values.get("retention_lo"), values.get("retention_hi")
    if low is None or high is None or pd.isna(low) or pd.isna(high):
        return f"{values['retention']:.3f}"
    return f"{values['retention']:.3f} [{low:.2f}, {high:.2f}]"


def leaderboard(
    summary: pd.DataFrame, probes: pd.DataFrame | None = None, requests: pd.DataFrame | None = None, *, pooled: pd.DataFrame | None = None,
    serving: dict[str, set[str]] | None = None,
) -> tuple[list[str], list[list[str]]]:
    """Header and formatted rows, within each profile the strategies that serve the window first (`verdict.servable`,
    as the verdict ranks them), each group best retention first; columns a summary lacks
    are left out. Pass the run's probes table for intervals and P(best) over several scenarios, and
    its requests table so the pairs are the verdict's (a strategy that ran in a scenario without
    leaving probe rows there unpairs that scenario's points; `aggregate.paired`); `serving` is
    `servable(summary, requests)` and `pooled` `overall(probes, requests, contenders=serving)` when the caller has them."""
    headline = [c for c in HEADLINE if c[1] in summary.columns]
    columns = [c for c in COLUMNS if c[1] in summary.columns]
    header = ["strategy", "profile", "scenarios", "window", "retention [95% CI]", *[c[0] for c in headline], *[c[0] for c in columns]]
    rows: list[tuple[tuple[str, bool, bool, float, str], list[str]]] = []
    if summary.empty or not {"strategy", "profile", "scenario"} <= set(summary.columns):
        return header, []
    summary = shared_scenarios(summary, unfinished(requests))  # the scenarios every strategy of the profile finished, as in `overall`
    serving = serving if serving is not None else servable(summary, requests)
    if pooled is None and probes is not None and not probes.empty:
        pooled = overall(probes, requests, contenders=serving)
    pooled = pooled.set_index(["strategy", "profile"]) if pooled is not None and not pooled.empty else None
    for key, frame in summary.groupby(["strategy", "profile"], sort=False):
        strategy, profile = cast(tuple[str, str], key)
        values: dict[str, float]
        if pooled is not None and (strategy, profile) in pooled.index:
            pooled_row = cast(pd.Series, pooled.loc[(strategy, profile)])
            values = {str(k): float(v) for k, v in pooled_row.items() if isinstance(v, (int, float))}
        else:
            values = _from_summary(frame)
        failing = int(frame["cannot_serve"].astype(bool).sum()) if "cannot_serve" in frame.columns else 0
        window = "ok" if not failing else f"{CANNOT_SERVE} ({failing} of {frame['scenario'].nunique()})"
        row = [str(strategy), str(profile), str(frame["scenario"].nunique()), window, _interval(values)]
        row += [format_value(values.get(column), fmt, column) for _, column, fmt in headline]
        for _, column, fmt, how in columns:
            row.append(format_value(combine(frame, column, how), fmt, column))
        retention = values.get("retention", float("nan"))
        flagged = strategy not in serving.get(str(profile), set())
        rows.append(((str(profile), bool(pd.isna(retention)), flagged, 0.0 if pd.isna(retention) else -retention, str(strategy)), row))
    profiles = list(dict.fromkeys(str(p) for p in summary["profile"]))
    rows.sort(key=lambda entry: (profiles.index(entry[0][0]), *entry[0][1:]))  # the verdict's order (`verdict.verdicts`)
    return header, [row for _, row in rows]


def column_width(header: list[str], rows: list[list[str]], k: int) -> int:
    """The width that shows every cell of column `k` whole: its longest cell, or its header's longest word
    if longer (a header wraps at its spaces)."""
    return max([len(row[k]) for row in rows] + [len(word) for word in header[k].split()])


def terminal_columns(header: list[str], rows: list[list[str]], width: int) -> list[int]:
    """The indices of the columns a table `width` characters wide shows with every cell whole, each column
    `column_width` wide plus three characters of padding and rule (the table one more): the first of
    `TERMINAL_PRIORITY` (then the rest, in table order) while they fit, in table order."""
    ranked = [header.index(name) for name in TERMINAL_PRIORITY if name in header]
    ranked += [k for k in range(len(header)) if k not in ranked]
    shown: list[int] = []
    used = 1
    for k in ranked:
        needed = column_width(header, rows, k) + 3
        if not shown or used + needed <= width:  # the first, the strategy's name, always
            shown.append(k)
            used += needed
    return sorted(shown)


def offline_note(run_dir: str | Path) -> str | None:
    """What the figures measure when the run's summarizer or answerer is an offline heuristic, else None."""
    config = read_manifest(run_dir).get("config", {}) if (Path(run_dir) / "manifest.json").is_file() else {}
    summarizer = str(config.get("summarizer") or DEFAULT_SUMMARIZER)
    answerer = str(config.get("answerer", DEFAULT_ANSWERER) or "")
    notes = []
    if is_offline(summarizer):
        notes.append(
            f"summaries were written by {summarizer}, a deterministic extractive heuristic that copies salient lines; "
            "'summary' retention measures that heuristic, not what a model would write (use --summarizer MODEL for that)."
        )
    if answerer and is_offline(answerer):
        notes.append(
            f"'answered' was graded with {answerer}, a deterministic heuristic that quotes the context line most like the question; "
            "it measures what that matching finds, not what a model would answer (use --answerer MODEL for that)."
        )
    return "note: " + " ".join(notes) if notes else None


def provider_note(run_dir: str | Path) -> str | None:
    """The strategies of the run that only one provider's own API runs (`Strategy.provider_only`: Anthropic's
    server-side edits) and the run's profiles of another provider, where their cost and cache figures follow that
    provider's billing and caching, which no real API offers with them; None when there are none."""
    manifest = read_manifest(run_dir) if (Path(run_dir) / "manifest.json").is_file() else {}
    profiles = {str(name): str(definition.get("provider") or "") for name, definition in (manifest.get("profiles") or {}).items()}
    needs: dict[str, list[str]] = {}
    for name in map(str, (manifest.get("config") or {}).get("strategies") or ()):
        try:
            provider = strategy_class(name).provider_only
        except BenchError:  # a plug-in no longer where the run found it: nothing to say of it
            continue
        if provider:
            needs.setdefault(provider, []).append(name)
    notes = []
    for provider, strategies in needs.items():
        others = [f"{profile} ({other or 'no provider'})" for profile, other in profiles.items() if other != provider]
        if others:
            notes.append(f"only {provider}'s API runs {' and '.join(strategies)}; at {', '.join(others)} their cost and cache "
                         f"figures follow that provider's billing and caching, which no real API offers with them: compare "
                         f"their cost at a profile whose provider is {provider}.")
    return "note: " + " ".join(notes) if notes else None


def offline_notes(*run_dirs: str | Path) -> list[str]:
    """The runs' `offline_note`s, each once (comparable runs share theirs)."""
    return list(dict.fromkeys(note for note in map(offline_note, run_dirs) if note))
