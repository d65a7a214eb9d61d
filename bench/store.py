"""The run store: `runs/<run-id>/` with its manifest, per-cell results, the merged tables and the replay archive.

Layout of a finished run::

    runs/<run-id>/
      manifest.json          config, versions, seeds, git revision, cells; every scenario's transcript
                             file, sha256, format, import options and session id (`scenarios`), every
                             profile's definition (`profiles`), the templates' text and sha256 (`templates`)
      transcripts/           canonical JSONL of scenarios that came from no file (synthetic, in memory)
      probes/scenario-<n>.yaml  the probes asked about scenario n (given or mined)
      requests.parquet       every request of every cell
      compactions.parquet    every compaction (its lists of ids dictionary-encoded, `ID_COLUMNS`)
      probes.parquet         one row per probe per probe point
      summary.parquet        one row per (scenario, strategy, profile)
      replays/               every cell's replay records, merged: cells.parquet (one row per cell: its key,
                             its replay.json text, the ids of its messages), contexts.parquet (every
                             request with its message references as `records.to_rows` keeps them, by
                             difference from the request before, its summarizer call and its cell's
                             row), messages.parquet (each distinct message of the run once)
      report.html            the self-contained report

While a run works, each finished cell is one file, `cells/<cell-key>.zip`: a zip archive (members
stored, not deflated) of its requests|compactions|probes tables and its contexts|messages replay
records, each as an Arrow IPC file (lz4), and its replay.json. The file is written whole, fsync'd
and renamed into place, so it is at once the cell's results and its finished mark: `--resume` redoes
exactly the cells without one (and without a row in the archive). One file per cell rather than a
folder of seven files: for a short session, writing and reading those took most of a cell's time.
Versions before the thirty-second speed pass wrote such a folder, `cells/<cell-key>/` (tables as
parquet, records as IPC or parquet files, then `DONE`); a resume reads it alike (`StoredCell`).
A file or folder in `cells/` that is no cell of the run's manifest, or that holds another cell than
its name says (its replay.json's key), is refused naming it, never merged (`RunStore.stored_cells`); so is a
file where the run keeps a folder (`cells`, `replays`) or a folder where it keeps a file (`RUN_LAYOUT`).
The run's own writers (`write_parquet`, `write_json`, the archive) remove, once their file is in place, the
temporary files an earlier write of it left when it was killed (`compaction_bench.atomic.stale_temps`).
Once every cell is finished and the tables are merged, `compact()` moves the replay records into
`replays/` and removes `cells/` (only the link, when it is one); the merged tables then hold the cells' rows. The archive is built
with Arrow a batch of cells at a time (their schemas made one first, from the files' schemas alone),
so it holds a batch of records, not the run's: messages are told apart by an identity string of all
their fields (length-prefixed, so no two different messages share one), and `cells.parquet` is
written last (it is the commit point). The replay records let `bench score`
measure a run again without replaying (`compaction_bench.records.from_rows`), one cell's records
at a time; its new folder gets a copy of the archive's files.

`load_run` reads the four tables by a declared schema (`SCHEMA`: each column's dtype by its name,
whatever the run holds); a table without a column it cannot be read without, or with a column stored
as another type, is a `StoreError` naming the file and the column, as is a file the system refuses to read.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import shutil
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.feather as feather
import pyarrow.parquet as pq

from compaction_bench.arrow_lists import frame_of, text_lists, write_frame
from compaction_bench.atomic import WriteFailed, atomic_write, atomic_write_text
from compaction_bench.errors import BenchError
from compaction_bench.run_folder import LOCK_NAME, held_here, in_use

TABLES = ("requests", "compactions", "probes")
#: The key columns that start every table but `summary`, with their dtypes ("str" is pandas' text dtype, `TEXT_DTYPE`).
KEY_DTYPES = {"scenario": "str", "strategy": "str", "profile": "str", "repeat": "int64"}
KEY_COLUMNS = list(KEY_DTYPES)
#: The compactions table's lists of item ids. The same ids recur from row to row (a strategy that rewrites the context
#: before each request lists the whole context in each row's `kept_ids`), so Arrow and Parquet hold them
#: dictionary-encoded and pandas gets them without decoding (`compaction_bench.arrow_lists`); read, each is a list per
#: row as any other list column.
ID_COLUMNS = ("summarized_ids", "kept_ids", "dropped_ids")
#: A cell's replay records: its requests' contexts and its distinct messages (Arrow IPC), and its replay.json; the
#: names of these members of its cell file, and of the files in the folder of a cell an earlier version wrote.
REPLAY_FILES = ("contexts.arrow", "messages.arrow", "replay.json")
#: The same records as versions before the thirtieth speed pass wrote them into a cell's folder (parquet), still read.
PARQUET_REPLAY_FILES = ("contexts.parquet", "messages.parquet", "replay.json")
CELLS = "cells"
#: A finished cell's file in `cells/`, after its slug.
CELL_SUFFIX = ".zip"
#: What a cell's file holds: each table as `<table>.arrow`, then its replay records.
CELL_MEMBERS = (*(f"{name}.arrow" for name in TABLES), *REPLAY_FILES)
ARCHIVE = "replays"
#: The archive's files; `cells.parquet`, renamed into place last, is the commit point (`RunStore.archived`)
ARCHIVE_FILES = ("messages.parquet", "contexts.parquet", "cells.parquet")
#: About how many bytes of cells' records (Arrow) `ArchiveWriter` holds before it writes them
ARCHIVE_BATCH_BYTES = 16 * 2**20
#: Message fields that identify a distinct message (every column `records.to_rows` writes).
MESSAGE_FIELDS = ("role", "content", "tool_calls", "tool_call_id", "item_ids", "attachments", "name", "is_error")


class StoreError(BenchError, RuntimeError):
    """A run folder that is missing, incomplete or not a run."""


@dataclass(frozen=True)
class CellKey:
    scenario: str
    strategy: str
    profile: str
    repeat: int

    @property
    def slug(self) -> str:
        """The cell's folder name: readable (at most 120 characters) and injective, through 12 hex digits of
        the sha256 of the exact key (names that differ only in punctuation get different folders)."""
        exact = json.dumps([self.scenario, self.strategy, self.profile, self.repeat], ensure_ascii=True)
        digest = hashlib.sha256(exact.encode("ascii")).hexdigest()[:12]
        safe = "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "_" for c in f"{self.scenario}__{self.strategy}__{self.profile}")
        return f"{safe.lstrip('.')[:120]}__r{self.repeat}-{digest}"

    def columns(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "strategy": self.strategy, "profile": self.profile, "repeat": self.repeat}

    @property
    def label(self) -> str:
        """How an error names the cell: scenario · strategy · profile · repeat N."""
        return f"{self.scenario} · {self.strategy} · {self.profile} · repeat {self.repeat}"


def write_parquet(frame: pd.DataFrame, path: Path) -> Path:
    """`frame` as the run's table `path` (its lists of ids dictionary-encoded, `ID_COLUMNS`); the temporary files an
    earlier write of it left when killed are removed (`sweep`: a run folder has one writer, its run)."""
    return atomic_write(path, lambda tmp: write_frame(frame, tmp, ID_COLUMNS), sweep=True)


def _write_zip(members: Mapping[str, Callable[[IO[bytes]], None]], path: Path) -> Path:
    """`members` (name → a function that writes the member's bytes) as a zip archive at `path`, stored, each dated
    1980-01-01 (the same members, the same bytes). The members are written one after the other, each made while it is
    written (`_write_ipc`): a cell's tables are not all held at once, as Arrow and as their files' bytes."""

    def write(tmp: Path) -> None:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as archive:
            for name, write_member in members.items():
                with archive.open(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), "w") as member:
                    write_member(member)

    return atomic_write(path, write)


def _write_ipc(table: Callable[[], pa.Table], out: IO[bytes]) -> None:
    """The table `table()` makes, as an Arrow IPC file (lz4) written to `out`."""
    feather.write_feather(table(), out, compression="lz4")


def _write_json(data: Any, out: IO[bytes]) -> None:
    """`json_text(data)` as UTF-8 written to `out` (`dump_json_text`)."""
    with io.TextIOWrapper(out, encoding="utf-8", newline="") as text:
        dump_json_text(data, text)


def _ipc_table(data: bytes) -> pa.Table:
    """The table of an Arrow IPC file in memory, read on this thread (a cell's tables are small)."""
    return feather.read_table(pa.BufferReader(data), use_threads=False)


def cell_table(key: CellKey, rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    """One cell's rows of a table, with the cell's key columns in front, as Arrow.

    Built without pandas (a `DataFrame` of a few rows, then Arrow of it, cost a short cell more than its
    replay), yet read back (`to_pandas`) it is the frame pandas makes of the rows after a round trip through
    Arrow or parquet: the columns in the order pandas gives them (each row's keys as first seen, the key
    columns first), a key missing from a row as a null, each column typed as Arrow infers it from its values
    (integers with a null read back as float64 with NaN, as pandas makes them), the lists of ids (`ID_COLUMNS`) as
    dictionary-encoded texts."""
    keyed = [{**key.columns(), **row} for row in rows]
    if not keyed:
        return pa.table({name: pa.nulls(0) for name in KEY_COLUMNS})
    names: dict[str, None] = {}
    for row in keyed:
        names.update(dict.fromkeys(row))
    return pa.table({name: (text_lists if name in ID_COLUMNS else pa.array)([row.get(name) for row in keyed]) for name in names})


def _read_records_table(path: Path) -> pa.Table:
    """One of a cell's replay records tables (IPC, or parquet from an earlier version), read on this thread: a
    cell's files are small, and Arrow's thread pools cost more CPU than reading them."""
    if path.suffix == ".arrow":
        return feather.read_table(path, memory_map=False, use_threads=False)
    return pq.read_table(path, use_threads=False)


def _records_schema(path: Path) -> pa.Schema:
    """The schema of one of an earlier version's cell folder's records files (`_read_records_table`), without its rows."""
    return pa.ipc.open_file(path).schema if path.suffix == ".arrow" else pq.read_schema(path)


def archive_schemas(schemas: Iterable[tuple[pa.Schema, pa.Schema]]) -> tuple[pa.Schema, pa.Schema]:
    """The contexts and messages schemas of an archive of cells whose records have these schemas: each unified as
    Arrow's concatenation unifies them (a column of nulls in one cell takes another's type; a column of integers in
    one and of floats in another is an `ArrowTypeError`), without metadata."""
    contexts, messages = zip(*schemas, strict=True)
    return tuple(pa.unify_schemas(list(group), promote_options="default").remove_metadata() for group in (contexts, messages))


def _conformed(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` with `schema` (which `archive_schemas` made from this table's schema among others): its columns in the
    schema's order, a column it lacks as nulls, a column of nulls cast to the schema's type."""
    present = set(table.column_names)
    columns = [table.column(f.name).cast(f.type) if f.name in present else pa.nulls(table.num_rows, f.type) for f in schema]
    return pa.Table.from_arrays(columns, schema=schema)


def replay_files(directory: Path) -> tuple[Path, ...] | None:
    """An earlier version's cell folder's replay records files (`REPLAY_FILES`, else `PARQUET_REPLAY_FILES`), None when neither set is whole."""
    for names in (REPLAY_FILES, PARQUET_REPLAY_FILES):
        files = tuple(directory / name for name in names)
        if all(f.is_file() for f in files):
            return files
    return None


#: how the store writes JSON (the manifest, a cell's replay.json): indented, keys sorted
_JSON_FORM: dict[str, Any] = {"indent": 2, "sort_keys": True, "default": str}


def json_text(data: Any) -> str:
    """`data` as the store writes JSON (`_JSON_FORM`)."""
    return json.dumps(data, **_JSON_FORM) + "\n"


def dump_json_text(data: Any, out: IO[str]) -> None:
    """`json_text(data)` written to `out` piece by piece as it is encoded: indented JSON is encoded in Python, as
    millions of pieces for a cell that lists millions of ids (a 102 MB replay.json took 0.8 GB made whole)."""
    json.dump(data, out, **_JSON_FORM)
    out.write("\n")


#: how `json_text` starts the top-level member "key": on a line of its own, indented by two spaces (a nested member
#: is indented further, and no JSON string holds a raw newline)
_TOP_LEVEL_KEY = '\n  "key": '


def replay_key(text: str) -> CellKey:
    """The key a cell's replay.json gives it, read alone: a cell whose strategy compacts before every request holds
    millions of ids beside it (a 102 MB text), which parsing whole to read four fields made a Python object each.
    A text `json_text` did not write is parsed whole."""
    at = text.find(_TOP_LEVEL_KEY)
    if at < 0:
        return CellKey(**json.loads(text)["key"])
    value, _ = json.JSONDecoder().raw_decode(text, at + len(_TOP_LEVEL_KEY))
    return CellKey(**value)


def write_json(data: Any, path: Path) -> Path:
    """`data` as the run's JSON file `path` (its manifest), sweeping as `write_parquet` does."""
    return atomic_write_text(path, json_text(data), sweep=True)


def merge_tables(tables: Mapping[str, pa.Table]) -> pd.DataFrame:
    """Cells' tables of one table (Arrow, by cell slug) as one frame, in slug order (the order of
    `RunStore.stored_cells`), tables without rows left out: the frame `pd.concat` makes of each table's
    `to_pandas()` (`arrow_lists.frame_of`), made with one conversion per schema instead of one per cell, but for its
    lists of texts (the compactions' `ID_COLUMNS`), which stay Arrow (`pd.ArrowDtype`): a run's end writes them and
    reads none of them, and as Python lists a masking run's 33 M ids were a pointer each (`load_run` makes them lists).

    Converting a table costs about half a millisecond whatever its rows (a run's parent did it three times per
    cell, more than a short cell's replay). The cells that share a schema are concatenated by Arrow and
    converted at once, which gives their rows the dtype pandas gives the concatenated frames (a column with
    a null in any of them reads as float64, or as objects for booleans, as pandas' concatenation makes it);
    the schemas' frames are concatenated by pandas, which types a column across them as before, and the
    rows are put back in slug order."""
    kept = [(slug, tables[slug]) for slug in sorted(tables) if tables[slug].num_rows]
    if not kept:
        return pd.DataFrame(columns=KEY_COLUMNS)
    groups: dict[pa.Schema, list[int]] = {}
    for index, (_, table) in enumerate(kept):
        groups.setdefault(table.schema, []).append(index)
    if len(groups) == 1:
        return frame_of(pa.concat_tables([table for _, table in kept]), python_lists=False)
    frame = pd.concat([frame_of(pa.concat_tables([kept[i][1] for i in members]), python_lists=False) for members in groups.values()],
                      ignore_index=True)
    starts = np.cumsum([0] + [kept[i][1].num_rows for members in groups.values() for i in members])
    where = dict(zip((i for members in groups.values() for i in members), starts[:-1], strict=True))  # cell index -> its first row in `frame`
    order = np.concatenate([np.arange(where[i], where[i] + kept[i][1].num_rows) for i in range(len(kept))])
    return frame.take(order).reset_index(drop=True)


@dataclass(frozen=True)
class CellRecords:
    """One cell's replay records as stored: its contexts and messages tables and its replay.json text."""

    key: CellKey
    contexts: pa.Table
    messages: pa.Table
    replay: str

    def rows(self) -> dict[str, Any]:
        """The records as `compaction_bench.records.to_rows` made them: `messages`, `requests` (rows) and `replay`
        (with the cell's `key`)."""
        return {"requests": self.contexts.to_pylist(), "messages": self.messages.to_pylist(), "replay": json.loads(self.replay)}


class StoredCell:
    """A finished cell that the archive does not hold yet, as its run stored it: the file `cells/<slug>.zip`,
    or the folder `cells/<slug>/` that a version before the thirty-second speed pass wrote (its tables as
    parquet, its replay records as files, then `DONE`), read alike."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.is_folder = path.suffix != CELL_SUFFIX  # a slug ends in "-<12 hex digits>", never in the suffix
        self.slug = path.name if self.is_folder else path.name.removesuffix(CELL_SUFFIX)

    def _members(self, names: Sequence[str]) -> dict[str, bytes]:
        """Members of the cell's file, by name; a file that is not a whole cell file is a `StoreError` naming it."""
        try:
            with zipfile.ZipFile(self.path) as archive:
                return {name: archive.read(name) for name in names}
        except (OSError, zipfile.BadZipFile, KeyError) as exc:
            raise self._unreadable(exc.args[0] if isinstance(exc, KeyError) and exc.args else exc) from None

    def _unreadable(self, reason: object) -> StoreError:
        """The error for a cell file that cannot be read, with what to do about it."""
        kind = "cell folder" if self.is_folder else "cell file"
        return StoreError(f"{self.path}: not a readable {kind} ({reason}); delete it, and `bench run --resume` does the cell again")

    @contextmanager
    def _decoding(self, member: str) -> Iterator[None]:
        """Reading `member` of the cell's file (or folder): one that is missing or is not what a cell holds (Arrow IPC
        or parquet, the replay's JSON) is a `StoreError` naming the cell, as a file that is not whole is."""
        try:
            yield
        except (OSError, pa.ArrowException, UnicodeDecodeError, ValueError, TypeError, KeyError) as exc:
            raise self._unreadable(f"{member}: {exc}") from None

    def tables(self) -> dict[str, pa.Table]:
        """The cell's requests, compactions and probes tables, as Arrow (`merge_tables` makes a run's frames of them)."""
        if self.is_folder:
            with self._decoding("its tables"):
                return {name: pq.read_table(self.path / f"{name}.parquet", use_threads=False) for name in TABLES}
        members = self._members([f"{name}.arrow" for name in TABLES])
        return {name: self._table(members, f"{name}.arrow") for name in TABLES}

    def _table(self, members: Mapping[str, bytes], name: str) -> pa.Table:
        """Member `name` (Arrow IPC) of the cell's file as a table; one that is not IPC is a `StoreError` naming the file."""
        with self._decoding(name):
            return _ipc_table(members[name])

    def has_records(self) -> bool:
        """Whether the cell kept its replay records (a cell file always does; a folder of a version that kept none does not)."""
        return not self.is_folder or replay_files(self.path) is not None

    def _replay_files(self) -> tuple[Path, ...]:
        """An earlier version's folder's replay records files; a `StoreError` naming those missing when it kept none."""
        files = replay_files(self.path)
        if files is None:
            missing = [name for name in REPLAY_FILES if not (self.path / name).is_file()]
            raise StoreError(f"{self.path}: no replay records ({', '.join(missing)} missing; a run made before runs kept them)")
        return files

    def records(self) -> CellRecords:
        """The cell's replay records, as stored."""
        if self.is_folder:
            files = self._replay_files()
            with self._decoding("its replay records"):
                text = files[2].read_text(encoding="utf-8")
                contexts, messages = _read_records_table(files[0]), _read_records_table(files[1])
                return CellRecords(replay_key(text), contexts, messages, text)
        members = self._members(REPLAY_FILES)
        with self._decoding(REPLAY_FILES[2]):
            text = members[REPLAY_FILES[2]].decode("utf-8")
            key = replay_key(text)
        return CellRecords(key, self._table(members, REPLAY_FILES[0]), self._table(members, REPLAY_FILES[1]), text)

    def replay_text(self) -> str | None:
        """The cell's replay.json text, read alone (not its records tables); None for the folder of a version that kept
        no replay records."""
        if self.is_folder:
            files = replay_files(self.path)
            if files is None:
                return None
            with self._decoding(REPLAY_FILES[2]):
                return files[2].read_text(encoding="utf-8")
        member = self._members(REPLAY_FILES[2:])[REPLAY_FILES[2]]
        with self._decoding(REPLAY_FILES[2]):
            return member.decode("utf-8")

    def key(self) -> CellKey | None:
        """The key the cell's replay.json gives it (the cell it holds, whatever its name); None for the folder of a
        version that kept no replay records."""
        text = self.replay_text()
        if text is None:
            return None
        with self._decoding(REPLAY_FILES[2]):
            return replay_key(text)

    def record_schemas(self) -> tuple[pa.Schema, pa.Schema]:
        """The schemas of the cell's contexts and messages records (`records`), read without decoding their rows."""
        if self.is_folder:
            files = self._replay_files()
            with self._decoding("its replay records"):
                return _records_schema(files[0]), _records_schema(files[1])
        members = self._members(REPLAY_FILES[:2])
        schemas = []
        for name in REPLAY_FILES[:2]:
            with self._decoding(name):
                schemas.append(pa.ipc.open_file(pa.BufferReader(members[name])).schema)
        return schemas[0], schemas[1]


def _identity(messages: pa.Table) -> pa.Array:
    """One string per message that equals another's exactly when every field does: each field as
    `N` (null) or its length, `:` and its text; `item_ids` as its count and each id so."""

    def field(values: pa.Array) -> pa.Array:
        text = values if pa.types.is_string(values.type) else pc.cast(values, pa.string())
        framed = pc.binary_join_element_wise(pc.cast(pc.utf8_length(text), pa.string()), text, ":")
        return pc.fill_null(framed, "N")

    table = messages.combine_chunks()
    parts = []
    for name in MESSAGE_FIELDS:
        if name not in table.column_names:  # cells that stored no message (a session with nothing to send) give no schema
            column = pa.nulls(table.num_rows, pa.string())
        else:
            column = table.column(name).chunk(0) if table.column(name).num_chunks else pa.array([], pa.string())
        if pa.types.is_list(column.type):
            inner = field(pc.cast(column.values, pa.string()))  # the offsets index the child array as it is
            joined = pc.binary_join(pa.ListArray.from_arrays(column.offsets, inner), "")
            parts.append(pc.fill_null(pc.binary_join_element_wise(pc.cast(pc.list_value_length(column), pa.string()), joined, "#"), "N"))
        else:
            parts.append(field(column))
    return pc.binary_join_element_wise(*parts, ";")


#: The schema of the archive's `cells.parquet`: one row per cell, its key, its replay.json text and its messages' rows.
CELLS_SCHEMA = pa.schema([
    ("cell", pa.string()), ("scenario", pa.string()), ("strategy", pa.string()), ("profile", pa.string()), ("repeat", pa.int64()),
    ("replay", pa.string()), ("messages", pa.list_(pa.int64())),
])
#: The columns of `cells.parquet` given statistics and a dictionary: the key's. Parquet's writer copies a value it
#: keeps min/max statistics of and one it tries to dictionary-encode, and a cell's replay text can be many MB (writing
#: one of 162 MB took a process's peak RSS to 1,517 MiB with them, 741 MiB without); no reader filters on it or on the
#: message numbers.
CELLS_INDEXED = ("cell", "scenario", "strategy", "profile", "repeat")


class ArchiveWriter:
    """Writes the archive's three files from cells' records (`RunStore.write_archive`), holding a batch of about
    `ARCHIVE_BATCH_BYTES` of them at a time, however many cells there are.

    A message is stored once however many cells sent it, numbered in order of first appearance: messages are
    told apart by their identity (`_identity`), and one seen before is found by its 128-bit BLAKE2b digest, so
    what is kept across batches is 16 bytes per distinct message (two different identities with one digest are
    as unlikely as in any content-addressed store). Every cell's records are given `schemas` (`_conformed`). A
    file that cannot be written is a `WriteFailed` naming the archive's folder (the files' folder)."""

    def __init__(self, schemas: tuple[pa.Schema, pa.Schema], messages: Path, contexts: Path, cells: Path) -> None:
        self.folder = messages.parent
        self.contexts_schema = schemas[0].append(pa.field("cell", pa.int64()))
        self.messages_schema = schemas[1]
        with self._writing():
            self.messages = pq.ParquetWriter(messages, self.messages_schema, compression="zstd")
            self.contexts = pq.ParquetWriter(contexts, self.contexts_schema, compression="zstd")
            self.cells = pq.ParquetWriter(
                cells, CELLS_SCHEMA, compression="zstd", write_statistics=list(CELLS_INDEXED), use_dictionary=list(CELLS_INDEXED)
            )
        self.numbers: dict[bytes, int] = {}  # a message's identity's digest -> its row of messages.parquet
        self.batch: list[CellRecords] = []
        self.size = 0
        self.written = 0  # cells written

    def __enter__(self) -> ArchiveWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        with self._writing():
            try:
                if exc[0] is None:
                    self._flush()
            finally:
                for writer in (self.messages, self.contexts, self.cells):
                    writer.close()

    @contextmanager
    def _writing(self) -> Iterator[None]:
        try:
            yield
        except OSError as exc:
            raise WriteFailed(self.folder, exc) from exc

    def add(self, cell: CellRecords) -> None:
        self.batch.append(cell)
        self.size += cell.messages.nbytes + cell.contexts.nbytes
        if self.size >= ARCHIVE_BATCH_BYTES:
            with self._writing():
                self._flush()

    def _flush(self) -> None:
        batch, self.batch, self.size = self.batch, [], 0
        if not batch:
            return
        messages = pa.concat_tables([_conformed(r.messages, self.messages_schema) for r in batch])
        known = len(self.numbers)
        encoded = pc.dictionary_encode(_identity(messages))  # the batch's distinct identities, in order of first appearance
        number = np.fromiter((self.numbers.setdefault(hashlib.blake2b(identity, digest_size=16).digest(), len(self.numbers))
                              for identity in encoded.dictionary.cast(pa.binary()).to_pylist()), np.int64, len(encoded.dictionary))
        indices = encoded.indices.to_numpy(zero_copy_only=False)
        _, first = np.unique(indices, return_index=True)  # each distinct identity's first row in the batch
        self.messages.write_table(messages.take(pa.array(first[number >= known])))  # those not seen before, in their numbers' order
        offsets = np.cumsum([0] + [r.messages.num_rows for r in batch])
        self.cells.write_table(pa.table({
            "cell": [r.key.slug for r in batch], "scenario": [r.key.scenario for r in batch], "strategy": [r.key.strategy for r in batch],
            "profile": [r.key.profile for r in batch], "repeat": [r.key.repeat for r in batch], "replay": [r.replay for r in batch],
            "messages": pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(number[indices], pa.int64())),
        }, schema=CELLS_SCHEMA))
        self.contexts.write_table(pa.concat_tables([
            _conformed(r.contexts.append_column("cell", pa.array(np.full(r.contexts.num_rows, self.written + n, np.int64))), self.contexts_schema)
            for n, r in enumerate(batch)
        ]))
        self.written += len(batch)


class RunStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._archived: dict[str, int] | None = None
        self._run_cells: dict[str, CellKey] | None = None  # `_expected`
        self._checked: set[str] = set()  # the names in `cells/` found to be cells of this run (`_check`), or written here
        self._listed = False  # whether `is_done` checked `cells/`

    @property
    def manifest_path(self) -> Path:
        return self.root / "manifest.json"

    @property
    def archive_dir(self) -> Path:
        return self.root / ARCHIVE

    def cell_path(self, key: CellKey) -> Path:
        """The file a finished cell is stored in until the archive holds it."""
        return self.root / CELLS / f"{key.slug}{CELL_SUFFIX}"

    def archived(self) -> dict[str, int]:
        """The archive's cells: slug → row of `replays/cells.parquet` (empty before `compact()`)."""
        if self._archived is None:
            index = self.archive_dir / "cells.parquet"
            slugs = pq.read_table(index, columns=["cell"]).column("cell").to_pylist() if index.is_file() else []
            self._archived = {slug: row for row, slug in enumerate(slugs)}
        return self._archived

    def stored(self, key: CellKey) -> StoredCell | None:
        """The finished cell `key` as it is stored outside the archive (its file, or an earlier version's folder), if it is."""
        path = self.cell_path(key)
        if path.is_file():
            return StoredCell(path)
        folder = self.root / CELLS / key.slug
        return StoredCell(folder) if (folder / "DONE").is_file() else None

    def is_done(self, key: CellKey) -> bool:
        """Whether the cell `key` is finished (archived, or stored outside the archive). The first call checks every cell
        in `cells/` (`stored_cells`), so a resume refuses a file that is no cell of the run before it runs a cell."""
        if not self._listed:
            self.stored_cells()
            self._listed = True
        return key.slug in self.archived() or self.stored(key) is not None

    def forget(self, key: CellKey) -> None:
        """Make the finished cell `key` unfinished (its file removed, or an earlier version's folder's `DONE`), so
        that the run does it again."""
        self.cell_path(key).unlink(missing_ok=True)
        (self.root / CELLS / key.slug / "DONE").unlink(missing_ok=True)

    def write_cell(self, key: CellKey, cell: Mapping[str, Any]) -> Path:
        """A finished cell as its one file: its tables (`TABLES`, each a list of rows) and its replay records
        (`replay`, as `compaction_bench.records.to_rows` makes them). The file appears whole or not at all, so a
        cell with a file is a finished cell."""
        records = cell["replay"]
        contexts, messages, replay = REPLAY_FILES
        members: dict[str, Callable[[IO[bytes]], None]] = {
            f"{name}.arrow": functools.partial(_write_ipc, functools.partial(cell_table, key, cell.get(name, []))) for name in TABLES
        }
        members[contexts] = functools.partial(_write_ipc, functools.partial(pa.Table.from_pylist, records["requests"]))
        members[messages] = functools.partial(_write_ipc, functools.partial(pa.Table.from_pylist, records["messages"]))
        members[replay] = functools.partial(_write_json, {"key": key.columns(), **records["replay"]})
        path = _write_zip(members, self.cell_path(key))  # in the order of CELL_MEMBERS
        self._checked.add(path.name)  # named by the key it holds
        return path

    def check_layout(self) -> None:
        """Refuse a run folder where a name the run keeps (`RUN_LAYOUT`) is a file where it keeps a folder, or a
        folder where it keeps a file: a `StoreError` naming it and what belongs there (`_misplaced`). A link
        counts as what it points to (`cells/` may be a link to a folder on another disk)."""
        for name, (what, is_folder) in RUN_LAYOUT.items():
            path = self.root / name
            try:
                misplaced = path.exists() and path.is_dir() != is_folder
            except OSError as exc:
                raise _cannot_read(path, exc) from None
            if misplaced:
                raise _misplaced(path, what, is_folder)

    def stored_cells(self) -> list[StoredCell]:
        """Finished cells that the archive does not hold yet, in slug order (a cell's file before an earlier version's folder
        of it), each one of this run's (`_check`: a file or folder of `cells/` that is not is a `StoreError` naming it).
        The run folder's layout is checked first (`check_layout`), so a resume stops at a misplaced file or folder
        before it runs a cell, not at its end."""
        self.check_layout()
        archived = self.archived()
        found: dict[str, StoredCell] = {}
        folder = self.root / CELLS
        try:
            entries = list(os.scandir(folder))
        except FileNotFoundError:
            return []
        except NotADirectoryError:  # made a file since `check_layout` looked
            raise _misplaced(folder, RUN_LAYOUT[CELLS][0], True) from None
        except OSError as exc:
            raise _cannot_read(folder, exc) from None
        for entry in entries:
            if entry.is_dir() and os.path.isfile(os.path.join(entry.path, "DONE")):
                found.setdefault(entry.name, StoredCell(Path(entry.path)))
            elif entry.name.endswith(CELL_SUFFIX) and entry.is_file():
                cell = StoredCell(Path(entry.path))
                found[cell.slug] = cell
        cells = [found[slug] for slug in sorted(found) if slug not in archived]
        for cell in cells:
            self._check(cell)
        return cells

    def _expected(self) -> dict[str, CellKey] | None:
        """The run's cells by slug, from its manifest (every scenario × strategy × profile × repeat, as the runner makes
        them; read once); None for a store without a manifest (cells written by themselves, as tests do)."""
        if self._run_cells is not None or not self.manifest_path.exists():
            return self._run_cells
        manifest = read_manifest(self.root, required=("config", "scenarios"))
        config = manifest["config"]
        strategies, profiles, repeats = config.get("strategies"), config.get("profiles"), config.get("repeats", 1)
        if not (isinstance(strategies, list) and isinstance(profiles, list) and isinstance(repeats, int)):
            raise StoreError(f"{self.manifest_path}: not a run manifest this version reads ('config' lacks its strategies, profiles or repeats)")
        keys = (CellKey(s["name"], strategy, profile, repeat)
                for s in manifest["scenarios"] for strategy in strategies for profile in profiles for repeat in range(repeats))
        self._run_cells = {key.slug: key for key in keys}
        return self._run_cells

    def _check(self, cell: StoredCell) -> None:
        """Refuse a cell of `cells/` that is not this run's: named as no cell of its manifest (e.g. copied from another
        run), or holding another cell than its name says (its replay.json's key; a copy of a cell under another
        cell's name). Merged, either would add rows that are no cell of the run, or a cell's rows twice. A
        `StoreError` naming the file rather than a warning and the cell left out: the file is what a user put
        there, and only they know whether it belongs elsewhere. Each name is checked once (a cell this store
        wrote is not read back)."""
        if cell.path.name in self._checked:
            return
        expected = self._expected()
        move = f"move it out of {cell.path.parent}, then try again"
        if expected is not None and cell.slug not in expected:
            raise StoreError(f"{cell.path}: not a cell of this run (its manifest has no cell of this name); {move}")
        key = cell.key()
        if key is not None and key.slug != cell.slug:
            raise StoreError(f"{cell.path}: holds the cell {key.label}, not the one its name says (a copy of another cell's file?); {move}")
        self._checked.add(cell.path.name)

    def merged_tables(self, loaded: Mapping[str, Mapping[str, pa.Table]] | None = None) -> dict[str, pd.DataFrame]:
        """Every finished cell's rows of each table: the archived cells' (from the merged tables) and those in `cells/`,
        as `merge_tables` makes them (lists of ids kept Arrow).

        `loaded` holds tables already read (slug → table name → `StoredCell.tables`; e.g. while the cells
        ran), the other cells are read now.
        """
        by_name: dict[str, dict[str, pa.Table]] = {name: {} for name in TABLES}
        for cell in self.stored_cells():
            tables = (loaded or {}).get(cell.slug) or cell.tables()
            for name in TABLES:
                by_name[name][cell.slug] = tables[name]
        merged = {name: merge_tables(by_name[name]) for name in TABLES}
        if not self.archived():
            return merged
        out = {}
        for name in TABLES:
            before = frame_of(pq.read_table(self.root / f"{name}.parquet"), python_lists=False)
            parts = [f for f in (before, merged[name]) if not f.empty]
            out[name] = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0] if parts else before
        return out

    def replays(self) -> Iterator[dict[str, Any]]:
        """Every finished cell's replay records as rows (`CellRecords.rows`): the archive's, then those in `cells/`.
        One cell's rows at a time become Python objects."""
        for records in self.cell_records():
            yield records.rows()

    def cell_records(self) -> Iterator[CellRecords]:
        """Every finished cell's replay records as stored (Arrow tables and the replay JSON text): the archive's, then the
        folders'. The archive is read once; each of its cells gets its own rows (a run writes a cell's requests together,
        in cell order, but any order is read right)."""
        if self.archived():
            cells = pq.read_table(self.archive_dir / "cells.parquet")
            messages = pq.read_table(self.archive_dir / "messages.parquet")
            contexts = pq.read_table(self.archive_dir / "contexts.parquet")
            rows = contexts.column("cell").to_numpy()
            if not np.all(rows[:-1] <= rows[1:]):  # a cell's requests in their order, cell after cell
                order = np.argsort(rows, kind="stable")
                contexts, rows = contexts.take(order), rows[order]
            bounds = np.searchsorted(rows, np.arange(cells.num_rows + 1))
            contexts = contexts.drop_columns(["cell"]).combine_chunks()  # one chunk: a cell's rows are a slice, a take reads one array
            messages = messages.combine_chunks()
            for row in range(cells.num_rows):
                cell = cells.slice(row, 1).to_pylist()[0]
                yield CellRecords(
                    CellKey(cell["scenario"], cell["strategy"], cell["profile"], cell["repeat"]),
                    contexts.slice(bounds[row], bounds[row + 1] - bounds[row]), messages.take(pa.array(cell["messages"], pa.int64())),
                    cell["replay"],
                )
        for cell in self.stored_cells():
            yield cell.records()

    def record_schemas(self) -> Iterator[tuple[pa.Schema, pa.Schema]]:
        """The schemas of `cell_records`' contexts and messages, read without their rows: the archive's once, then each cell's in `cells/`."""
        if self.archived():
            contexts = pq.read_schema(self.archive_dir / "contexts.parquet")
            yield contexts.remove(contexts.get_field_index("cell")), pq.read_schema(self.archive_dir / "messages.parquet")
        for cell in self.stored_cells():
            yield cell.record_schemas()

    def write_archive(self, records: Iterable[CellRecords], schemas: tuple[pa.Schema, pa.Schema] | None = None) -> None:
        """Write `replays/` from cells' stored replay records (`ArchiveWriter`), `cells.parquet` last.

        `schemas` are the cells' contexts and messages schemas made one (`archive_schemas`); given them,
        `records` are read once, a batch at a time (without them, `records` are listed first to find them)."""
        if schemas is None:
            records = list(records)
            schemas = archive_schemas((r.contexts.schema, r.messages.schema) for r in records)
        messages_path, contexts_path, cells_path = (self.archive_dir / name for name in ARCHIVE_FILES)

        def write(messages: Path, contexts: Path, cells: Path) -> None:
            with ArchiveWriter(schemas, messages, contexts, cells) as archive:
                for cell in records:
                    archive.add(cell)

        # nested: the three files are renamed into place only once all are written, `cells.parquet` last (the commit point);
        # each, once in place, removes the temporary files of it that an archiving killed part-way left (`sweep`)
        atomic_write(cells_path, lambda cells: atomic_write(messages_path, lambda messages: atomic_write(
            contexts_path, lambda contexts: write(messages, contexts, cells), sweep=True), sweep=True), sweep=True)
        self._archived = None

    def archive_from(self, source: RunStore) -> None:
        """Give this run the replay records of `source` (the run `bench score` measures again): the files of its
        archive copied as they are when the archive holds every one of its cells, else an archive written from
        its cells' records."""
        if not source.archived() or source.stored_cells():
            self.write_archive(source.cell_records(), archive_schemas(source.record_schemas()))
            return
        for name in ARCHIVE_FILES:
            atomic_write(self.archive_dir / name, functools.partial(shutil.copyfile, source.archive_dir / name), sweep=True)
        self._archived = None

    def compact(self) -> bool:
        """Move every finished cell's replay records into `replays/` and remove `cells/`; True when done.

        Call it only once the merged tables hold every finished cell's rows (after `finalize`).
        Cells whose records do not share one schema (a column of integers in one cell and of floats
        in another), or a cell without replay records (written by a version that kept none, then
        resumed), are left in `cells/` rather than converted: the run stays complete, only not
        compacted. A `cells/` that is a symbolic link (the cells kept on another disk) is removed as a
        link: the folder it points to, and the cell files in it, are left as they are. A `cells/` whose
        cells the archive holds every one of (a compaction killed after its archive's commit, before it
        removed the folder) is removed as well.
        """
        cells = self.stored_cells()
        if not cells:
            self._remove_cells_folder()
            return True
        if not all(cell.has_records() for cell in cells):
            return False
        try:
            schemas = archive_schemas(self.record_schemas())
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            return False
        self.write_archive(self.cell_records(), schemas)
        self._remove_cells_folder()
        return True

    def _remove_cells_folder(self) -> None:
        """Remove `cells/` once the archive holds its cells; a link to it (the cells kept on another disk) goes, what it points to stays."""
        folder = self.root / CELLS
        if folder.is_symlink():
            folder.unlink()
        elif folder.is_dir():
            shutil.rmtree(folder)

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        write_json(manifest, self.manifest_path)


#: The fields of a run's manifest that its readers rely on (the report, score, gate), with their JSON types.
MANIFEST_FIELDS: dict[str, type] = {"run_id": str, "created": str, "config": dict, "profiles": dict, "scenarios": list, "cells": dict}
#: The JSON name of each type `json.loads` gives.
JSON_TYPES: dict[type, str] = {dict: "object", list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


#: The names in a run folder that `RunStore.check_layout` checks, each with what the run keeps there and whether it is a
#: folder (the module docstring's layout). A file where a folder goes, or the reverse, stopped a resume with Python's
#: words ("[Errno 20] Not a directory", "[Errno 21] Is a directory", or `replays/cells.parquet: cannot write (File
#: exists)`), some only once every cell had run (an outside audit's findings).
RUN_LAYOUT: dict[str, tuple[str, bool]] = {
    CELLS: ("the folder of its finished cells", True),
    ARCHIVE: ("the folder of its cells' replay records", True),
    **{f"{ARCHIVE}/{name}": (f"the file {name} of its replay records", False) for name in ARCHIVE_FILES},
    **{f"{name}.parquet": (f"its {name} table", False) for name in (*TABLES, "summary")},
}


def _misplaced(path: Path, what: str, is_folder: bool) -> StoreError:
    """The error for `path`, where a run keeps `what` (a folder when `is_folder`), holding the other kind."""
    found = "a file" if is_folder else "a folder"
    return StoreError(f"{path}: is {found} where the run keeps {what}; move it away, then resume the run (`bench run --resume`)")


def _cannot_read(path: str | Path, exc: OSError) -> StoreError:
    """The error for a file or folder of a run, `path`, that the system refuses to read (no permission, an I/O error)."""
    return StoreError(f"{path}: cannot be read ({os.strerror(exc.errno) if exc.errno else exc})")


def read_manifest(root: str | Path, required: Iterable[str] = ()) -> dict[str, Any]:
    """The manifest of the run folder `root`: a `StoreError` naming the file when it is missing, unreadable, not JSON (or
    not UTF-8) or not an object, when it lacks a field of `required`, or when a field of `MANIFEST_FIELDS` it holds is
    of another type (each scenario an object with its name, `cells` with its total and its failed cells, each an
    object with its cell and error)."""
    path = Path(root) / "manifest.json"
    try:
        if not path.is_file():
            raise StoreError(f"{root}: not a run folder (no manifest.json)")
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise _cannot_read(path, exc) from None
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise StoreError(f"{path}: malformed JSON ({exc})") from None
    if not isinstance(manifest, dict):
        raise StoreError(f"{path}: not a JSON object")
    for name in required:
        if name not in manifest:
            raise StoreError(f"{path}: not a run manifest this version reads ('{name}' is missing)")
    for name, kind in MANIFEST_FIELDS.items():
        if name in manifest and not isinstance(manifest[name], kind):
            found = JSON_TYPES.get(type(manifest[name]), "value")
            raise StoreError(f"{path}: not a run manifest this version reads ('{name}' is a JSON {found}, not a JSON {JSON_TYPES[kind]})")
    if not all(isinstance(s, dict) and isinstance(s.get("name"), str) for s in manifest.get("scenarios", [])):
        raise StoreError(f"{path}: not a run manifest this version reads (a scenario is not an object with its name)")
    cells = manifest.get("cells", {"total": 0, "failed": []})
    if not isinstance(cells.get("total"), int) or not isinstance(cells.get("failed"), list):
        raise StoreError(f"{path}: not a run manifest this version reads ('cells' lacks its total or its failed cells)")
    if not all(isinstance(f, dict) and isinstance(f.get("cell"), str) and isinstance(f.get("error"), str) for f in cells["failed"]):
        raise StoreError(f"{path}: not a run manifest this version reads (a failed cell is not an object with its cell and error)")
    return manifest


#: Columns whose value may be unknown, by table and by the kind of value they hold (where each is written says when:
#: `metrics/measure.py` for requests and compactions, `metrics/retention.py` for probes, `metrics/aggregate.py` for
#: the summary). `load_run` gives each, in every run, a dtype that holds a missing value: booleans pandas' nullable
#: `boolean` (NA); numbers float64 (NaN), integers too: the README promises NaN for an unknown number, which is how
#: pandas reads an integer column with a null and what the metrics test for (`np.isnan`), not the NA of pandas'
#: nullable Int64, and every count here is far below 2**53, exact as a float; text `TEXT_DTYPE` (NaN). Parquet stores a
#: column as what the run's rows held: integers without a null as integers, nulls only (no judge, no answerer, no
#: summary, no compaction) as nulls, which pandas reads as Python objects; hence a declared dtype, not the stored one.
NULLABLE_BOOLEANS = {"probes": ("correct", "ceiling_correct", "judge_strict", "judge_lenient", "answer_cached")}
NULLABLE_NUMBERS = {
    # None where there is none: a transcript without turns, a request or compaction without the strategy's estimate or
    # threshold, an error not measured (no estimate, or one made on recorded usage), a compaction no request followed,
    # a probe row at a checkpoint (no compaction) or unscored; NaN: dollars of a model without a price
    "requests": ("turn", "estimate_tokens", "threshold", "estimate_error", "estimate_ape", "cost_usd"),
    "compactions": ("turn", "estimate_tokens", "estimate_error", "threshold", "next_request", "llm_cost_usd"),
    "probes": ("compaction", "score"),
    # NaN for a cell without paired probe rows (`unscored` and `summarized_source_pairs` are not counted then), without
    # a grade, a judge, a summarized source, a compaction point, an estimate or a request that could hit the cache,
    # dollars without a price, and a `p_best` withheld (`stats.difference_claimed`)
    "summary": (
        "retention", "retention_lo", "retention_hi", "retention_kept", "retention_summary", "answered", "answered_lo", "answered_hi",
        "answered_ceiling", "answered_rel", "unscored", "retention_summarized_source", "summarized_source_pairs", "judge_strict",
        "judge_lenient", "retention_compaction_points", "p_best", "estimate_error", "estimate_ape", "cache_hit_rate", "cost_usd",
        "summarizer_cost_usd",
    ),
}
NULLABLE_TEXTS = {"requests": ("timestamp", "usage_source"), "compactions": ("summary",), "probes": ("answer", "answer_error")}
#: The other columns of each table, which every row has a value in, with their dtypes ("str" is `TEXT_DTYPE`, "list"
#: a list per row, as Python objects): a count or index is int64, a share float64, and so is each of the summary's
#: sums, a mean over the cell's repeats (a fraction with several).
COLUMN_DTYPES: dict[str, dict[str, str]] = {
    "requests": {
        "request": "int64", "step": "int64", "kind": "str", "attempt": "int64", "true_tokens": "int64", "missed_trigger": "bool",
        "estimate_on_recorded_usage": "bool", "overflow": "bool", "refused": "bool", "prefix_tokens": "int64", "cached_tokens": "int64",
        "cache_write_tokens": "int64", "rebilled_tokens": "int64", "output_tokens": "int64", "n_messages": "int64", "integrity_detail": "str",
    },
    "compactions": {
        "compaction": "int64", "step": "int64", "trigger": "str", "tokens_before": "int64", "tokens_after": "int64", "summarized_ids": "list",
        "kept_ids": "list", "dropped_ids": "list", "silent_loss": "int64", "llm_calls": "int64", "llm_input_tokens": "int64",
        "llm_output_tokens": "int64", "summary_requests": "list", "premature": "bool", "estimate_on_recorded_usage": "bool",
        # whether the compaction has a probe point (`metrics.measure._probe_points`); a run written before the column
        # reads without it (`REQUIRED_COLUMNS`: an older run reads as it is), and the report calls its compactions'
        # probe points unknown (`reports.html`); a run never merges cells of two versions (`runner`: other columns, redone)
        "probed": "bool",
        # a summarizer reply of the compaction cut off at max_tokens (`LLMResult.finish_reason`); older runs read without it
        "summary_cut": "bool",
    },
    "probes": {
        "probe_id": "str", "kind": "str", "match": "str", "point_kind": "str", "step": "int64", "request": "int64", "status": "str",
        "present": "bool", "present_share": "float64", "found": "str", "source_summarized": "bool", "in_summary": "bool", "sample": "int64",
        "fact_age_tokens": "int64",
    },
    "summary": {
        "paired_pairs": "int64", "paired_probes": "int64", "compaction_point_rows": "int64", "estimate_ape_n": "int64", "cannot_serve": "bool",
        **dict.fromkeys((
            "missed_triggers", "overflows", "refused_requests", "failed_requests", "cache_eligible_tokens", "cached_tokens", "rebilled_tokens", "cache_write_tokens",
            "input_tokens", "output_tokens", "tokens_per_task", "requests", "compactions", "silent_loss", "premature_triggers", "summarizer_calls",
            "summarizer_tokens",
        ), "float64"),
    },
}
#: Every column of each table `load_run` knows, with the dtype it gives it whatever the run holds: the keys
#: (`KEY_DTYPES`; the summary's cells have no repeat), `COLUMN_DTYPES`, then the nullable columns by kind.
SCHEMA: dict[str, dict[str, str]] = {
    name: {
        **{k: v for k, v in KEY_DTYPES.items() if name in TABLES or k != "repeat"}, **COLUMN_DTYPES[name],
        **{c: kind for kind, columns in (("boolean", NULLABLE_BOOLEANS), ("float64", NULLABLE_NUMBERS), ("str", NULLABLE_TEXTS))
           for c in columns.get(name, ())},
    }
    for name in (*TABLES, "summary")
}
#: Families of columns named by a prefix, with their dtype: one per wire format (`integrity_<format>`,
#: `integrity_recorded_<format>`), probe family (`retention_<kind>`, `answered_<kind>`) or fact-age bucket
#: (`retention_age_<bucket>`). The metrics own those lists (the kernel imports no plug-in), so a format or family
#: added later is typed too; a name `SCHEMA` gives (`integrity_detail`) is typed as it says.
PREFIXED_DTYPES = {"requests": {"integrity_": "int64"}, "summary": {"integrity_": "float64", "retention_": "float64", "answered_": "float64"}}
#: The columns without which a table is not read, by table: its keys and what every reader of its rows starts from
#: (a request's number, kind and overflow; a probe row's probe, point, presence and grade), which every version of
#: the run store wrote. A run of an older version may lack any other column, and reads as it is.
REQUIRED_COLUMNS = {
    "requests": (*KEY_COLUMNS, "request", "kind", "overflow"),
    "compactions": tuple(KEY_COLUMNS),
    "probes": (*KEY_COLUMNS, "probe_id", "step", "request", "present", "correct"),
    "summary": tuple(KEY_COLUMNS[:3]),
}
#: The dtype pandas reads a text column as (`str` from pandas 3, Python objects before).
TEXT_DTYPE = pd.Series([""]).dtype
#: The pandas dtype of each of `SCHEMA`'s dtypes.
PANDAS_DTYPES: dict[str, Any] = {
    "str": TEXT_DTYPE, "int64": np.dtype("int64"), "float64": np.dtype("float64"), "bool": np.dtype(bool), "boolean": pd.BooleanDtype(),
    "list": np.dtype(object),
}


def _is_text(kind: pa.DataType) -> bool:
    return pa.types.is_string(kind) or pa.types.is_large_string(kind)


def _is_list(kind: pa.DataType) -> bool:
    return pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)


#: Whether a column stored as an Arrow type is read as each of `SCHEMA`'s dtypes (integers widen to numbers, never the
#: reverse); a column of nulls only is read as any dtype that holds a missing value.
STORED_AS: dict[str, Callable[[pa.DataType], bool]] = {
    "str": _is_text, "int64": pa.types.is_integer, "float64": lambda kind: pa.types.is_integer(kind) or pa.types.is_floating(kind),
    "bool": pa.types.is_boolean, "boolean": pa.types.is_boolean, "list": _is_list,
}


def _type_name(kind: pa.DataType) -> str:
    """A stored column's type in pandas' words (str, int64, float64, boolean, list), else in Arrow's (null, timestamp[ns], …)."""
    if _is_text(kind):
        return "str"
    if pa.types.is_floating(kind):
        return f"float{kind.bit_width}"
    if pa.types.is_boolean(kind):
        return "boolean"
    return "list" if _is_list(kind) else str(kind)


def column_dtype(name: str, column: str) -> str | None:
    """The dtype `load_run` gives `column` of table `name` (`SCHEMA`, else its family's, `PREFIXED_DTYPES`); None for a
    column it does not know."""
    dtype = SCHEMA[name].get(column)
    if dtype is None:
        dtype = next((d for prefix, d in PREFIXED_DTYPES.get(name, {}).items() if column.startswith(prefix)), None)
    return dtype


def typed(name: str, frame: pd.DataFrame, stored: pa.Schema, file: Path) -> pd.DataFrame:
    """Table `name` of a run as pandas read it from `file` (`frame`; `stored`, the file's schema), each column
    `column_dtype` knows given its dtype there, whatever the run holds; values unchanged. A `StoreError` naming the
    file and the column when a column of `REQUIRED_COLUMNS` is missing, when a column is stored as a type that is not
    read as its dtype (`STORED_AS`: text for a number, a boolean for text, …) or when a column whose dtype holds no
    missing value (int64, bool) lacks one. A table without rows is typed alike whatever its columns were stored as,
    and gets the required columns it lacks (it has no row for them to be wrong in), so every table has its keys. A
    column this version does not know (a later version's) is left as pandas reads it."""
    for position, column in enumerate(REQUIRED_COLUMNS[name]):
        if column not in frame.columns:
            if len(frame):
                raise StoreError(f"{file}: column {column!r} is missing")
            frame.insert(min(position, len(frame.columns)), column, pd.Series(dtype=PANDAS_DTYPES[SCHEMA[name][column]]))
    kinds = dict(zip(stored.names, stored.types, strict=True))
    for label, read_as in frame.dtypes.items():  # a column is taken from the frame only to be cast (each take costs)
        column = str(label)
        dtype = column_dtype(name, column)
        if dtype is None:
            continue
        kind, expected = kinds.get(column), "boolean" if dtype == "bool" else dtype
        if len(frame) and kind is not None and not (STORED_AS[dtype](kind) or (pa.types.is_null(kind) and dtype not in ("int64", "bool"))):
            raise StoreError(f"{file}: column {column!r} is {_type_name(kind)}, not {expected}")
        if read_as == PANDAS_DTYPES[dtype] or (dtype == "list" and isinstance(read_as, pd.ArrowDtype)):  # lists kept as Arrow
            continue
        values = frame[column]
        if dtype in ("int64", "bool") and values.isna().any():  # integers or booleans with a null: pandas reads floats or objects
            row = int(np.flatnonzero(values.isna().to_numpy())[0])
            raise StoreError(f"{file}: column {column!r} has no value in row {row} ({expected}: every row has one)")
        frame[column] = values.astype(PANDAS_DTYPES[dtype])
    return frame


#: The manifest key a run's finalize sets to the rule its summary's per-scenario P(best) was judged by (withheld where
#: the leader's lead is no difference the tests may claim, `metrics.aggregate.summarize`). A summary written before
#: (no key), or by the forty-first to forty-fifth passes' rule (`true`: the scenario's probes counted as independent
#: units), holds P(best) the current rule withholds, so `load_run` withholds all of them (`bench score` computes them
#: again).
P_BEST_JUDGED = "p_best_judged"
#: The current rule: a scenario's units are its summary draws, its repeats (repeats that are all the same are one draw).
P_BEST_RULE = "summary draws"


def load_run(path: str | Path) -> dict[str, pd.DataFrame]:
    """A finished run's tables as DataFrames, by name, each with a plain RangeIndex:

    - `requests`: one row per request of every cell (turn requests and their retries, summary requests,
      the final context);
    - `compactions`: one row per compaction;
    - `probes`: one row per probe per probe point;
    - `summary`: one row per (scenario, strategy, profile), repeats pooled (counts are per repeat).

    Each column has the dtype its name has in `SCHEMA` whatever the run holds (`typed`): `correct` and the other
    answer grades are `boolean` with NA where unscored, unknown numbers NaN, missing text NaN (pandas 3).

    Every table but `summary` starts with scenario, strategy, profile, repeat; the README's run layout
    lists the columns; a run with failed cells holds the finished cells only (`failed_cells_in`). Raises `StoreError`
    for a path that is no run folder, an unfinished run (a table missing), a damaged table (not parquet, a required
    column missing or of another type: `typed`), a file or folder the system refuses to read, a damaged manifest
    (`read_manifest`, through `compaction_bench.load_run`) or a folder another process's run is working in (its
    tables are an earlier attempt's or are being replaced one by one); a run in this process reads its own tables
    (for its report). A summary written before P(best) was judged by the current rule (`P_BEST_JUDGED`) has its `p_best`
    withheld (NaN).
    The manifest is read once; `load_run_with_manifest` gives it with the tables."""
    return load_run_with_manifest(path)[0]


def load_run_with_manifest(path: str | Path, *, python_lists: bool = True) -> tuple[dict[str, pd.DataFrame], dict[str, Any]]:
    """`load_run`'s tables and the run's manifest (`read_manifest`), which it reads once: a caller that needs the
    manifest too (whether P(best) was judged, the failed cells: `p_best_judged_in`, `failed_cells_in`) takes it from
    here rather than reading the file again, and sees the same manifest the tables were loaded by. With
    `python_lists=False` the compactions' lists of ids stay Arrow (`arrow_lists.frame_of`; the report reads them a row
    at a time, `arrow_lists.RowTexts`)."""
    root = Path(path)
    _check_run_folder(root)
    tables = {name: _read_table(root, name, python_lists) for name in (*TABLES, "summary")}
    manifest = read_manifest(root)
    if not p_best_judged_in(manifest):
        tables["summary"]["p_best"] = float("nan")
    return tables, manifest


def _check_run_folder(root: Path) -> None:
    """Refuse `root` unless it is a run folder no other process's run is working in (`load_run`'s errors)."""
    try:
        if root.exists() and not root.is_dir():
            raise StoreError(f"{root}: is a file, not a run folder")
        if not root.is_dir():
            raise StoreError(f"{root}: no such run folder")
        if not (root / "manifest.json").is_file():
            raise StoreError(f"{root}: not a run folder (no manifest.json)")
        if in_use(root) and not held_here(root):
            raise StoreError(f"{root}: a run is still working in this folder (it holds {root / LOCK_NAME}); wait for it to finish")
    except OSError as exc:  # looking up the folder or a file in it: the folder is what cannot be read
        raise _cannot_read(root, exc) from None


def _read_table(root: Path, name: str, python_lists: bool = True) -> pd.DataFrame:
    """The run's table `name`, typed by its schema (`typed`), its lists of texts as `frame_of` makes them given
    `python_lists`; a `StoreError` naming the file when it is missing or cannot be read."""
    file = root / f"{name}.parquet"
    try:
        if file.is_dir():
            raise _misplaced(file, RUN_LAYOUT[file.name][0], False)
        if not file.is_file():
            raise StoreError(f"{root}: {name}.parquet is missing (an unfinished run? finish it with `bench run --resume`)")
        table = pq.read_table(file)
        stored, frame = table.schema, frame_of(table, python_lists=python_lists)
    except pa.ArrowException as exc:
        raise StoreError(f"{file}: not a readable table ({exc})") from None
    except OSError as exc:
        raise _cannot_read(file, exc) from None
    return typed(name, frame, stored, file)


def p_best_judged_in(manifest: Mapping[str, Any]) -> bool:
    """Whether a run's `manifest` says its summary withholds the P(best) the current rule cannot claim (`P_BEST_JUDGED`
    is `P_BEST_RULE`; a run finalized before, or by an earlier rule, may hold a P(best) that reads as a certainty no
    test backs)."""
    return manifest.get(P_BEST_JUDGED) == P_BEST_RULE


def failed_cells_in(manifest: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The cells of a run that failed (`cell`, `error`), from its `manifest` (as `read_manifest` checked it): its
    tables hold the others only."""
    return list(manifest.get("cells", {}).get("failed", []))
