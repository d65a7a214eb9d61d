"""Where a run's cell CPU goes: the README's first command (`bench run` on the embedded default, 147 cells) in one
process (`bench.run(jobs=1, report=False)`, which runs the cells inline), each cell's replay, its measurement
(`measure_cell`: probes, pairing checks, accuracy, cache, cost) and the rows of its replay records (`to_rows`) timed
apart in CPU time (`time.process_time` around each call). Prints the three sums, the rest of the run's CPU (import,
probe mining, storing and merging the cells, the summary), and each strategy's replay and measurement over its 7 cells,
largest first. The cells share the process's memos, as the cells of one worker do, so a strategy whose contexts
equal those of one measured before it is measured cheaply (`anthropic-compact`, which at `64k` never compacts, after
`none`). Nothing is asserted: these are timings.

    .venv/bin/python -m pytest tests/benchmarks/test_cell_cpu.py -m benchmarks -s -n 0
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pytest

import compaction_bench as bench
import compaction_bench.metrics.measure as measure
import compaction_bench.runner as runner


def _timed(spent: dict[str, float], part: str, function: Callable[..., Any], strategy_of: Callable[..., str]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.process_time()
        try:
            return function(*args, **kwargs)
        finally:
            seconds = time.process_time() - started
            spent[part] += seconds
            spent[f"{part} {strategy_of(*args, **kwargs)}"] += seconds
    return wrapper


@pytest.mark.slow
def test_default_run_cell_cpu(tmp_path, monkeypatch):
    spent: dict[str, float] = defaultdict(float)
    monkeypatch.setattr(runner, "replay", _timed(spent, "replay", runner.replay, lambda transcript, name, **_: str(name)))
    monkeypatch.setattr(measure, "measure_cell", _timed(spent, "measure", measure.measure_cell, lambda result, *_, **__: result.strategy))
    monkeypatch.setattr(runner, "to_rows", _timed(spent, "records", runner.to_rows, lambda result: result.strategy))
    started = time.process_time()
    bench.run(out=tmp_path, jobs=1, report=False, progress=False)
    total = time.process_time() - started
    cells = spent["replay"] + spent["measure"] + spent["records"]
    print(f"\nthe default run at -j 1: {total:.1f} s of CPU; replay {spent['replay']:.1f} s, measurement {spent['measure']:.1f} s, "
          f"replay records {spent['records']:.1f} s, the rest {total - cells:.1f} s")
    strategies = sorted({key.split(" ", 1)[1] for key in spent if key.startswith("replay ")},
                        key=lambda s: -(spent[f"replay {s}"] + spent[f"measure {s}"]))
    for strategy in strategies:
        print(f"  {strategy:<26} replay {spent[f'replay {strategy}']:5.2f} s  measurement {spent[f'measure {strategy}']:5.2f} s")
