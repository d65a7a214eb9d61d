"""The folders `bench score` and `bench report` write, and what they leave of the user's.

Each case was found by an audit and fails on the code before it: two scores started in the same second
shared one folder (both said they succeeded, one's tables were lost); an interrupted `--in-place` score
with new probes had already replaced the run's probe files, so the run's manifest and tables no longer
described them; `bench score .` failed; a bare `--resume` finished the newest scored copy instead of the
run; `bench report` deleted the whole `report/` folder, a file of the user's in it too, and followed a
symbolic link; `--no-report` left the old report beside new tables; an `--in-place` score took no lock."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest

import compaction_bench as bench
from compaction_bench import run_folder, runner
from compaction_bench.probes import Probe, write_probes
from compaction_bench.reports.html import write_report
from compaction_bench.reports.report_files import ReportFilesError
from compaction_bench.runner import score
from compaction_bench.scenarios.synthetic import generate
from compaction_bench.store import TABLES, load_run
from tests.conftest import bench_cli


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished run of two scenarios from a file (mined probes), with its report."""
    root = tmp_path_factory.mktemp("runs")
    paths = []
    for seed in (3, 4):
        path = root / f"session-{seed}.jsonl"
        generate("parallel-calls", seed=seed, target_tokens=12_000).transcript.write(path)
        paths.append(path)
    return bench.run(paths, ["none"], ["32k"], out=root, run_id="r", jobs=1, progress=False, report=True)


@pytest.fixture
def run_copy(finished, tmp_path):
    copy = tmp_path / "runs" / "r"
    shutil.copytree(finished, copy)
    return copy


def contents(folder):
    return {path.relative_to(folder): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file() and path.name != ".lock"}


def test_two_scores_started_in_the_same_second_get_a_folder_each(run_copy, monkeypatch):
    monkeypatch.setattr(runner, "new_run_id", lambda: "2026-12-05T10-00-00")
    first = score(run_copy, report=False)
    second = score(run_copy, answerer="", report=False)
    assert first.name == "r-scored-2026-12-05T10-00-00" and second.name == "r-scored-2026-12-05T10-00-00-2"
    assert load_run(first)["probes"]["answer"].notna().any() and load_run(second)["probes"]["answer"].isna().all()


def test_an_interrupted_in_place_score_leaves_the_run_as_it_was(run_copy, tmp_path):
    before = contents(run_copy)
    other = write_probes([Probe("other", "recall", "Which command ran first?", "ls", source_text="ls")], tmp_path / "other.yaml")

    def interrupt(event):
        if event.phase == "cells" and event.done == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        score(run_copy, probes=str(other), in_place=True, report=False, progress=interrupt)
    assert contents(run_copy) == before


def test_an_in_place_score_holds_the_run_folder(run_copy):
    refused = []

    def try_to_claim(event):
        if event.phase == "cells" and event.done == 1:
            with pytest.raises(run_folder.RunFolderError, match="is in use by another run"):
                run_folder.claim(run_copy.parent, run_copy.name, resume=True, new_id="unused")
            refused.append(True)

    score(run_copy, in_place=True, report=False, progress=try_to_claim)
    assert refused == [True]


def test_score_of_the_current_folder(run_copy):
    proc = bench_cli("score", ".", "--no-report", cwd=run_copy)
    assert proc.returncode == 0, proc.stderr
    (scored,) = [p for p in run_copy.parent.iterdir() if p.name.startswith("r-scored-")]
    for name in TABLES:
        pd.testing.assert_frame_equal(load_run(scored)[name], load_run(run_copy)[name])


def test_a_bare_resume_finishes_the_run_not_its_scored_copy(run_copy):
    score(run_copy, report=False)  # its manifest's `created` is the run's
    assert run_folder.newest_run(run_copy.parent) == "r"


def test_a_report_keeps_the_users_files_in_its_folder_and_follows_no_link(run_copy, tmp_path):
    pages = run_copy / "report"
    pages.mkdir()
    (pages / "notes.md").write_text("mine\n")
    (pages / "2024-q3-notes.html").write_text("mine, shaped like a page\n")
    (pages / "0009-gone.html").write_text("a page of an earlier report\n")
    # the earlier report's index lists its pages (`report_files.listed_pages`): those are removed, and only those
    (run_copy / "report.html").write_text('<script type="application/json" id="report-pages">["0009-gone.html"]</script>')
    write_report(run_copy)
    assert (pages / "notes.md").read_text() == "mine\n" and not (pages / "0009-gone.html").exists()
    assert (pages / "2024-q3-notes.html").read_text() == "mine, shaped like a page\n"
    shutil.rmtree(pages)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "0001-x.html").write_text("not the run's\n")
    pages.symlink_to(elsewhere)
    with pytest.raises(ReportFilesError, match=r"report: is a symbolic link, not the report's folder of pages"):
        write_report(run_copy)
    assert (elsewhere / "0001-x.html").read_text() == "not the run's\n"
    proc = bench_cli("report", str(run_copy))
    assert proc.returncode == 2 and "is a symbolic link" in proc.stderr and "Traceback" not in proc.stderr


def test_tables_written_without_a_report_remove_the_old_one(run_copy):
    assert (run_copy / "report.html").is_file()
    score(run_copy, in_place=True, report=False)
    assert not (run_copy / "report.html").exists()


def test_a_manifest_naming_files_outside_the_run_is_refused(run_copy, tmp_path):
    """`probes_file` edited to name a file of the user's: `bench score` wrote the new probes over it."""
    import json

    precious = tmp_path / "precious.yaml"
    precious.write_text("USER DATA\n")
    manifest = json.loads((run_copy / "manifest.json").read_text())
    for key, value in (("probes_file", str(precious)), ("probes_file", "../../precious.yaml"), ("file", "../elsewhere.jsonl")):
        edited = json.loads(json.dumps(manifest))
        edited["scenarios"][0][key] = value
        (run_copy / "manifest.json").write_text(json.dumps(edited))
        with pytest.raises(runner.RunError, match=f"its {key} '{value}' is outside the run folder"):
            score(run_copy, probes=str(run_copy / "probes" / manifest["scenarios"][0]["probes_file"].split("/")[-1]), report=False)
    assert precious.read_text() == "USER DATA\n"
