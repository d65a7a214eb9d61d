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

from compaction_bench.atomic import atomic_write_text
from compaction_bench.profiles import PROFILES
from compaction_bench.reports.figures import context_timeline
from compaction_bench.reports.leaderboard import format_value, leaderboard
from compaction_bench.store import load_run

TEMPLATE_DIR = Path(__file__).parent / "templates"
#: At most this many context timelines (the scenarios with the most requests).
MAX_TIMELINES = 40


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
                "step": format_value(record.get("step"), "{:.0f}"),
                "trigger": str(record.get("trigger", "")),
                "before": format_value(record.get("tokens_before"), "{:,.0f}"),
                "after": format_value(record.get("tokens_after"), "{:,.0f}"),
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
    groups = list(requests.groupby(["scenario", "profile"], sort=False)) if not requests.empty else []
    # A corpus of many short sessions would make thousands of figures: draw the longest ones.
    groups.sort(key=lambda group: -len(group[1]))
    for (scenario, profile), frame in groups[:MAX_TIMELINES]:
        points = compactions[(compactions["scenario"] == scenario) & (compactions["profile"] == profile)] if not compactions.empty else compactions
        profile_info = PROFILES.get(profile)
        window = profile_info.context_window if profile_info else None
        figures.append({"scenario": scenario, "profile": profile, "svg": context_timeline(frame, points, window, f"{scenario} · {profile}")})
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATE_DIR), autoescape=True, undefined=jinja2.StrictUndefined)
    return env.get_template("report.html.j2").render(
        manifest=manifest,
        header=header,
        rows=rows,
        figures=figures,
        compactions=_compaction_rows(compactions) if not compactions.empty else [],
        n_compactions=len(compactions),
        n_timelines=len(groups),
    )


def write_report(run_dir: str | Path) -> Path:
    root = Path(run_dir)
    return atomic_write_text(root / "report.html", render_report(root))
