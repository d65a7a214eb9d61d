"""Benchmark helpers: mark this folder's tests as benchmarks, collect timings by size and print growth
exponents at the end of the session."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

#: the checkout: the benchmarks that measure each cell in a fresh process run it here, importing from `tests.benchmarks`
ROOT = Path(__file__).resolve().parents[2]
_timings: dict[str, dict[int, float]] = defaultdict(dict)


def record_timing(name: str, size: int, seconds: float) -> None:
    _timings[name][size] = min(seconds, _timings[name].get(size, math.inf))


def growth_exponent(points: dict[int, float]) -> float:
    """Least-squares slope of log(time) against log(size)."""
    xs = [math.log(s) for s in points]
    ys = [math.log(t) for t in points.values()]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


def timed_bench_run(arguments: list[str], errors: Path) -> dict[str, float]:
    """`bench run *arguments` in a fresh process, its stderr written to `errors`: its wall seconds, and the CPU seconds
    and peak RSS in MB of it and the workers it waited for (`wait4`: the largest process's peak; Linux carries a peak
    across `exec`, so it is at least the caller's own at the fork). A run that fails fails the benchmark, with the end
    of its stderr."""
    command = [sys.executable, "-m", "compaction_bench.cli", "run", *arguments]
    started = time.monotonic()
    with errors.open("w") as stderr:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
        _, status, usage = os.wait4(process.pid, 0)
    wall = time.monotonic() - started
    assert os.waitstatus_to_exitcode(status) == 0, errors.read_text()[-3000:]
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "peak": usage.ru_maxrss / 1024}


def pytest_collection_modifyitems(config, items):
    """Everything in this folder is a benchmark: left out of the test suite unless asked for. Asked
    for, they run alone in one process (`-n 0`): timings made beside another worker, with their
    printed lines swallowed by xdist, would not mean what they say."""
    here = __file__.rpartition("/")[0]
    mine = [item for item in items if str(item.fspath).startswith(here)]
    for item in mine:
        item.add_marker(pytest.mark.benchmarks)
    asked = "benchmarks" in (config.getoption("markexpr") or "").replace("not benchmarks", "")
    if mine and asked and (config.getoption("numprocesses", None) or hasattr(config, "workerinput")):
        raise pytest.UsageError("run the benchmarks in one process: add `-n 0` (pytest-xdist is on by default)")


def pytest_terminal_summary(terminalreporter):
    for name, points in _timings.items():
        if len(points) < 2:
            continue
        sizes = ", ".join(f"{s:,}: {t:.2f}s" for s, t in sorted(points.items()))
        terminalreporter.write_line(f"{name}: {sizes}; growth exponent {growth_exponent(points):.2f} (1.0 = linear)")
