"""`load_run` gives a column that may hold None one dtype in every run: pandas reads a parquet column of booleans
with a null, or of nulls only, as Python objects. Checked on real runs of a recorded Claude Code session (7
responses, about 2,000 tokens) at a 1,500-token window, where `none` overflows and never compacts, `truncate`
compacts, and probes go unscored; the values are those the parquet files hold, read by pyarrow."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

import compaction_bench as bench
from compaction_bench.metrics.aggregate import summarize
from compaction_bench.store import NULLABLE_NUMBERS, NULLABLE_TEXTS, TEXT_DTYPE
from tests.conftest import CORPORA

SESSION = CORPORA / "claude-code-jsonl" / "d-kimuson__claude-code-viewer" / "1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl"
#: Columns of lists: Python objects by nature.
LISTS = {"summarized_ids", "kept_ids", "dropped_ids", "summary_requests"}
GRADES = ["correct", "ceiling_correct", "judge_strict", "judge_lenient", "answer_cached"]


def _run(out: Path, run_id: str, window: str, **options) -> Path:
    return bench.run([SESSION], strategies=["none", "truncate"], profiles=[f"gpt-5@{window}"], out=out, run_id=run_id, jobs=1,
                     report=False, progress=False, **options)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("runs")
    return {"graded": _run(out, "graded", "1500"), "presence": _run(out, "presence", "1500", answerer=""),
            "roomy": _run(out, "roomy", "12k")}


def _plain(value: object) -> object:
    """A cell as pyarrow's `to_pylist` gives it: None for a missing value, lists for arrays."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    return list(value) if hasattr(value, "tolist") and not isinstance(value, (int, float, bool)) else value


def test_the_runs_hold_what_the_dtypes_are_about(runs):
    tables = bench.load_run(runs["graded"])
    requests, compactions, probes = tables["requests"], tables["compactions"], tables["probes"]
    assert requests.loc[requests["strategy"] == "none", "overflow"].any()
    assert set(compactions["strategy"]) == {"truncate"}  # the `none` cell has no compaction
    assert probes["correct"].isna().any() and probes["correct"].notna().any()  # some probes unscored, some graded
    assert bench.load_run(runs["presence"])["probes"]["correct"].isna().all()  # no answerer: nothing graded
    assert bench.load_run(runs["roomy"])["compactions"].empty  # the session fits: no cell compacted


@pytest.mark.parametrize("run", ["graded", "presence", "roomy"])
def test_no_column_but_the_lists_is_objects_and_the_grades_are_nullable_booleans(runs, run):
    tables = bench.load_run(runs[run])
    for name, frame in tables.items():
        objects = {c for c in frame.columns if frame[c].dtype == object}
        assert objects <= LISTS, (name, objects)
    probes = tables["probes"]
    assert {c: str(probes[c].dtype) for c in GRADES} == dict.fromkeys(GRADES, "boolean")
    assert probes["compaction"].dtype == "float64" and probes["score"].dtype == "float64"
    assert probes["answer"].dtype == TEXT_DTYPE and probes["answer_error"].dtype == TEXT_DTYPE
    compactions = tables["compactions"]
    if len(compactions):
        assert compactions["summary"].dtype == TEXT_DTYPE  # text, also where truncate wrote no summary (every row None)
    assert [str(compactions[c].dtype) for c in ("scenario", "repeat")] == [str(TEXT_DTYPE), "int64"]  # with rows or without


@pytest.mark.parametrize("run", ["graded", "presence"])
def test_the_values_are_the_stored_ones(runs, run):
    for name, frame in bench.load_run(runs[run]).items():
        stored = pq.read_table(runs[run] / f"{name}.parquet").to_pydict()
        assert list(frame.columns) == list(stored)
        for column in frame.columns:
            assert [_plain(v) for v in frame[column].tolist()] == [_plain(v) for v in stored[column]], (name, column)


def test_unscored_probes_count_as_before(runs):
    """A grade's NA is what None was: left out of the answered share, counted as unscored by the summary."""
    tables = bench.load_run(runs["graded"])
    probes = tables["probes"]
    stored = pq.read_table(runs["graded"] / "probes.parquet").to_pydict()["correct"]
    graded = [v for v in stored if v is not None]
    assert probes["correct"].sum() == sum(graded) and probes["correct"].count() == len(graded)
    assert probes["correct"].mean() == pytest.approx(sum(graded) / len(graded))


def test_a_run_in_which_nothing_compacted_types_its_compactions_as_a_run_that_compacted(runs):
    """The empty table has every column, each with the dtype the table with rows reads back as; a number that
    may be None (`NULLABLE_NUMBERS`) is float64, what pandas reads an integer column with a null as."""
    with_rows, without = (bench.load_run(runs[run])["compactions"] for run in ("graded", "roomy"))
    assert len(with_rows) and without.empty
    assert list(without.columns) == list(with_rows.columns)
    nullable = set(NULLABLE_NUMBERS["compactions"])
    for column in with_rows.columns:
        expected = "float64" if column in nullable else str(with_rows[column].dtype)
        assert str(without[column].dtype) == expected, column
    # as stored, too, but for the columns whose every row may be None (truncate writes no summary: stored as nulls)
    # and the lists (Python objects, which pandas gives no element type)
    stored = {run: pq.read_schema(runs[run] / "compactions.parquet") for run in ("graded", "roomy")}
    for column in with_rows.columns:
        if column not in nullable | set(NULLABLE_TEXTS["compactions"]) | LISTS:
            assert stored["roomy"].field(column).type == stored["graded"].field(column).type, column


@pytest.mark.parametrize("run", ["graded", "presence", "roomy"])
def test_the_tables_load_run_gives_summarize_to_the_runs_own_summary(runs, run):
    """A notebook that filters `load_run`'s tables and summarizes them again gets what the run computed from its
    own rows: an NA grade is read as the None it was (it raised a TypeError before)."""
    tables = bench.load_run(runs[run])
    again = summarize(tables["requests"], tables["compactions"], tables["probes"])
    assert tables["probes"][GRADES].isna().any().any()  # the NAs the summary has to read
    pd.testing.assert_frame_equal(again, tables["summary"], check_dtype=False)
