"""A JSONL of session records, `{"id": …, "messages": [system, user, assistant+tool_calls, tool, assistant]}`
one per line (OpenAI's chat fine-tuning files, Hugging Face chat datasets), is sniffed as openai-messages. It
was read as one message per line: every record became an empty marker ("message without a role") and the
command exited 0. Each record is now its own session, as `hf-dataset` reads the same file; a file that mixes
records and messages is one error naming the line, exit 2. Every file here is built by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from compaction_bench.importing import detect, load_transcripts
from compaction_bench.transcript import Transcript
from tests.conftest import assert_user_error, bench_cli


def session(n: int) -> list[dict[str, Any]]:
    """One hand-built session: a task, one `ls` call and its output, the answer."""
    call = {"id": f"c{n}", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": f"ls /srv/{n}"})}}
    return [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": f"List the files in /srv/{n}."},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"c{n}", "content": f"notes-{n}.txt"},
        {"role": "assistant", "content": f"There is one file: notes-{n}.txt."},
    ]


def write_lines(path: Path, *records: Any) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def shape(transcript: Transcript) -> list[tuple[str, str, str | None]]:
    return [(i.kind, i.text, i.call_id) for i in transcript.items]


def expected_shape(n: int) -> list[tuple[str, str, str | None]]:
    return [
        ("system", "You are a helpful assistant.", None),
        ("user", f"List the files in /srv/{n}.", None),
        ("tool_call", "", f"c{n}"),
        ("tool_result", f"notes-{n}.txt", f"c{n}"),
        ("assistant", f"There is one file: notes-{n}.txt.", None),
    ]


def test_a_jsonl_of_session_records_is_one_session_per_line(tmp_path):
    path = write_lines(tmp_path / "sessions.jsonl", {"id": "r1", "messages": session(1)}, {"id": "r2", "messages": session(2)})
    assert detect(path).format == "openai-messages"
    first, second = load_transcripts(path)
    assert (first.id, second.id) == ("sessions:r1", "sessions:r2")
    assert (shape(first), shape(second)) == (expected_shape(1), expected_shape(2))
    for t, line in ((first, 1), (second, 2)):
        assert len(t.steps()) == 2 and len(t.real_user_messages()) == 1
        assert t.source["line"] == line and not t.meta.get("problems")


def test_the_records_read_as_the_hf_dataset_importer_reads_them(tmp_path):
    path = write_lines(tmp_path / "sessions.jsonl", {"id": "r1", "messages": session(1)}, {"id": "r2", "messages": session(2)})
    ours = load_transcripts(path)
    theirs = load_transcripts(path, format="hf-dataset")
    assert [shape(t) for t in ours] == [shape(t) for t in theirs]


def test_a_json_list_of_session_records_is_one_session_per_entry(tmp_path):
    path = tmp_path / "sessions.json"
    path.write_text(json.dumps([{"id": "r1", "messages": session(1)}, {"messages": session(2)}]), encoding="utf-8")
    assert detect(path).format == "openai-messages"
    first, second = load_transcripts(path)
    assert (first.id, second.id) == ("sessions:r1", "sessions:entry1")  # no id: named by its place
    assert (shape(first), shape(second)) == (expected_shape(1), expected_shape(2))


def test_a_record_without_an_id_is_named_by_its_line_and_a_broken_line_is_a_problem(tmp_path):
    path = tmp_path / "sessions.jsonl"
    path.write_text(json.dumps({"messages": session(1)}) + "\n{\"messages\": [\n" + json.dumps({"id": 7, "messages": session(3)}) + "\n")
    first, second = load_transcripts(path)
    assert (first.id, second.id) == ("sessions:line1", "sessions:7")
    for t in (first, second):  # the lost line is named in every session of the file
        assert [p for p in t.meta["problems"] if p.startswith(f"{path}:2: malformed JSON")], t.meta["problems"]


def test_bench_inspect_and_import_read_every_record(tmp_path):
    path = write_lines(tmp_path / "sessions.jsonl", {"id": "r1", "messages": session(1)}, {"id": "r2", "messages": session(2)})
    inspected = bench_cli("inspect", str(path))
    assert inspected.returncode == 0, inspected.stderr
    assert "sessions:r1" in inspected.stdout and "sessions:r2" in inspected.stdout
    assert "without a role" not in inspected.stdout + inspected.stderr
    out = tmp_path / "out"
    written = bench_cli("import", str(path), "-o", str(out))
    assert written.returncode == 0, written.stderr
    assert len(list(out.glob("*.jsonl"))) == 2


def test_a_message_among_session_records_is_an_error_naming_its_line(tmp_path):
    path = write_lines(tmp_path / "mixed.jsonl", {"id": "r1", "messages": session(1)}, session(2)[1])
    assert_user_error(bench_cli("inspect", str(path)), f"{path}:2:", "expected a session record", "role 'user'")


def test_a_session_record_among_messages_is_an_error_naming_its_line(tmp_path):
    path = write_lines(tmp_path / "mixed.jsonl", *session(1)[:2], {"id": "r2", "messages": session(2)})
    assert_user_error(bench_cli("inspect", str(path)), f"{path}:3:", "a session record")


def test_a_file_of_one_record_stays_one_session_named_after_the_file(tmp_path):
    path = write_lines(tmp_path / "single.jsonl", {"id": "r1", "messages": session(1)})
    (only,) = load_transcripts(path)
    assert only.id == "single" and shape(only) == expected_shape(1)
