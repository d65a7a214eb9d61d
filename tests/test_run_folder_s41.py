"""The run folder, after an outside audit (session 41): a file or folder of the wrong kind where the run keeps
the other is refused in the project's words, naming it, before a resume runs a cell; the temporary files an
archiving killed part-way left are removed by the next archiving (and only they), and so is the `cells/` a
compaction killed after its archive's commit left; a run on Ray whose folder cannot be written stops with the
resume hint a local run gives (once runner.py has the change /work/notes/s41/run_folder.md describes). Each case
was a reproduced defect."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from compaction_bench.atomic import WriteFailed, atomic_write_text, stale_temps
from compaction_bench.runner import CannotWrite
from compaction_bench.store import StoreError, load_run
from tests.conftest import assert_user_error, bench_cli, write_tiny_session
from tests.test_run_lifecycle_interrupts import run_args, stopped
from tests.test_run_lifecycle_resume import run_tiny, stop_after_first_cell

RESUME = "; move it away, then resume the run (`bench run --resume`)"


def interrupted_run(tmp_path: Path) -> Path:
    """A run of two cells stopped after its first: the folder a resume finishes."""
    with pytest.raises(KeyboardInterrupt):
        run_tiny(tmp_path, "r", on_cell=stop_after_first_cell)
    return tmp_path / "runs" / "r"


def finished_cells(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "cells").iterdir())


# --------------------------------------------------------------------------- 1: a file or folder of the wrong kind
def test_cells_as_a_file_is_refused_naming_it_and_the_resume_finishes_once_it_is_moved(tmp_path):
    """Before: `error: [Errno 20] Not a directory: 'runs/r/cells'` (`os.scandir` in `RunStore.stored_cells`)."""
    root = interrupted_run(tmp_path)
    for cell in (root / "cells").iterdir():
        cell.unlink()
    (root / "cells").rmdir()
    (root / "cells").write_text("notes\n")
    with pytest.raises(StoreError, match=re.escape(f"{root / 'cells'}: is a file where the run keeps the folder of its finished cells{RESUME}")):
        run_tiny(tmp_path, "r", resume=True)
    (root / "cells").rename(tmp_path / "moved")
    run_tiny(tmp_path, "r", resume=True)
    assert set(load_run(root)["summary"]["strategy"]) == {"none", "truncate"}


def test_the_cli_says_it_in_one_line_with_exit_2(tmp_path):
    session = write_tiny_session(tmp_path)
    out = tmp_path / "runs"
    proc = stopped(tmp_path, "compaction_bench.runner:finalize", "SIGKILL", *run_args(session, out, "r", "--no-report"))
    assert proc.returncode == -9, proc.stderr  # both cells finished, nothing finalized
    (out / "r" / "replays").write_text("")
    line = assert_user_error(bench_cli(*run_args(session, out, "r", "--no-report", "--resume")))
    assert line == f"error: {out / 'r' / 'replays'}: is a file where the run keeps the folder of its cells' replay records{RESUME}"


def test_summary_as_a_folder_is_refused_before_a_cell_runs(tmp_path):
    """Before: the resume ran every remaining cell, then stopped at the finalize with `[Errno 21] Is a directory`."""
    root = interrupted_run(tmp_path)
    before = finished_cells(root)
    (root / "summary.parquet").mkdir()
    with pytest.raises(StoreError, match=re.escape(f"{root / 'summary.parquet'}: is a folder where the run keeps its summary table{RESUME}")):
        run_tiny(tmp_path, "r", resume=True)
    assert finished_cells(root) == before  # refused before the second cell ran
    (root / "summary.parquet").rmdir()
    run_tiny(tmp_path, "r", resume=True)
    assert set(load_run(root)["summary"]["strategy"]) == {"none", "truncate"}


def test_load_run_calls_a_table_that_is_a_folder_what_it_is_not_missing(tmp_path):
    """Before: "summary.parquet is missing (an unfinished run? …)" for a folder of that name."""
    root = run_tiny(tmp_path, "r")
    (root / "summary.parquet").unlink()
    (root / "summary.parquet").mkdir()
    with pytest.raises(StoreError, match=re.escape(f"{root / 'summary.parquet'}: is a folder where the run keeps its summary table{RESUME}")):
        load_run(root)


def test_replays_as_a_file_is_refused_before_a_cell_runs(tmp_path):
    """Before: every remaining cell ran, then `replays/cells.parquet: cannot write (File exists)`."""
    root = interrupted_run(tmp_path)
    before = finished_cells(root)
    (root / "replays").write_text("")
    with pytest.raises(StoreError, match=re.escape(f"{root / 'replays'}: is a file where the run keeps the folder of its cells' replay records{RESUME}")):
        run_tiny(tmp_path, "r", resume=True)
    assert finished_cells(root) == before


def test_a_file_of_the_archive_that_is_a_folder_is_refused(tmp_path):
    root = interrupted_run(tmp_path)
    (root / "replays" / "cells.parquet").mkdir(parents=True)
    with pytest.raises(StoreError, match=re.escape(f"{root / 'replays' / 'cells.parquet'}: is a folder where the run keeps the file cells.parquet")):
        run_tiny(tmp_path, "r", resume=True)


def test_a_write_says_which_file_or_folder_is_in_the_way(tmp_path):
    """Before: "cannot write (File exists)", "(Not a directory)" or "(Is a directory)", naming neither."""
    (tmp_path / "replays").write_text("")
    with pytest.raises(WriteFailed, match=re.escape(f"{tmp_path / 'replays' / 'x.parquet'}: cannot write ({tmp_path / 'replays'} is a file, not a folder)")):
        atomic_write_text(tmp_path / "replays" / "x.parquet", "")
    with pytest.raises(WriteFailed, match=re.escape(f"cannot write ({tmp_path / 'replays'} is a file, not a folder)")):
        atomic_write_text(tmp_path / "replays" / "deeper" / "x.parquet", "")
    (tmp_path / "summary.parquet").mkdir()
    with pytest.raises(WriteFailed, match=re.escape(f"{tmp_path / 'summary.parquet'}: cannot write ({tmp_path / 'summary.parquet'} is a folder, not a file)")):
        atomic_write_text(tmp_path / "summary.parquet", "")
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere")
    with pytest.raises(WriteFailed, match=re.escape(f"cannot write ({tmp_path / 'gone'} is a link to nothing, not a folder)")):
        atomic_write_text(tmp_path / "gone" / "x", "")


def test_a_cell_that_cannot_be_written_locally_says_what_is_in_the_way_and_how_to_go_on(tmp_path):
    """`cells` made a file once the run started: the cell's write is refused by its folder, not by "File exists"."""
    root = tmp_path / "runs" / "r"
    with pytest.raises(CannotWrite, match=re.escape(f"cannot write ({root / 'cells'} is a file, not a folder); the run stopped, "
                                                    "its finished cells are kept for `bench run --resume`")):
        run_tiny(tmp_path, "r", on_start=lambda todo: (root / "cells").write_text(""))


# --------------------------------------------------------------------------- 2: temporary files a killed archiving left
def test_temporary_files_of_an_archiving_killed_part_way_are_removed_by_the_resume(tmp_path):
    """Before: `replays/.cells.parquet.<random>.tmp` (and the messages' and contexts') stayed after the resume."""
    session = write_tiny_session(tmp_path)
    out = tmp_path / "runs"
    proc = stopped(tmp_path, "compaction_bench.store:_identity", "SIGKILL", *run_args(session, out, "r", "--no-report"))
    assert proc.returncode == -9, proc.stderr
    replays = out / "r" / "replays"
    left = sorted(p.name for p in replays.iterdir())
    assert [re.sub(r"\.[a-z0-9_]{8}\.tmp$", ".*.tmp", name) for name in left] == [
        ".cells.parquet.*.tmp", ".contexts.parquet.*.tmp", ".messages.parquet.*.tmp"]
    (replays / "my notes.tmp").write_text("the user's")
    resumed = bench_cli(*run_args(session, out, "r", "--no-report", "--resume"))
    assert resumed.returncode == 0, resumed.stderr
    assert sorted(p.name for p in replays.iterdir()) == ["cells.parquet", "contexts.parquet", "messages.parquet", "my notes.tmp"]


def test_cells_left_by_a_compaction_killed_after_its_archive_are_removed_by_the_resume(tmp_path):
    """Before: killed between the archive's commit (`replays/cells.parquet` renamed into place) and the removal of
    `cells/`, the run kept `cells/` for good: every resume found no cell outside the archive and left it there."""
    session = write_tiny_session(tmp_path)
    out = tmp_path / "runs"
    proc = stopped(tmp_path, "shutil:rmtree", "SIGKILL", *run_args(session, out, "r", "--no-report"))
    assert proc.returncode == -9, proc.stderr
    assert (out / "r" / "replays" / "cells.parquet").is_file() and len(list((out / "r" / "cells").iterdir())) == 2
    resumed = bench_cli(*run_args(session, out, "r", "--no-report", "--resume"))
    assert resumed.returncode == 0, resumed.stderr
    assert not (out / "r" / "cells").exists()
    assert set(load_run(out / "r")["summary"]["strategy"]) == {"none", "truncate"}


def test_only_files_of_the_projects_temporary_naming_are_removed(tmp_path):
    """Planted: a temporary file as `tempfile.mkstemp` names one (`.` name `.` 8 of a-z0-9_ `.tmp`) beside each file the
    resume writes, and files of the user's beside them that are not of that form, which stay."""
    root = interrupted_run(tmp_path)
    stale = [root / "replays" / ".cells.parquet.k3j9_x0q.tmp", root / "replays" / ".messages.parquet.00000000.tmp",
             root / ".summary.parquet.a1b2c3d4.tmp", root / ".requests.parquet.zzzzzzzz.tmp", root / ".manifest.json.q_q_q_q_.tmp"]
    users = [root / "replays" / ".cells.parquet.backup.tmp", root / "replays" / ".cells.parquet.K3J9X0QZ.tmp",
             root / "replays" / "cells.parquet.k3j9_x0q.tmp", root / "replays" / ".cells.parquet.k3j9_x0q.tmp.keep",
             root / ".summary.parquet.a1b2c3d4e.tmp", root / "notes.tmp"]
    (root / "replays").mkdir()
    for path in (*stale, *users):
        path.write_text("x")
    os.symlink(root / "notes.tmp", root / "replays" / ".contexts.parquet.abcdefgh.tmp")  # a link: not a file it wrote
    run_tiny(tmp_path, "r", resume=True)
    assert not [p for p in stale if p.exists()]
    assert all(p.read_text() == "x" for p in users)
    assert (root / "replays" / ".contexts.parquet.abcdefgh.tmp").is_symlink()
    assert stale_temps(root / "replays" / "cells.parquet") == []


def test_a_write_that_is_not_a_run_s_leaves_other_temporary_files_alone(tmp_path):
    """Without `sweep` (a file the user named, which another process may be writing too) nothing else is touched."""
    other = tmp_path / ".out.md.abcdefgh.tmp"
    other.write_text("another process's write, in progress")
    atomic_write_text(tmp_path / "out.md", "mine")
    assert other.exists()


# --------------------------------------------------------------------------- 3: Ray
@pytest.mark.slow
def test_a_ray_run_whose_cells_cannot_be_written_stops_with_the_resume_hint(tmp_path):
    """Before: with --executor ray this process writes the cells, and a failed write was a bare `WriteFailed`, without the
    "; the run stopped, its finished cells are kept for `bench run --resume`" a local run gives."""
    root = tmp_path / "runs" / "r"
    with pytest.raises(CannotWrite, match=re.escape(f"cannot write ({root / 'cells'} is a file, not a folder); the run stopped, "
                                                    "its finished cells are kept for `bench run --resume`")):
        run_tiny(tmp_path, "r", executor="ray", on_start=lambda todo: (root / "cells").write_text(""))
