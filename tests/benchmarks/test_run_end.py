"""A run's end and a run of many short sessions: the parent's peak memory around the archive of the cells'
replay records, and `bench run` over the Aider history's sessions at `-j 1` and `-j 2` (the README's "Memory
of a run's end" and "Many short sessions").

The archive (`RunStore.write_archive`) is written once every cell is done, in the run's parent process: it
once held every cell's records at the same time. `test_parent_memory_around_the_archive` runs `bench.run`
(`jobs=2`, `report=False`) in a fresh process per run, on the embedded default and, when the corpora are
beside the checkout, on all 57 corpus files with `none` and `truncate` at `64k`, and prints that process's peak
RSS (`ru_maxrss`) right before and right after the archive, with the archive's CPU time. A worker's memory is
its own (`-j 2`), so the peak is the parent's.

`test_many_short_sessions` times `bench run <the Aider history> -s none -s truncate -p 64k --no-report` (one
file of 1,134 sessions, of which 473 have something to replay: 946 cells of a few requests each), where a
cell's fixed costs (storing its tables, reading them back) outweigh its replay. `BENCH_PAIRS` pairs (default
2) of `-j 1` then `-j 2`, each a fresh `bench run` process: wall time, the CPU time of the processes
and the largest process's peak RSS (`wait4`; Linux carries a process's peak across `exec`, so it is at least
the benchmark's own at the fork, printed beside it). The tables of the two settings must be equal; the
times are printed, never asserted.

    .venv/bin/python -m pytest tests/benchmarks/test_run_end.py -m benchmarks -s -n 0
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from compaction_bench.store import load_run
from tests.benchmarks.conftest import ROOT, timed_bench_run
from tests.conftest import CORPORA

AIDER_HISTORY = CORPORA / "aider-chat-history-md/Aider-AI__aider/chat-history.md"
PAIRS = int(os.environ.get("BENCH_PAIRS", "2"))


def measure_run_end(out: str, paths: list[str]) -> dict[str, float]:
    """`bench.run` into `out` in the calling process (a fresh one): its peak RSS in MB right before and right after
    the archive, the archive's CPU seconds, and the peak at the end. No paths: the embedded default, every strategy;
    else those paths with `none` and `truncate` at `64k`."""
    import compaction_bench as bench
    from compaction_bench.store import RunStore

    write_archive = RunStore.write_archive
    seen: dict[str, float] = {}

    def measured(self: RunStore, *args: object, **kwargs: object) -> None:
        seen["before"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        started = time.process_time()
        write_archive(self, *args, **kwargs)
        seen["archive_cpu"] = time.process_time() - started
        seen["after"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    RunStore.write_archive = measured
    chosen: dict[str, object] = {"strategies": ["none", "truncate"], "profiles": ["64k"]} if paths else {}
    bench.run(paths, out=out, jobs=2, report=False, progress=False, **chosen)
    seen["end"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return seen


CHILD = """
import json, sys
from tests.benchmarks.test_run_end import measure_run_end
print(json.dumps(measure_run_end(sys.argv[1], sys.argv[2:])))
"""


@pytest.mark.slow
@pytest.mark.parametrize("which", ["default", "all 57 corpus files"])
def test_parent_memory_around_the_archive(which, tmp_path):
    paths = [] if which == "default" else sorted(str(p) for p in CORPORA.glob("*/*/*") if p.is_file())
    if which != "default" and not paths:
        pytest.skip(f"{CORPORA} is not available")
    done = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "runs"), *paths], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"\n{which}: parent peak RSS {seen['before']:.0f} MB before the archive, {seen['after']:.0f} MB after it, "
          f"{seen['end']:.0f} MB at the end; the archive {seen['archive_cpu']:.2f} s of CPU")


def timed_run(out: Path, jobs: int) -> dict[str, float]:
    """`bench run` of the Aider history at `-j jobs` into `out` (`timed_bench_run`)."""
    arguments = [str(AIDER_HISTORY), "-s", "none", "-s", "truncate", "-p", "64k", "--no-report", "-j", str(jobs),
                 "-o", str(out.parent), "--run-id", out.name]
    return timed_bench_run(arguments, out.parent / f"{out.name}.stderr")


@pytest.mark.slow
def test_many_short_sessions(tmp_path):
    if not AIDER_HISTORY.exists():
        pytest.skip(f"{AIDER_HISTORY} is not available")
    for pair in range(1, PAIRS + 1):
        for jobs in (1, 2):
            numbers = timed_run(tmp_path / f"j{jobs}-{pair}", jobs)
            print(f"\npair {pair} -j {jobs}: wall {numbers['wall']:.1f} s, CPU {numbers['cpu']:.1f} s, "
                  f"peak RSS {numbers['peak']:.0f} MB (the benchmark's process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB)")
        one, two = load_run(tmp_path / f"j1-{pair}"), load_run(tmp_path / f"j2-{pair}")
        for name in ("requests", "compactions", "probes", "summary"):
            pd.testing.assert_frame_equal(one[name], two[name], check_exact=True, obj=name)
