"""The OpenCode importer (docs/specs/opencode.md §7) on files built by hand in the documented shapes:
an `opencode export` JSON and the SQLite layout (session / message / part)."""

from __future__ import annotations

import copy
import json
import sqlite3

import pytest

from compaction_bench.importing import ImportFailure, detect, load_transcripts
from compaction_bench.replay import replay
from compaction_bench.scenarios.opencode_export import OpenCodeImporter
from compaction_bench.transcript import Attachment, Usage

SESSION = "ses_8f01"
STEP1_TOKENS = {"total": 41234, "input": 812, "output": 402, "reasoning": 120, "cache": {"read": 39900, "write": 0}}
STEP2_TOKENS = {"total": 42000, "input": 300, "output": 66, "reasoning": 0, "cache": {"read": 41234, "write": 400}}
CONTINUE = "Continue if you have next steps, or stop and ask for clarification if you are unsure how to proceed."


def message(mid: str, role: str, created: int, parts: list[dict], **info) -> dict:
    full_parts = [{"id": f"{mid}.p{n:02d}", "sessionID": SESSION, "messageID": mid, **p} for n, p in enumerate(parts)]
    return {"info": {"id": mid, "sessionID": SESSION, "role": role, "time": {"created": created}, **info}, "parts": full_parts}


def export_doc() -> dict:
    return {
        "info": {"id": SESSION, "slug": "brave-otter", "projectID": "4b0e", "directory": "/repo", "title": "Fix parser",
                 "version": "1.16.2", "time": {"created": 1752550000000, "updated": 1752550900000}},
        "messages": [
            message("msg_01", "user", 1752550000000, [
                {"type": "text", "text": "Fix the failing parser test"},
                {"type": "file", "mime": "image/png", "filename": "err.png", "url": "data:image/png;base64," + "A" * 400},
            ], agent="build", model={"providerID": "anthropic", "modelID": "claude-sonnet-4-5"}),
            message("msg_02", "assistant", 1752550001000, [
                {"type": "step-start", "snapshot": "a1b2"},
                {"type": "reasoning", "text": "Look at the test first.", "metadata": {"anthropic": {"signature": "s"}}},
                {"type": "text", "text": "Reading the test."},
                {"type": "tool", "callID": "toolu_01", "tool": "read",
                 "state": {"status": "completed", "input": {"filePath": "/repo/test/parser.test.ts"}, "output": "<file>test</file>",
                           "title": "test/parser.test.ts", "metadata": {}, "time": {"start": 1, "end": 2, "compacted": 1752551000000}}},
                {"type": "tool", "callID": "toolu_02", "tool": "bash",
                 "state": {"status": "error", "input": {"command": "bun test"}, "error": "exit 1", "time": {"start": 3, "end": 4}}},
                {"type": "step-finish", "reason": "tool-calls", "cost": 0.02, "tokens": STEP1_TOKENS},
                {"type": "patch", "hash": "d4e5", "files": ["/repo/src/parser.ts"]},
                {"type": "step-start"},
                {"type": "text", "text": "The parser is fixed."},
                {"type": "step-finish", "reason": "stop", "tokens": STEP2_TOKENS},
            ], parentID="msg_01", modelID="claude-sonnet-4-5", providerID="anthropic", tokens=STEP2_TOKENS, finish="stop"),
            message("msg_03", "user", 1752550100000, [
                {"type": "compaction", "auto": True, "overflow": False, "tail_start_id": "msg_01"},
            ]),
            message("msg_04", "assistant", 1752550101000, [
                {"type": "text", "text": "## Objective\n- Fix parser test"},
            ], parentID="msg_03", mode="compaction", agent="compaction", summary=True, finish="stop"),
            message("msg_05", "user", 1752550102000, [
                {"type": "text", "synthetic": True, "metadata": {"compaction_continue": True}, "text": CONTINUE},
            ]),
            message("msg_06", "assistant", 1752550103000, [{"type": "step-start"}],
                    error={"name": "MessageAbortedError", "data": {"message": "aborted by user"}}),
        ],
    }


def write_export(tmp_path, doc=None):
    path = tmp_path / "session.json"
    path.write_text(json.dumps(doc or export_doc(), indent=2))
    return path


def write_db(tmp_path, docs):
    path = tmp_path / "opencode.db"
    con = sqlite3.connect(path)
    con.executescript(
        """
        CREATE TABLE session (id TEXT PRIMARY KEY, project_id TEXT, parent_id TEXT, slug TEXT, directory TEXT,
            title TEXT, version TEXT, time_created INTEGER, time_updated INTEGER);
        CREATE TABLE message (id TEXT PRIMARY KEY, session_id TEXT, time_created INTEGER, time_updated INTEGER, data TEXT);
        CREATE TABLE part (id TEXT PRIMARY KEY, message_id TEXT, session_id TEXT, time_created INTEGER,
            time_updated INTEGER, data TEXT);
        """
    )
    for doc in docs:
        info = doc["info"]
        con.execute(
            "INSERT INTO session VALUES (?, ?, NULL, ?, ?, ?, ?, ?, ?)",
            (info["id"], info["projectID"], info["slug"], info["directory"], info["title"], info["version"],
             info["time"]["created"], info["time"]["updated"]),
        )
        # rows in a scrambled order: the importer must sort by (time_created, id) and parts by id
        for msg in reversed(doc["messages"]):
            data = {k: v for k, v in msg["info"].items() if k not in ("id", "sessionID")}
            created = msg["info"]["time"]["created"]
            con.execute("INSERT INTO message VALUES (?, ?, ?, ?, ?)", (msg["info"]["id"], info["id"], created, created, json.dumps(data)))
            for part in reversed(msg["parts"]):
                pdata = {k: v for k, v in part.items() if k not in ("id", "sessionID", "messageID")}
                con.execute("INSERT INTO part VALUES (?, ?, ?, ?, ?, ?)", (part["id"], msg["info"]["id"], info["id"], created, created, json.dumps(pdata)))
    con.commit()
    con.close()
    return path


def summary_of(transcript):
    return [(i.id, i.kind, i.response, i.call_id) for i in transcript.items]


EXPECTED = [
    ("msg_01", "user", None, None),
    ("msg_02.p01", "reasoning", 0, None),
    ("msg_02.p02", "assistant", 0, None),
    ("msg_02.p03", "tool_call", 0, "toolu_01"),
    ("msg_02.p04", "tool_call", 0, "toolu_02"),
    ("msg_02.p03.result", "tool_result", None, "toolu_01"),
    ("msg_02.p04.result", "tool_result", None, "toolu_02"),
    ("msg_02.p08", "assistant", 1, None),
    ("msg_03.p00", "marker", None, None),
    ("msg_04", "marker", None, None),
    ("msg_05.p00", "user", None, None),
    ("marker-11", "marker", None, None),
]


def check_items(transcript):
    assert summary_of(transcript) == EXPECTED
    items = {i.id: i for i in transcript.items}
    user = items["msg_01"]
    assert (user.text, user.synthetic, user.turn) == ("Fix the failing parser test", False, 0)
    assert user.attachments == (Attachment("image/png", "err.png", 300, uri="data:image/png;base64," + "A" * 400),)
    read_call, read_result = items["msg_02.p03"], items["msg_02.p03.result"]
    assert (read_call.tool_name, json.loads(read_call.arguments)) == ("read", {"filePath": "/repo/test/parser.test.ts"})
    assert (read_result.text, read_result.is_error, dict(read_result.meta)) == ("<file>test</file>", False, {"compacted": 1752551000000})
    bash_result = items["msg_02.p04.result"]
    assert (bash_result.text, bash_result.is_error) == ("exit 1", True)
    # step-finish tokens: input back to cache-inclusive, output back to reasoning-inclusive
    assert items["msg_02.p04"].usage == Usage(input=812 + 39900, cached_input=39900, output=402 + 120, reasoning=120, total=41234)
    assert items["msg_02.p08"].usage == Usage(input=300 + 41234 + 400, cached_input=41234, cache_write=400, output=66, total=42000)
    assert items["msg_02.p02"].usage is None
    assert dict(items["msg_03.p00"].meta) == {"event": "compaction", "auto": True, "overflow": False, "tail_start_id": "msg_01"}
    assert items["msg_04"].text == "## Objective\n- Fix parser test" and items["msg_04"].meta["event"] == "compaction-summary"
    assert (items["msg_05.p00"].text, items["msg_05.p00"].synthetic) == (CONTINUE, True)
    assert dict(items["marker-11"].meta) == {"event": "error", "name": "MessageAbortedError"}
    assert transcript.model == "claude-sonnet-4-5"
    assert transcript.meta["title"] == "Fix parser"
    assert transcript.meta["ignored_parts"] == {"patch": 1, "step-finish": 2, "step-start": 3}


def test_export_json(tmp_path):
    path = write_export(tmp_path)
    assert detect(path) is OpenCodeImporter
    (transcript,) = load_transcripts(path)
    assert transcript.id == SESSION and transcript.source["layout"] == "export"
    check_items(transcript)


def test_canonical_file_keeps_attachment_uris(tmp_path):
    (transcript,) = load_transcripts(write_export(tmp_path))
    assert transcript.loads(transcript.dumps()).items == transcript.items


def test_sqlite_layout_gives_the_same_items_per_session(tmp_path):
    second = copy.deepcopy(export_doc())
    second["info"]["id"] = "ses_9a02"
    second["info"]["time"]["created"] += 10
    for msg in second["messages"]:
        msg["info"]["sessionID"] = "ses_9a02"
        msg["info"]["id"] = msg["info"]["id"].replace("msg_", "msg_b")
        for part in msg["parts"]:
            part["id"] = part["id"].replace("msg_", "msg_b")
    path = write_db(tmp_path, [export_doc(), second])
    assert detect(path) is OpenCodeImporter
    first, other = load_transcripts(path)
    assert (first.id, other.id) == (SESSION, "ses_9a02")
    assert first.source["layout"] == "sqlite"
    check_items(first)
    assert [i.kind for i in other.items] == [i.kind for i in first.items]


def test_bad_messages_are_reported_not_dropped_silently(tmp_path):
    doc = export_doc()
    doc["messages"].insert(1, {"info": {"id": "msg_x"}, "parts": []})
    doc["messages"][2]["parts"].append({"no": "type"})
    (transcript,) = load_transcripts(write_export(tmp_path, doc))
    problems = transcript.meta["problems"]
    assert any("messages[1]: message without a user/assistant role" in p for p in problems)
    assert any("messages[2]: a part without a type" in p for p in problems)


def test_unusable_files_fail_with_the_place(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text('{"info": {}, "messages": [\n  {"info": {"sessionID": "x"}, "parts": []},\n  oops\n]}')
    with pytest.raises(ImportFailure, match=r"broken.json:3"):
        load_transcripts(broken, format="opencode")
    other = tmp_path / "other.json"
    other.write_text('{"info": {}}')
    with pytest.raises(ImportFailure, match="not an `opencode export` file"):
        load_transcripts(other, format="opencode")


def test_imported_session_replays_through_opencode(tmp_path):
    (transcript,) = load_transcripts(write_export(tmp_path))
    result = replay(transcript, "opencode-v1", profile="64k", usage="recorded-always")
    # both recorded steps (41,234 and 42,000 tokens) cross the 32,000 usable window: the first
    # compacts before the second step's request, the second at the end of the turn
    assert [(c.trigger, c.step) for c in result.compactions] == [("step", 1), ("step", 1)]
