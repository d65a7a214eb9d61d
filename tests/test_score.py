"""Self-describing runs and `bench score`: the folder alone reproduces the tables, new probes need no replay."""

from __future__ import annotations

import hashlib
import importlib
import json
from pathlib import Path

import pandas as pd
import pytest

import compaction_bench as bench
from compaction_bench.cli import app
from compaction_bench.probes import Probe, load_probes, write_probes
from compaction_bench.profiles import get_profile
from compaction_bench.records import ReplayResult, from_rows
from compaction_bench.replay import replay as replay_anew
from compaction_bench.runner import Case, RunError, scenario_transcripts, score
from compaction_bench.scenarios.synthetic import generate
from compaction_bench.store import RunStore, load_run
from compaction_bench.strategy import Strategy
from compaction_bench.transcript import Transcript
from tests.conftest import assert_user_error, bench_cli

TABLES = ("requests", "compactions", "probes", "summary")


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished run with a transcript file (mined probes) and an in-memory scenario, two strategies, summaries included."""
    root = tmp_path_factory.mktemp("runs")
    small = generate("parallel-calls", seed=3, target_tokens=45_000)  # compacts at 32k
    path = root / "session.jsonl"
    generate("parallel-calls", seed=4, target_tokens=12_000).transcript.write(path)  # a short file, mined probes
    from compaction_bench.runner import file_cases

    cases = [*file_cases([path], "auto"), Case("memory", small.transcript, tuple(small.probes))]
    run_dir = bench.run(strategies=["truncate", "codex-local"], profiles=["32k"], cases=cases, out=root, run_id="r", jobs=1, progress=False,
                      report=False)
    return run_dir, path, small


def test_the_run_folder_describes_its_inputs(finished):
    run_dir, path, small = finished
    manifest = json.loads((run_dir / "manifest.json").read_text())
    from_file, in_memory = manifest["scenarios"]
    assert from_file["file"] == str(path.resolve()) and from_file["format"] == "canonical" and from_file["import_options"] == {}
    assert from_file["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert from_file["session_id"] == bench.load_transcript(path).id
    # The in-memory scenario is kept in the run folder in canonical form, with its hash.
    kept = run_dir / in_memory["file"]
    assert in_memory["format"] == "canonical" and in_memory["sha256"] == hashlib.sha256(kept.read_bytes()).hexdigest()
    assert bench.load_transcript(kept) == small.transcript
    # The probes actually asked: mined for the file, given for the in-memory scenario.
    assert load_probes(run_dir / in_memory["probes_file"]) == list(small.probes)
    assert len(load_probes(run_dir / from_file["probes_file"])) == from_file["probes"] > 0
    assert from_file["probes_sha256"] == hashlib.sha256((run_dir / from_file["probes_file"]).read_bytes()).hexdigest()
    assert manifest["profiles"]["32k"] == get_profile("32k").to_dict()
    # Every template codex-local rendered (its summary prompt among them), with its text and that text's hash.
    assert "codex_summary.j2" in manifest["templates"] and set(manifest["templates"]) == set(manifest["template_hashes"])
    for name, template in manifest["templates"].items():
        assert template["sha256"] == hashlib.sha256(template["text"].encode()).hexdigest() == manifest["template_hashes"][name]


def cell_transcript(run_dir: Path, record: dict) -> Transcript:
    manifest = json.loads((run_dir / "manifest.json").read_text())
    return scenario_transcripts(run_dir, manifest["scenarios"])[record["replay"]["key"]["scenario"]]


def rebuilt(run_dir: Path, record: dict) -> ReplayResult:
    """A stored cell's replay rebuilt from its records."""
    profile = get_profile(record["replay"]["key"]["profile"])
    return from_rows(cell_transcript(run_dir, record), profile, record["messages"], record["requests"], record["replay"])


def test_each_request_keeps_its_context_and_summary_links(finished):
    run_dir, _, _ = finished
    requests = load_run(run_dir)["requests"]
    # A finished run keeps the replay records in its archive (no folder per cell).
    assert not (run_dir / "cells").exists() and (run_dir / "replays" / "cells.parquet").is_file()
    records = list(RunStore(run_dir).replays())
    assert len(records) == 4
    for record in records:
        contexts = pd.DataFrame(record["requests"])
        replay = record["replay"]
        key = replay["key"]
        mine = requests[(requests.scenario == key["scenario"]) & (requests.strategy == key["strategy"])]
        assert list(contexts["index"]) == list(mine["request"])
        # Each context is stored by its difference from the one before: the messages a request shares with it,
        # and the rest; rebuilt, every request holds the messages and item ids a new replay of the cell sends.
        back, again = rebuilt(run_dir, record), replay_anew(cell_transcript(run_dir, record), key["strategy"], profile=key["profile"])
        assert [tuple(r.messages) for r in back.requests] == [tuple(r.messages) for r in again.requests]
        assert [r.item_ids() for r in back.requests] == [r.item_ids() for r in again.requests]
        assert sum(map(len, contexts["messages"])) < sum(len(r.messages) for r in again.requests)
        for compaction in replay["compactions"]:
            for index, call in zip(compaction["summary_request_indices"], compaction["llm_calls"], strict=True):
                row = contexts[contexts["index"] == index].iloc[0]
                assert row["kind"] == "summary" and json.loads(row["llm_call"]) == call


def test_score_reproduces_the_tables_exactly(finished, tmp_path):
    run_dir, _, _ = finished
    events = []
    again = score(run_dir, out=tmp_path / "again", report=False, progress=events.append)
    # progress as a run gives it: a cells event per cell measured (2 scenarios x 2 strategies), then the finalize steps
    cells = [e for e in events if e.phase == "cells"]
    assert [(e.done, e.total) for e in cells] == [(n, 4) for n in range(5)]
    assert sorted(e.label for e in cells[1:]) == sorted(f"{s} · {t} · 32k" for s in ("memory", "session.jsonl") for t in ("codex-local", "truncate"))
    assert events[-1].phase == "finalize"
    original, scored = load_run(run_dir), load_run(again)
    assert len(original["compactions"]) > 0 and original["compactions"]["llm_calls"].sum() > 0
    for name in TABLES:
        pd.testing.assert_frame_equal(scored[name], original[name], check_exact=True)


def test_score_with_other_probes_grades_them_without_a_replay(finished, tmp_path, monkeypatch):
    run_dir, path, small = finished

    def no_replay(*args, **kwargs):
        raise AssertionError("bench score replayed")

    monkeypatch.setattr(importlib.import_module("compaction_bench.replay")._Engine, "__init__", no_replay)
    monkeypatch.setattr(Strategy, "__init__", no_replay)
    first = next(i for i in small.transcript.items if i.kind == "user")
    word = max(first.text.split(), key=len)
    # the other session numbers its items alike: the probe names its own
    assert first.id in bench.load_transcript(path).by_id and small.transcript.id != bench.load_transcript(path).id
    other = [Probe("first-ask", "recall", "What did the user ask first?", word, source=first.id, session=small.transcript.id)]
    write_probes(other, tmp_path / "other.yaml")
    new = score(run_dir, probes=str(tmp_path / "other.yaml"), out=tmp_path / "other-run", report=False)
    probes = load_run(new)["probes"]
    assert set(probes["probe_id"]) == {"first-ask"} and set(probes["scenario"]) == {"memory"}
    # Wherever the stored context still holds the first user message verbatim, the probe is present.
    for record in RunStore(new).replays():
        key = record["replay"]["key"]
        contexts = {r.index: r for r in rebuilt(new, record).requests}
        rows = probes[(probes.scenario == key["scenario"]) & (probes.strategy == key["strategy"])]
        if key["scenario"] != "memory":
            assert rows.empty
            continue
        assert len(rows) > 0
        for request, present in zip(rows["request"], rows["present"], strict=True):
            if first.id in contexts[request].item_ids():
                assert present
    original = load_run(run_dir)
    assert set(original["probes"]["probe_id"]) != {"first-ask"}
    pd.testing.assert_frame_equal(load_run(new)["requests"], original["requests"])
    manifest = json.loads((new / "manifest.json").read_text())
    assert manifest["scored"]["from"] == str(run_dir.resolve()) and [s["probes"] for s in manifest["scenarios"]] == [0, 1]


def test_score_never_overwrites_silently(finished, tmp_path):
    run_dir, _, _ = finished
    with pytest.raises(RunError, match="already exists"):
        score(run_dir, out=run_dir)
    with pytest.raises(RunError, match="exclude each other"):
        score(run_dir, out=tmp_path / "x", in_place=True)


def test_score_refuses_a_changed_transcript(finished, tmp_path):
    run_dir, path, _ = finished
    copy = tmp_path / "copy"
    import shutil

    shutil.copytree(run_dir, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    changed = tmp_path / "changed.jsonl"
    changed.write_text(Path(path).read_text() + "\n")
    manifest["scenarios"][0]["file"] = str(changed)
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(RunError, match="changed since the run"):
        score(copy, out=tmp_path / "never")


def test_bench_score_command(finished, tmp_path):
    from typer.testing import CliRunner

    run_dir, _, _ = finished
    result = CliRunner().invoke(app, ["score", str(run_dir), "--out", str(tmp_path / "cli"), "--answerer", ""])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "cli" / "report.html").is_file()
    scored, original = load_run(tmp_path / "cli"), load_run(run_dir)
    pd.testing.assert_frame_equal(scored["requests"], original["requests"])
    assert scored["probes"]["correct"].isna().all() and list(scored["probes"]["present"]) == list(original["probes"]["present"])
    assert json.loads((tmp_path / "cli" / "manifest.json").read_text())["config"]["answerer"] == ""


def test_bench_score_without_the_report_writes_the_tables_only(finished, tmp_path):
    """As `bench run --no-report`: scoring a large run need not spend its time on the report; the summary says how to
    render it later."""
    from typer.testing import CliRunner

    run_dir, _, _ = finished
    result = CliRunner().invoke(app, ["score", str(run_dir), "--out", str(tmp_path / "tables"), "--no-report"])
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "tables" / "report.html").exists() and not (tmp_path / "tables" / "report").exists()
    assert "report: " not in result.output and f"bench report {tmp_path / 'tables'}" in " ".join(result.output.split())
    for name in TABLES:
        pd.testing.assert_frame_equal(load_run(tmp_path / "tables")[name], load_run(run_dir)[name], check_exact=True)


def test_score_in_place_replaces_the_runs_own_tables_with_equal_ones(finished, tmp_path):
    import shutil

    run_dir, _, _ = finished
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    assert score(copy, in_place=True, report=False) == copy
    for name in TABLES:
        pd.testing.assert_frame_equal(load_run(copy)[name], load_run(run_dir)[name], check_exact=True)
    assert json.loads((copy / "manifest.json").read_text())["scored"]["from"] == str(copy.resolve())


#: An Aider history of four sessions, the second with nothing to replay: three scenarios from one file, each
#: session about a different file and name (a scenario scored against another's session would not match).
AIDER_SESSIONS = "".join(
    f"""# aider chat started at 2024-06-0{day} 10:00:00

> /usr/bin/aider {name}.py

#### Rename the function `{old}` in {name}.py to `{new}`, keep the port at {port}.

I renamed `{old}` to `{new}` in {name}.py; the port stays {port}.

{name}.py
```python
def {new}(port={port}):
    return port
```

#### Also add a docstring to `{new}` saying it serves on port {port}.

Added the docstring to `{new}`.

"""
    if name else f"# aider chat started at 2024-06-0{day} 09:00:00\n\n"
    for day, name, old, new, port in ((1, "alpha", "start", "launch", 8081), (2, "", "", "", 0),
                                      (3, "beta", "stop", "halt", 9092), (4, "gamma", "load", "fetch", 7073))
)


def test_score_reads_a_file_of_many_sessions_once_and_scores_each_against_its_own(tmp_path, monkeypatch):
    """A file that holds several sessions (an Aider history holds hundreds) is imported once when a run is scored,
    not once per scenario, which made scoring such a run quadratic; every scenario is still measured against its
    own session: the tables equal the run's exactly. The run's own probe files are carried over as they are."""
    from compaction_bench import runner
    from compaction_bench.runner import file_cases

    history = tmp_path / "chat history.md"
    history.write_text(AIDER_SESSIONS)
    cases = file_cases([history], "auto")
    assert [case.name for case in cases] == ["chat history.md #1", "chat history.md #3", "chat history.md #4"]
    run_dir = bench.run(strategies=["none", "truncate"], profiles=["32k"], cases=cases, out=tmp_path, run_id="r", jobs=1,
                        progress=False, report=False)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    probe_files = [run_dir / entry["probes_file"] for entry in manifest["scenarios"]]
    assert all(load_probes(path) for path in probe_files)
    for path in probe_files:  # a probe file as a user may have edited it: its bytes must reach the scored run unchanged
        path.write_text("# checked by hand\n" + path.read_text())
    imported = []
    load = runner.load_transcripts
    monkeypatch.setattr(runner, "load_transcripts", lambda path, **options: imported.append(path) or load(path, **options))
    scored = score(run_dir, out=tmp_path / "scored", report=False)
    assert imported == [history]
    original, again = load_run(run_dir), load_run(scored)
    assert sorted(set(original["probes"]["scenario"])) == [case.name for case in cases]
    for name in TABLES:
        pd.testing.assert_frame_equal(again[name], original[name], check_exact=True)
    for path in probe_files:
        assert (scored / path.relative_to(run_dir)).read_bytes() == path.read_bytes()


def test_a_score_interrupted_halfway_leaves_no_folder_and_the_next_one_scores(finished, tmp_path):
    """A scored folder is written from nothing: stopped after its first cell (or failing anywhere after the first
    file was written), it is removed rather than left as a run whose tables are missing; the run is untouched."""
    run_dir, _, _ = finished
    before = {path: path.read_bytes() for path in sorted(run_dir.rglob("*")) if path.is_file()}

    def interrupt(event):
        if event.phase == "cells" and event.done == 1:
            assert (tmp_path / "half").is_dir()  # it was made (and claimed) before the first cell
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        score(run_dir, out=tmp_path / "half", report=False, progress=interrupt)
    assert not (tmp_path / "half").exists()
    assert {path: path.read_bytes() for path in sorted(run_dir.rglob("*")) if path.is_file()} == before
    again = score(run_dir, out=tmp_path / "half", report=False)
    for name in TABLES:
        pd.testing.assert_frame_equal(load_run(again)[name], load_run(run_dir)[name], check_exact=True)


RAISER = """
from compaction_bench.strategies.baselines import NoCompaction


class Raiser(NoCompaction):
    def request(self):
        raise ZeroDivisionError("boom in the plug-in")
"""


def test_a_run_without_a_finished_cell_has_nothing_to_score(finished, tmp_path):
    """Every cell failed: scoring says so and where the errors are (it raised an unpacking `ValueError` from the
    empty archive before, after writing half a folder)."""
    from compaction_bench.runner import CellsFailed

    _, path, _ = finished
    (tmp_path / "raiser.py").write_text(RAISER)
    with pytest.raises(CellsFailed):
        bench.run([path], strategies=[f"{tmp_path / 'raiser.py'}:Raiser"], profiles=["32k"], out=tmp_path, run_id="failed", jobs=1,
                  report=False, progress=False)
    with pytest.raises(RunError, match=r"failed: no finished cell to score \(a failed cell's error is in errors\.log\)"):
        score(tmp_path / "failed", out=tmp_path / "scored")
    assert_user_error(bench_cli("score", str(tmp_path / "failed")), f"{tmp_path / 'failed'}: no finished cell to score")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["failed", "raiser.py"]


def test_replay_records_that_cannot_be_read_back_are_one_error_naming_the_cell(finished, tmp_path):
    """A run's stored replay records that its version did not write so (edited, damaged: here a compaction's kept ids
    without their `ids`) are one error naming the run and the cell, exit 2, no traceback, and no
    scored folder is left."""
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    run_dir, _, _ = finished
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    cells_file = copy / "replays" / "cells.parquet"
    cells = pq.read_table(cells_file)
    replays = cells.column("replay").to_pylist()
    (row,) = [n for n, (text, strategy) in enumerate(zip(replays, cells.column("strategy").to_pylist(), strict=True))
              if strategy == "codex-local" and json.loads(text)["compactions"]]
    record = json.loads(replays[row])
    record["compactions"][-1]["kept_ids"] = {"shared": 0}  # and no "ids"
    replays[row] = json.dumps(record)
    pq.write_table(cells.set_column(cells.schema.get_field_index("replay"), "replay", pa.array(replays, pa.string())), cells_file)
    scenario = cells.column("scenario")[row].as_py()
    done = bench_cli("score", str(copy), "--no-report", "--out", str(tmp_path / "scored"))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    *progress, error = [line for line in done.stderr.splitlines() if line.strip()]  # the progress lines, then the error
    assert all(line.startswith("cells ") for line in progress), progress
    assert error == (f"error: {copy}: the stored replay records of the cell {scenario} · codex-local · 32k · repeat 0 cannot be read "
                     "back (KeyError: 'ids')")
    assert not (tmp_path / "scored").exists()
