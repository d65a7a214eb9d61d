"""Import speed: CPU time per MB of the largest recorded transcript of each corpus format (pytest-benchmark).

Per format folder of the shared corpora, its largest file is imported (`load_transcripts`: format
detection, parsing, every session of the file); the best CPU time (`time.process_time`) of the
calls is divided by the file's size. With `--benchmark-enable` pytest-benchmark repeats the call
and keeps its statistics; disabled (the default) each import runs once. The session end prints one
row per format. Speed is reported (README, section Measured), never asserted.

    .venv/bin/python -m pytest tests/benchmarks/test_import_speed.py -m benchmarks -s -n 0
"""

from __future__ import annotations

import time

import pytest

from compaction_bench.importing import load_transcripts
from tests.conftest import CORPORA, corpus_files

FORMATS = sorted(p.name for p in CORPORA.iterdir() if p.is_dir()) if CORPORA.exists() else []
_rows: list[tuple[str, str, float, float, int]] = []


@pytest.mark.corpora
@pytest.mark.parametrize("folder", FORMATS)
def test_import_cpu_per_mb(benchmark, folder):
    path = max(corpus_files(folder), key=lambda p: p.stat().st_size)
    megabytes = path.stat().st_size / 1e6
    cpu: list[float] = []

    def load():
        started = time.process_time()
        out = load_transcripts(path)
        cpu.append(time.process_time() - started)
        return out

    transcripts = benchmark(load)
    best = min(cpu)
    benchmark.extra_info.update({"megabytes": round(megabytes, 3), "cpu_seconds_per_mb": best / megabytes})
    _rows.append((folder, path.name, megabytes, best, sum(len(t.items) for t in transcripts)))
    assert transcripts and any(t.items for t in transcripts)


@pytest.fixture(scope="module", autouse=True)
def _print_rows(request):
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and _rows:
        reporter.write_line("")
        reporter.write_line("import CPU time per MB (largest file of each corpus format):")
        for folder, name, mb, seconds, items in _rows:
            reporter.write_line(f"{folder:<24} {name[:40]:<40} {mb:5.2f} MB  {items:>7,} items  {seconds:6.3f}s CPU  {seconds / mb * 1000:6.1f} ms/MB")
