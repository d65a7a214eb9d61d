"""A session given twice (a copy of a file under another path, or the same session in another file)
is one scenario, not two clusters: the first is kept and the second named in one notice line and
in the manifest, and a resume with the same paths is accepted."""

from __future__ import annotations

import json
import shutil

import pytest

import compaction_bench as bench
from compaction_bench.runner import file_cases
from compaction_bench.transcript import Transcript
from tests.conftest import write_tiny_session


@pytest.fixture
def copies(tmp_path):
    """`a/tiny.jsonl` and `b/tiny.jsonl`, the same bytes (and `a/probes.yaml`)."""
    first = write_tiny_session(tmp_path / "a")
    (tmp_path / "b").mkdir()
    second = tmp_path / "b" / "tiny.jsonl"
    shutil.copyfile(first, second)
    assert first.read_bytes() == second.read_bytes()
    return first, second


def test_a_copy_of_a_file_is_one_scenario_and_is_named(copies, caplog):
    first, second = copies
    with caplog.at_level("WARNING"):
        cases = file_cases([str(first), str(second)], str(first.parent / "probes.yaml"))
    assert [case.name for case in cases] == ["tiny.jsonl"] and cases[0].file == str(first.resolve())
    lines = [r.getMessage() for r in caplog.records if str(second) in r.getMessage()]
    assert len(lines) == 1 and str(first) in lines[0]


def test_the_same_session_in_another_file_is_one_scenario(tmp_path, caplog):
    # Other bytes (a title in the header), the same items: the replay would be the same, so it is one cluster.
    first = write_tiny_session(tmp_path / "a")
    session = Transcript.read(first)
    second = Transcript("tiny-again", session.items, meta={"title": "a copy"}).write(tmp_path / "other.jsonl")
    assert first.read_bytes() != second.read_bytes()
    distinct = Transcript("tiny", session.items[:2]).write(tmp_path / "shorter.jsonl")
    with caplog.at_level("WARNING"):
        cases = file_cases([str(first), str(second), str(distinct)], None)
    assert [case.file for case in cases] == [str(first.resolve()), str(distinct.resolve())]
    assert sum(str(second) in r.getMessage() and str(first) in r.getMessage() for r in caplog.records) == 1


def test_a_run_records_the_duplicate_and_resumes_with_the_same_paths(copies, tmp_path, no_network):
    first, second = copies
    common = dict(out=tmp_path / "runs", run_id="dup", jobs=1, probes=str(first.parent / "probes.yaml"), report=False, progress=False)
    root = bench.run([first, second], ["none"], ["32k"], **common)
    manifest = json.loads((root / "manifest.json").read_text())
    assert [s["name"] for s in manifest["scenarios"]] == ["tiny.jsonl"] and manifest["cells"]["total"] == 1
    (skipped,) = manifest["duplicates"]
    assert skipped["file"] == str(second.resolve()) and skipped["same_as"] == str(first.resolve())
    assert skipped["session_index"] == 0 and skipped["scenario"] == "tiny.jsonl"
    again = bench.run([first, second], ["none"], ["32k"], resume=True, **common)
    assert again == root
    assert json.loads((root / "manifest.json").read_text())["duplicates"] == manifest["duplicates"]


def test_cases_built_in_memory_are_taken_once_each(tmp_path, caplog, no_network):
    from compaction_bench.runner import Case, RunError

    session = Transcript.read(write_tiny_session(tmp_path / "a"))
    shorter = Transcript("tiny", session.items[:2])
    common = dict(out=tmp_path / "runs", jobs=1, report=False, progress=False)
    # The same name twice: the second scenario would replace the first, so the run is refused.
    with pytest.raises(RunError, match="scenario 'one' given twice"):
        bench.run(strategies=["none"], cases=[Case("one", session), Case("one", shorter)], run_id="named", **common)
    assert not (tmp_path / "runs" / "named").exists()
    # The same session under two names: one scenario, the copy named.
    with caplog.at_level("WARNING"):
        root = bench.run(strategies=["none"], cases=[Case("one", session), Case("two", shorter), Case("three", session)],
                         run_id="copies", **common)
    manifest = json.loads((root / "manifest.json").read_text())
    assert [s["name"] for s in manifest["scenarios"]] == ["one", "two"] and manifest["cells"]["total"] == 2
    (skipped,) = manifest["duplicates"]
    assert (skipped["given_as"], skipped["scenario"], skipped["file"]) == ("three", "one", None)
    assert sum("three" in r.getMessage() and "one" in r.getMessage() for r in caplog.records) == 1
    # Paths beside cases would not be read: refused.
    with pytest.raises(RunError, match="not both"):
        bench.run([tmp_path / "a" / "tiny.jsonl"], ["none"], cases=[Case("one", session)], run_id="both", **common)


def test_a_path_given_twice_is_refused_even_as_the_same_object(copies):
    from compaction_bench.runner import RunError, repeated_path

    first, second = copies
    same = str(first)
    assert repeated_path([first, second]) is None  # a copy under another path is not a slip in the list
    with pytest.raises(RunError, match="given twice"):
        file_cases([same, same], None)  # one string object twice (a list written `[p, p]`)
