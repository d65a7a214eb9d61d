"""`-j N` scaling: the default `bench run` (the synthetic suite × every built-in strategy at the default
profile) at `-j 1` and at `-j 2`, each a fresh `bench run` process, with identical tables.

Prints each run's wall time, the CPU time of its processes (the main process and its workers,
from `getrusage(RUSAGE_CHILDREN)`), the wall ratio `-j 1` / `-j 2`, the 1-minute load average
before and after each run, and the size of each finished (lean) run folder. Issue 18 asks for a
ratio of at least 1.6 on a quiet machine; the ratio is printed, never asserted (a timing depends on
the machine's other work: on a 2-core machine it takes the second core from `-j 2`). The machine's
speed moves by a fifth from one minute to the next (`-j 1` read 58.9 s and 68.6 s in two runs of the
same code), so one pair does not decide: `BENCH_PAIRS` pairs (default 3) run one after the other,
`-j 2` then `-j 1`, and the median of their ratios is the measure, printed with the range. What is
asserted is what timing cannot change: equal tables and lean folders.

    pytest tests/benchmarks/test_jobs.py -m benchmarks --benchmark-enable -s -n 0
`COMPACTION_BENCH_JOBS_OUT=DIR` keeps the run folders (`DIR/j1-1`, `DIR/j2-1`, ...) instead of a temporary folder.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from compaction_bench.store import load_run

TARGET_RATIO = 1.6
PAIRS = int(os.environ.get("BENCH_PAIRS", "3"))


def folder_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def timed_run(out: Path, jobs: int, run_id: str) -> dict[str, float]:
    """One default `bench run` at `-j jobs` into `out/run_id`: wall seconds, CPU seconds of the processes, load averages."""
    before_load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "compaction_bench.cli", "run", "-o", str(out), "--run-id", run_id, "-j", str(jobs)],
        capture_output=True, text=True,
    )
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall": wall, "cpu": cpu, "load_before": before_load, "load_after": os.getloadavg()[0]}


@pytest.mark.slow
def test_default_run_at_j1_and_j2(tmp_path):
    tmp_path = Path(os.environ.get("COMPACTION_BENCH_JOBS_OUT") or tmp_path)
    ratios = []
    for pair in range(1, PAIRS + 1):
        two = timed_run(tmp_path, 2, f"j2-{pair}")
        one = timed_run(tmp_path, 1, f"j1-{pair}")
        ratios.append(one["wall"] / two["wall"])
        for jobs, numbers in ((1, one), (2, two)):
            print(f"\npair {pair} -j {jobs}: wall {numbers['wall']:.1f} s, CPU {numbers['cpu']:.1f} s, load average "
                  f"{numbers['load_before']:.2f} before, {numbers['load_after']:.2f} after; run folder "
                  f"{folder_bytes(tmp_path / f'j{jobs}-{pair}') / 1e6:.1f} MB")
        print(f"pair {pair}: -j 1 / -j 2 wall ratio {ratios[-1]:.2f}")
        a, b = load_run(tmp_path / f"j1-{pair}"), load_run(tmp_path / f"j2-{pair}")
        for name in ("requests", "compactions", "probes", "summary"):
            pd.testing.assert_frame_equal(a[name], b[name], check_exact=True, obj=name)
        assert not (tmp_path / f"j1-{pair}" / "cells").exists() and not (tmp_path / f"j2-{pair}" / "cells").exists()
    print(f"-j 1 / -j 2 wall ratio {statistics.median(ratios):.2f}, median of {len(ratios)} pairs ({min(ratios):.2f} to {max(ratios):.2f}) "
          f"(issue 18's target: at least {TARGET_RATIO} on a quiet machine)")
