"""Reading a large run back: `bench.load_run` (pytest-benchmark), rendering its report and scoring it again (issue 18).

The run is `COMPACTION_BENCH_SCALE_RUN` when set (the run over all 57 corpus files that
`test_report_scale.py` describes: 1,392 sessions, 2,784 cells), else the README's first command's
run, made here once (`bench run` on the embedded default, 147 cells, `-j 2`, about a minute).
`load_run` is timed over several rounds; the report is rendered once, into a copy of the run's
tables, and the run is scored once (`bench.score`) into a new folder, so the named run is never
written to. Printed, not asserted: these are timings.

    .venv/bin/python -m pytest tests/benchmarks/test_load_run.py -m benchmarks --benchmark-enable -s -n 0
    COMPACTION_BENCH_SCALE_RUN=runs/all57 .venv/bin/python -m pytest tests/benchmarks/test_load_run.py ...
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import compaction_bench as bench
from compaction_bench.reports.html import write_report

NAMED = os.environ.get("COMPACTION_BENCH_SCALE_RUN")


@pytest.fixture(scope="module")
def large_run(tmp_path_factory) -> Path:
    if NAMED:
        return Path(NAMED)
    out = tmp_path_factory.mktemp("runs")
    done = subprocess.run(
        [sys.executable, "-m", "compaction_bench.cli", "run", "-j", "2", "--no-report", "-o", str(out), "--run-id", "default"],
        capture_output=True, text=True, check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return out / "default"


def folder_megabytes(root: Path) -> float:
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file()) / 1e6


def test_load_run(benchmark, large_run):
    tables = benchmark.pedantic(bench.load_run, args=(large_run,), rounds=10, iterations=1, warmup_rounds=1)
    rows = {name: len(frame) for name, frame in tables.items()}
    benchmark.extra_info.update(rows)
    print(f"\nload_run of {large_run.name} ({folder_megabytes(large_run):.1f} MB on disk): "
          + ", ".join(f"{name} {count:,} rows" for name, count in rows.items()))
    assert rows["requests"] > 0 and rows["summary"] > 0


def test_report_rendering(large_run, tmp_path):
    copy = tmp_path / large_run.name  # the report is written beside the tables: render into a copy
    shutil.copytree(large_run, copy, ignore=shutil.ignore_patterns("report*", ".lock"))
    cpu, wall = time.process_time(), time.perf_counter()
    write_report(copy)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    pages = list(copy.rglob("*.html"))
    print(f"\nreport of {large_run.name}: {wall:.1f} s wall, {cpu:.1f} s CPU (this process), {len(pages):,} pages, "
          f"{sum(p.stat().st_size for p in pages) / 1e6:.1f} MB")
    assert (copy / "report.html").is_file()


def test_score(large_run, tmp_path):
    """`bench score` of the run: every cell measured again from its stored records, into a new folder (no report)."""
    cpu, wall = time.process_time(), time.perf_counter()
    scored = bench.score(large_run, out=tmp_path / "scored", report=False)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    cells = len(bench.load_run(scored)["summary"])
    print(f"\nscore of {large_run.name}: {wall:.1f} s wall, {cpu:.1f} s CPU, {cells:,} cells ({1000 * cpu / cells:.1f} ms CPU per cell)")
    assert cells > 0
