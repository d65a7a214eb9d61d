"""The openai-messages importer brought in line with the hf-dataset importer's fixes (forty-first pass), each
checked on files written by hand, whose right reading is known without the code.

A JSONL of `{id, messages}` records, one session per line, kept two records of one id as two sessions of that
id: `bench probes mine` wrote their probe ids twice (`dup:s/constraint-01`), which `bench probes check`
refuses, and a probe's `session` named both. Content of a type the converter does not read (`content: 5`,
an object, a part that is no text or image) was converted without a word. The ids are now made unique as
hf-dataset makes them (`#row<N>`, with a problem naming the records), and such content is a problem naming
the message and its line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from compaction_bench.importing import load_transcripts
from compaction_bench.transcript import Transcript
from tests.conftest import assert_mined_probes_stay_in_their_sessions

#: The installed command line, as a user runs it.
BENCH = Path(sys.executable).with_name("bench")

#: Two records that share the id `s`, each with a constraint the miner finds (a "must never" sentence).
SAME_ID = [
    {"id": "s", "messages": [{"role": "user", "content": "Please set up the project. You must never use port 8080; always use port 5173."},
                             {"role": "assistant", "content": "I'll configure the dev server on port 5173 because 8080 is taken."}]},
    {"id": "s", "messages": [{"role": "user", "content": "Write the docs. You must always write the changelog in German and never in English."},
                             {"role": "assistant", "content": "I'll write the changelog in German as you asked."}]},
]
CHAT = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def write_json(path: Path, value: Any) -> Path:
    path.write_text(json.dumps(value), encoding="utf-8")
    return path


def problems(transcript: Transcript) -> list[str]:
    return list(transcript.meta.get("problems", ()))


def bench(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BENCH), *args], capture_output=True, text=True, timeout=600, cwd=cwd)


# --------------------------------------------------------------------------- 1. records that share an id
def test_records_with_one_id_become_sessions_of_distinct_ids_and_say_so(tmp_path):
    path = write_jsonl(tmp_path / "dup.jsonl", SAME_ID)
    first, second = load_transcripts(path, format="openai-messages")
    assert (first.id, second.id) == ("dup:s#row0", "dup:s#row1")
    assert problems(first) == [f"{path}:1: records 0, 1 (lines 1, 2) have the same session id 'dup:s'; this one, record 0, is named 'dup:s#row0'"]
    assert problems(second) == [f"{path}:2: records 0, 1 (lines 1, 2) have the same session id 'dup:s'; this one, record 1, is named 'dup:s#row1'"]
    assert [i.text for i in second.items] == [m["content"] for m in SAME_ID[1]["messages"]]  # nothing of either session lost
    assert_mined_probes_stay_in_their_sessions([first, second])


def test_the_ids_are_those_hf_dataset_gives_the_same_file(tmp_path):
    """One file read by either importer gives the same sessions, so probes mined under one apply under the other."""
    path = write_jsonl(tmp_path / "dup.jsonl", SAME_ID)
    ours = [t.id for t in load_transcripts(path, format="openai-messages")]
    assert ours == [t.id for t in load_transcripts(path, format="hf-dataset", id_column="id")] == ["dup:s#row0", "dup:s#row1"]


def test_bench_probes_mine_then_check_passes_on_a_file_of_duplicate_ids(tmp_path):
    """End to end through the installed command: before, `probes check` exited 2 on "duplicate probe id 'dup:s/constraint-01'"."""
    write_jsonl(tmp_path / "dup.jsonl", SAME_ID)
    mined = bench("probes", "mine", "dup.jsonl", "-o", "probes.jsonl", cwd=tmp_path)
    assert mined.returncode == 0, mined.stderr
    probes = [json.loads(line) for line in (tmp_path / "probes.jsonl").read_text(encoding="utf-8").splitlines()]
    ids = [p["id"] for p in probes]
    assert len(ids) == len(set(ids)) >= 2 and {p["session"] for p in probes} == {"dup:s#row0", "dup:s#row1"}
    checked = bench("probes", "check", "dup.jsonl", "--probes", "probes.jsonl", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"{len(ids)} probes checked: 0 problem(s)" in checked.stdout


def test_a_json_list_of_records_names_the_entries(tmp_path):
    path = write_json(tmp_path / "list.json", [{"id": 3, "messages": CHAT}, {"id": "3", "messages": CHAT}, {"id": "x", "messages": CHAT}])
    ts = load_transcripts(path)
    assert [t.id for t in ts] == ["list:3#row0", "list:3#row1", "list:x"]
    assert problems(ts[1]) == [f"{path}: entries 0, 1 have the same session id 'list:3'; this one, entry 1, is named 'list:3#row1'"]
    assert not problems(ts[2])


def test_an_id_equal_to_another_records_place_name_is_made_unique(tmp_path):
    """A record without an id is named by its line (`line2`); a record whose id is `line2` would take that name."""
    path = write_jsonl(tmp_path / "names.jsonl", [{"id": "line2", "messages": CHAT}, {"messages": CHAT}])
    first, second = load_transcripts(path)
    assert (first.id, second.id) == ("names:line2#row0", "names:line2#row1")


def test_records_of_distinct_ids_keep_them_without_a_problem(tmp_path):
    path = write_jsonl(tmp_path / "ok.jsonl", [{"id": "a", "messages": CHAT}, {"id": "b", "messages": CHAT}])
    first, second = load_transcripts(path)
    assert (first.id, second.id) == ("ok:a", "ok:b") and not problems(first) + problems(second)


# --------------------------------------------------------------------------- 2. content of a type not read
CONTENTS = [
    (5, "content is a JSON int (5), not text or a list of parts; kept as its JSON text", "5"),
    ({"text": "hello"}, "content is an object with fields text, not text or a list of parts; kept as its JSON text", '{"text": "hello"}'),
    ([{"type": "text", "text": "kept"}, {"type": "refusal", "refusal": "no"}],
     "content part 1 is an object with fields type, refusal, no text or image part; left out of the message's text", "kept"),
]


@pytest.mark.parametrize(("content", "problem", "text"), CONTENTS)
def test_content_of_a_type_not_read_is_a_problem_naming_record_line_and_message(tmp_path, content, problem, text):
    rows = [{"id": "a", "messages": CHAT}, {"id": "b", "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": content}]}]
    path = write_jsonl(tmp_path / "content.jsonl", rows)
    first, second = load_transcripts(path)
    assert not problems(first)
    assert problems(second) == [f"{path}:2: message 1: {problem}"]
    assert second.items[-1].kind == "assistant" and second.items[-1].text == text  # the text as before


@pytest.mark.parametrize(("content", "problem", "text"), CONTENTS)
def test_content_of_a_type_not_read_is_a_problem_in_a_jsonl_of_messages(tmp_path, content, problem, text):
    path = write_jsonl(tmp_path / "chat.jsonl", [{"role": "user", "content": "q"}, {"role": "assistant", "content": content}])
    (t,) = load_transcripts(path)
    assert problems(t) == [f"{path}:2: line 2: {problem}"] and t.items[-1].text == text


def test_content_of_a_type_not_read_is_a_problem_in_a_json_list_and_a_tau_run(tmp_path):
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": 5}]
    listed = write_json(tmp_path / "list.json", messages)
    assert problems(load_transcripts(listed)[0]) == [f"{listed}: message 1: content is a JSON int (5), not text or a list of parts; kept as its JSON text"]
    runs = write_json(tmp_path / "runs.json", [{"task_id": 0, "trial": 0, "traj": CHAT}, {"task_id": 1, "trial": 0, "traj": messages}])
    first, second = load_transcripts(runs)
    assert not problems(first)
    assert problems(second) == [f"{runs}: run 1 message 1: content is a JSON int (5), not text or a list of parts; kept as its JSON text"]


def test_text_image_parts_and_tool_calls_without_content_are_no_problem(tmp_path):
    """OpenAI's content forms: a string, text and image_url parts, null beside tool_calls."""
    call = {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{\"path\": \"a.py\"}"}}
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    messages = [{"role": "user", "content": [{"type": "text", "text": "see"}, image]}, {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "print(1)"}]}]
    path = write_jsonl(tmp_path / "forms.jsonl", [{"id": "a", "messages": messages}, {"id": "b", "messages": CHAT}])
    first, _ = load_transcripts(path)
    assert [i.kind for i in first.items] == ["user", "tool_call", "tool_result"] and not problems(first)


def test_tau_runs_of_one_task_and_trial_get_ids_of_their_own(tmp_path):
    """Two tau-bench results files put together repeat a task's trials: each run keeps its own session (and probes)."""
    runs = write_json(tmp_path / "runs.json", [{"task_id": 7, "trial": 0, "traj": CHAT}, {"task_id": 8, "trial": 0, "traj": CHAT},
                                               {"task_id": 7, "trial": 0, "traj": CHAT}])
    first, other, again = load_transcripts(runs)
    assert [first.id, other.id, again.id] == ["runs:task7:trial0#row0", "runs:task8:trial0", "runs:task7:trial0#row2"]
    assert problems(first) == [f"{runs}: runs 0, 2 have the same session id 'runs:task7:trial0'; this one, run 0, is named 'runs:task7:trial0#row0'"]
    assert not problems(other)
