"""`load_run` reads a run folder by a declared schema, and a run folder's damage is one `StoreError` naming the file.

Each table's columns get the dtype their name has whatever the run holds (a run in which a strategy compacts and
one in which nothing does; a transcript with turns and one without); a table without a column every reader needs,
or with a column stored as another type, is refused naming the file and the column, while a run of an older version
(fewer columns) still reads. A manifest or a file the system refuses to read, a `cells/` folder that is a symbolic
link, and a file in `cells/` that is no cell of the run (or another cell under its name) are each met with one
clear answer. The runs are real, of a recorded Claude Code session (7 responses, about 2,000 tokens: at a 1,500-token
window `truncate` compacts, at 12k nothing does) or of the tiny hand-built session (two responses); the damage is
done by hand to a copy of a finished run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

import compaction_bench as bench
from compaction_bench.store import KEY_COLUMNS, CellKey, RunStore, StoreError
from compaction_bench.transcript import Item, Transcript
from tests.conftest import CORPORA, assert_user_error, bench_cli, write_tiny_session

SESSION = CORPORA / "claude-code-jsonl" / "d-kimuson__claude-code-viewer" / "1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl"
STRATEGIES = ["none", "truncate"]
#: The scenario of the tiny session's runs: its file's name.
TINY = "tiny.jsonl"
#: Columns of `compactions` that are an integer or None, and columns of `summary` that count per repeat.
COMPACTION_NUMBERS = ["estimate_tokens", "estimate_error", "threshold", "next_request"]
SUMMARY_COUNTS = ["compactions", "silent_loss", "summarizer_calls", "summarizer_tokens", "premature_triggers"]


def _run(out: Path, run_id: str, window: str) -> Path:
    return bench.run([SESSION], strategies=STRATEGIES, profiles=[f"gpt-5@{window}"], out=out, run_id=run_id, jobs=1, report=False,
                     progress=False, answerer="")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("runs")
    return {"compacted": _run(out, "compacted", "1500"), "fitting": _run(out, "fitting", "12k")}


def tiny_run(folder: Path, run_id: str, **options) -> Path:
    session = folder / "tiny.jsonl" if (folder / "tiny.jsonl").exists() else write_tiny_session(folder)
    return bench.run([session], strategies=STRATEGIES, profiles=["32k"], out=folder / "runs", run_id=run_id, jobs=1, report=False,
                     progress=False, probes=str(folder / "probes.yaml"), **options)


def copy_of(run: Path, folder: Path) -> Path:
    return Path(shutil.copytree(run, folder / run.name))


def edit(root: Path, name: str, change: Callable[[pd.DataFrame], pd.DataFrame]) -> Path:
    """Rewrite table `name` of the run folder `root` as `change` makes it (as pandas writes a frame); the file."""
    file = root / f"{name}.parquet"
    change(pd.read_parquet(file)).to_parquet(file, index=False)
    return file


# ---------------------------------------------------------------------------- 1: one dtype per column, whatever the run holds
def test_the_same_column_has_the_same_dtype_in_a_run_that_compacted_and_in_one_that_did_not(runs):
    stored = {run: pq.read_schema(runs[run] / "compactions.parquet") for run in runs}
    # as parquet stores them, these columns differ: integers where a strategy compacted, no row (nulls) where none did
    assert {str(stored["compacted"].field(c).type) for c in COMPACTION_NUMBERS} == {"int64"}
    stored_counts = {run: pq.read_schema(runs[run] / "summary.parquet") for run in runs}
    assert {str(stored_counts["fitting"].field(c).type) for c in SUMMARY_COUNTS} == {"int64"}  # 0 compactions: integers
    assert {str(stored_counts["compacted"].field(c).type) for c in SUMMARY_COUNTS} == {"double"}  # a mean over repeats
    tables = {run: bench.load_run(runs[run]) for run in runs}
    assert len(tables["compacted"]["compactions"]) == 2 and tables["fitting"]["compactions"].empty
    for name in ("requests", "compactions", "probes", "summary"):
        compacted, fitting = tables["compacted"][name], tables["fitting"][name]
        shared = [c for c in compacted.columns if c in fitting.columns]
        assert {c: str(compacted[c].dtype) for c in shared} == {c: str(fitting[c].dtype) for c in shared}, name
    # an estimate, a threshold or the next request may be None (the README: an unknown number is NaN): float64 in both
    for run in runs:
        assert [str(tables[run]["compactions"][c].dtype) for c in COMPACTION_NUMBERS] == ["float64"] * 4
        assert [str(tables[run]["summary"][c].dtype) for c in SUMMARY_COUNTS] == ["float64"] * 5
    # the values are the stored ones: truncate compacted twice, the strategy's estimate above its threshold each time
    compactions = tables["compacted"]["compactions"]
    assert compactions[COMPACTION_NUMBERS].to_dict("list") == pq.read_table(runs["compacted"] / "compactions.parquet").select(
        COMPACTION_NUMBERS).to_pydict()
    assert (compactions["estimate_tokens"] > compactions["threshold"]).all()
    assert tables["fitting"]["summary"][SUMMARY_COUNTS].eq(0).all().all()
    assert tables["compacted"]["summary"].set_index("strategy").loc["truncate", "compactions"] == 2.0


def test_a_transcript_without_turns_gives_turn_the_dtype_a_transcript_with_turns_does(runs, tmp_path):
    """An item's `turn` is optional: a session that names none leaves every request's turn None (it read as Python objects)."""
    items = (
        Item("u0", "user", "Remember: the deploy key is ZEBRA-42. Now list the files."),
        Item("c0", "tool_call", call_id="c0", tool_name="bash", arguments='{"command": "ls"}', response=0),
        Item("r0", "tool_result", "setup.py\nREADME.md", call_id="c0"),
        Item("a0", "assistant", "Two files: setup.py and README.md.", response=1),
    )
    session = Transcript("turnless", items).write(tmp_path / "turnless.jsonl")
    root = bench.run([session], strategies=["none"], profiles=["32k"], out=tmp_path / "runs", run_id="r", jobs=1, report=False,
                     progress=False, answerer="")
    assert set(pq.read_table(root / "requests.parquet").column("turn").to_pylist()) == {None}
    turnless, turned = bench.load_run(root)["requests"]["turn"], bench.load_run(runs["compacted"])["requests"]["turn"]
    assert str(turnless.dtype) == str(turned.dtype) == "float64"
    assert turnless.isna().all() and turned.notna().all()


# ---------------------------------------------------------------------------- 2: a damaged table names its file and column
DAMAGES: dict[str, tuple[str, Callable[[pd.DataFrame], pd.DataFrame], str]] = {
    "requests without scenario": ("requests", lambda f: f.drop(columns="scenario"), "column 'scenario' is missing"),
    "probes without present": ("probes", lambda f: f.drop(columns="present"), "column 'present' is missing"),
    "probes without correct": ("probes", lambda f: f.drop(columns="correct"), "column 'correct' is missing"),
    "repeat as text": ("requests", lambda f: f.assign(repeat=f["repeat"].astype(str)), "column 'repeat' is str, not int64"),
    "present as text": ("probes", lambda f: f.assign(present=f["present"].astype(str)), "column 'present' is str, not boolean"),
    "a cost as text": ("summary", lambda f: f.assign(cost_usd=f["cost_usd"].astype(str)), "column 'cost_usd' is str, not float64"),
    "a step left out": ("requests", lambda f: f.assign(step=f["step"].astype(object).where(f.index != 2, None)),
                        "column 'step' has no value in row 2"),
    "a presence left out": ("probes", lambda f: f.assign(present=f["present"].astype(object).where(f.index != 1, None)),
                            "column 'present' has no value in row 1"),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_table_without_a_column_it_needs_or_with_one_of_another_type_is_refused_naming_both(runs, tmp_path, damage):
    name, change, message = DAMAGES[damage]
    root = copy_of(runs["fitting"], tmp_path)
    file = edit(root, name, change)
    with pytest.raises(StoreError) as refused:
        bench.load_run(root)
    assert str(refused.value).startswith(f"{file}: {message}")


def test_bench_report_on_a_table_without_its_scenario_column_says_which_file_and_column(runs, tmp_path):
    """It ended in `unusable run folder (KeyError: 'scenario')`, naming neither."""
    root = copy_of(runs["fitting"], tmp_path)
    file = edit(root, "requests", lambda f: f.drop(columns="scenario"))
    assert_user_error(bench_cli("report", str(root)), f"{file}: column 'scenario' is missing")


def test_a_run_of_an_older_version_reads_with_the_columns_it_has_typed_by_name(runs, tmp_path):
    """Columns added since are absent, not refused: requests without the cache write and re-billed tokens, probes whose
    point is named `point`, a compactions table of an older version with no row and no column but its keys (as
    objects) or but `scenario`."""
    root = copy_of(runs["fitting"], tmp_path)
    edit(root, "requests", lambda f: f.drop(columns=["cache_write_tokens", "rebilled_tokens", "usage_source"]))
    edit(root, "probes", lambda f: f.drop(columns=["found", "source_summarized"]).rename(columns={"point_kind": "point"}))
    edit(root, "compactions", lambda f: pd.DataFrame(columns=KEY_COLUMNS))
    tables = bench.load_run(root)
    assert not {"cache_write_tokens", "rebilled_tokens", "usage_source"} & set(tables["requests"].columns)
    assert set(tables["probes"]["point"]) == {"checkpoint", "final"}
    compactions = tables["compactions"]
    assert compactions.empty and list(compactions.columns) == KEY_COLUMNS
    assert [str(compactions[c].dtype) for c in KEY_COLUMNS] == [str(tables["requests"][c].dtype) for c in KEY_COLUMNS]
    # what this run's summary stored as integers (no compaction) reads as every run's does
    assert [str(tables["summary"][c].dtype) for c in SUMMARY_COUNTS] == ["float64"] * 5
    # a table with no row and one column: it gets the keys every table starts with, typed
    edit(root, "compactions", lambda f: pd.DataFrame({"scenario": pd.Series(dtype=str)}))
    compactions = bench.load_run(root)["compactions"]
    assert list(compactions.columns) == KEY_COLUMNS and str(compactions["repeat"].dtype) == "int64"


# ---------------------------------------------------------------------------- 3: a damaged or unreadable manifest or file
@pytest.mark.parametrize("failed", [[1, 2], ["a cell"], [{"cell": 3, "error": "x"}]])
def test_a_manifest_whose_failed_cells_are_not_cells_is_refused_naming_it(runs, tmp_path, failed):
    root = copy_of(runs["fitting"], tmp_path)
    manifest = json.loads((root / "manifest.json").read_text(encoding="utf-8"))
    manifest["cells"]["failed"] = failed
    (root / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(StoreError, match=r"manifest\.json: not a run manifest this version reads \(a failed cell is not an object"):
        bench.load_run(root)


@pytest.fixture
def shared_copy(runs) -> Iterator[Path]:
    """A copy of a finished run in a folder every user may enter (a suite run as root, which reads any file, has
    another user read it: `load_as_another_user`)."""
    base = Path(tempfile.mkdtemp(prefix="load-run-schema-"))
    base.chmod(0o755)
    root = copy_of(runs["fitting"], base)
    yield root
    root.chmod(0o755)
    for path in root.iterdir():
        path.chmod(0o755 if path.is_dir() else 0o644)
    shutil.rmtree(base)


def load_as_another_user(root: Path) -> str:
    """What `compaction_bench.load_run(root)` raises in a process that is not root's: its type and message."""
    prefix = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv: no user to whom a file can be unreadable")
        prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    code = ("import sys\nimport compaction_bench\ntry:\n    compaction_bench.load_run(sys.argv[1])\n"
            "except Exception as exc:\n    print(f'{type(exc).__name__}: {exc}')\n")
    done = subprocess.run([*prefix, sys.executable, "-c", code, str(root)], capture_output=True, text=True, timeout=300, cwd="/")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("unreadable", ["probes.parquet", "manifest.json", "."])
def test_a_table_manifest_or_folder_the_system_refuses_to_read_is_a_store_error_naming_it(shared_copy, unreadable):
    (shared_copy / unreadable).chmod(0)
    named = shared_copy if unreadable == "." else shared_copy / unreadable
    assert load_as_another_user(shared_copy) == f"StoreError: {named}: cannot be read (Permission denied)"


# ---------------------------------------------------------------------------- 4, 5: the cells of an unfinished run
def stop_after_first_cell(key, status):
    raise KeyboardInterrupt


@pytest.fixture
def stopped(tmp_path) -> Path:
    """A run of the tiny session stopped after its first cell (`none`): `cells/` holds that cell's file only."""
    with pytest.raises(KeyboardInterrupt):
        tiny_run(tmp_path, "r", on_cell=stop_after_first_cell)
    root = tmp_path / "runs" / "r"
    assert [p.name for p in (root / "cells").iterdir()] == [f"{CellKey(TINY, 'none', '32k', 0).slug}.zip"]
    return root


def test_a_cells_folder_that_is_a_symbolic_link_is_resumed_and_only_the_link_removed(stopped, tmp_path):
    """The cells kept on another disk: a resume ended in `error: Cannot call rmtree on a symbolic link`."""
    elsewhere = tmp_path / "elsewhere"
    (stopped / "cells").rename(elsewhere)
    (stopped / "cells").symlink_to(elsewhere, target_is_directory=True)
    root = tiny_run(tmp_path, "r", resume=True)
    assert not (root / "cells").exists() and not (root / "cells").is_symlink()
    # what the link pointed to is left as it was, with both cells' files (the second written through the link)
    assert sorted(p.name for p in elsewhere.iterdir()) == sorted(f"{CellKey(TINY, s, '32k', 0).slug}.zip" for s in STRATEGIES)
    tables = bench.load_run(root)
    assert sorted(tables["summary"]["strategy"]) == STRATEGIES
    assert len(tables["requests"]) == 6  # two turn requests and the final context per cell
    assert sorted(r["replay"]["key"]["strategy"] for r in RunStore(root).replays()) == STRATEGIES


def test_a_cell_file_of_another_run_is_refused_naming_it_and_merged_into_nothing(stopped, tmp_path):
    """A copy of a cell's file under a name no cell of the run has: a resume merged it, its requests twice."""
    cells = stopped / "cells"
    (own,) = cells.iterdir()
    foreign = cells / "zzz-000000000000.zip"
    shutil.copyfile(own, foreign)
    refusal = f"{foreign}: not a cell of this run (its manifest has no cell of this name); move it out of {cells}, then try again"
    with pytest.raises(StoreError, match=f"^{re.escape(refusal)}$"):
        tiny_run(tmp_path, "r", resume=True)
    # the command line says so on one line
    session, probes = tmp_path / "tiny.jsonl", tmp_path / "probes.yaml"
    args = ["run", str(session), "-s", "none", "-s", "truncate", "-p", "32k", "-o", str(tmp_path / "runs"), "--run-id", "r", "--resume",
            "--no-report", "--probes", str(probes)]
    assert_user_error(bench_cli(*args), f"{foreign}: not a cell of this run")
    foreign.rename(tmp_path / foreign.name)  # moved out, as the message says: the resume finishes with the run's own cells
    tables = bench.load_run(tiny_run(tmp_path, "r", resume=True))
    assert tables["requests"].groupby("strategy").size().to_dict() == {"none": 3, "truncate": 3}


def test_a_cell_file_under_another_cells_name_is_refused_naming_it(stopped, tmp_path):
    """The first cell's file copied under the second's name: the resume took the second for done and merged the first's
    rows twice, under its own key, and none of the second's."""
    (own,) = (stopped / "cells").iterdir()
    copy = stopped / "cells" / f"{CellKey(TINY, 'truncate', '32k', 0).slug}.zip"
    shutil.copyfile(own, copy)
    with pytest.raises(StoreError, match=f"^{re.escape(f'{copy}: holds the cell tiny.jsonl · none · 32k · repeat 0, not the one its name says')}"):
        tiny_run(tmp_path, "r", resume=True)
    assert not (stopped / "requests.parquet").exists()  # nothing merged
