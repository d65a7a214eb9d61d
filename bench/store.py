"""The run store: `runs/<run-id>/` with its manifest, per-cell results, the merged tables and the replay archive.

Layout of a finished run::

    runs/<run-id>/
      manifest.json          config, versions, seeds, git revision, cells; every scenario's transcript
                             file, sha256, format, import options and session id (`scenarios`), every
                             profile's definition (`profiles`), the templates' text and sha256 (`templates`)
      transcripts/           canonical JSONL of scenarios that came from no file (synthetic, in memory)
      probes/scenario-<n>.yaml  the probes asked about scenario n (given or mined)
      requests.parquet       every request of every cell
      compactions.parquet    every compaction
      probes.parquet         one row per probe per probe point
      summary.parquet        one row per (scenario, strategy, profile)
      replays/               every cell's replay records, merged: cells.parquet (one row per cell: its key,
                             its replay.json text, the ids of its messages), contexts.parquet (every
                             request with its item ids, message references and summarizer call, and its
                             cell's row), messages.parquet (each distinct message of the run once)
      report.html            the self-contained report

While a run works, each finished cell has its own folder `cells/<cell-key>/`: its
requests|compactions|probes.parquet, its replay records (contexts.arrow, messages.arrow,
replay.json) and then `DONE`. The records are Arrow IPC files (lz4): they live only until the archive
reads them back, in half the time it took to read parquet (folders that an earlier version wrote
with contexts.parquet and messages.parquet are read as well). Every write is atomic (temporary
file, then rename); a cell counts as finished once its `DONE` marker exists or the archive lists
it, so `--resume` redoes exactly the unfinished cells. Once every cell is finished and the tables are merged, `compact()` moves the
replay records into `replays/` and removes the cell folders; the merged tables then hold the
cells' rows. The archive is built with Arrow, without a row of it becoming a Python object:
messages are told apart by an identity string of all their fields (length-prefixed, so no two
different messages share one), and `cells.parquet` is written last (it is the commit point). The
replay records let `bench score` measure a run again without replaying
(`compaction_bench.records.from_rows`).
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.feather as feather
import pyarrow.parquet as pq

from compaction_bench.atomic import atomic_write, atomic_write_text
from compaction_bench.errors import BenchError
from compaction_bench.run_folder import LOCK_NAME, held_here, in_use

TABLES = ("requests", "compactions", "probes")
#: The key columns that start every table but `summary`, with their dtypes ("str" is pandas' text dtype, `TEXT_DTYPE`).
KEY_DTYPES = {"scenario": "str", "strategy": "str", "profile": "str", "repeat": "int64"}
KEY_COLUMNS = list(KEY_DTYPES)
#: A cell's replay record files, as `write_replay` writes them into its folder: its requests' contexts and its
#: distinct messages (Arrow IPC), and its replay.json.
REPLAY_FILES = ("contexts.arrow", "messages.arrow", "replay.json")
#: The same records as versions before the thirtieth speed pass wrote them (parquet), still read.
PARQUET_REPLAY_FILES = ("contexts.parquet", "messages.parquet", "replay.json")
ARCHIVE = "replays"
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


def write_parquet(frame: pd.DataFrame, path: Path) -> Path:
    return atomic_write(path, lambda tmp: frame.to_parquet(tmp, index=False))


def _write_table(table: pa.Table, path: Path) -> Path:
    def write(tmp: Path) -> None:
        pq.write_table(table, tmp, compression="zstd")

    return atomic_write(path, write)


def _write_ipc(table: pa.Table, path: Path) -> Path:
    return atomic_write(path, lambda tmp: feather.write_feather(table, tmp, compression="lz4"))


def _read_records_table(path: Path) -> pa.Table:
    """One of a cell's replay records tables (IPC, or parquet from an earlier version), read on this thread: a
    cell's files are small, and Arrow's thread pools cost more CPU than reading them."""
    if path.suffix == ".arrow":
        return feather.read_table(path, memory_map=False, use_threads=False)
    return pq.read_table(path, use_threads=False)


def replay_files(directory: Path) -> tuple[Path, ...] | None:
    """The cell folder's replay records files (`REPLAY_FILES`, else `PARQUET_REPLAY_FILES`), None when neither set is whole."""
    for names in (REPLAY_FILES, PARQUET_REPLAY_FILES):
        files = tuple(directory / name for name in names)
        if all(f.is_file() for f in files):
            return files
    return None


def write_json(data: Any, path: Path) -> Path:
    return atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def cell_frame(key: CellKey, rows: list[dict[str, Any]]) -> pd.DataFrame:
    """One cell's rows of a table with the cell's key columns in front."""
    rows = [{**key.columns(), **row} for row in rows]
    return pd.DataFrame(rows) if rows else pd.DataFrame(columns=KEY_COLUMNS)


def as_stored(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` as it reads back from its parquet file (lists become arrays, empty columns get their stored type)."""
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    buffer.seek(0)
    return pd.read_parquet(buffer)


def merge_frames(frames: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Cells' frames of one table (by cell slug) as one table, in slug order (the order of a run's folders)."""
    kept = [frames[slug] for slug in sorted(frames) if not frames[slug].empty]
    return pd.concat(kept, ignore_index=True) if kept else pd.DataFrame(columns=KEY_COLUMNS)


@dataclass(frozen=True)
class CellRecords:
    """One cell's replay records as stored: its contexts and messages tables and its replay.json text."""

    key: CellKey
    contexts: pa.Table
    messages: pa.Table
    replay: str


def read_cell_records(directory: Path) -> CellRecords:
    """A cell folder's replay records, as stored (the folder must hold them: `replay_files`)."""
    files = replay_files(directory)
    if files is None:
        raise StoreError(f"{directory}: no replay records")
    text = files[2].read_text(encoding="utf-8")
    key = CellKey(**json.loads(text)["key"])
    return CellRecords(key, _read_records_table(files[0]), _read_records_table(files[1]), text)


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


class RunStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._archived: dict[str, int] | None = None

    @property
    def manifest_path(self) -> Path:
        return self.root / "manifest.json"

    @property
    def archive_dir(self) -> Path:
        return self.root / ARCHIVE

    def cell_dir(self, key: CellKey) -> Path:
        return self.root / "cells" / key.slug

    def archived(self) -> dict[str, int]:
        """The archive's cells: slug → row of `replays/cells.parquet` (empty before `compact()`)."""
        if self._archived is None:
            index = self.archive_dir / "cells.parquet"
            slugs = pq.read_table(index, columns=["cell"]).column("cell").to_pylist() if index.is_file() else []
            self._archived = {slug: row for row, slug in enumerate(slugs)}
        return self._archived

    def is_done(self, key: CellKey) -> bool:
        return key.slug in self.archived() or (self.cell_dir(key) / "DONE").exists()

    def write_cell(self, key: CellKey, tables: Mapping[str, list[dict[str, Any]]]) -> None:
        """A finished cell's tables, then its `DONE` marker (its replay records must be written before)."""
        directory = self.cell_dir(key)
        for name in TABLES:
            write_parquet(cell_frame(key, tables.get(name, [])), directory / f"{name}.parquet")
        atomic_write_text(directory / "DONE", "")

    def write_replay(self, key: CellKey, rows: Mapping[str, Any]) -> None:
        """A cell's replay records (`compaction_bench.records.to_rows`); written before its DONE marker."""
        directory = self.cell_dir(key)
        contexts, messages, replay = REPLAY_FILES
        _write_ipc(pa.Table.from_pylist(rows["requests"]), directory / contexts)
        _write_ipc(pa.Table.from_pylist(rows["messages"]), directory / messages)
        write_json({"key": key.columns(), **rows["replay"]}, directory / replay)

    def cell_folders(self) -> list[Path]:
        """Folders of finished cells that the archive does not hold yet, in slug order."""
        archived = self.archived()
        return [d for d in sorted((self.root / "cells").glob("*")) if (d / "DONE").exists() and d.name not in archived]

    def read_cell_tables(self, directory: Path) -> dict[str, pd.DataFrame]:
        """A cell folder's requests, compactions and probes tables."""
        return {name: pd.read_parquet(directory / f"{name}.parquet") for name in TABLES}

    def merged_tables(self, loaded: Mapping[str, Mapping[str, pd.DataFrame]] | None = None) -> dict[str, pd.DataFrame]:
        """Every finished cell's rows of each table: the archived cells' (from the merged tables) and the cell folders'.

        `loaded` holds tables already read (slug → table name → frame; e.g. while the cells ran), the
        other folders are read now.
        """
        frames: dict[str, dict[str, pd.DataFrame]] = {name: {} for name in TABLES}
        for directory in self.cell_folders():
            tables = (loaded or {}).get(directory.name) or self.read_cell_tables(directory)
            for name in TABLES:
                frames[name][directory.name] = tables[name]
        merged = {name: merge_frames(frames[name]) for name in TABLES}
        if not self.archived():
            return merged
        out = {}
        for name in TABLES:
            before = pd.read_parquet(self.root / f"{name}.parquet")
            parts = [f for f in (before, merged[name]) if not f.empty]
            out[name] = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0] if parts else before
        return out

    @staticmethod
    def read_replay(directory: Path) -> dict[str, Any]:
        """What `write_replay` wrote into a cell folder: `messages`, `requests` (rows) and `replay` (with the cell's `key`)."""
        files = replay_files(directory)
        if files is None:
            missing = [name for name in REPLAY_FILES if not (directory / name).is_file()]
            raise StoreError(f"{directory}: no replay records ({', '.join(missing)} missing; a run made before runs kept them)")
        return {
            "requests": _read_records_table(files[0]).to_pylist(),
            "messages": _read_records_table(files[1]).to_pylist(),
            "replay": json.loads(files[2].read_text(encoding="utf-8")),
        }

    def replays(self) -> Iterator[dict[str, Any]]:
        """Every finished cell's replay records (as `read_replay` returns them): the archive's, then the cell folders'."""
        if self.archived():
            cells = pq.read_table(self.archive_dir / "cells.parquet").to_pylist()
            messages = pq.read_table(self.archive_dir / "messages.parquet").to_pylist()
            by_cell: dict[int, list[dict[str, Any]]] = {row: [] for row in range(len(cells))}
            for request in pq.read_table(self.archive_dir / "contexts.parquet").to_pylist():
                by_cell[request.pop("cell")].append(request)
            for row, cell in enumerate(cells):
                yield {"requests": by_cell[row], "messages": [messages[n] for n in cell["messages"]], "replay": json.loads(cell["replay"])}
        for directory in self.cell_folders():
            yield self.read_replay(directory)

    def cell_records(self) -> Iterator[CellRecords]:
        """Every finished cell's replay records as stored (Arrow tables and the replay JSON text): the archive's, then the folders'."""
        if self.archived():
            cells = pq.read_table(self.archive_dir / "cells.parquet")
            messages = pq.read_table(self.archive_dir / "messages.parquet")
            contexts = pq.read_table(self.archive_dir / "contexts.parquet")
            rows = contexts.column("cell").to_numpy()
            contexts = contexts.drop_columns(["cell"])
            for row, cell in enumerate(cells.to_pylist()):
                yield CellRecords(
                    CellKey(cell["scenario"], cell["strategy"], cell["profile"], cell["repeat"]),
                    contexts.filter(pa.array(rows == row)), messages.take(pa.array(cell["messages"], pa.int64())), cell["replay"],
                )
        for directory in self.cell_folders():
            yield read_cell_records(directory)

    def write_archive(self, records: Sequence[CellRecords]) -> None:
        """Write `replays/` from cells' stored replay records, `cells.parquet` last."""
        messages = pa.concat_tables([r.messages for r in records], promote_options="default")
        ids = pc.dictionary_encode(_identity(messages)).indices.to_numpy(zero_copy_only=False).astype(np.int64)
        _, first = np.unique(ids, return_index=True)  # ids number distinct messages in order of first appearance
        offsets = np.cumsum([0] + [r.messages.num_rows for r in records])
        contexts = pa.concat_tables(
            [r.contexts.append_column("cell", pa.array(np.full(r.contexts.num_rows, row, np.int64))) for row, r in enumerate(records)],
            promote_options="default",
        )
        cells = pa.table({
            "cell": [r.key.slug for r in records], "scenario": [r.key.scenario for r in records], "strategy": [r.key.strategy for r in records],
            "profile": [r.key.profile for r in records], "repeat": pa.array([r.key.repeat for r in records], pa.int64()),
            "replay": [r.replay for r in records],
            "messages": pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(ids, pa.int64())),
        })
        _write_table(messages.take(pa.array(first)), self.archive_dir / "messages.parquet")
        _write_table(contexts, self.archive_dir / "contexts.parquet")
        _write_table(cells, self.archive_dir / "cells.parquet")
        self._archived = None

    def compact(self) -> bool:
        """Move every finished cell's replay records into `replays/` and remove the cell folders; True when done.

        Call it only once the merged tables hold every finished cell's rows (after `finalize`).
        Cells whose records do not share one schema (a column of integers in one cell and of floats
        in another), or a cell without replay records (written by a version that kept none, then
        resumed), are left in their folders rather than converted: the run stays complete, only not
        compacted.
        """
        folders = self.cell_folders()
        if not folders:
            return True
        if any(replay_files(d) is None for d in folders):
            return False
        try:
            self.write_archive(list(self.cell_records()))
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            return False
        shutil.rmtree(self.root / "cells")
        return True

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        write_json(manifest, self.manifest_path)

    def read_manifest(self) -> dict[str, Any]:
        if not self.manifest_path.is_file():
            raise StoreError(f"{self.root}: not a run folder (no manifest.json)")
        return json.loads(self.manifest_path.read_text(encoding="utf-8"))


#: Columns whose rows may hold None, by table and by the kind of value they hold: `load_run` gives each the same
#: dtype in every run. Parquet stores them typed, but pandas reads a column of booleans with a null, and a column
#: of nulls only (no row of the run had a value: no judge, no answerer, no summary, no compaction), as Python objects.
NULLABLE_BOOLEANS = {"probes": ("correct", "ceiling_correct", "judge_strict", "judge_lenient", "answer_cached")}
NULLABLE_NUMBERS = {
    "requests": ("estimate_tokens", "threshold", "estimate_error", "estimate_ape"),
    "compactions": ("estimate_tokens", "estimate_error", "threshold", "next_request"),
    "probes": ("compaction", "score"),
}
NULLABLE_TEXTS = {"requests": ("timestamp", "usage_source"), "compactions": ("trigger", "summary"), "probes": ("answer", "answer_error")}
#: The dtype pandas reads a text column as (`str` from pandas 3, Python objects before).
TEXT_DTYPE = pd.Series([""]).dtype


def typed(name: str, frame: pd.DataFrame) -> pd.DataFrame:
    """Table `name` of a run with its nullable columns typed: booleans as pandas' nullable `boolean` (None as NA),
    numbers as float64 (None as NaN, as pandas reads an integer column with a null), text as `TEXT_DTYPE`; the
    key columns of a table without rows (no cell compacted) as those of one with rows. Values are unchanged."""
    frame = frame.copy()
    for column in NULLABLE_BOOLEANS.get(name, ()):
        values = frame.get(column)
        if values is not None and (values.dtype in (bool, object) or values.isna().all()):
            frame[column] = values.astype("boolean")
    targets: list[tuple[str, Any]] = [(column, np.dtype("float64")) for column in NULLABLE_NUMBERS.get(name, ())]
    targets += [(column, TEXT_DTYPE) for column in NULLABLE_TEXTS.get(name, ())]
    targets += [(column, TEXT_DTYPE if kind == "str" else np.dtype(kind)) for column, kind in KEY_DTYPES.items()]
    for column, dtype in targets:
        if column in frame.columns and frame[column].dtype == object and frame[column].isna().all():
            frame[column] = frame[column].astype(dtype)
    return frame


def load_run(path: str | Path) -> dict[str, pd.DataFrame]:
    """A finished run's tables as DataFrames, by name, each with a plain RangeIndex:

    - `requests`: one row per request of every cell (turn requests and their retries, summary requests,
      the final context);
    - `compactions`: one row per compaction;
    - `probes`: one row per probe per probe point;
    - `summary`: one row per (scenario, strategy, profile), repeats pooled (counts are per repeat).

    A column that may hold None has one dtype whatever the run holds (`typed`): `correct` and the other
    answer grades are `boolean` with NA where unscored, unknown numbers NaN, missing text NaN (pandas 3).

    Every table but `summary` starts with scenario, strategy, profile, repeat; the README's run layout
    lists the columns; a run with failed cells holds the finished cells only (`failed_cells`). Raises `StoreError` for a path that is no run folder, an unfinished
    run (a table missing) or a folder another process's run is working in (its tables are an earlier
    attempt's or are being replaced one by one); a run in this process reads its own tables (for its
    report)."""
    root = Path(path)
    if root.exists() and not root.is_dir():
        raise StoreError(f"{root}: is a file, not a run folder")
    if not root.is_dir():
        raise StoreError(f"{root}: no such run folder")
    if not (root / "manifest.json").is_file():
        raise StoreError(f"{root}: not a run folder (no manifest.json)")
    if in_use(root) and not held_here(root):
        raise StoreError(f"{root}: a run is still working in this folder (it holds {root / LOCK_NAME}); wait for it to finish")
    tables = {}
    for name in (*TABLES, "summary"):
        file = root / f"{name}.parquet"
        if not file.is_file():
            raise StoreError(f"{root}: {name}.parquet is missing (an unfinished run? finish it with `bench run --resume`)")
        tables[name] = typed(name, pd.read_parquet(file))
    return tables


def failed_cells(path: str | Path) -> list[dict[str, Any]]:
    """The cells of a run that failed (`cell`, `error`), from its manifest: its tables hold the others only."""
    manifest = json.loads((Path(path) / "manifest.json").read_text(encoding="utf-8"))
    return list(manifest.get("cells", {}).get("failed") or [])
