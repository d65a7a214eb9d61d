"""A cell's tables built as Arrow without pandas (`store.cell_table`) read back as the frames pandas made of the
same rows when cells were stored as parquet: a `DataFrame` of the rows, written with `to_parquet` and read with
`read_parquet` (the store of versions before the thirty-second speed pass); and cells' tables merged with one
conversion per schema (`store.merge_tables`) give the frame pandas' concatenation of those frames gave. Right
answers: pandas' own round trip and concatenation, on hand-built rows with every kind of value the metrics
write, and on the rows of real cells."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest

import compaction_bench as bench
from compaction_bench.metrics.measure import measure_cell
from compaction_bench.scenarios.synthetic import generate
from compaction_bench.store import KEY_COLUMNS, TABLES, CellKey, RunStore, StoredCell, cell_table, merge_tables

KEY = CellKey("scenario · one", "none", "32k", 2)


def through_parquet(key: CellKey, rows: list[dict]) -> pd.DataFrame:
    """What the earlier store read back: pandas' frame of the keyed rows, through a parquet file."""
    keyed = [{**key.columns(), **row} for row in rows]
    frame = pd.DataFrame(keyed) if keyed else pd.DataFrame(columns=KEY_COLUMNS)
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    buffer.seek(0)
    return pd.read_parquet(buffer)


def assert_same(expected: pd.DataFrame, got: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(got, expected, check_exact=True, check_column_type=True, check_index_type=True)
    assert list(got.dtypes) == list(expected.dtypes) and got.columns.dtype == expected.columns.dtype


HAND_BUILT = {
    "no rows": [],
    "every kind of value": [
        {"step": 0, "tokens": 10, "estimate": None, "ratio": 0.5, "whole": 2, "overflow": False, "correct": True, "answer": "yes",
         "nothing": None, "ids": ["a", "b"], "nan": float("nan")},
        {"step": 1, "tokens": 12, "estimate": 11, "ratio": 1, "whole": 3, "overflow": True, "correct": None, "answer": None,
         "nothing": None, "ids": [], "nan": 1.5},
    ],
    "a key only later rows have": [{"step": 0, "tokens": 1}, {"step": 1, "tokens": 2, "trigger": "auto"}, {"step": 2, "tokens": 3}],
    "numpy scalars": [{"step": np.int64(4), "share": np.float64(0.25), "over": np.bool_(True)},
                      {"step": np.int64(5), "share": np.float64(0.75), "over": np.bool_(False)}],
    "text that is not plain": [{"answer": "naïve — ✓ \u0000 \ud7ff", "step": 0}, {"answer": "", "step": 1}],
}


@pytest.mark.parametrize("rows", HAND_BUILT.values(), ids=HAND_BUILT.keys())
def test_a_cell_table_reads_back_as_pandas_frame_of_its_rows_did(rows):
    assert_same(through_parquet(KEY, rows), cell_table(KEY, rows).to_pandas())


def test_a_cell_files_tables_read_back_as_pandas_frames_of_real_cells_rows_did(tmp_path):
    """The rows of real cells (a synthetic session that compacts, three strategies, probes answered) stored
    in a cell file and read back."""
    session = generate("parallel-calls", seed=3, target_tokens=20_000)
    store = RunStore(tmp_path)
    for strategy in ("none", "truncate", "codex-local"):
        result = bench.replay(session.transcript, strategy, profile="32k")
        tables = measure_cell(result, list(session.probes), answerer=None)
        key = CellKey(session.name, strategy, "32k", 0)
        cell = {name: getattr(tables, name) for name in TABLES} | {"replay": {"requests": [], "messages": [], "replay": {}}}
        assert tables.requests and tables.probes  # the real rows are there to compare
        read = StoredCell(store.write_cell(key, cell)).tables()
        for name in TABLES:
            assert_same(through_parquet(key, cell[name]), read[name].to_pandas())


def concatenated(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """What the earlier store merged: the cells' frames without rows left out, concatenated by pandas."""
    kept = [frame for frame in frames if not frame.empty]
    return pd.concat(kept, ignore_index=True) if kept else pd.DataFrame(columns=KEY_COLUMNS)


#: Cells of one table by scenario name (their slugs sort as the names do), in an order that is not the slugs':
#: three schemas interleaved (a column of integers, of integers with a null, of nulls only; booleans with and
#: without a null; a column one schema lacks), and a cell without rows.
CELLS = {
    "c": [{"step": 0, "estimate": 5, "flag": True}],
    "a": [{"step": 0, "estimate": None, "flag": None}, {"step": 1, "estimate": None, "flag": None}],
    "e": [],
    "b": [{"step": 0, "estimate": 7, "flag": False}, {"step": 1, "estimate": None, "flag": True}],
    "d": [{"step": 0, "estimate": 3, "flag": True, "extra": "x"}],
    "f": [{"step": 0, "estimate": None, "flag": None}],
}


@pytest.mark.parametrize("names", [["c"], ["a", "f"], ["c", "b"], list(CELLS), ["e"]], ids=["one", "one schema", "nulls in one", "all", "no rows"])
def test_merged_cells_are_pandas_concatenation_of_their_frames_in_slug_order(names):
    keys = {name: CellKey(name, "none", "32k", 0) for name in names}
    expected = concatenated([through_parquet(keys[name], CELLS[name]) for name in sorted(names, key=lambda n: keys[n].slug)])
    assert_same(expected, merge_tables({keys[name].slug: cell_table(keys[name], CELLS[name]) for name in names}))
