"""Runs end to end: the run store's tables, resume after an interruption, failed cells, executors."""

from __future__ import annotations

import json
import re
import zipfile

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
    root, _ = run_small(tmp_path, cases, run_id="whole")
    whole = load_run(root)

    def interrupt(key, status):  # Ctrl-C right after the first cell was recorded
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        bench.run(strategies=["none", "truncate"], profiles=["32k"], cases=cases, out=tmp_path, jobs=1, run_id="r", on_cell=interrupt)
    interrupted = tmp_path / "r"
    (cell,) = (interrupted / "cells").iterdir()  # the finished cell's file, and nothing else
    assert cell.suffix == ".zip" and zipfile.is_zipfile(cell) and not (interrupted / "summary.parquet").exists()
    root2, finished = run_small(tmp_path, cases, run_id="r", resume=True)
    assert root2 == interrupted
    assert len(finished) == 1 and finished[0][1] == "done"
    after = load_run(interrupted)
    for name in ("requests", "compactions", "probes", "summary"):
        pd.testing.assert_frame_equal(whole[name], after[name], check_exact=True)
    # A finished run is lean: no folder per cell, the replay records of both cells in one archive.
    assert not (interrupted / "cells").exists() and sorted(p.name for p in (interrupted / "replays").iterdir()) == [
        "cells.parquet", "contexts.parquet", "messages.parquet"]
    assert len(pd.read_parquet(interrupted / "replays" / "cells.parquet")) == 2
    # Resuming a finished run redoes nothing and finalizes again from the merged tables.
    (interrupted / "summary.parquet").unlink()
    _, again = run_small(tmp_path, cases, run_id="r", resume=True)
    assert again == []
    pd.testing.assert_frame_equal(whole["summary"], load_run(interrupted)["summary"], check_exact=True)


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
    # from the Python API, a run with a failed cell says so: its tables hold the finished cells only
    with pytest.warns(RuntimeWarning, match=r"1 cell\(s\) failed \(first: .*exploding.*ZeroDivisionError: boom\)"):
        assert set(bench.load_run(tmp_path / "r")["requests"]["strategy"]) == {"none"}


def test_worker_processes_and_ray_give_the_same_tables_with_transcripts_sent_with_the_task(tmp_path):
    """In this process, in worker processes and on a local Ray: the same tables. The workers get the
    transcripts with the task: a Ray worker on another node cannot read the driver's paths, so the
    file is moved away once the cells start (one Ray start serves both checks)."""
    path = tmp_path / "session.jsonl"
    generate("parallel-calls", seed=4, target_tokens=12_000).transcript.write(path)

    def away(todo) -> None:
        path.rename(tmp_path / "away.jsonl")

    tables = {}
    for executor, jobs in (("inline", 1), ("local", 2), ("ray", 2)):
        root = bench.run([path], strategies=["none", "truncate"], profiles=["32k"], out=tmp_path / "runs", run_id=executor, jobs=jobs,
                         executor="ray" if executor == "ray" else "local", report=False, progress=False,
                         on_start=None if executor == "inline" else away)
        if executor != "inline":
            (tmp_path / "away.jsonl").rename(path)
        tables[executor] = load_run(root)["requests"]
    assert len(tables["inline"]) > 0
    for other in ("local", "ray"):
        pd.testing.assert_frame_equal(tables["inline"], tables[other], check_exact=True, obj=other)


def test_cells_go_out_largest_first_then_by_the_cost_learned_from_finished_cells():
    from compaction_bench.executors import execute
    from compaction_bench.runner import LargestFirst
    from compaction_bench.store import CellKey

    scenarios = {name: generate("parallel-calls", seed=3, target_tokens=tokens) for name, tokens in (("small", 12_000), ("big", 45_000))}
    by_name = {name: Case(name, s.transcript) for name, s in scenarios.items()}
    keys = [CellKey(name, strategy, "32k", 0) for name in ("small", "big") for strategy in ("cheap", "dear")]
    order = LargestFirst(keys, by_name)
    handed_out = []
    for index, _ in execute(lambda shared, i: i, [(i,) for i in range(len(keys))], priority=order, jobs=1):
        key = keys[index]
        handed_out.append((key.scenario, key.strategy))
        order.finished(key, 10.0 if key.strategy == "dear" else 0.1)
    # Nothing known yet: the big transcript first (ties in list order). Then `dear` proved 100 times as
    # costly per character, so the small transcript's `dear` cell goes before its `cheap` one.
    assert handed_out == [("big", "cheap"), ("big", "dear"), ("small", "dear"), ("small", "cheap")]


def test_the_queue_hands_out_work_in_the_order_of_a_full_scan_of_the_priorities():
    """The per-group heaps give, take after take, what scanning every pending task would: the highest
    weight × rate, then the higher weight, then the lower index, with rates that change between takes
    (zero included, and groups that share a rate)."""
    import random

    from compaction_bench.executors import _Queue

    rng = random.Random(7)
    groups = [rng.randrange(6) for _ in range(300)]
    weights = [float(rng.choice([1, 2, 3, 50, 51, 1000])) for _ in range(300)]
    rates = dict.fromkeys(range(6), 1.0)

    class Rates:
        def group(self, index):
            return groups[index]

        def weight(self, index):
            return weights[index]

        def rate(self, group):
            return rates[group]

    queue = _Queue(len(groups), Rates())
    pending = set(range(len(groups)))
    while queue:
        expected = max(pending, key=lambda i: (weights[i] * rates[groups[i]], weights[i], -i))
        assert queue.take() == expected
        pending.remove(expected)
        rates[rng.randrange(6)] = rng.choice([0.0, 0.5, 1.0, 3.0, rng.random()])
    assert not pending


def test_strategy_variants_compare_a_strategy_with_itself(tmp_path, cases):
    root, finished = run_small(tmp_path, cases, run_id="v", strategies=["truncate", "truncate@trigger_ratio=0.5,target_ratio=0.3"])
    summary = load_run(root)["summary"].set_index("strategy")
    # Compacting at half the window instead of 90% compacts more often and keeps a smaller context.
    assert summary.loc["truncate@trigger_ratio=0.5,target_ratio=0.3", "compactions"] > summary.loc["truncate", "compactions"]
    with pytest.raises(Exception, match="unknown option"):
        run_small(tmp_path, cases, run_id="w", strategies=["truncate@colour=red"])


def test_one_path_strategy_or_profile_given_alone_is_the_list_of_it(tmp_path):
    """`bench.run("session.jsonl", strategies="pi")` in a notebook: a string was iterated by its characters (unknown
    strategy 'p', file 'o' given twice); alone, each is the one-item list, with the same tables."""
    from tests.conftest import write_tiny_session

    session = write_tiny_session(tmp_path)
    common = {"out": tmp_path / "runs", "jobs": 1, "report": False, "progress": False, "probes": str(session.parent / "probes.yaml")}
    listed = load_run(bench.run([session], strategies=["truncate"], profiles=["32k"], run_id="listed", **common))
    alone = load_run(bench.run(str(session), strategies="truncate", profiles="32k", run_id="alone", **common))
    assert set(alone["summary"]["strategy"]) == {"truncate"} and set(alone["summary"]["profile"]) == {"32k"}
    for name in ("requests", "compactions", "probes", "summary"):
        pd.testing.assert_frame_equal(alone[name], listed[name], check_exact=True, obj=name)
