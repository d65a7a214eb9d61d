"""The OpenCode importer on the storage layouts built by hand from docs/specs/opencode.md §6.2,
§7.1 and §7.2: the V2 `session_message` table, the legacy one-file-per-object JSON storage, and
two reading rules of §2.6 (`ignored` text parts are not model input; parts keep their stored order)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from compaction_bench.importing import load_transcripts
from compaction_bench.transcript import Usage

SID = "ses_v2"
TOKENS = {"total": 5000, "input": 800, "output": 150, "reasoning": 50, "cache": {"read": 4000, "write": 0}}


def v2_database(tmp_path: Path) -> Path:
    path = tmp_path / "opencode.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE session (id TEXT, title TEXT, directory TEXT, time_created INTEGER)")
    con.execute("CREATE TABLE message (id TEXT, session_id TEXT, time_created INTEGER, data TEXT)")
    con.execute("CREATE TABLE part (id TEXT, message_id TEXT, session_id TEXT, data TEXT)")
    con.execute("CREATE TABLE session_message (id TEXT, session_id TEXT, type TEXT, seq INTEGER, time_created INTEGER, data TEXT)")
    con.execute("INSERT INTO session VALUES (?, 'V2 session', '/repo', 1)", (SID,))
    rows = [
        ("msg_a", "model-switched", {"model": {"id": "gpt-5", "providerID": "openai"}, "time": {"created": 1}}),
        ("msg_b", "user", {"text": "Fix the build", "files": [{"mime": "image/png", "filename": "e.png"}], "time": {"created": 2}}),
        ("msg_c", "system", {"text": "The working directory changed.", "time": {"created": 3}}),
        ("msg_d", "assistant", {
            "agent": "build", "model": {"id": "gpt-5", "providerID": "openai"}, "tokens": TOKENS, "time": {"created": 4},
            "content": [
                {"type": "reasoning", "text": "check the log"},
                {"type": "text", "text": "Running it."},
                {"type": "tool", "id": "call_1", "name": "bash", "state": {"status": "completed", "input": {"command": "make"},
                 "content": [{"type": "text", "text": "error: missing ;"}]}, "time": {"created": 4}},
                {"type": "tool", "id": "call_2", "name": "read", "state": {"status": "error", "input": {"path": "x"},
                 "error": {"message": "no such file"}}, "time": {"created": 4}},
            ]}),
        ("msg_e", "compaction", {"status": "completed", "reason": "auto", "summary": "## Objective\n- fix build",
                                 "recent": "[User]: Fix the build", "time": {"created": 5}}),
        ("msg_f", "shell", {"command": "ls", "output": "a b", "status": "completed", "time": {"created": 6}}),
    ]
    for seq, (rid, kind, data) in enumerate(rows):
        con.execute("INSERT INTO session_message VALUES (?, ?, ?, ?, ?, ?)", (rid, SID, kind, seq, seq, json.dumps(data)))
    con.commit()
    con.close()
    return path


def test_v2_session_message_rows_in_seq_order(tmp_path):
    (t,) = load_transcripts(v2_database(tmp_path), format="opencode")
    got = [(i.kind, i.id, i.synthetic) for i in t.items]
    assert got == [
        ("user", "msg_b", False),
        ("user", "msg_c", True),
        ("reasoning", "msg_d.0", False),
        ("assistant", "msg_d.1", False),
        ("tool_call", "msg_d.2", False),
        ("tool_call", "msg_d.3", False),
        ("tool_result", "msg_d.2.result", False),
        ("tool_result", "msg_d.3.result", False),
        ("marker", "msg_e", False),
        ("user", "msg_f", True),
    ]
    by = t.by_id
    assert by["msg_b"].attachments[0].mime == "image/png"
    assert json.loads(by["msg_d.2"].arguments) == {"command": "make"} and by["msg_d.2"].call_id == "call_1"
    assert by["msg_d.2.result"].text == "error: missing ;" and not by["msg_d.2.result"].is_error
    assert by["msg_d.3.result"].text == "no such file" and by["msg_d.3.result"].is_error
    assert by["msg_d.3"].usage == Usage(input=4800, cached_input=4000, cache_write=0, output=200, reasoning=50, total=5000)
    assert by["msg_e"].meta["event"] == "compaction-summary" and by["msg_e"].meta["recent"] == "[User]: Fix the build"
    assert by["msg_f"].text == "ls\na b"
    assert t.meta["ignored_parts"] == {"model-switched": 1}


def write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")


def test_legacy_storage_layout(tmp_path):
    root = tmp_path / "storage"
    session_file = root / "session" / "proj1" / "ses_old.json"
    write(session_file, {"id": "ses_old", "projectID": "proj1", "title": "Old", "time": {"created": 1}})
    # messages ordered by (time.created, id), not by file name
    write(root / "message" / "ses_old" / "msg_z.json", {"id": "msg_z", "sessionID": "ses_old", "role": "user", "time": {"created": 1}})
    write(root / "message" / "ses_old" / "msg_a.json", {"id": "msg_a", "sessionID": "ses_old", "role": "assistant", "time": {"created": 2},
                                                         "tokens": {"total": 100, "input": 90, "output": 10}})
    write(root / "part" / "msg_z" / "prt_1.json", {"id": "prt_1", "messageID": "msg_z", "type": "text", "text": "hello"})
    write(root / "part" / "msg_a" / "prt_3.json", {"id": "prt_3", "messageID": "msg_a", "type": "text", "text": "done"})
    write(root / "part" / "msg_a" / "prt_2.json", {"id": "prt_2", "messageID": "msg_a", "type": "reasoning", "text": "think"})
    (t,) = load_transcripts(session_file)
    assert [(i.kind, i.text) for i in t.items] == [("user", "hello"), ("reasoning", "think"), ("assistant", "done")]
    assert t.source["layout"] == "legacy-storage"


def test_ignored_parts_are_not_input_and_parts_keep_their_stored_order(tmp_path):
    doc = {"info": {"id": "ses_1"}, "messages": [{
        "info": {"id": "msg_1", "sessionID": "ses_1", "role": "user", "time": {"created": 1}},
        "parts": [
            {"id": "p1", "sessionID": "ses_1", "messageID": "msg_1", "type": "text", "text": "Read this file"},
            {"id": "p2", "sessionID": "ses_1", "messageID": "msg_1", "type": "text", "synthetic": True, "text": "<file>x</file>"},
            {"id": "p3", "sessionID": "ses_1", "messageID": "msg_1", "type": "text", "ignored": True, "text": "UI-only note"},
        ]}]}
    path = tmp_path / "export.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    (t,) = load_transcripts(path, format="opencode")
    assert [(i.kind, i.text, i.synthetic) for i in t.items] == [("user", "Read this file", False), ("user", "<file>x</file>", True)]
    assert t.meta["ignored_parts"] == {"text:ignored": 1}
