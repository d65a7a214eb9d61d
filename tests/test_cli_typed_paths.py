"""A transcript's path is named as the user typed it: pathlib would print `./x` as `x` and `a//b` as `a/b`, so
`bench inspect ./x` named another spelling of the file than the one given, in its errors, in the problems it
lists and in the imported transcript's `source["path"]`."""

from __future__ import annotations

from pathlib import Path

import pytest

from compaction_bench.importing import TypedPath, load_transcripts
from tests.conftest import CORPORA, assert_user_error, bench_cli

#: A short Claude Code session (7 responses); a line that is not a JSON object is added to it as a problem.
SESSION = CORPORA / "claude-code-jsonl" / "d-kimuson__claude-code-viewer" / "1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl"
LINES = 29


@pytest.fixture
def session_with_a_problem(tmp_path: Path) -> Path:
    path = tmp_path / "session.jsonl"
    path.write_bytes(SESSION.read_bytes() + b"[1]\n")
    return path


@pytest.mark.parametrize("typed", ["./session.jsonl", ".//session.jsonl", "./sub/../session.jsonl"])
def test_inspect_lists_a_problem_under_the_path_as_typed(session_with_a_problem, typed):
    (session_with_a_problem.parent / "sub").mkdir()
    proc = bench_cli("inspect", typed, cwd=session_with_a_problem.parent)
    assert proc.returncode == 0, proc.stderr
    assert f"  {typed}:{LINES + 1}: expected a JSON object, got list; line kept out" in proc.stdout.splitlines()


@pytest.mark.parametrize(("typed", "message"), [
    ("./absent.jsonl", "./absent.jsonl: no such file"),
    ("./folder/", "./folder/: is a directory"),
    ("./unknown.txt", "./unknown.txt: unrecognised transcript format"),
])
def test_an_error_names_the_path_as_typed(tmp_path, typed, message):
    (tmp_path / "folder").mkdir()
    (tmp_path / "unknown.txt").write_text("not a transcript\n")
    assert_user_error(bench_cli("inspect", typed, cwd=tmp_path), message)


def test_the_transcript_records_the_path_as_typed(session_with_a_problem, monkeypatch):
    monkeypatch.chdir(session_with_a_problem.parent)
    (transcript,) = load_transcripts("./session.jsonl")
    assert transcript.source["path"] == "./session.jsonl"
    assert list(transcript.meta["problems"]) == [f"./session.jsonl:{LINES + 1}: expected a JSON object, got list; line kept out"]


def test_a_typed_path_is_the_same_path_for_everything_but_its_spelling(tmp_path):
    typed = TypedPath.of(f"{tmp_path}//./a.jsonl")
    assert str(typed) == f"{tmp_path}//./a.jsonl"
    assert typed == tmp_path / "a.jsonl" and hash(typed) == hash(tmp_path / "a.jsonl")
    assert str(typed.parent) == str(tmp_path) and typed.name == "a.jsonl"  # what derives from it prints as pathlib's


def test_import_names_its_output_as_typed(tmp_path):
    """`bench import ... -o ./out.jsonl` says it wrote `./out.jsonl`, and refuses to replace it under that name."""
    proc = bench_cli("import", str(SESSION), "-o", "./out.jsonl", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["wrote ./out.jsonl"]
    assert (tmp_path / "out.jsonl").read_text(encoding="utf-8").startswith("{")
    assert_user_error(bench_cli("import", str(SESSION), "-o", ".//out.jsonl", cwd=tmp_path),
                      ".//out.jsonl: already exists; not overwritten")
