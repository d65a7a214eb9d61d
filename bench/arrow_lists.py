"""Columns of text lists whose texts repeat from row to row, held dictionary-encoded in Arrow and made pandas
without decoding them.

A compactions table's `kept_ids` list every id still in the context after each compaction; a strategy that
rewrites the context before nearly every request (observation masking, Anthropic's tool-use clearing) has a
row per request, each listing the whole context: 33 M ids over 3,362 rows for the 4M-token session, about
10 k distinct. As Arrow strings those were 556 MB, built through a transient of twice that, and pandas'
`to_pandas` decodes a dictionary-encoded list into such strings before it makes Python objects of them.
Here the texts are Arrow's dictionary of `int32` indices into each distinct text once (`TEXT_LIST`), and a
column of them becomes pandas as `to_pandas` makes a list column — a NumPy array of `str` per row, None for a
missing list — by taking the distinct texts' Python objects at the indices (`frame_of`): a pointer per id.
Parquet keeps the encoding (the type is in the file's Arrow schema) and reads it back as `TEXT_LIST`; a frame
is written to it a row group of at most about `GROUP_TEXTS` texts at a time (`write_frame`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

#: A list of texts, each an index into the distinct texts of its chunk of the column.
TEXT_LIST = pa.list_(pa.dictionary(pa.int32(), pa.string()))


def is_text_list(kind: pa.DataType) -> bool:
    """Whether an Arrow type is `TEXT_LIST`'s shape (a list of dictionary-encoded texts, whatever its index width
    or the name of its list field, which Parquet renames)."""
    return (
        pa.types.is_list(kind)
        and pa.types.is_dictionary(kind.value_type)
        and (pa.types.is_string(kind.value_type.value_type) or pa.types.is_large_string(kind.value_type.value_type))
    )


#: About how many texts `text_lists` holds as Python objects of its own at a time: the rows of a batch are converted at
#: once, each batch a chunk of the column with its own dictionary.
BATCH_TEXTS = 1 << 20


def text_lists(values: Iterable[Any]) -> pa.Array | pa.ChunkedArray:
    """A column of `TEXT_LIST` from lists of texts: lists, tuples or NumPy arrays, or any other sequence of texts,
    read once (a compaction's `records.KeptIds`, which builds its ids when read); None or NaN for a missing list.
    Rows are converted a batch of about `BATCH_TEXTS` texts at a time, so the texts of the rows read for the
    conversion are held a batch at a time, not all at once (a masking run's rows list 33 M ids)."""
    chunks: list[pa.Array] = []
    batch: list[Any] = []
    held = 0
    for value in values:
        if not isinstance(value, (list, tuple, np.ndarray, float)) and value is not None:
            value = tuple(iter(value))  # `iter` first: `tuple()` would ask a lazy sequence for its length, which reads it too
        batch.append(value)
        held += len(value) if isinstance(value, (list, tuple, np.ndarray)) else 0
        if held >= BATCH_TEXTS:
            chunks.append(pa.array(batch, type=TEXT_LIST, from_pandas=True))
            batch, held = [], 0
    if batch or not chunks:
        chunks.append(pa.array(batch, type=TEXT_LIST, from_pandas=True))
    return chunks[0] if len(chunks) == 1 else pa.chunked_array(chunks, type=TEXT_LIST)


class _Chunk(NamedTuple):
    """One chunk of a `TEXT_LIST` column as NumPy arrays."""

    #: the Python objects of the chunk's distinct texts
    distinct: np.ndarray
    #: each row's bounds in the chunk's values, whatever its slice
    offsets: np.ndarray
    #: every value's index into `distinct` (a missing list's values too: `flatten` leaves those out)
    indices: np.ndarray
    #: whether each row holds a list
    valid: np.ndarray

    @classmethod
    def of(cls, chunk: pa.ListArray) -> _Chunk:
        texts = chunk.values
        return cls(np.asarray(texts.dictionary.to_pylist(), dtype=object), chunk.offsets.to_numpy(),
                   texts.indices.to_numpy(zero_copy_only=False), chunk.is_valid().to_numpy(zero_copy_only=False))


def _python_lists(column: pa.ChunkedArray) -> list[np.ndarray | None]:
    """A `TEXT_LIST` column as `to_pandas` makes a list column: per row a NumPy array of `str` (a view into one
    array of the chunk's texts), None for a missing list."""
    rows: list[np.ndarray | None] = []
    for chunk in map(_Chunk.of, column.chunks):
        offsets = chunk.offsets
        flat = chunk.distinct[chunk.indices[offsets[0]:offsets[-1]]]
        parts = np.split(flat, offsets[1:-1] - offsets[0])
        rows += [part if present else None for part, present in zip(parts, chunk.valid, strict=True)]
    return rows


def frame_of(table: pa.Table, *, python_lists: bool = True) -> pd.DataFrame:
    """`table.to_pandas()`, its `TEXT_LIST` columns made Python lists without decoding them first (`_python_lists`):
    the same frame, with a pointer per text where `to_pandas` would build Arrow strings of every text. With
    `python_lists=False` those columns stay Arrow (`pd.ArrowDtype` of `TEXT_LIST`, sharing the table's buffers): no
    Python object per text, for a frame that is written (`write_frame`) and summarized without reading its lists."""
    encoded = [name for name, kind in zip(table.column_names, table.schema.types, strict=True) if is_text_list(kind)]
    if not encoded or not table.num_rows:
        return table.to_pandas()
    frame = table.drop_columns(encoded).to_pandas()
    for name in encoded:
        column = table.column(name)
        values = (pd.Series(_python_lists(column), index=frame.index, dtype=object) if python_lists
                  else pd.Series(pd.arrays.ArrowExtensionArray(column), index=frame.index))
        frame.insert(table.column_names.index(name), name, values)
    return frame


def _arrow_column(column: pd.Series) -> pa.ChunkedArray:
    """The Arrow data of a `pd.ArrowDtype` column, as it holds it (`pa.array` asks pandas for it, no copy)."""
    data = pa.array(column.array)
    return data if isinstance(data, pa.ChunkedArray) else pa.chunked_array([data])


class RowTexts:
    """Each row's texts of a `TEXT_LIST` column kept as Arrow (`frame_of(..., python_lists=False)`), one row at a time:
    `rows[n]` is row n's texts as a NumPy array of `str` (None for a missing list), made when asked, so the rows a
    reader walks through are never all Python lists at once (a masking run's 33 M ids)."""

    def __init__(self, column: pd.Series | pa.ChunkedArray) -> None:
        self._chunks = list((column if isinstance(column, pa.ChunkedArray) else _arrow_column(column)).chunks)
        self._starts = np.cumsum([0] + [len(chunk) for chunk in self._chunks])
        self._read: dict[int, _Chunk] = {}

    def __len__(self) -> int:
        return int(self._starts[-1])

    def __getitem__(self, row: int) -> np.ndarray | None:
        if not 0 <= row < len(self):
            raise IndexError(row)
        at = int(np.searchsorted(self._starts, row, side="right")) - 1
        chunk = self._read.get(at)
        if chunk is None:
            chunk = self._read[at] = _Chunk.of(self._chunks[at])
        n = row - int(self._starts[at])
        return chunk.distinct[chunk.indices[chunk.offsets[n]:chunk.offsets[n + 1]]] if chunk.valid[n] else None


def _texts_per_row(column: pd.Series) -> np.ndarray:
    """How many texts each row's list holds (a missing list, None or NaN, none)."""
    if isinstance(column.dtype, pd.ArrowDtype):
        lengths = pc.list_value_length(_arrow_column(column)).fill_null(0)
        return np.asarray(lengths.to_numpy(zero_copy_only=False), np.int64)
    counts = (len(ids) if isinstance(ids, (list, tuple, np.ndarray)) else 0 for ids in column)
    return np.fromiter(counts, np.int64, len(column))


#: About how many texts of its encoded lists a table written by `write_frame` holds per Parquet row group. A
#: table is converted and written a row group at a time, so what the conversion and the writer hold grows with this,
#: not with the table: a masking run's compactions table (33 M ids in 3,362 rows) took its writer 420 MB as one group.
GROUP_TEXTS = 1 << 22


def write_frame(frame: pd.DataFrame, path: str | Path, encoded: Collection[str], group_texts: int = GROUP_TEXTS) -> None:
    """`frame` as a Parquet file as `frame.to_parquet(path, index=False)` writes it, its columns named in `encoded`
    as `TEXT_LIST`, and, when those hold more than `group_texts` texts, in row groups of about that many (at least a
    row each; a row group is converted from its rows alone). The other columns' types are pandas' for the whole
    frame, inferred without the lists."""
    listed = [name for name in frame.columns if name in encoded]
    schema = None  # without lists, pandas' own for the whole frame
    if listed:
        inferred = pa.Schema.from_pandas(frame.drop(columns=listed), preserve_index=False)
        schema = pa.schema([pa.field(str(name), TEXT_LIST) if name in listed else inferred.field(str(name)) for name in frame.columns])
    texts = np.zeros(len(frame) + 1, np.int64)  # texts[r]: how many the rows before row r hold
    for name in listed:
        texts[1:] += np.cumsum(_texts_per_row(frame[name]))
    # lists kept as Arrow go into the table as they are; converted, they stand as missing lists, so that the file's pandas
    # metadata is the one an object column of lists gives (a reader's `read_parquet` makes the frame it made before)
    kept = {name: _arrow_column(frame[name]) for name in listed if isinstance(frame[name].dtype, pd.ArrowDtype)}
    plain = frame.assign(**{name: np.full(len(frame), None, dtype=object) for name in kept}) if kept else frame
    starts = [0]
    while starts[-1] < len(frame):
        end = int(np.searchsorted(texts, texts[starts[-1]] + group_texts, side="right")) - 1
        starts.append(min(max(end, starts[-1] + 1), len(frame)))
    groups = list(zip(starts, starts[1:], strict=False)) or [(0, 0)]

    def group(start: int, stop: int) -> pa.Table:
        table = pa.Table.from_pandas(plain.iloc[start:stop], schema=schema, preserve_index=False)
        for name, column in kept.items():
            at = table.schema.get_field_index(str(name))
            table = table.set_column(at, table.schema.field(at), column.slice(start, stop - start))
        return table

    if len(groups) == 1:
        pq.write_table(group(*groups[0]), path)
        return
    tables = (group(start, stop) for start, stop in groups)
    first = next(tables)
    with pq.ParquetWriter(path, first.schema) as writer:  # the first group's pandas metadata, as one group's would be
        writer.write_table(first)
        for table in tables:
            writer.write_table(table)
