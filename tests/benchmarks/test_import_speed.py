"""Import speed: seconds per MB of the largest recorded Claude Code transcript (pytest-benchmark).

Run with `pytest tests/benchmarks --benchmark-enable` for statistics; with benchmarks disabled
(the default) the import runs once as a plain test. Speed is reported (README), never asserted.
"""

from __future__ import annotations

import time

import pytest

from compaction_bench.importing import load_transcripts
from tests.conftest import corpus_files


@pytest.mark.corpora
def test_claude_code_import_speed_per_mb(benchmark):
    path = max(corpus_files("claude-code-jsonl"), key=lambda p: p.stat().st_size)
    megabytes = path.stat().st_size / 1e6
    started = time.perf_counter()
    transcripts = benchmark(load_transcripts, path)
    elapsed = time.perf_counter() - started
    stats = getattr(benchmark, "stats", None)
    best = stats.stats.min if stats else elapsed
    benchmark.extra_info.update({"megabytes": round(megabytes, 3), "seconds_per_mb": best / megabytes})
    print(f"\n{path.name}: {megabytes:.2f} MB, {best / megabytes * 1000:.1f} ms/MB, {megabytes / best:.1f} MB/s")
    assert transcripts and len(transcripts[0].items) > 500
