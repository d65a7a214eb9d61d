"""The terminal summary of a run with `--repeat N` says its counts are per repeat, as the report does: a
"compactions 85" that is the mean of two repeats' 85 and 85 would otherwise read as a total of 85."""

from __future__ import annotations

import pandas as pd

from tests.conftest import bench_cli, write_tiny_session

NOTE = "note: counts, tokens and dollars are per repeat (the mean over the 2 repeats), summed over the scenarios"


def test_a_repeated_run_says_its_counts_are_per_repeat(tmp_path):
    session = write_tiny_session(tmp_path)
    twice = bench_cli("run", str(session), "-s", "truncate", "-p", "32k", "--repeat", "2", "-o", str(tmp_path), "--run-id", "r")
    assert twice.returncode == 0, twice.stderr
    assert NOTE in twice.stdout + twice.stderr
    assert sorted(pd.read_parquet(tmp_path / "r" / "requests.parquet")["repeat"].unique()) == [0, 1]
    once = bench_cli("run", str(session), "-s", "truncate", "-p", "32k", "-o", str(tmp_path), "--run-id", "once")
    assert once.returncode == 0 and "per repeat" not in once.stdout + once.stderr
