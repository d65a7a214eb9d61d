"""The run store: `runs/<run-id>/` with its manifest, per-cell results and the merged tables.

Layout::

    runs/<run-id>/
      manifest.json          config, versions, seeds, git revision, cells; every scenario's transcript
                             file, sha256, format, import options and session id (`scenarios`), every
                             profile's definition (`profiles`), the templates' text and sha256 (`templates`)
      transcripts/           canonical JSONL of scenarios that came from no file (synthetic, in memory)
      probes/scenario-<n>.yaml  the probes asked about scenario n (given or mined)
      cells/<cell-key>/      requests|compactions|probes.parquet of one finished cell, its replay
                             records (contexts.parquet: each request's item ids, message references
                             and summarizer call; messages.parquet: each distinct message once;
                             replay.json: compactions, probe points, settings), then DONE
      requests.parquet       every request of every cell
      compactions.parquet    every compaction
      probes.parquet         one row per probe per probe point
      summary.parquet        one row per (scenario, strategy, profile)
      report.html            the self-contained report

Every write is atomic (temporary file, then rename); a cell counts as finished only once its
`DONE` marker exists, so `--resume` redoes exactly the unfinished cells. The replay records let
`bench score` measure a run again without replaying (`compaction_bench.records.from_rows`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from compaction_bench.atomic import atomic_write, atomic_write_text
from compaction_bench.errors import BenchError

TABLES = ("requests", "compactions", "probes")
KEY_COLUMNS = ["scenario", "strategy", "profile", "repeat"]


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
        pq.write_table(table, tmp)

    return atomic_write(path, write)


def write_json(data: Any, path: Path) -> Path:
    return atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


class RunStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    @property
    def manifest_path(self) -> Path:
        return self.root / "manifest.json"

    def cell_dir(self, key: CellKey) -> Path:
        return self.root / "cells" / key.slug

    def is_done(self, key: CellKey) -> bool:
        return (self.cell_dir(key) / "DONE").exists()

    def write_cell(self, key: CellKey, tables: dict[str, list[dict[str, Any]]]) -> None:
        directory = self.cell_dir(key)
        for name in TABLES:
            rows = [{**key.columns(), **row} for row in tables.get(name, [])]
            frame = pd.DataFrame(rows) if rows else pd.DataFrame(columns=KEY_COLUMNS)
            write_parquet(frame, directory / f"{name}.parquet")
        atomic_write_text(directory / "DONE", "")

    def write_replay(self, key: CellKey, rows: dict[str, Any]) -> None:
        """A cell's replay records (`compaction_bench.records.to_rows`); written before its DONE marker."""
        directory = self.cell_dir(key)
        for name, file in (("requests", "contexts.parquet"), ("messages", "messages.parquet")):
            _write_table(pa.Table.from_pylist(rows[name]), directory / file)
        write_json({"key": key.columns(), **rows["replay"]}, directory / "replay.json")

    def done_cells(self) -> list[Path]:
        return [d for d in sorted((self.root / "cells").glob("*")) if (d / "DONE").exists()]

    @staticmethod
    def read_replay(directory: Path) -> dict[str, Any]:
        """What `write_replay` wrote: `messages`, `requests` (rows) and `replay` (with the cell's `key`)."""
        files = [directory / f for f in ("contexts.parquet", "messages.parquet", "replay.json")]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise StoreError(f"{directory}: no replay records ({', '.join(missing)} missing; a run made before runs kept them)")
        return {
            "requests": pq.read_table(files[0]).to_pylist(),
            "messages": pq.read_table(files[1]).to_pylist(),
            "replay": json.loads(files[2].read_text(encoding="utf-8")),
        }

    def read_cells(self, name: str) -> pd.DataFrame:
        frames = [
            pd.read_parquet(d / f"{name}.parquet")
            for d in sorted((self.root / "cells").glob("*"))
            if (d / "DONE").exists()
        ]
        frames = [f for f in frames if not f.empty]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=KEY_COLUMNS)

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        write_json(manifest, self.manifest_path)

    def read_manifest(self) -> dict[str, Any]:
        if not self.manifest_path.is_file():
            raise StoreError(f"{self.root}: not a run folder (no manifest.json)")
        return json.loads(self.manifest_path.read_text(encoding="utf-8"))


def load_run(path: str | Path) -> dict[str, pd.DataFrame]:
    """A finished run's tables: `requests`, `compactions`, `probes`, `summary` as DataFrames."""
    root = Path(path)
    if not root.is_dir():
        raise StoreError(f"{root}: no such run folder")
    tables = {}
    for name in (*TABLES, "summary"):
        file = root / f"{name}.parquet"
        if not file.is_file():
            raise StoreError(f"{root}: {name}.parquet is missing (an unfinished run? finish it with `bench run --resume`)")
        tables[name] = pd.read_parquet(file)
    return tables
