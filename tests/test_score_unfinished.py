"""`bench score` of an interrupted run (an outside audit's finding): it scored the cells the run had reached and wrote
tables under a manifest that read as finished, so `load_run` and `bench report` took the interrupted run for a whole
one (with `--in-place`, the run's own folder). A run is scored once every cell finished or failed."""

from __future__ import annotations

import pytest

from compaction_bench.runner import RunError, score
from tests.conftest import bench_cli
from tests.test_run_lifecycle_resume import run_tiny, stop_after_first_cell


def test_an_interrupted_run_is_not_scored_and_stays_as_it_was(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        run_tiny(tmp_path, "r", on_cell=stop_after_first_cell)  # 1 of its 2 cells done
    root = tmp_path / "runs" / "r"
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    with pytest.raises(RunError, match=r"the run did not finish \(1 of its 2 cells done\).*bench run --resume"):
        score(root, out=tmp_path / "scored", report=False)
    proc = bench_cli("score", str(root), "--in-place", "--no-report")
    assert proc.returncode == 2 and "the run did not finish (1 of its 2 cells done)" in proc.stderr, proc.stderr
    assert not (tmp_path / "scored").exists() and sorted(p.relative_to(root) for p in root.rglob("*")) == before
    run_tiny(tmp_path, "r", resume=True)  # finished, it is scored
    assert (score(root, out=tmp_path / "scored", report=False) / "summary.parquet").is_file()
