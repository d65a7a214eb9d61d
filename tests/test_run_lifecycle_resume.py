"""Run lifecycle: what `--resume` accepts. Files the configuration names by path (a `--prompt` template,
a strategy loaded from a file) must be the ones the finished cells read; cells an older version wrote
(fewer columns) are done again rather than merged; a long import is preceded by the folder's
refusals. Each case was a reproduced defect."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

import compaction_bench as bench
from compaction_bench import runner
from compaction_bench.runner import RunError
from compaction_bench.store import RunStore, load_run
from compaction_bench.templates import default_prompt_dir
from tests.conftest import write_tiny_session
from tests.earlier_cells import as_earlier_folder


def stop_after_first_cell(key, status):
    raise KeyboardInterrupt


def run_tiny(tmp_path: Path, run_id: str, **kwargs):
    session = write_tiny_session(tmp_path) if not (tmp_path / "tiny.jsonl").exists() else tmp_path / "tiny.jsonl"
    paths = kwargs.pop("paths", [session])
    return bench.run(paths, strategies=kwargs.pop("strategies", ["none", "truncate"]), profiles=["32k"], out=tmp_path / "runs",
                     run_id=run_id, jobs=1, report=False, progress=False, probes=str(tmp_path / "probes.yaml"), **kwargs)


def test_resume_after_the_prompt_template_file_changed_is_refused_and_writes_nothing(tmp_path):
    """Before: the finished cells had summarized with the old text and the rest used the new one, and the
    manifest recorded only the new template's hash: one run, two prompts, no trace of it."""
    template = tmp_path / "summary.j2"
    template.write_text((default_prompt_dir() / "codex_summary.j2").read_text(encoding="utf-8"), encoding="utf-8")
    prompts = {"codex_summary.j2": str(template)}
    with pytest.raises(KeyboardInterrupt):
        run_tiny(tmp_path, "r", strategies=["codex-local", "truncate"], prompts=prompts, on_cell=stop_after_first_cell)
    manifest = (tmp_path / "runs" / "r" / "manifest.json").read_text()
    template.write_text(template.read_text(encoding="utf-8").replace("## Progress and key decisions", "## What happened"), encoding="utf-8")
    with pytest.raises(RunError, match=r"--prompt codex_summary\.j2: the file changed since the run's cells read it"):
        run_tiny(tmp_path, "r", strategies=["codex-local", "truncate"], prompts=prompts, resume=True)
    assert (tmp_path / "runs" / "r" / "manifest.json").read_text() == manifest
    assert "--prompt codex_summary.j2" in json.loads(manifest)["input_sha256"]  # what the run's cells read
    assert len(RunStore(tmp_path / "runs" / "r").stored_cells()) == 1
    # The same text again: the resume proceeds.
    template.write_text(template.read_text(encoding="utf-8").replace("## What happened", "## Progress and key decisions"), encoding="utf-8")
    root = run_tiny(tmp_path, "r", strategies=["codex-local", "truncate"], prompts=prompts, resume=True)
    assert set(load_run(root)["summary"]["strategy"]) == {"codex-local", "truncate"}


STRATEGY = """
from compaction_bench.strategies.baselines import NoCompaction


class Mine(NoCompaction):
    pass
"""


def test_resume_after_a_strategy_file_changed_is_refused(tmp_path):
    """Before: a strategy loaded from `file.py:Class` was compared by its path only; an edited file resumed silently."""
    plugin = tmp_path / "mine.py"
    plugin.write_text(STRATEGY)
    spec = f"{plugin}:Mine"
    with pytest.raises(KeyboardInterrupt):
        run_tiny(tmp_path, "r", strategies=["none", spec], on_cell=stop_after_first_cell)
    plugin.write_text(STRATEGY + "\n# changed\n")
    with pytest.raises(RunError, match=rf"--strategy {plugin}:Mine: the file changed since the run's cells read it"):
        run_tiny(tmp_path, "r", strategies=["none", spec], resume=True)


def test_cells_an_older_version_wrote_are_done_again_not_merged(tmp_path, caplog):
    """Before: a resume merged the earlier cells (without the columns this version adds) with the new ones;
    the summary then failed on the missing values (`ValueError: cannot convert float NaN to integer`, a
    traceback) after the tables had been written."""
    session = write_tiny_session(tmp_path)
    other = tmp_path / "other.jsonl"
    other.write_text(session.read_text().replace("Two files", "2 files"))  # another session (a copy would be one scenario)
    whole = load_run(run_tiny(tmp_path, "whole", paths=[session, other]))
    with pytest.raises(KeyboardInterrupt):
        run_tiny(tmp_path, "r", paths=[session, other], on_cell=stop_after_first_cell)
    (early,) = RunStore(tmp_path / "runs" / "r").stored_cells()

    def without_two_columns(name: str, frame: pd.DataFrame) -> pd.DataFrame:  # as a version before these two columns wrote it
        return frame.drop(columns=["rebilled_tokens", "cache_write_tokens"]) if name == "requests" else frame

    as_earlier_folder(early.path, edit=without_two_columns)
    done = []
    root = run_tiny(tmp_path, "r", paths=[session, other], resume=True, on_cell=lambda key, status: done.append(key.slug))
    assert done.count(early.slug) == 1 and len(done) == 4  # the three left, then the old one again
    assert "written by another version of compaction-bench" in caplog.text and "lacks cache_write_tokens, rebilled_tokens" in caplog.text
    resumed = load_run(root)
    for name in ("requests", "compactions", "probes", "summary"):
        pd.testing.assert_frame_equal(whole[name], resumed[name], check_exact=True, obj=name)


def test_a_run_folder_that_would_be_refused_is_refused_before_the_transcripts_are_read(tmp_path, monkeypatch):
    """Before: `bench run` read and mined every transcript (over a minute on the corpora) and only then
    said the folder already held a run, or that there was nothing to resume."""
    run_tiny(tmp_path, "r")

    def no_import(*args, **kwargs):
        raise AssertionError("the transcripts were read before the folder was checked")

    monkeypatch.setattr(runner, "file_cases", no_import)
    with pytest.raises(RunError, match="already holds a run; pass --resume"):
        run_tiny(tmp_path, "r")
    with pytest.raises(RunError, match="nothing to resume"):
        run_tiny(tmp_path, "nosuch", resume=True)


TAU = [{"task_id": n, "trial": 0, "reward": 1.0, "info": {},
        "traj": [{"role": "user", "content": f"Task {n}: the code is ZEBRA-{n}."}, {"role": "assistant", "content": "Noted."}]}
       for n in range(4)]


def test_a_file_of_several_sessions_is_hashed_once(tmp_path, monkeypatch):
    """Before: the manifest hashed the file once per session (the Aider corpus file, 1,134 sessions: 12 s)."""
    path = tmp_path / "runs.json"
    path.write_text(json.dumps(TAU))
    hashed = []
    real = runner.sha256_file
    monkeypatch.setattr(runner, "sha256_file", lambda file: hashed.append(Path(file)) or real(file))
    root = bench.run([path], strategies=["none"], profiles=["32k"], out=tmp_path / "runs", run_id="r", jobs=1, report=False, progress=False)
    scenarios = json.loads((root / "manifest.json").read_text())["scenarios"]
    assert len(scenarios) == 4 and {s["sha256"] for s in scenarios} == {real(path)}
    assert hashed.count(path) == 1


@pytest.mark.parametrize("edit, said", [
    (lambda m: m["versions"].update({"litellm": "0.0.1"}), "litellm: 0.0.1 then, "),
    (lambda m: m["profiles"]["32k"].update({"context_window": 128_000}), "profile 32k: its definition changed (context_window)"),
    (lambda m: m.update(code_sha256="0" * 64, code_files={**m["code_files"], "compaction_bench/runner.py": "0" * 64}),
     "code: compaction_bench's source files are not the ones that made the run's cells (compaction_bench/runner.py changed)"),
])
def test_a_resume_with_other_code_or_profiles_is_refused(tmp_path, edit, said):
    """A resume after an upgrade (litellm supplies the profiles) or a code change merged cells two versions made,
    and the manifest was overwritten with the new versions: one run, two implementations, no trace of it."""
    with pytest.raises(KeyboardInterrupt):
        run_tiny(tmp_path, "r", on_cell=stop_after_first_cell)
    path = tmp_path / "runs" / "r" / "manifest.json"
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))
    with pytest.raises(RunError, match=rf"the run was made with another configuration \(.*{re.escape(said)}"):
        run_tiny(tmp_path, "r", resume=True)
    assert json.loads(path.read_text()) == manifest  # the record of what made the finished cells stays


FLAKY = """
from compaction_bench.strategies.baselines import Truncate


class Flaky(Truncate):
    def on_user_turn(self, item):
        raise RuntimeError("boom")
"""


def test_an_interrupted_resume_keeps_the_record_of_the_cells_that_failed(tmp_path):
    """A resume wrote `cells.failed: []` as it started; interrupted, it left a run whose manifest named no failed
    cell while its tables lacked that strategy's cell."""
    from compaction_bench.runner import CellsFailed
    from compaction_bench.store import failed_cells_in, read_manifest

    plugin = tmp_path / "flaky.py"
    plugin.write_text(FLAKY)
    strategies = ["none", f"{plugin}:Flaky"]
    with pytest.raises(CellsFailed):
        run_tiny(tmp_path, "r", strategies=strategies)
    root = tmp_path / "runs" / "r"
    (failed,) = failed_cells_in(read_manifest(root))
    assert "Flaky" in failed["cell"] and "boom" in failed["error"]
    with pytest.raises(KeyboardInterrupt):
        run_tiny(tmp_path, "r", strategies=strategies, resume=True, on_cell=stop_after_first_cell)
    assert failed_cells_in(read_manifest(root)) == [failed]
