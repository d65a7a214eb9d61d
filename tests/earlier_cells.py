"""Cell folders as versions before the thirty-second speed pass wrote them, made from this version's cell files.

Those versions stored a finished cell as a folder `cells/<slug>/`: its three tables as parquet files
(written by pandas), its replay records as Arrow IPC files (from the thirtieth pass) or parquet files
(before), its replay.json, and then a `DONE` marker. A resume and `bench score` still read them.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq

from compaction_bench.store import PARQUET_REPLAY_FILES, REPLAY_FILES, TABLES


def as_earlier_folder(
    cell_file: Path, *, records: str | None = "arrow", edit: Callable[[str, pd.DataFrame], pd.DataFrame] | None = None
) -> Path:
    """Replace the cell file `cell_file` by the folder an earlier version wrote for the same cell: its tables as
    parquet (each passed through `edit(name, frame)` when given), its records as `records` ("arrow", "parquet",
    or None for a version that kept none), then DONE. Returns the folder."""
    folder = cell_file.with_suffix("")
    folder.mkdir()
    with zipfile.ZipFile(cell_file) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    for name in TABLES:
        frame = feather.read_table(pa.BufferReader(members[f"{name}.arrow"])).to_pandas()
        (edit(name, frame) if edit else frame).to_parquet(folder / f"{name}.parquet", index=False)
    if records is not None:
        (folder / REPLAY_FILES[2]).write_bytes(members[REPLAY_FILES[2]])
        for ipc, parquet in zip(REPLAY_FILES[:2], PARQUET_REPLAY_FILES[:2], strict=True):
            if records == "arrow":
                (folder / ipc).write_bytes(members[ipc])
            else:
                pq.write_table(feather.read_table(pa.BufferReader(members[ipc])), folder / parquet, compression="zstd")
    (folder / "DONE").write_text("")
    cell_file.unlink()
    return folder
