"""The run report: one self-contained `report.html` (inline CSS and SVG, no server, no network).

It shows the leaderboard (the summary table per strategy and profile), then per scenario and
profile a context-tokens timeline with compaction points and the window line, and the
compactions with what each kept, summarized and dropped.
"""

from __future__ import annotations

import json
from pathlib import Path

import jinja2
import pandas as pd

from bench.atomic import atomic_write_text
from bench.profiles import PROFILES
from bench.store import load_run
from reports.figures import context_timeline

TEMPLATE_DIR = Path(__file__).parent / "templates"

LEADERBOARD_COLUMNS = (
    ("presence", "presence", "{:.3f}"),
    ("answered", "answered", "{:.3f}"),
    ("compactions", "compactions", "{:.0f}"),
    ("overflows", "overflows", "{:.0f}"),
    ("integrity violations", "integrity_violations", "{:.0f}"),
    ("silent losses", "silent_losses", "{:.0f}"),
    ("estimate error %", "estimate_ape_mean", "{:.1f}"),
    ("cache hit rate", "cache_hit_rate", "{:.3f}"),
    ("re-billed tokens", "rebilled_tokens", "{:,.0f}"),
    ("summarizer tokens", "summarizer_tokens", "{:,.0f}"),
    ("cost $", "cost_usd", "{:.4f}"),
)


def _fmt(value, fmt: str) -> str:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return "–"
    try:
        return fmt.format(value)
    except (ValueError, TypeError):
        return str(value)


def leaderboard(summary: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    columns = [c for c in LEADERBOARD_COLUMNS if c[1] in summary.columns]
    header = ["strategy", "profile", "scenarios", *[c[0] for c in columns]]
    rows: list[list[str]] = []
    if summary.empty or not {"strategy", "profile"} <= set(summary.columns):
        return header, rows
    for (strategy, profile), frame in summary.groupby(["strategy", "profile"], sort=False):
        row = [strategy, profile, str(frame["scenario"].nunique())]
        for _, column, fmt in columns:
            series = frame[column]
            value = series.sum() if column in ("compactions", "overflows", "integrity_violations", "silent_losses", "rebilled_tokens", "summarizer_tokens", "cost_usd") else series.mean()
            row.append(_fmt(value, fmt))
        rows.append(row)
    return header, rows


def _compaction_rows(compactions: pd.DataFrame, limit: int = 400) -> list[dict[str, str]]:
    rows = []
    for record in compactions.head(limit).to_dict("records"):
        def count(column: str) -> int:
            value = record.get(column)
            return len(value) if value is not None and not isinstance(value, float) else 0

        rows.append(
            {
                "scenario": record.get("scenario", ""),
                "strategy": record.get("strategy", ""),
                "profile": record.get("profile", ""),
                "step": _fmt(record.get("step"), "{:.0f}"),
                "trigger": str(record.get("trigger", "")),
                "before": _fmt(record.get("tokens_before"), "{:,.0f}"),
                "after": _fmt(record.get("tokens_after"), "{:,.0f}"),
                "summarized": str(count("summarized_ids")),
                "kept": str(count("kept_ids")),
                "dropped": str(count("dropped_ids")),
                "summary": summary[:1500] if isinstance(summary := record.get("summary"), str) else "",
            }
        )
    return rows


def render_report(run_dir: str | Path) -> str:
    root = Path(run_dir)
    tables = load_run(root)
    manifest = json.loads((root / "manifest.json").read_text(encoding="utf-8"))
    requests, compactions, summary = tables["requests"], tables["compactions"], tables["summary"]
    header, rows = leaderboard(summary)
    figures = []
    if not requests.empty:
        for (scenario, profile), frame in requests.groupby(["scenario", "profile"], sort=False):
            points = compactions[(compactions["scenario"] == scenario) & (compactions["profile"] == profile)] if not compactions.empty else compactions
            profile_info = PROFILES.get(profile)
            figures.append(
                {
                    "scenario": scenario,
                    "profile": profile,
                    "svg": context_timeline(frame, points, profile_info.context_window if profile_info else None, f"{scenario} · {profile}"),
                }
            )
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATE_DIR), autoescape=True, undefined=jinja2.StrictUndefined)
    return env.get_template("report.html.j2").render(
        manifest=manifest,
        header=header,
        rows=rows,
        figures=figures,
        compactions=_compaction_rows(compactions) if not compactions.empty else [],
        n_compactions=len(compactions),
    )


def write_report(run_dir: str | Path) -> Path:
    root = Path(run_dir)
    return atomic_write_text(root / "report.html", render_report(root))
