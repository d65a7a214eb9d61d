"""`compaction_bench.load_run` from a notebook user's side: the four tables the README documents, with the columns it
names typed as numbers, a plain row index, one summary row per cell whatever the repeats, and a clear refusal of a
folder whose tables are missing or not written yet."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import compaction_bench as bench
from compaction_bench.metrics.integrity import FORMATS
from compaction_bench.runner import Case
from compaction_bench.scenarios.synthetic import generate
from compaction_bench.store import StoreError
from tests.conftest import write_tiny_session

KEYS = ["scenario", "strategy", "profile", "repeat"]
#: Columns the README's run layout names, by table, that hold numbers (or booleans).
NUMERIC = {
    "requests": ["repeat", "step", "turn", "true_tokens", "estimate_tokens", "threshold", "overflow", "estimate_on_recorded_usage",
                 "cached_tokens", "prefix_tokens", "cache_write_tokens", "rebilled_tokens", "n_messages", "cost_usd",
                 *(f"integrity_{fmt}" for fmt in FORMATS), *(f"integrity_recorded_{fmt}" for fmt in FORMATS)],
    "compactions": ["repeat", "step", "tokens_before", "tokens_after", "silent_loss", "premature", "estimate_on_recorded_usage",
                    "llm_calls", "llm_input_tokens", "llm_output_tokens", "llm_cost_usd"],
    "probes": ["repeat", "step", "request", "present", "source_summarized", "in_summary", "fact_age_tokens"],
    "summary": ["retention", "retention_lo", "retention_hi", "retention_kept", "retention_summary", "paired_pairs", "paired_probes",
                "p_best", "failed_requests", "cannot_serve", "answered", "answered_lo", "answered_hi", "answered_ceiling", "answered_rel",
                "retention_compaction_points", "compaction_point_rows", "estimate_ape", "estimate_ape_n", "cache_hit_rate",
                "rebilled_tokens", "cost_usd", "summarizer_tokens", "silent_loss", "overflows", "premature_triggers", "missed_triggers"],
}
#: Columns the README names that hold text or lists.
OTHER = {
    "requests": ["kind", "usage_source", "integrity_detail"],
    "compactions": ["trigger", "summary", "summarized_ids", "kept_ids", "dropped_ids", "summary_requests"],
    "probes": ["probe_id", "kind", "point_kind", "status", "found", "correct", "ceiling_correct"],
    "summary": [],
}


@pytest.fixture(scope="module")
def compacting_run(tmp_path_factory) -> Path:
    """A run in which every strategy compacts: a 60k-token synthetic session at the 32k window."""
    scenario = generate("short-turns", seed=0, target_tokens=60_000)
    return bench.run(strategies=["truncate", "codex-local"], profiles=["32k"], cases=[Case(scenario.name, scenario.transcript, tuple(scenario.probes))],
                     out=tmp_path_factory.mktemp("runs"), run_id="compacting", jobs=1, report=False, progress=False)


def tiny_run(folder: Path, run_id: str, **options) -> Path:
    session = write_tiny_session(folder) if not (folder / "tiny.jsonl").exists() else folder / "tiny.jsonl"
    return bench.run([session], strategies=["none", "truncate"], profiles=["32k"], out=folder / "runs", run_id=run_id, jobs=1,
                     report=False, progress=False, probes=str(folder / "probes.yaml"), **options)


def test_the_tables_are_the_four_documented_with_their_columns_typed(compacting_run):
    tables = bench.load_run(compacting_run)
    assert set(tables) == {"requests", "compactions", "probes", "summary"}
    for name, frame in tables.items():
        assert isinstance(frame, pd.DataFrame) and len(frame), name
        assert isinstance(frame.index, pd.RangeIndex) and frame.index.start == 0, name  # rows, not a key
        keys = KEYS if name != "summary" else KEYS[:3]  # the summary is one row per (scenario, strategy, profile)
        assert frame.columns[: len(keys)].tolist() == keys, name
        assert set(frame["strategy"]) == {"truncate", "codex-local"}, name
        missing = [c for c in [*NUMERIC[name], *OTHER[name]] if c not in frame.columns]
        assert not missing, (name, missing)
        not_numbers = {c: str(frame[c].dtype) for c in NUMERIC[name] if not pd.api.types.is_numeric_dtype(frame[c])}
        assert not not_numbers, (name, not_numbers)
    summary = tables["summary"]
    assert not summary.duplicated(KEYS[:3]).any()
    # no column of the summary is text but its keys: every figure can be compared, sorted and plotted as it is
    assert [c for c in summary.columns if not pd.api.types.is_numeric_dtype(summary[c])] == KEYS[:3]
    # a number a table stores is the number the summary adds up: the cost of every request sent, per strategy
    requests = tables["requests"]
    for strategy, row in summary.set_index("strategy").iterrows():
        sent = requests[(requests["strategy"] == strategy) & ~requests["overflow"]]
        assert row["cost_usd"] == pytest.approx(sent["cost_usd"].sum())
        assert row["compactions"] == (tables["compactions"]["strategy"] == strategy).sum() > 0


def test_a_run_with_repeats_has_its_rows_per_repeat_and_one_summary_row_per_cell(tmp_path):
    """The tiny session has two recorded responses: two turn requests and the final context per repeat."""
    tables = bench.load_run(tiny_run(tmp_path, "twice", repeats=2))
    requests = tables["requests"]
    assert requests.groupby(["strategy", "repeat"]).size().to_dict() == {(s, r): 3 for s in ("none", "truncate") for r in (0, 1)}
    assert set(tables["probes"]["repeat"]) == {0, 1}
    summary = tables["summary"].set_index("strategy")
    assert sorted(summary.index) == ["none", "truncate"]  # one row per cell, not per repeat
    assert summary["requests"].to_dict() == {"none": 2, "truncate": 2}  # per repeat: the mean over the two, not their sum
    assert summary["retention"].to_dict() == {"none": 1.0, "truncate": 1.0}  # the deploy key stays in so short a session


def test_a_folder_missing_a_table_is_refused_by_name(tmp_path):
    root = tiny_run(tmp_path, "r")
    (root / "probes.parquet").unlink()
    with pytest.raises(StoreError, match=r"probes\.parquet is missing \(an unfinished run\? finish it with `bench run --resume`\)"):
        bench.load_run(root)


def test_a_run_interrupted_before_its_tables_were_written_is_refused_until_resumed(tmp_path):
    def stop_after_first_cell(key, status):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        tiny_run(tmp_path, "r", on_cell=stop_after_first_cell)
    root = tmp_path / "runs" / "r"
    assert (root / "manifest.json").is_file() and (root / "cells").is_dir()  # one cell finished, nothing merged
    with pytest.raises(StoreError, match=r"requests\.parquet is missing"):
        bench.load_run(root)
    tiny_run(tmp_path, "r", resume=True)
    assert set(bench.load_run(root)["summary"]["strategy"]) == {"none", "truncate"}


@pytest.mark.parametrize("what", ["missing", "file", "no manifest"])
def test_a_path_that_is_no_run_folder_is_refused_with_what_it_is(tmp_path, what):
    path = tmp_path / "x"
    if what == "file":
        path.write_text("")
    elif what == "no manifest":
        path.mkdir()
    expected = {"missing": "no such run folder", "file": "is a file, not a run folder", "no manifest": r"not a run folder \(no manifest.json\)"}
    with pytest.raises(StoreError, match=expected[what]):
        bench.load_run(path)


def test_a_run_in_which_nothing_compacted_has_a_compactions_table_with_its_columns(tmp_path, compacting_run):
    # the tiny session fits the window: no strategy compacts, and the table still has every column a compacting
    # run's has (a notebook reading `tables["compactions"]["step"]` gets an empty column, not a KeyError)
    empty = bench.load_run(tiny_run(tmp_path, "nothing"))["compactions"]
    full = bench.load_run(compacting_run)["compactions"]
    assert empty.empty and len(full)
    assert list(empty.columns) == list(full.columns)


def test_a_summary_written_before_p_best_was_judged_has_it_withheld_until_scored_again(tmp_path):
    """A run finalized before P(best) was withheld where no difference can be claimed holds per-scenario P(best) that
    read as certainties no test backs (the audit: 126 of 126 rows of such a run withheld when computed again, the
    report showing 0.071 and 0 beside a glossary saying they are withheld). Its manifest lacks the mark, or holds the
    earlier rule's `true` (a scenario's probes counted as independent units, where now its summary draws are), so
    `load_run` withholds them all and says why; `bench score` computes them again and marks the run with the current
    rule (`P_BEST_RULE`)."""
    import json

    from compaction_bench.store import P_BEST_JUDGED, P_BEST_RULE

    root = tiny_run(tmp_path, "old")
    manifest_path = root / "manifest.json"
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    assert manifest[P_BEST_JUDGED] == P_BEST_RULE
    summary = pd.read_parquet(root / "summary.parquet")
    summary["p_best"] = 0.75  # what an older rule could have stored
    summary.to_parquet(root / "summary.parquet")
    assert (bench.load_run(root)["summary"]["p_best"] == 0.75).all()  # a judged run's summary is read as stored
    for mark in (True, None):  # the earlier rule's mark, then none
        if mark is None:
            del manifest[P_BEST_JUDGED]
        else:
            manifest[P_BEST_JUDGED] = mark
        manifest_path.write_text(json.dumps(manifest), encoding="utf-8")
        with pytest.warns(RuntimeWarning, match="bench score"):
            tables = bench.load_run(root)
        assert tables["summary"]["p_best"].isna().all(), mark
    scored = bench.score(root, progress=False, report=False)  # into a new folder beside the run
    assert json.loads((scored / "manifest.json").read_text(encoding="utf-8"))[P_BEST_JUDGED] == P_BEST_RULE
    assert "p_best" in bench.load_run(scored)["summary"].columns
