"""Growth of replay CPU time and peak memory with session length, per strategy (issue 18).

Each (strategy, size) replays the synthetic `short-turns` session of that many total tokens at the
`64k` profile (or `BENCH_PROFILE`) in a fresh subprocess, which reports the replay's CPU time (`time.process_time`) and
its number of compactions and its peak resident memory (`ru_maxrss`, minus the resident size right before the replay, so the
generator's and the imports' memory are not counted; the absolute peak is printed too). The
session-end summary prints, per strategy, the times, the fitted growth exponent of time against
size over all measured sizes (least squares in log-log; 1.0 is linear) and the peak memory at the
largest size. Nothing about time is asserted; a replay that fails is a test failure.

    .venv/bin/python -m pytest tests/benchmarks/test_growth.py -m benchmarks -s -n 0
    BENCH_SIZES=0.25,0.5,1,2,4 BENCH_STRATEGIES=pi,observation-masking .venv/bin/python -m pytest ...

`BENCH_SIZES` are millions of tokens (default 0.25, 0.5, 1, 2, 4: issue 18's sweep); `BENCH_STRATEGIES` a comma list of
strategy ids (default: every built-in); `BENCH_PROFILE` a context profile (default `64k`, issue 18's).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict

import pytest

from compaction_bench.registry import strategy_ids
from tests.benchmarks.conftest import growth_exponent

SIZES = [int(float(s) * 1_000_000) for s in os.environ.get("BENCH_SIZES", "0.25,0.5,1,2,4").split(",")]
STRATEGIES = [s for s in os.environ.get("BENCH_STRATEGIES", "").split(",") if s] or strategy_ids(builtin_only=True)
PROFILE = os.environ.get("BENCH_PROFILE", "64k")

CHILD = """
import json, resource, sys, time
import compaction_bench as bench
from compaction_bench.scenarios.synthetic import generate
strategy, size, profile = sys.argv[1], int(sys.argv[2]), sys.argv[3]
transcript = generate("short-turns", seed=0, target_tokens=size).transcript
bench.replay(generate("short-turns", seed=1, target_tokens=5_000).transcript, strategy, profile=profile)  # warm imports
def rss_kb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() // 1024
before = rss_kb()
started = time.process_time()
result = bench.replay(transcript, strategy, profile=profile)
cpu = time.process_time() - started
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"cpu": cpu, "peak_kb": peak, "before_kb": before, "requests": len(result.requests),
                  "compactions": len(result.compactions)}))
"""

#: issue 18's bounds: the growth exponent over 0.25M-4M, and the peak resident memory at 4M
TARGET_EXPONENT = 1.15
TARGET_PEAK_KB = 1024 * 1024
_results: dict[str, dict[int, dict[str, float]]] = defaultdict(dict)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_replay_growth(strategy, size):
    done = subprocess.run(
        [sys.executable, "-c", CHILD, strategy, str(size), PROFILE], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    row = json.loads(done.stdout.strip().splitlines()[-1])
    assert row["requests"] > 0
    _results[strategy][size] = row
    print(
        f"\n{strategy} {size:,}: {row['cpu']:.2f}s CPU, {row['requests']:,} requests, {row['compactions']:,} compactions, "
        f"peak {row['peak_kb'] / 1024:.0f} MB",
        flush=True,
    )


def summary_lines() -> list[str]:
    lines = []
    for strategy, rows in _results.items():
        times = {s: r["cpu"] for s, r in sorted(rows.items())}
        largest = rows[max(rows)]
        exponent = f"{growth_exponent(times):.2f}" if len(times) > 1 else "n/a"
        cells = "  ".join(f"{s / 1e6:g}M {t:.2f}s" for s, t in times.items())
        over = len(times) > 1 and growth_exponent(times) > TARGET_EXPONENT
        heavy = largest["peak_kb"] >= TARGET_PEAK_KB
        lines.append(
            f"{strategy:<22} {cells}  exponent {exponent}{' > 1.15' if over else ''}  peak at {max(rows) / 1e6:g}M: "
            f"{(largest['peak_kb'] - largest['before_kb']) / 1024:.0f} MB over the start ({largest['peak_kb'] / 1024:.0f} MB RSS"
            f"{', over 1 GB' if heavy else ''})"
        )
    return lines


@pytest.fixture(scope="module", autouse=True)
def _print_summary(request):
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and _results:
        reporter.write_line("")
        reporter.write_line(f"replay CPU time against session size (synthetic short-turns, {PROFILE}), fresh process per cell:")
        for line in summary_lines():
            reporter.write_line(line)
