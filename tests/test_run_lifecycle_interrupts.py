"""Run lifecycle: a run stopped at a given point (SIGTERM while the report renders, SIGKILL while a resume
finalizes, a full output folder while cells run), what the folder then holds, what `load_run` gives,
and that `--resume` ends with the tables of an uninterrupted run. Each case was a reproduced defect."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from compaction_bench import run_folder
from compaction_bench.store import StoreError, load_run
from tests.conftest import bench_cli, write_tiny_session

TABLES = ("requests", "compactions", "probes", "summary")

FLAKY = """
from pathlib import Path
from compaction_bench.strategies.baselines import NoCompaction

SWITCH = Path(__file__).with_name("fail-now")


class Flaky(NoCompaction):
    def request(self):
        if SWITCH.exists():
            raise ZeroDivisionError("flaky")
        return super().request()
"""

#: `bench ARGS` with one library function replaced by a stop: `python stopper.py MODULE:FUNCTION SIGNAL ARGS…`
STOPPER = """
import importlib, os, signal, sys, time
from compaction_bench import cli

where, sig = sys.argv[1], getattr(signal, sys.argv[2])
module, name = where.split(":")
target = importlib.import_module(module)
real = getattr(target, name)

def stop(*args, **kwargs):
    os.kill(os.getpid(), sig)
    time.sleep(30)  # the signal ends the run before this does
    return real(*args, **kwargs)

setattr(target, name, stop)
sys.argv = ["bench", *sys.argv[3:]]
cli.main()
"""


def run_args(session: Path, out: Path, run_id: str, *extra: str) -> list[str]:
    return ["run", str(session), "-s", "none", "-s", "truncate", "-p", "32k", "-j", "1", "-o", str(out), "--run-id", run_id,
            "--probes", str(session.parent / "probes.yaml"), *extra]


def stopped(tmp_path: Path, where: str, sig: str, *args: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "stopper.py"
    script.write_text(STOPPER)
    return subprocess.run([sys.executable, str(script), where, sig, *args], capture_output=True, text=True, timeout=300)


def assert_same_tables(expected: Path, got: Path) -> None:
    whole, resumed = load_run(expected), load_run(got)
    for name in TABLES:
        pd.testing.assert_frame_equal(whole[name], resumed[name], check_exact=True, obj=name)


def test_sigterm_while_the_report_renders_stops_cleanly_and_resume_finishes(tmp_path):
    """Before: SIGTERM was handled only while cells ran; during the finalize (tables, summary, report)
    it killed the run with status -15 and no message."""
    session = write_tiny_session(tmp_path)
    out = tmp_path / "runs"
    assert bench_cli(*run_args(session, out, "whole")).returncode == 0
    proc = stopped(tmp_path, "compaction_bench.reports.html:write_report", "SIGTERM", *run_args(session, out, "r"))
    assert proc.returncode == 130, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"interrupted; finish the run with `bench run --resume` and the same arguments (--run-id r -o {out})")
    assert not (out / "r" / "report.html").exists() and not run_folder.in_use(out / "r")
    resumed = bench_cli(*run_args(session, out, "r", "--resume"))
    assert resumed.returncode == 0, resumed.stderr
    assert (out / "r" / "report.html").is_file()
    assert_same_tables(out / "whole", out / "r")


def test_a_resume_killed_while_it_finalizes_leaves_no_summary_that_mixes_two_attempts(tmp_path):
    """Before: the first attempt's summary (one strategy; the other's cell had failed) stayed beside the
    resume's new requests table (both strategies) when the resume was killed between the two, and
    `load_run` and `bench report` read them together without a word."""
    session = write_tiny_session(tmp_path)
    (tmp_path / "flaky.py").write_text(FLAKY)
    out = tmp_path / "runs"
    args = ["run", str(session), "-s", "none", "-s", f"{tmp_path / 'flaky.py'}:Flaky", "-p", "32k", "-j", "1", "-o", str(out),
            "--probes", str(tmp_path / "probes.yaml"), "--no-report"]
    assert bench_cli(*args, "--run-id", "whole").returncode == 0
    (tmp_path / "fail-now").write_text("")
    assert bench_cli(*args, "--run-id", "r").returncode == 1  # the flaky cell failed; the tables hold `none` alone
    assert set(load_run(out / "r")["summary"]["strategy"]) == {"none"}
    (tmp_path / "fail-now").unlink()
    proc = stopped(tmp_path, "compaction_bench.metrics.aggregate:summarize", "SIGKILL", *args, "--run-id", "r", "--resume")
    assert proc.returncode == -9
    assert len(set(pd.read_parquet(out / "r" / "requests.parquet")["strategy"])) == 2  # the new tables were written
    with pytest.raises(StoreError, match="summary.parquet is missing"):
        load_run(out / "r")
    report = bench_cli("report", str(out / "r"))
    assert report.returncode == 2 and "summary.parquet is missing" in report.stderr
    resumed = bench_cli(*args, "--run-id", "r", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert_same_tables(out / "whole", out / "r")


HOLD = """
import sys
from pathlib import Path
from compaction_bench import run_folder

folder = run_folder.claim(Path(sys.argv[1]), sys.argv[2], resume=True, new_id="unused")
print("held", flush=True)
sys.stdin.read()
"""


def test_load_run_refuses_a_folder_another_process_is_running_in(tmp_path):
    """Before: `load_run` read whatever tables a running `--resume` had left or half replaced (the
    commands that read runs refused such a folder; the Python API did not)."""
    import compaction_bench as bench

    session = write_tiny_session(tmp_path)
    root = bench.run([session], strategies=["none"], profiles=["32k"], out=tmp_path, run_id="r", jobs=1, report=False, progress=False,
                     probes=str(tmp_path / "probes.yaml"))
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path), "r"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(StoreError, match=r"a run is still working in this folder \(it holds .*\.lock\)"):
            load_run(root)
    finally:
        holder.communicate("", timeout=60)
    assert set(load_run(root)["summary"]["strategy"]) == {"none"}
    # A run in this process reads its own tables (its report does) while it holds the folder.
    folder = run_folder.claim(tmp_path, "r", resume=True, new_id="unused")
    try:
        assert set(load_run(root)["summary"]["strategy"]) == {"none"}
    finally:
        folder.release()


#: `bench ARGS` on a disk that fills up once the run's own files are written: every cell's file fails.
FULL_DISK = """
import errno, sys
from compaction_bench import store
from compaction_bench.atomic import WriteFailed

def full(contents, path):
    raise WriteFailed(path, OSError(errno.ENOSPC, "No space left on device"))

store._write_zip = full  # a cell's file, and the archive's tables
sys.argv = ["bench", *sys.argv[1:]]
from compaction_bench import cli
cli.main()
"""


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_full_output_folder_stops_the_run_at_the_first_cell_with_one_error_line(tmp_path, jobs):
    """Before: with -j 2 the worker's error did not unpickle, which broke the pool (a BrokenProcessPool
    traceback, exit 1); with -j 1 every remaining cell was replayed and failed the same way, and the
    run ended as "N of N cells failed" (exit 1)."""
    session = write_tiny_session(tmp_path)
    other = tmp_path / "other.jsonl"
    other.write_text(session.read_text().replace("Two files", "2 files"))  # another session (a copy would be one scenario)
    script = tmp_path / "full.py"
    script.write_text(FULL_DISK)
    out = tmp_path / "runs"
    args = run_args(session, out, "full", "--no-report")
    args[2:2] = [str(other)]
    args[args.index("-j") + 1] = jobs
    proc = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "FAILED" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {out / 'full' / 'cells'}/"), proc.stderr
    assert "cannot write (No space left on device)" in errors[0] and "--resume" in errors[0]
    assert not (out / "full" / "errors.log").exists()
    # The folder is a run to resume once there is room.
    resumed = bench_cli(*args, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert set(load_run(out / "full")["summary"]["scenario"]) == {"tiny.jsonl", "other.jsonl"}
