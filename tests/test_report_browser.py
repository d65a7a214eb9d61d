"""The default run's report in real headless Chromium: no console errors, the verdict, the sortable table, a
small-multiple timeline, a compaction drill-down showing item contents, every compaction reachable, a screenshot.

The default run is `bench run` with no arguments (the synthetic suite, every strategy, `64k`); it takes
a few minutes. `COMPACTION_BENCH_DEFAULT_RUN=<run folder>` reuses a finished run instead (its report is
rendered again by the code under test). `COMPACTION_BENCH_SCREENSHOT=docs/report.png` also copies the
screenshot there (the README's picture is made that way).
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

import compaction_bench as bench
from compaction_bench.reports.html import write_report
from tests.browser import load, screenshot

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def default_run(tmp_path_factory) -> Path:
    given = os.environ.get("COMPACTION_BENCH_DEFAULT_RUN")
    if given:
        copy = tmp_path_factory.mktemp("runs") / "default"
        shutil.copytree(given, copy, ignore=shutil.ignore_patterns("cells", "report", "report.html"))
        write_report(copy)
        return copy
    return bench.run(out=tmp_path_factory.mktemp("runs"), run_id="default", progress=False)


def pages(root: Path) -> list[Path]:
    """The report's pages: report.html, plus one per scenario when the run's report is a folder."""
    return [root / "report.html", *sorted((root / "report").glob("*.html"))]


def blobs(page: Path) -> list[dict]:
    text = page.read_text(encoding="utf-8")
    return [json.loads(b) for b in re.findall(r'<script type="application/json" class="cdata">(.*?)</script>', text, re.S)]


def strategies(root: Path) -> list[str]:
    return json.loads((root / "manifest.json").read_text(encoding="utf-8"))["config"]["strategies"]


def _ordered(root: Path) -> pd.DataFrame:
    compactions = pd.read_parquet(root / "compactions.parquet")
    return compactions.sort_values(["scenario", "strategy", "profile", "repeat", "compaction"]).reset_index(drop=True)


def test_the_report_loads_cleanly_with_verdict_table_and_timelines(default_run, tmp_path):
    page = load(default_run / "report.html")
    assert 'data-report-ready="1"' in page.dom
    assert not re.search(r"<html[^>]*data-js-error", page.dom)
    assert page.console == [], page.console
    verdict = page.dom[page.dom.index('id="verdict"'):page.dom.index('id="figures"')]
    assert re.search(r'<p class="sentence">At \S+, ', verdict)
    assert verdict.count("<tr") == len(strategies(default_run)) + 1  # header + one row per strategy
    leaderboard = re.search(r'<table id="leaderboard" class="sortable[^"]*">(.*?)</table>', page.dom, re.S)
    assert leaderboard and leaderboard.group(1).count("<tr>") == len(strategies(default_run)) + 1
    timelines = next(p for p in pages(default_run) if '<figure class="timeline">' in p.read_text(encoding="utf-8"))
    first = load(timelines).dom
    first = first[first.index('<figure class="timeline">'):]
    first = first[: first.index("</figure>")]
    assert first.count("<svg") == 1
    for strategy in strategies(default_run):  # one panel per strategy in the same figure
        assert re.search(rf">{re.escape(strategy)} · \d+ overflows<", first), strategy
    shot = screenshot(default_run / "report.html", tmp_path / "report.png")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000
    if os.environ.get("COMPACTION_BENCH_SCREENSHOT"):
        shutil.copy(shot, os.environ["COMPACTION_BENCH_SCREENSHOT"])


def test_a_compaction_drill_down_shows_the_items_themselves(default_run):
    ordered = _ordered(default_run)
    cid = int(ordered.index[(ordered["strategy"] == "codex-local") & (ordered["summarized_ids"].map(len) > 0)][0])
    record = ordered.loc[cid]
    items = pd.read_parquet(default_run / "items.parquet")
    items = items[items["scenario"] == record["scenario"]].set_index("id")
    holder = next(p for p in pages(default_run) if any(str(cid) in b["compactions"] for b in blobs(p)))
    page = load(holder, f"#c{cid}")
    assert page.console == [], page.console
    drill = page.dom[page.dom.index('<div id="drill">'):]
    assert f"compaction #c{cid}" in drill and 'class="card main"' in drill
    assert "summarized (" in drill and "kept verbatim (" in drill and "dropped silently (" in drill
    first = str(items.loc[str(record["summarized_ids"][0]), "text"])[:60]
    assert html.escape(first, quote=False) in drill  # the summarized item's own text
    # Side by side: other strategies' compactions in the same scenario appear as further cards.
    others = ordered[(ordered["scenario"] == record["scenario"]) & (ordered["strategy"] != "codex-local")]["strategy"].nunique()
    assert drill.count('class="card"') == others


def test_every_compaction_is_reachable(default_run):
    ordered = _ordered(default_run)
    page = (default_run / "report.html").read_text(encoding="utf-8")
    links = set(re.findall(r'<a href="[^"#]*#c(\d+)">c\1</a>', page))
    assert links == {str(n) for n in range(len(ordered))}
    assert sum(len(b["compactions"]) for p in pages(default_run) for b in blobs(p)) == len(ordered)
