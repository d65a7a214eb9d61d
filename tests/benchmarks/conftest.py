"""Benchmark helpers: mark this folder's tests as benchmarks, collect timings by size and print growth
exponents at the end of the session."""

from __future__ import annotations

import math
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
