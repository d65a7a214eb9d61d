"""Run lifecycle: the progress a run and `bench report` show on long work. Each case was a reproduced defect."""

from __future__ import annotations

import compaction_bench as bench
from compaction_bench import runner
from compaction_bench.progress import ProgressEvent
from tests.conftest import bench_cli, write_tiny_session


def finalize_steps(tmp_path, run_id: str, **kwargs) -> list[ProgressEvent]:
    session = write_tiny_session(tmp_path) if not (tmp_path / "tiny.jsonl").exists() else tmp_path / "tiny.jsonl"
    events: list[ProgressEvent] = []
    bench.run([session], strategies=["none", "truncate"], profiles=["32k"], out=tmp_path / "runs", run_id=run_id, jobs=1, progress=False,
              probes=str(tmp_path / "probes.yaml"), callback=events.append, **kwargs)
    return [e for e in events if e.phase == "finalize"]


def test_the_finalize_steps_count_up_without_gaps_to_their_total(tmp_path):
    """Before: the steps went 0, 1, 3, 4, 5 of 5 (no step 2), and 0, 1, 4, 5 of 5 without a report."""
    for run_id, report, total in (("with", True, 5), ("without", False, 3)):
        steps = finalize_steps(tmp_path, run_id, report=report)
        assert {e.total for e in steps} == {total}
        assert sorted(set(e.done for e in steps)) == list(range(total + 1)), [(e.done, e.label) for e in steps]
        assert [e.done for e in steps] == sorted(e.done for e in steps)
        assert steps[-1].label == "done" and steps[0].label == "writing tables"


def test_a_long_import_reports_each_file_read(tmp_path, monkeypatch):
    """Before: a run printed nothing while it read its transcripts and mined their probes (78 s on the corpora)."""
    first = write_tiny_session(tmp_path)
    second = tmp_path / "second.jsonl"
    second.write_text(first.read_text().replace("Two files", "2 files"))  # another session (a copy would be one scenario)
    events: list[ProgressEvent] = []
    monkeypatch.setattr(runner, "SLOW_IMPORT_SECONDS", 0.0)
    bench.run([first, second], strategies=["none"], profiles=["32k"], out=tmp_path / "runs", run_id="r", jobs=1, report=False,
              progress=False, callback=events.append)
    assert [(e.phase, e.done, e.total, e.label) for e in events if e.phase == "scenarios"] == [
        ("scenarios", 1, 2, "tiny.jsonl"), ("scenarios", 2, 2, "second.jsonl")]
    # then each scenario's probes as they are mined, the larger session first
    assert [(e.phase, e.done, e.total, e.label) for e in events if e.phase == "probes"] == [
        ("probes", 1, 2, "tiny.jsonl"), ("probes", 2, 2, "second.jsonl")]
    # A short import stays silent (a refusal right after it is one error line).
    events.clear()
    monkeypatch.setattr(runner, "SLOW_IMPORT_SECONDS", 3600.0)
    bench.run([first], strategies=["none"], profiles=["32k"], out=tmp_path / "runs", run_id="s", jobs=1, report=False,
              progress=False, callback=events.append)
    assert not [e for e in events if e.phase in ("scenarios", "probes")]


def test_bench_report_shows_its_pages_as_it_builds_them(tmp_path):
    """Before: `bench report` printed nothing until the end (3 min 50 s for the 1,392-scenario corpus run)."""
    session = write_tiny_session(tmp_path)
    root = bench.run([session], strategies=["none"], profiles=["32k"], out=tmp_path, run_id="r", jobs=1, report=False, progress=False,
                     probes=str(tmp_path / "probes.yaml"))
    proc = bench_cli("report", str(root), "-j", "1")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("report 0/") and any(line.startswith("report ") and line.endswith("report.html") for line in lines), lines
