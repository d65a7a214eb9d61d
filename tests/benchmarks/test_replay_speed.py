"""Replay speed: `truncate` on synthetic sessions of 0.5M, 1M and 2M total tokens (pytest-benchmark).

Each size is one benchmark; the session-end hook in `conftest.py` prints the growth exponent of
replay time against session size (1.0 is linear). Run with statistics:

    .venv/bin/python -m pytest tests/benchmarks -m benchmarks --benchmark-enable -n 0
With benchmarks disabled (the default test run) each replay runs once, as a plain test.
"""

from __future__ import annotations

import time

import pytest

import compaction_bench as bench
from compaction_bench.scenarios.synthetic import generate
from tests.benchmarks.conftest import record_timing

SIZES = (500_000, 1_000_000, 2_000_000)


@pytest.mark.parametrize("target_tokens", SIZES)
def test_truncate_replay_time(benchmark, target_tokens):
    scenario = generate("short-turns", seed=0, target_tokens=target_tokens)
    timings: list[float] = []

    def replay_once():
        started = time.perf_counter()
        result = bench.replay(scenario.transcript, "truncate", profile="64k")
        timings.append(time.perf_counter() - started)
        return result

    result = benchmark(replay_once)
    record_timing("truncate replay", target_tokens, min(timings))
    benchmark.extra_info["target_tokens"] = target_tokens
    assert len(result.turn_requests) == len(scenario.transcript.steps())
    assert result.compactions, "a session this long must compact at 64k"
