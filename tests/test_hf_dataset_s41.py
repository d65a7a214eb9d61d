"""The Hugging Face dataset importer's defects an audit found (forty-first pass), each checked on small
datasets written by hand, whose right reading is known without the code.

ShareGPT rows (`from`/`value`) read with only `role_key=from` imported every message as '' with no problem,
exit 0; without `role_key`, or with plain strings for messages, the error said only "nothing in the file is
hf-dataset content", and the same file as Parquet (format sniffed) imported as markers, exit 0. An
`id_column` / `model_column` that is no column was ignored; rows with the same id became sessions of one
id, whose mined probes carry the same ids (which `bench probes check` refuses). Content of a wrong type
was converted without a word."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from compaction_bench.importing import ImportFailure, load_transcripts
from tests.conftest import assert_mined_probes_stay_in_their_sessions, assert_user_error, bench_cli

SHAREGPT = [
    {"id": "a", "conversations": [{"from": "system", "value": "You are helpful."},
                                  {"from": "human", "value": "Fix the bug in parser.py please"},
                                  {"from": "gpt", "value": "I changed line 42 of parser.py to handle None."}]},
    {"id": "b", "conversations": [{"from": "human", "value": "Run the tests"}, {"from": "gpt", "value": "All 12 tests passed."}]},
]
#: Two sessions that share the id `s`, each with a constraint the miner finds (a "must never" sentence).
SAME_ID = [
    {"id": "s", "messages": [{"role": "user", "content": "Please set up the project. You must never use port 8080; always use port 5173."},
                             {"role": "assistant", "content": "I'll configure the dev server on port 5173 because 8080 is taken."}]},
    {"id": "s", "messages": [{"role": "user", "content": "Write the docs. You must always write the changelog in German and never in English."},
                             {"role": "assistant", "content": "I'll write the changelog in German as you asked."}]},
]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> Path:
    pd.DataFrame(rows).to_parquet(path)
    return path


def problems(transcript: Any) -> list[str]:
    return list(transcript.meta.get("problems", ()))


# --------------------------------------------------------------------------- 1. silent loss
def test_sharegpt_with_only_role_key_is_one_error_naming_row_and_fields(tmp_path):
    path = write_jsonl(tmp_path / "sharegpt.jsonl", SHAREGPT)
    with pytest.raises(ImportFailure) as caught:
        load_transcripts(path, format="hf-dataset", role_key="from")
    message = str(caught.value)
    assert "row 0 message 0" in message and "'content' field" in message and "(this one has: from, value)" in message
    assert "content_key=" in message and "'role'" not in message
    proc = bench_cli("inspect", str(path), "--format", "hf-dataset", "--import-option", "role_key=from")
    assert_user_error(proc, "row 0 message 0", "'content' field", "from, value", "--import-option content_key=")
    # with both options the rows read as they are written
    first, second = load_transcripts(path, format="hf-dataset", role_key="from", content_key="value", id_column="id")
    assert [(i.kind, i.text) for i in first.items] == [
        ("system", "You are helpful."), ("user", "Fix the bug in parser.py please"), ("assistant", "I changed line 42 of parser.py to handle None.")]
    assert (first.id, second.id) == ("sharegpt:a", "sharegpt:b") and not problems(first) + problems(second)


def test_a_message_without_the_content_field_among_messages_with_it_is_a_problem(tmp_path):
    rows = [{"conversations": [{"from": "human", "value": "hello"}, {"from": "gpt", "text": "the reply under another key"}]}]
    path = write_jsonl(tmp_path / "partial.jsonl", rows)
    (t,) = load_transcripts(path, format="hf-dataset", role_key="from", content_key="value")
    assert [(i.kind, i.text) for i in t.items] == [("user", "hello"), ("assistant", "")]
    assert problems(t) == [f"{path}: row 0 message 1: no 'value' field (fields: from, text); its text is empty"]


def test_an_assistant_message_with_tool_calls_needs_no_content(tmp_path):
    """OpenAI: an assistant message's content is "Required unless `tool_calls` or `function_call` is specified"."""
    call = {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{\"path\": \"a.py\"}"}}
    rows = [{"messages": [{"role": "user", "content": "read a.py"}, {"role": "assistant", "content": None, "tool_calls": [call]},
                          {"role": "tool", "tool_call_id": "c1", "content": "print(1)"}]}]
    (t,) = load_transcripts(write_jsonl(tmp_path / "calls.jsonl", rows), format="hf-dataset")
    assert [i.kind for i in t.items] == ["user", "tool_call", "tool_result"] and not problems(t)


@pytest.mark.parametrize("option", ["id_column", "model_column"])
def test_a_named_column_that_is_not_there_is_an_error_naming_the_columns(tmp_path, option):
    path = write_jsonl(tmp_path / "chat.jsonl", [{"uid": "x", "messages": [{"role": "user", "content": "hi"}]}])
    with pytest.raises(ImportFailure, match=f"{option} 'idx' is not a column of the dataset; columns: uid, messages"):
        load_transcripts(path, format="hf-dataset", **{option: "idx"})


def test_a_model_column_holding_no_string_is_a_problem(tmp_path):
    path = write_jsonl(tmp_path / "model.jsonl", [{"m": 5, "messages": [{"role": "user", "content": "hi"}]},
                                                   {"m": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}])
    first, second = load_transcripts(path, format="hf-dataset", model_column="m")
    assert first.model is None and problems(first) == [f"{path}: row 0: model column 'm' holds a JSON int (5), not a model id; the model is unknown"]
    assert second.model == "gpt-4o" and not problems(second)


# --------------------------------------------------------------------------- 2. duplicate ids
@pytest.mark.parametrize("writer", [write_jsonl, write_parquet])
def test_rows_with_one_id_become_sessions_of_distinct_ids_and_say_so(tmp_path, writer):
    path = writer(tmp_path / f"same{'.jsonl' if writer is write_jsonl else '.parquet'}", SAME_ID)
    first, second = load_transcripts(path, format="hf-dataset", id_column="id")
    assert (first.id, second.id) == ("same:s#row0", "same:s#row1")
    assert problems(first) == [f"{path}: row 0: rows 0, 1 have the same session id 'same:s' (id column 'id'); this one is named 'same:s#row0'"]
    assert problems(second) == [f"{path}: row 1: rows 0, 1 have the same session id 'same:s' (id column 'id'); this one is named 'same:s#row1'"]
    assert_mined_probes_stay_in_their_sessions([first, second])


def test_a_null_id_named_by_its_row_does_not_take_another_rows_id(tmp_path):
    chat = [{"role": "user", "content": "hi"}]
    path = write_jsonl(tmp_path / "ids.jsonl", [{"id": 1, "messages": chat}, {"id": None, "messages": chat}, {"id": 7, "messages": chat}])
    ids = [t.id for t in load_transcripts(path, format="hf-dataset", id_column="id")]
    assert ids == ["ids:1#row0", "ids:1#row1", "ids:7"] and len(set(ids)) == 3


# --------------------------------------------------------------------------- 3. errors that say why and where
def test_sharegpt_without_options_says_which_fields_to_map_forced_or_sniffed(tmp_path):
    jsonl = write_jsonl(tmp_path / "sharegpt.jsonl", SHAREGPT)
    parquet = write_parquet(tmp_path / "sharegpt.parquet", SHAREGPT)
    expected = "row 0 message 0: no message of the dataset has a 'role' or a 'content' field (this one has: from, value)"
    for path, fmt in ((jsonl, "hf-dataset"), (parquet, "auto")):
        with pytest.raises(ImportFailure, match=r"ShareGPT: role_key=from content_key=value") as caught:
            load_transcripts(path, format=fmt)
        assert f"{path}: {expected}" in str(caught.value)
    assert_user_error(bench_cli("inspect", str(parquet)), expected)  # exit 0 with markers only before


def test_a_message_list_of_plain_strings_is_an_error_naming_the_row(tmp_path):
    path = write_jsonl(tmp_path / "strings.jsonl", [{"messages": ["hello", "world"]}])
    proc = bench_cli("inspect", str(path), "--format", "hf-dataset")
    assert_user_error(proc, "row 0 message 0: the messages are values like a JSON string (\"hello\"), not objects with 'role' and 'content'")


def test_messages_of_no_chat_role_are_an_error_naming_the_roles_found(tmp_path):
    path = write_parquet(tmp_path / "roles.parquet", [{"messages": [{"role": "wizard", "content": "hello"}]}])
    with pytest.raises(ImportFailure, match=r"row 0 message 0: no message of the dataset has a chat role in its 'role' field \(found 'wizard'"):
        load_transcripts(path)


@pytest.mark.parametrize(("content", "problem", "text"), [
    (5, "content is a JSON int (5), not text or a list of parts; kept as its JSON text", "5"),
    ({"text": "hello"}, "content is an object with fields text, not text or a list of parts; kept as its JSON text", '{"text": "hello"}'),
    ([{"type": "text", "text": "kept"}, {"type": "refusal", "refusal": "no"}],
     "content part 1 is an object with fields type, refusal, no text or image part; left out of the message's text", "kept"),
])
def test_content_of_a_type_not_read_is_a_problem_naming_row_and_message(tmp_path, content, problem, text):
    rows = [{"messages": [{"role": "user", "content": "hello"}]}, {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": content}]}]
    path = tmp_path / "content.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    first, second = load_transcripts(path, format="hf-dataset")
    assert not problems(first)
    assert problems(second) == [f"{path}: row 1 message 1: {problem}"]
    assert second.items[-1].kind == "assistant" and second.items[-1].text == text
