"""A hand-written canonical transcript whose fields have the wrong type is refused when it is read, with one
error naming the file, the line and the field (exit 2 from the command line), not imported and left to fail
later with a traceback in a strategy, the miner or a metric."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pytest

from compaction_bench.importing import load_transcripts
from compaction_bench.transcript import Item, TranscriptError
from tests.conftest import assert_user_error, bench_cli

HEADER = {"format": "compaction-bench/transcript", "version": 1, "id": "hand", "model": None, "source": {}, "meta": {}}
USER = {"id": "u1", "kind": "user", "text": "hello"}


def write(tmp_path: Path, *items: dict, header: dict | None = None, name: str = "hand.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(json.dumps(line) for line in (header or HEADER, *items)) + "\n", encoding="utf-8")
    return path


#: Per item field (every field of `Item`): a line holding a value of the wrong type there, and the refusal it must get.
WRONG = {
    "id": ({"id": 5, "kind": "user", "text": "a"}, "field 'id' must be a string, got int"),
    "kind": ({"id": "x", "kind": 3, "text": "a"}, "field 'kind' must be a string, got int"),
    "text": ({"id": "x", "kind": "user", "text": 123}, "field 'text' must be a string, got int"),
    "call_id": (
        {"id": "x", "kind": "tool_call", "call_id": 5, "tool_name": "t", "arguments": "{}", "response": 0},
        "field 'call_id' must be a string or null, got int",
    ),
    "tool_name": (
        {"id": "x", "kind": "tool_call", "call_id": "c", "tool_name": ["bash"], "arguments": "{}", "response": 0},
        "field 'tool_name' must be a string or null, got list",
    ),
    "arguments": (
        {"id": "x", "kind": "tool_call", "call_id": "c", "tool_name": "t", "arguments": {"a": 1}, "response": 0},
        "field 'arguments' must be a string (the arguments' JSON text) or null, got object",
    ),
    "is_error": (
        {"id": "x", "kind": "tool_result", "call_id": "c", "text": "a", "is_error": "false"},
        "field 'is_error' must be true or false, got string",
    ),
    "attachments": ({"id": "x", "kind": "user", "text": "a", "attachments": "abc"}, "field 'attachments' must be a list, got string"),
    "synthetic": ({"id": "x", "kind": "user", "text": "a", "synthetic": 1}, "field 'synthetic' must be true or false, got int"),
    "usage": ({"id": "x", "kind": "assistant", "text": "a", "response": 0, "usage": [1, 2]}, "field 'usage' must be an object or null, got list"),
    "response": ({"id": "x", "kind": "assistant", "text": "a", "response": "0"}, "field 'response' must be a whole number or null, got string"),
    "turn": ({"id": "x", "kind": "user", "text": "a", "turn": 1.5}, "field 'turn' must be a whole number or null, got float"),
    "timestamp": ({"id": "x", "kind": "user", "text": "a", "timestamp": 1700000000}, "field 'timestamp' must be a string or null, got int"),
    "meta": ({"id": "x", "kind": "user", "text": "a", "meta": [1, 2]}, "field 'meta' must be an object, got list"),
}


@pytest.mark.parametrize("name", [f.name for f in fields(Item)])
def test_a_field_of_the_wrong_type_is_refused_naming_file_line_and_field(tmp_path, name):
    line, message = WRONG[name]  # a field added to `Item` needs its case here
    path = write(tmp_path, USER, line)
    with pytest.raises(TranscriptError) as refused:
        load_transcripts(path)
    assert str(refused.value) == f"{path}:3: {message}"


def test_attachments_are_checked_entry_by_entry(tmp_path):
    cases = [
        ([{"mime": "image/png", "bogus": 1}], "attachment 1: unknown field(s): bogus"),
        (["x.png"], "attachment 1 must be an object, got string"),
        ([{"mime": "image/png"}, {"name": "x.png"}], "attachment 2 needs 'mime'"),
        ([{"mime": "image/png", "size": "10"}], "attachment 1 field 'size' must be a whole number, got string"),
    ]
    for attachments, message in cases:
        path = write(tmp_path, {"id": "x", "kind": "user", "text": "a", "attachments": attachments})
        with pytest.raises(TranscriptError) as refused:
            load_transcripts(path)
        assert str(refused.value) == f"{path}:2: {message}"


def test_header_fields_of_the_wrong_type_are_refused_on_line_1(tmp_path):
    cases = [
        ({"meta": [1]}, "header field 'meta' must be an object or null, got list"),
        ({"source": "x"}, "header field 'source' must be an object or null, got string"),
        ({"model": 5}, "header field 'model' must be a string or null, got int"),
        ({"id": 7}, "header field 'id' must be a string or null, got int"),
    ]
    for change, message in cases:
        path = write(tmp_path, USER, header={**HEADER, **change})
        with pytest.raises(TranscriptError) as refused:
            load_transcripts(path)
        assert str(refused.value) == f"{path}:1: {message}"


def test_usage_counts_are_whole_numbers_of_at_least_zero_with_known_names(tmp_path):
    def assistant(usage: dict) -> dict:
        return {"id": "a1", "kind": "assistant", "text": "x", "response": 0, "usage": usage}

    path = write(tmp_path, USER, assistant({"input": 10.0, "output": 2}))
    (transcript,) = load_transcripts(path)
    assert transcript.items[1].usage.input == 10  # a whole number written as 10.0 is that count
    for usage, message in [
        ({"input": -10}, "usage field 'input' is -10, expected a token count (a whole number of at least 0)"),
        ({"input": 10.7}, "usage field 'input' is 10.7, expected a token count (a whole number of at least 0)"),
        ({"input": 10, "inptu": 3}, "unknown usage field(s): inptu"),
    ]:
        path = write(tmp_path, USER, assistant(usage))
        with pytest.raises(TranscriptError) as refused:
            load_transcripts(path)
        assert str(refused.value) == f"{path}:3: {message}"


def test_a_repeated_item_id_names_both_lines(tmp_path):
    path = write(tmp_path, USER, {"id": "a1", "kind": "assistant", "text": "x", "response": 0}, USER)
    with pytest.raises(TranscriptError) as refused:
        load_transcripts(path)
    assert str(refused.value) == f"{path}:4: duplicate item id 'u1' (first on line 2)"


def test_the_command_line_refuses_such_a_file_before_mining_or_running(tmp_path):
    text_number = write(tmp_path, {"id": "x", "kind": "user", "text": 123}, name="text.jsonl")
    assert_user_error(bench_cli("probes", "mine", str(text_number)), f"{text_number}:2: field 'text' must be a string, got int")
    call = {"id": "x", "kind": "tool_call", "call_id": "c", "tool_name": "t", "arguments": {"a": 1}, "response": 0}
    arguments = write(tmp_path, call, name="args.jsonl")
    proc = bench_cli("run", str(arguments), "-s", "none", "-o", str(tmp_path / "runs"), "--run-id", "y")
    assert_user_error(proc, f"{arguments}:2: field 'arguments' must be a string")
