"""The run folder's last writes (session 42): a run whose tables cannot be written once every cell finished stops
with the same resume hint a failed cell write gives, and the resume writes them; the run's own files beside the
tables (each scenario's probes, `errors.log`) remove the temporary files an earlier write of them left when killed,
as the tables and the manifest do. Each case was a reproduced defect."""

from __future__ import annotations

import errno
import re

import pyarrow.parquet as pq
import pytest

from compaction_bench.runner import CannotWrite
from compaction_bench.store import load_run
from tests.test_run_lifecycle_resume import FLAKY, run_tiny


def test_tables_that_cannot_be_written_stop_with_the_resume_hint_and_the_resume_writes_them(tmp_path, monkeypatch):
    """The disk fills once every cell finished. Before: `requests.parquet: cannot write (No space left on device)`
    alone, with nothing saying that every cell was kept and how to finish."""
    root = tmp_path / "runs" / "r"
    done: list[str] = []

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    def fill_the_disk(key, status):
        done.append(status)
        if len(done) == 2:  # the last cell: the tables come next
            monkeypatch.setattr(pq, "write_table", full)

    hint = (f"{root / 'requests.parquet'}: cannot write (No space left on device); every cell finished and is kept: "
            f"write the tables with `bench run --resume` and the same arguments (--run-id r -o {root.parent})")
    with pytest.raises(CannotWrite, match=re.escape(hint)):
        run_tiny(tmp_path, "r", on_cell=fill_the_disk)
    monkeypatch.undo()
    run_tiny(tmp_path, "r", resume=True)
    resumed = load_run(root)
    run_tiny(tmp_path, "whole")
    whole = load_run(tmp_path / "runs" / "whole")
    for name in ("requests", "compactions", "probes"):
        assert resumed[name].drop(columns=["run_id"], errors="ignore").equals(whole[name].drop(columns=["run_id"], errors="ignore")), name


def test_the_run_s_probe_files_sweep_the_temporary_files_a_killed_write_left(tmp_path):
    """Before: `probes/.scenario-0.yaml.<random>.tmp` stayed through every resume (the tables swept theirs)."""
    with pytest.raises(KeyboardInterrupt):
        run_tiny(tmp_path, "r", on_cell=lambda key, status: (_ for _ in ()).throw(KeyboardInterrupt))
    root = tmp_path / "runs" / "r"
    (probes,) = (root / "probes").iterdir()
    stale = probes.parent / f".{probes.name}.k3j9_x0q.tmp"
    mine = probes.parent / "notes.tmp"
    stale.write_text("x")
    mine.write_text("the user's")
    run_tiny(tmp_path, "r", resume=True)
    assert not stale.exists() and mine.read_text() == "the user's"


def test_errors_log_sweeps_the_temporary_files_a_killed_write_left(tmp_path):
    """Before: `.errors.log.<random>.tmp` stayed beside the log a run with a failed cell wrote."""
    from compaction_bench.runner import CellsFailed

    plugin = tmp_path / "flaky.py"
    plugin.write_text(FLAKY)
    root = tmp_path / "runs" / "r"
    stale = root / ".errors.log.a1b2c3d4.tmp"
    with pytest.raises(CellsFailed):
        run_tiny(tmp_path, "r", strategies=["none", f"{plugin}:Flaky"], on_start=lambda todo: stale.write_text("x"))
    assert (root / "errors.log").is_file() and not stale.exists()


def test_a_score_in_place_with_other_probes_sweeps_what_a_killed_write_of_them_left(tmp_path):
    """Before: `bench score --in-place --probes …` left `probes/.scenario-0.yaml.<random>.tmp` of a killed score."""
    from compaction_bench.probes import load_probes, write_probes
    from compaction_bench.runner import score

    run_tiny(tmp_path, "r")
    root = tmp_path / "runs" / "r"
    (probes,) = (root / "probes").iterdir()
    stale = probes.parent / f".{probes.name}.abcdefgh.tmp"
    stale.write_text("x")
    other = write_probes(load_probes(probes)[:1], tmp_path / "other.yaml")
    score(root, probes=str(other), in_place=True, report=False)
    assert not stale.exists() and len(load_probes(probes)) == 1
