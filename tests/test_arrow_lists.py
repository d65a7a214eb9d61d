"""Lists of repeated texts held dictionary-encoded (`compaction_bench.arrow_lists`) and the compactions table's lists of
ids stored so (`store.ID_COLUMNS`). Right answers: the hand-built lists themselves, and what pandas' and Arrow's own
conversions (`to_pandas`, `from_pandas`, `read_parquet`) make of the same lists stored as plain strings — the tables
every earlier version wrote."""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import compaction_bench as bench
from compaction_bench import arrow_lists
from compaction_bench.arrow_lists import TEXT_LIST, RowTexts, frame_of, is_text_list, text_lists, write_frame
from compaction_bench.metrics.measure import measure_cell
from compaction_bench.records import KeptIds, to_rows
from compaction_bench.scenarios.synthetic import generate
from compaction_bench.store import ID_COLUMNS, CellKey, RunStore, StoredCell, cell_table, load_run

#: Rows of one column: lists that share texts, an empty list, a missing one (None), a text that is not plain.
LISTS = [["call_1", "call_2", "m-3"], [], None, ["call_2", "naïve — ✓"], ["m-3"], ["call_1"] * 3]


def plain(values: list) -> pa.Array:
    return pa.array(values, type=pa.list_(pa.string()))


def rows_of(frame: pd.DataFrame, column: str) -> list:
    return [None if value is None else list(value) for value in frame[column]]


def assert_same_frame(got: pd.DataFrame, expected: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(got, expected, check_exact=True)
    for column in expected.columns:  # a list per row, NumPy arrays of str as `to_pandas` makes them
        for mine, theirs in zip(got[column], expected[column], strict=True):
            assert type(mine) is type(theirs)
            if isinstance(theirs, np.ndarray):
                assert mine.dtype == theirs.dtype and mine.tolist() == theirs.tolist()


def test_text_lists_hold_each_distinct_text_once_and_read_back_as_given():
    column = text_lists(LISTS)
    assert column.type == TEXT_LIST and is_text_list(column.type)
    assert column.to_pylist() == LISTS
    assert sorted(column.values.dictionary.to_pylist()) == sorted({"call_1", "call_2", "m-3", "naïve — ✓"})
    assert column.null_count == 1


@pytest.mark.parametrize(
    "chunks",
    [[LISTS], [LISTS[:2], LISTS[2:]], [LISTS[4:], LISTS[:4]]],
    ids=["one chunk", "two chunks, each its own dictionary", "two chunks in another order"],
)
def test_a_frame_of_dictionary_encoded_lists_is_the_frame_to_pandas_makes_of_plain_ones(chunks):
    encoded = pa.table({"n": pa.chunked_array([pa.array(range(len(c))) for c in chunks]),
                        "ids": pa.chunked_array([text_lists(c) for c in chunks]),
                        "after": pa.chunked_array([pa.array([str(i) for i in range(len(c))]) for c in chunks])})
    expected = pa.table({"n": encoded.column("n"), "ids": pa.chunked_array([plain(c) for c in chunks]), "after": encoded.column("after")})
    got = frame_of(encoded)
    assert_same_frame(got, expected.to_pandas())
    assert rows_of(got, "ids") == [row for c in chunks for row in c]
    assert list(got.columns) == ["n", "ids", "after"]


def test_row_texts_give_each_row_of_a_column_kept_as_arrow_as_a_numpy_array_of_str():
    column = arrow_lists_of([LISTS[:2], LISTS[2:]])  # two chunks, each with a dictionary of its own
    rows = RowTexts(column)
    assert len(rows) == len(LISTS)
    got = [rows[n] for n in range(len(LISTS))]
    assert [None if ids is None else ids.tolist() for ids in got] == LISTS
    assert all(ids is None or (ids.dtype == object and all(type(i) is str for i in ids)) for ids in got)
    with pytest.raises(IndexError):
        rows[len(LISTS)]
    # a slice's rows (the offsets of a slice do not start at 0), a missing list backed by values among them
    values = pa.DictionaryArray.from_arrays(pa.array([0, 1, 1, 0, 2], pa.int32()), pa.array(["a", "b", "c"]))
    lists = pa.ListArray.from_arrays(pa.array([0, 2, 4, 5], pa.int32()), values, mask=pa.array([False, True, False]))
    sliced = RowTexts(pa.chunked_array([lists.slice(1, 2)]))
    assert sliced[0] is None and sliced[1].tolist() == ["c"]


def test_a_slice_of_a_column_reads_its_own_rows_a_missing_list_backed_by_values_too():
    """A missing list can still span values in its array (Arrow allows it; `flatten` leaves them out): the rows
    after it must not take them."""
    values = pa.DictionaryArray.from_arrays(pa.array([0, 1, 1, 0, 2], pa.int32()), pa.array(["a", "b", "c"]))
    lists = pa.ListArray.from_arrays(pa.array([0, 2, 4, 5], pa.int32()), values, mask=pa.array([False, True, False]))
    assert lists.to_pylist() == [["a", "b"], None, ["c"]]
    table = pa.table({"ids": lists}).slice(1, 2)
    assert rows_of(frame_of(table), "ids") == [None, ["c"]]


def test_a_table_without_rows_or_without_lists_converts_as_to_pandas_does():
    empty = pa.table({"ids": text_lists([]), "n": pa.array([], pa.int64())})
    assert_same_frame(frame_of(empty), empty.to_pandas())
    numbers = pa.table({"n": [1, 2]})
    assert_same_frame(frame_of(numbers), numbers.to_pandas())


def arrow_lists_of(chunks: list[list]) -> pd.Series:
    """A column of lists held as Arrow (`frame_of(..., python_lists=False)`), each chunk with a dictionary of its own."""
    return pd.Series(pd.arrays.ArrowExtensionArray(pa.chunked_array([text_lists(c) for c in chunks])))


def test_a_frame_of_lists_kept_as_arrow_holds_the_tables_own_data():
    table = pa.table({"n": pa.chunked_array([pa.array([0, 1]), pa.array([2, 3, 4, 5])]),
                      "ids": pa.chunked_array([text_lists(LISTS[:2]), text_lists(LISTS[2:])])})
    got = frame_of(table, python_lists=False)
    assert isinstance(got["ids"].dtype, pd.ArrowDtype) and got["ids"].dtype.pyarrow_dtype == TEXT_LIST
    assert pa.array(got["ids"].array).equals(table.column("ids"))  # the same chunks, dictionaries and indices
    assert_same_frame(got.drop(columns="ids"), frame_of(table).drop(columns="ids"))


@pytest.mark.parametrize("held", ["python", "arrow"], ids=["lists as Python objects", "lists kept as Arrow, two chunks"])
@pytest.mark.parametrize("group_texts", [1 << 22, 3, 1], ids=["one row group", "about three texts a group", "a row a group"])
def test_a_frame_written_with_its_lists_encoded_reads_back_as_pandas_own_parquet_file_does(group_texts, held, tmp_path):
    frame = pd.DataFrame({"n": range(len(LISTS)), "ids": pd.Series(LISTS, dtype=object), "other": [[1, 2]] * len(LISTS),
                          "text": [None, None, "a", None, "b", None]})
    written = tmp_path / "encoded.parquet"
    write_frame(frame if held == "python" else frame.assign(ids=arrow_lists_of([LISTS[:3], LISTS[3:]])), written,
                ["ids", "not a column"], group_texts=group_texts)
    stored = pq.read_table(written)
    assert stored.schema.field("ids").type == TEXT_LIST and stored.schema.field("other").type == pa.list_(pa.int64())
    groups = pq.ParquetFile(written).metadata.num_row_groups
    # texts per row 3, 0, 0, 2, 1, 3: a group takes as many rows as fit the bound (a row without texts fits any), at
    # least one: 3 → rows 0–2, 3–4, 5; 1 → rows 0, 1–2, 3, 4, 5
    assert groups == {1 << 22: 1, 3: 3, 1: 5}[group_texts]
    frame.to_parquet(tmp_path / "plain.parquet", index=False)
    expected = pd.read_parquet(tmp_path / "plain.parquet")
    assert_same_frame(frame_of(stored), expected)
    assert_same_frame(pd.read_parquet(written), expected)  # a reader of the file with pandas alone


def test_a_frame_without_lists_or_rows_or_with_a_list_missing_as_nan_is_written_as_pandas_writes_it(tmp_path):
    """NaN is how pandas' concatenation fills a list column one of the frames lacks."""
    frames = (pd.DataFrame({"n": [1, 2], "text": ["a", None]}), pd.DataFrame({"ids": pd.Series([], dtype=object)}),
              pd.DataFrame({"ids": pd.Series([["a", "b"], np.nan, ["b"]], dtype=object)}))
    for frame in frames:
        write_frame(frame, tmp_path / "mine.parquet", ["ids"], group_texts=1)
        frame.to_parquet(tmp_path / "pandas.parquet", index=False)
        assert_same_frame(pd.read_parquet(tmp_path / "mine.parquet"), pd.read_parquet(tmp_path / "pandas.parquet"))


@pytest.fixture(scope="module")
def masking_run(tmp_path_factory: pytest.TempPathFactory):
    """A run whose compactions list ids in every row: observation masking keeps the whole context at each rewrite."""
    out = tmp_path_factory.mktemp("runs")
    session = out / "session.jsonl"
    session.write_text(generate("short-turns", 0, target_tokens=60_000).transcript.dumps(), encoding="utf-8")
    bench.run([session], strategies=["observation-masking", "codex-local"], profiles=["32k"], out=out,
              run_id="r", jobs=1, report=False, progress=False)
    return out / "r"


def test_a_runs_lists_of_ids_are_stored_encoded_and_read_as_lists_of_text(masking_run):
    stored = pq.read_schema(masking_run / "compactions.parquet")
    assert all(is_text_list(stored.field(name).type) for name in ID_COLUMNS)
    compactions = load_run(masking_run)["compactions"]
    kept = compactions["kept_ids"]
    assert len(compactions) > 1 and kept.map(len).sum() > len(compactions)
    assert all(isinstance(ids, np.ndarray) and ids.dtype == object and all(isinstance(i, str) for i in ids) for ids in kept)
    # the run's end held them as Arrow (`merge_tables`); the file's pandas metadata is an object column's all the same
    assert pd.read_parquet(masking_run / "compactions.parquet")["kept_ids"].dtype == object


def test_merged_cells_keep_their_lists_of_ids_as_arrow(masking_run):
    """What a run's end writes and summarizes: the cells' lists of ids as Arrow, no Python object per id (the finished
    run's cells are archived: its merged tables are read back, as a resume that adds cells reads them)."""
    merged = RunStore(masking_run).merged_tables()["compactions"]
    assert all(isinstance(merged[name].dtype, pd.ArrowDtype) for name in ID_COLUMNS)
    expected = load_run(masking_run)["compactions"]
    assert len(merged) == len(expected)
    for name in ID_COLUMNS:
        assert [list(ids) for ids in merged[name]] == [list(ids) for ids in expected[name]]


def test_a_run_stored_before_the_encoding_reads_as_the_same_frames(masking_run, tmp_path):
    """The compactions table as earlier versions wrote it (plain lists of strings) against this version's file."""
    table = pq.read_table(masking_run / "compactions.parquet")
    fields = [pa.field(f.name, pa.list_(pa.string())) if is_text_list(f.type) else f for f in table.schema]
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    for path in masking_run.iterdir():
        if path.is_file():
            (earlier / path.name).write_bytes(path.read_bytes())
    pq.write_table(table.cast(pa.schema(fields, metadata=table.schema.metadata)), earlier / "compactions.parquet")
    assert not is_text_list(pq.read_schema(earlier / "compactions.parquet").field("kept_ids").type)
    assert_same_frame(load_run(earlier)["compactions"], load_run(masking_run)["compactions"])


class ReadOnce(Sequence[str]):
    """Texts that may be iterated once, never measured or indexed: how a lazy `records.KeptIds` is to be read (each
    of those reads builds all of its ids again)."""

    def __init__(self, texts: list[str]) -> None:
        self.texts, self.reads = texts, 0

    def __iter__(self) -> Iterator[str]:
        self.reads += 1
        assert self.reads == 1, "read twice"
        return iter(self.texts)

    def __len__(self) -> int:
        raise AssertionError("measured")

    def __getitem__(self, index: Any) -> Any:
        raise AssertionError("indexed")


def test_rows_of_other_sequences_are_read_once_and_converted_a_batch_at_a_time(monkeypatch):
    monkeypatch.setattr(arrow_lists, "BATCH_TEXTS", 3)
    rows = [None if ids is None else ReadOnce(ids) for ids in LISTS] + [float("nan")]  # NaN: pandas' missing list
    column = text_lists(rows)
    # a batch ends once it holds 3 texts: [3 texts], [0, missing, 2, 1], [3], and the rest ([missing])
    assert isinstance(column, pa.ChunkedArray) and column.type == TEXT_LIST
    assert [len(chunk) for chunk in column.chunks] == [1, 4, 1, 1]
    assert column.to_pylist() == [*LISTS, None]
    assert all(row is None or row.reads == 1 for row in rows[:-1])


def test_a_cells_rows_hold_each_compactions_kept_ids_unread_and_send_them_as_a_tuple(monkeypatch, tmp_path):
    """Masking rewrites the context at nearly every request, each compaction listing the whole context: the rows hold
    the records' own lazy ids (read when the table is built), and pickled (a Ray worker's rows) they are the ids."""
    transcript = generate("short-turns", 0, target_tokens=60_000).transcript
    result = bench.replay(transcript, "observation-masking", profile="32k")
    rows = measure_cell(result, [], answerer=None).compactions
    assert len(rows) == len(result.compactions) > 10
    assert all(isinstance(c.kept_ids, KeptIds) and row["kept_ids"] is c.kept_ids for row, c in zip(rows, result.compactions, strict=True))
    key = CellKey("s", "observation-masking", "32k", 0)
    expected = [list(iter(c.kept_ids)) for c in result.compactions]
    assert cell_table(key, rows).column("kept_ids").to_pylist() == expected
    # converted in batches (chunks with dictionaries of their own), stored in the cell's file and read back
    monkeypatch.setattr(arrow_lists, "BATCH_TEXTS", 100)
    assert cell_table(key, rows).column("kept_ids").num_chunks > 1
    cell = {"requests": [], "compactions": rows, "probes": [], "replay": to_rows(result)}
    stored = StoredCell(RunStore(tmp_path).write_cell(key, cell)).tables()["compactions"]
    assert stored.column("kept_ids").to_pylist() == expected
    sent = pickle.loads(pickle.dumps(rows))
    assert [row["kept_ids"] for row in sent] == [tuple(ids) for ids in expected]
    assert all(type(row["kept_ids"]) is tuple for row in sent)
    # the ids, not the context they were read from: no tool output's text travels with them
    outputs = [item.text for item in transcript.items if item.kind == "tool_result" and len(item.text) > 200]
    assert outputs and not any(text.encode() in pickle.dumps(rows[-1]["kept_ids"]) for text in outputs)
