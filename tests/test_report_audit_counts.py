"""Counts the report shows mean what their labels say: found by an audit of a run's report against its tables.

A count that is a mean over repeats (0.5: a request broke tool pairs in one repeat of two) printed "0" in the
leaderboard while the verdict said the strategy breaks tool pairs; pair errors counted the final context, which is
only probed and never sent; and a scenario's integrity findings were summed over repeats."""

from __future__ import annotations

import pandas as pd

from compaction_bench.metrics.aggregate import summarize
from compaction_bench.reports.html import integrity_findings
from compaction_bench.reports.leaderboard import count_text, format_value
from tests.test_metrics_aggregate import probe_row, request_row


def test_a_count_that_is_a_mean_over_repeats_shows_its_fraction():
    assert format_value(0.5, "{:.0f}") == "0.5" and format_value(0.5, "{:,.0f}") == "0.5"
    assert count_text(2.0) == "2" and count_text(3) == "3" and count_text(12.25) == "12.2" and count_text(0.04) == "0.04"
    assert count_text(1234.5) == "1,234"  # past 1,000 a fraction changes no comparison
    assert format_value(0.5, "{:.3f}") == "0.500"  # other formats as they are


def test_pair_errors_count_the_requests_sent_not_the_final_context():
    """A turn that broke a pair, a summary request that did too, and the final context (probed, never sent)
    holding the same break: 2 pair errors, not 3. The recorded session's own break counts the same way."""
    rows = [request_row("x", 0, 1000, 0, integrity_anthropic=1, integrity_recorded_anthropic=1),
            request_row("x", 1, 1000, 0, kind="summary", integrity_anthropic=1, integrity_recorded_anthropic=1),
            request_row("x", 2, 1000, 0, kind="final", integrity_anthropic=1, integrity_recorded_anthropic=1)]
    (row,) = summarize(pd.DataFrame(rows), pd.DataFrame(), pd.DataFrame([probe_row("x", "a", True)])).to_dict("records")
    assert row["integrity_anthropic"] == 2 and row["integrity_recorded_anthropic"] == 2


def test_a_scenarios_integrity_findings_are_per_repeat():
    """Two repeats that found the same one break each, and a final context holding it: one finding per repeat."""
    rows = [{**request_row("x", 0, 1000, 0, integrity_anthropic=1, integrity_recorded_openai_chat=2), "repeat": r} for r in (0, 1)]
    rows.append({**request_row("x", 1, 1000, 0, kind="final", integrity_anthropic=1), "repeat": 0})
    found = integrity_findings(pd.DataFrame(rows), pd.DataFrame(), "s")
    assert found.caused == 1 and found.recorded == 2
