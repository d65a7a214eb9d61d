"""The leaderboard: one row per (strategy, profile) from a run's summary table.

Shared by the terminal summary of `bench run` and the HTML report, so both show the same numbers.
Counts are summed over scenarios; rates and errors are averaged over scenarios.
"""

from __future__ import annotations

import pandas as pd

#: (header, summary column, format, how scenarios combine)
COLUMNS = (
    ("presence", "presence", "{:.3f}", "mean"),
    ("answered", "answered", "{:.3f}", "mean"),
    ("compactions", "compactions", "{:.0f}", "sum"),
    ("overflows", "overflows", "{:.0f}", "sum"),
    ("pair errors chat", "integrity_openai_chat", "{:.0f}", "sum"),
    ("pair errors responses", "integrity_openai_responses", "{:.0f}", "sum"),
    ("pair errors anthropic", "integrity_anthropic", "{:.0f}", "sum"),
    ("silent loss", "silent_loss", "{:.0f}", "sum"),
    ("estimate error %", "estimate_ape", "{:.1%}", "mean"),
    ("premature", "premature_triggers", "{:.0f}", "sum"),
    ("cache hit", "cache_hit_rate", "{:.3f}", "mean"),
    ("re-billed tokens", "rebilled_tokens", "{:,.0f}", "sum"),
    ("summarizer tokens", "summarizer_tokens", "{:,.0f}", "sum"),
    ("cost $", "cost_usd", "{:.2f}", "sum"),
)


def format_value(value: object, fmt: str) -> str:
    """A number formatted for a table; missing values as an en dash."""
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return "–"
    try:
        return fmt.format(value)
    except (ValueError, TypeError):
        return str(value)


def leaderboard(summary: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Header and formatted rows; columns a summary lacks are left out."""
    columns = [c for c in COLUMNS if c[1] in summary.columns]
    header = ["strategy", "profile", "scenarios", *[c[0] for c in columns]]
    rows: list[list[str]] = []
    if summary.empty or not {"strategy", "profile", "scenario"} <= set(summary.columns):
        return header, rows
    for (strategy, profile), frame in summary.groupby(["strategy", "profile"], sort=False):
        row = [str(strategy), str(profile), str(frame["scenario"].nunique())]
        for _, column, fmt, how in columns:
            series = frame[column]
            row.append(format_value(series.sum() if how == "sum" else series.mean(), fmt))
        rows.append(row)
    return header, rows
