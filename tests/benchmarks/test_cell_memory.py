"""Peak memory of a whole `bench run` cell of the 4M-token session, per strategy (issue 18: "the 4M-token
session stays under 1 GB for each").

`test_growth.py` weighs `replay()` alone; a cell of `bench run` also mines the session's probes, measures
the replay, stores its records for `bench score`, merges the tables and archives the records. Here the
synthetic `short-turns` session of `BENCH_SIZE` million tokens (default 4) is written to a JSONL file once, and
`bench run <file> -s <strategy> -p 64k -j 1 --no-report` runs in a fresh process per strategy: its peak RSS
(`wait4`: the largest process's), its wall and CPU time, how many compactions it recorded and the size of its
run folder are printed, never asserted. Linux carries a process's peak RSS across `exec`, so a child's peak is
at least its parent's at the fork: the session is generated in a child process and the benchmark's own process
reads no run's tables (the compactions are counted from the parquet file's metadata), so it stays far below any
cell's peak.

    .venv/bin/python -m pytest tests/benchmarks/test_cell_memory.py -m benchmarks -s -n 0
    BENCH_STRATEGIES=none,codex-remote-v2 BENCH_SIZE=1 .venv/bin/python -m pytest ...

`BENCH_STRATEGIES` is a comma list of strategy ids (default: every built-in).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from compaction_bench.registry import strategy_ids
from tests.benchmarks.conftest import timed_bench_run

SIZE = int(float(os.environ.get("BENCH_SIZE", "4")) * 1_000_000)
STRATEGIES = [s for s in os.environ.get("BENCH_STRATEGIES", "").split(",") if s] or strategy_ids(builtin_only=True)


WRITE_SESSION = """
import sys
from compaction_bench.scenarios.synthetic import generate
with open(sys.argv[1], "w", encoding="utf-8") as out:
    out.write(generate("short-turns", 0, target_tokens=int(sys.argv[2])).transcript.dumps())
"""


@pytest.fixture(scope="module")
def session_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The `short-turns` session of `SIZE` tokens as a JSONL transcript, written by a child process."""
    path = tmp_path_factory.mktemp("session") / f"short-turns-{SIZE / 1_000_000:g}m.jsonl"
    subprocess.run([sys.executable, "-c", WRITE_SESSION, str(path), str(SIZE)], check=True)
    return path


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


@pytest.mark.slow
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_whole_cell_memory(strategy: str, session_file: Path, tmp_path: Path) -> None:
    arguments = [str(session_file), "-s", strategy, "-p", "64k", "-j", "1", "--no-report", "-o", str(tmp_path), "--run-id", "cell"]
    numbers = timed_bench_run(arguments, tmp_path / "stderr.txt")
    compactions = pq.ParquetFile(tmp_path / "cell" / "compactions.parquet").metadata.num_rows
    print(f"\n{strategy}: peak RSS {numbers['peak']:.0f} MB, wall {numbers['wall']:.1f} s, CPU {numbers['cpu']:.1f} s, "
          f"{compactions} compactions, run folder {folder_bytes(tmp_path / 'cell') / 2**20:.1f} MB "
          f"(the benchmark's process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB)")
