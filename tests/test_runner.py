"""Runs end to end: the run store's tables, resume after an interruption, failed cells, executors."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

import compaction_bench as bench
from compaction_bench.runner import Case, RunError
from compaction_bench.scenarios.synthetic import generate
from compaction_bench.store import load_run


@pytest.fixture(scope="module")
def cases():
    small = generate("parallel-calls", seed=3, target_tokens=45_000)
    return [Case(small.name, small.transcript, tuple(small.probes))]


def run_small(tmp_path, cases, **kwargs):
    finished = []
    root = bench.run(
        strategies=kwargs.pop("strategies", ["none", "truncate"]),
        profiles=["32k"],
        cases=cases,
        out=tmp_path,
        jobs=kwargs.pop("jobs", 1),
        on_cell=lambda key, status: finished.append((key.strategy, status)),
        **kwargs,
    )
    return root, finished


def test_tables_have_the_documented_columns(tmp_path, cases, no_network):
    root, finished = run_small(tmp_path, cases, run_id="r")
    assert sorted(finished) == [("none", "done"), ("truncate", "done")]
    tables = load_run(root)
    keys = {"scenario", "strategy", "profile", "repeat"}
    assert keys | {"step", "turn", "true_tokens", "estimate_tokens", "overflow", "cached_tokens", "n_messages"} <= set(tables["requests"])
    assert keys | {"step", "trigger", "tokens_before", "tokens_after", "summary", "summarized_ids", "kept_ids",
                   "dropped_ids", "llm_calls", "llm_input_tokens", "llm_output_tokens"} <= set(tables["compactions"])
    assert keys | {"probe_id", "kind", "step", "present", "correct"} <= set(tables["probes"])
    assert set(tables["summary"]["strategy"]) == {"none", "truncate"}
    # `none` overflows a 32k window on a 45k-token session; truncate never does.
    summary = tables["summary"].set_index("strategy")
    assert summary.loc["none", "overflows"] > 0 and summary.loc["truncate", "overflows"] == 0
    html = (root / "report.html").read_text()
    assert "<svg" in html
    # Self-contained: nothing is loaded from anywhere (namespace URIs in SVG are names, not loads).
    assert not re.search(r"""(src|href)\s*=\s*["']https?://""", html) and "<script src" not in html and "<link" not in html
    manifest = json.loads((root / "manifest.json").read_text())
    assert manifest["cells"] == {"total": 2, "failed": []}


def test_resume_redoes_only_unfinished_cells(tmp_path, cases):
    root, _ = run_small(tmp_path, cases, run_id="r")
    before = load_run(root)["requests"]
    # An interrupted run: one cell never finished.
    (next(p for p in (root / "cells").iterdir() if "__truncate__" in p.name) / "DONE").unlink()
    (root / "summary.parquet").unlink()
    root2, finished = run_small(tmp_path, cases, run_id="r", resume=True)
    assert root2 == root
    assert finished == [("truncate", "done")]
    after = load_run(root)["requests"]
    pd.testing.assert_frame_equal(before.sort_values(["strategy", "request"]).reset_index(drop=True),
                                  after.sort_values(["strategy", "request"]).reset_index(drop=True))


def test_a_second_run_into_the_same_folder_is_refused(tmp_path, cases):
    run_small(tmp_path, cases, run_id="r", strategies=["none"])
    with pytest.raises(RunError, match="already holds a run; pass --resume"):
        run_small(tmp_path, cases, run_id="r", strategies=["none"])


def test_a_failing_cell_is_reported_and_the_others_kept(tmp_path, cases):
    from compaction_bench.strategies.baselines import NoCompaction

    class Exploding(NoCompaction):
        name = "exploding"

        def request(self):
            raise ZeroDivisionError("boom")

    from compaction_bench import registry

    registry.register_strategy(Exploding)
    try:
        with pytest.raises(RunError, match=r"1 of 2 cells failed .*ZeroDivisionError: boom"):
            run_small(tmp_path, cases, run_id="r", strategies=["none", "exploding"])
    finally:
        registry.reset()
    tables = load_run(tmp_path / "r")
    assert set(tables["requests"]["strategy"]) == {"none"}
    assert "ZeroDivisionError: boom" in (tmp_path / "r" / "errors.log").read_text()


def test_worker_processes_and_ray_give_the_same_tables(tmp_path, cases):
    inline, _ = run_small(tmp_path, cases, run_id="inline")
    pooled, _ = run_small(tmp_path, cases, run_id="pooled", jobs=2)
    on_ray, _ = run_small(tmp_path, cases, run_id="ray", jobs=2, executor="ray")
    columns = ["scenario", "strategy", "request", "true_tokens", "cached_tokens", "overflow"]
    expected = load_run(inline)["requests"][columns].sort_values(["strategy", "request"]).reset_index(drop=True)
    for other in (pooled, on_ray):
        got = load_run(other)["requests"][columns].sort_values(["strategy", "request"]).reset_index(drop=True)
        pd.testing.assert_frame_equal(expected, got)


def test_strategy_variants_compare_a_strategy_with_itself(tmp_path, cases):
    root, finished = run_small(tmp_path, cases, run_id="v", strategies=["truncate", "truncate@trigger_ratio=0.5,target_ratio=0.3"])
    summary = load_run(root)["summary"].set_index("strategy")
    # Compacting at half the window instead of 90% compacts more often and keeps a smaller context.
    assert summary.loc["truncate@trigger_ratio=0.5,target_ratio=0.3", "compactions"] > summary.loc["truncate", "compactions"]
    with pytest.raises(Exception, match="unknown option"):
        run_small(tmp_path, cases, run_id="w", strategies=["truncate@colour=red"])
