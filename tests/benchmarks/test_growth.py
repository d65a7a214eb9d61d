"""Growth of replay CPU time and peak memory with session length, per strategy (issue 18).

Each (strategy, size) replays the synthetic `short-turns` session of that many total tokens at the
`64k` profile (or `BENCH_PROFILE`) in a fresh subprocess, which reports the replay's CPU time (`time.process_time`) and
its number of compactions and its peak resident memory (`VmHWM`, minus the resident size right before the replay, so the
generator's and the imports' memory are not counted; the absolute peak is printed too). The
session-end summary prints, per strategy, the times, the fitted growth exponent of time against
size over all measured sizes (least squares in log-log; 1.0 is linear) and the peak memory at the
largest size. Nothing about time is asserted; a replay that fails is a test failure.

The machine's speed drifts by up to twice within minutes, which moves one sweep's exponent by about
±0.1, so each strategy's sweep is made `BENCH_REPEATS` times (default 3), spread over the
benchmark's run (every strategy's first sweep, then every second one, ...) so that they meet the
machine in different states, each with its sizes measured in a row. The speed also moves within a
sweep (the same 4M replay took 4.75 s in one sweep and 7.5 s in the two others), so each cell also
times a fixed piece of plain Python work (`reference_seconds`, about 50 ms, touching none of the
package's memos) `REFERENCE_ROUNDS` times right before the replay and as many right after it, and
the exponent is fitted to the replay's CPU over the median of those: how the replay's cost grows in
units of the machine's speed at that moment. An exponent is fitted to each sweep, and the summary
gives their median with the lowest and highest, and the same for the raw CPU times beside it (the
times shown are the medians per size). A strategy is marked over the bound only when every sweep is,
and undecided when the sweeps fall on both sides.

    .venv/bin/python -m pytest tests/benchmarks/test_growth.py -m benchmarks -s -n 0
    BENCH_SIZES=0.25,0.5,1,2,4 BENCH_STRATEGIES=pi,observation-masking .venv/bin/python -m pytest ...

`BENCH_SIZES` are millions of tokens (default 0.25, 0.5, 1, 2, 4: issue 18's sweep); `BENCH_STRATEGIES` a comma list of
strategy ids (default: every built-in); `BENCH_PROFILE` a context profile (default `64k`, issue 18's);
`BENCH_REPEATS` how many sweeps per strategy (default 3).
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict

import pytest

from compaction_bench.registry import strategy_ids
from tests.benchmarks.conftest import ROOT, growth_exponent

SIZES = [int(float(s) * 1_000_000) for s in os.environ.get("BENCH_SIZES", "0.25,0.5,1,2,4").split(",")]
STRATEGIES = [s for s in os.environ.get("BENCH_STRATEGIES", "").split(",") if s] or strategy_ids(builtin_only=True)
PROFILE = os.environ.get("BENCH_PROFILE", "64k")
REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))
#: how many times the reference work is timed right before the replay, and again right after it
REFERENCE_ROUNDS = 3

CHILD = """
import json, resource, statistics, sys, time
import compaction_bench as bench
from tests.benchmarks.test_growth import REFERENCE_ROUNDS, reference_seconds
from tests.conftest import own_peak_rss_kb
from compaction_bench.scenarios.synthetic import generate
strategy, size, profile = sys.argv[1], int(sys.argv[2]), sys.argv[3]
transcript = generate("short-turns", seed=0, target_tokens=size).transcript
bench.replay(generate("short-turns", seed=1, target_tokens=5_000).transcript, strategy, profile=profile)  # warm imports
def rss_kb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() // 1024
references = [reference_seconds() for _ in range(REFERENCE_ROUNDS)]
before = rss_kb()
started = time.process_time()
result = bench.replay(transcript, strategy, profile=profile)
cpu = time.process_time() - started
peak = own_peak_rss_kb()
references += [reference_seconds() for _ in range(REFERENCE_ROUNDS)]
print(json.dumps({"cpu": cpu, "reference": statistics.median(references), "peak_kb": peak, "before_kb": before,
                  "requests": len(result.requests), "compactions": len(result.compactions)}))
"""


def reference_seconds() -> float:
    """CPU time of a fixed piece of plain Python work (string formatting, dictionary updates, a sort;
    about 50 ms), which reads none of the package's memos: how fast the machine runs Python right now.
    The garbage collector is off during it (the work makes no cycles): a collection of whatever the
    process holds would be timed otherwise, and the process holds more after a larger replay."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        started = time.process_time()
        counts: dict[str, int] = {}
        for n in range(150_000):
            key = f"k{n % 4099}"
            counts[key] = counts.get(key, 0) + n
        sorted(counts.items(), key=lambda item: (item[1], item[0]))
        return time.process_time() - started
    finally:
        if enabled:
            gc.enable()


#: issue 18's bounds: the growth exponent over 0.25M-4M, and the peak resident memory at 4M
TARGET_EXPONENT = 1.15
TARGET_PEAK_KB = 1024 * 1024
#: per strategy, per sweep, per size: the cell's measurements
_results: dict[str, dict[int, dict[int, dict[str, float]]]] = defaultdict(lambda: defaultdict(dict))


# collected sweep by sweep (every strategy's first sweep, then every second one, ...), each sweep's sizes in a row
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("sweep", range(REPEATS))
def test_replay_growth(sweep, strategy, size):
    done = subprocess.run(
        [sys.executable, "-c", CHILD, strategy, str(size), PROFILE], capture_output=True, text=True, check=False, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-2000:]
    row = json.loads(done.stdout.strip().splitlines()[-1])
    assert row["requests"] > 0
    _results[strategy][sweep][size] = row
    print(
        f"\n{strategy} sweep {sweep + 1} {size:,}: {row['cpu']:.2f}s CPU, {row['requests']:,} requests, {row['compactions']:,} compactions, "
        f"peak {row['peak_kb'] / 1024:.0f} MB",
        flush=True,
    )


def _exponents(sweeps: list[dict[int, dict[str, float]]], cost) -> list[float]:
    """Each complete sweep's growth exponent of `cost(row)` against size, lowest first."""
    return sorted(growth_exponent({s: cost(r) for s, r in sorted(rows.items())}) for rows in sweeps if len(rows) > 1)


def _spread(exponents: list[float]) -> str:
    if not exponents:
        return "n/a"
    spread = f" ({exponents[0]:.2f} to {exponents[-1]:.2f} over {len(exponents)} sweeps)" if len(exponents) > 1 else ""
    return f"{statistics.median(exponents):.2f}{spread}"


def summary_lines() -> list[str]:
    lines = []
    for strategy, sweeps in _results.items():
        normalized = _exponents(list(sweeps.values()), lambda row: row["cpu"] / row["reference"])
        raw = _exponents(list(sweeps.values()), lambda row: row["cpu"])
        sizes = sorted({s for rows in sweeps.values() for s in rows})
        times = {s: statistics.median(rows[s]["cpu"] for rows in sweeps.values() if s in rows) for s in sizes}
        largest = max(sizes)
        peak = max((rows[largest] for rows in sweeps.values() if largest in rows), key=lambda row: row["peak_kb"])
        verdict = ""
        if normalized:
            verdict = " > 1.15" if normalized[0] > TARGET_EXPONENT else " undecided" if normalized[-1] > TARGET_EXPONENT else ""
        cells = "  ".join(f"{s / 1e6:g}M {t:.2f}s" for s, t in times.items())
        heavy = peak["peak_kb"] >= TARGET_PEAK_KB
        lines.append(
            f"{strategy:<22} {cells}  exponent {_spread(normalized)}{verdict} (raw CPU {_spread(raw)})  peak at {largest / 1e6:g}M: "
            f"{(peak['peak_kb'] - peak['before_kb']) / 1024:.0f} MB over the start ({peak['peak_kb'] / 1024:.0f} MB RSS"
            f"{', over 1 GB' if heavy else ''})"
        )
    return lines


@pytest.fixture(scope="module", autouse=True)
def _print_summary(request):
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and _results:
        reporter.write_line("")
        reporter.write_line(
            f"replay CPU time against session size (synthetic short-turns, {PROFILE}), fresh process per cell, "
            f"median of {REPEATS} sweeps:"
        )
        for line in summary_lines():
            reporter.write_line(line)
