"""What `opencode-v2` reads besides the history (issue 14): the tool schemas in its trigger estimate
(docs/specs/opencode.md §6.6: ``estimate(JSON.stringify({system, messages, tools}))``) and the
files of a user message named by their URI when they have no name (§6.3, upstream `serialize`:
``[Attached ${file.mime}: ${file.name ?? file.uri}]``), from a hand-built `opencode export`."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from compaction_bench.importing import load_transcripts
from compaction_bench.replay import replay
from compaction_bench.strategies.opencode import OpenCodeV2Options
from tests.test_opencode_helpers import Session

SYSTEM = "You are a coding agent."
QUESTION = "Where is the parser defined?"


def request_json_length(tools_chars: int) -> int:
    """UTF-16 length of ``JSON.stringify({system, messages, tools})`` for the first request of
    `session()`: the system prompt and one user message in the AI-SDK shape, and a tool array of
    `tools_chars` characters (worked out here, not with the strategy's estimator)."""
    frame = json.dumps(
        {"system": [SYSTEM], "messages": [{"role": "user", "content": [{"type": "text", "text": QUESTION}]}]},
        separators=(",", ":"),
    )
    return len(frame) - 1 + len(',"tools":') + tools_chars + 1  # ASCII only: one code unit per character


def session() -> Session:
    return Session(SYSTEM).user("u0", QUESTION).say("a0", "In parser.py.")


def first_request(context_limit: int, **options):
    # output 1,000 and buffer 1,000: the trigger fires when the estimate exceeds context_limit - 1,000
    opts = {"context_limit": context_limit, "output_limit": 1_000, "buffer": 1_000, **options}
    return replay(session().transcript(), "opencode-v2", profile="64k", options=opts).turn_requests[0]


def test_the_trigger_estimate_includes_the_tool_schemas_by_default():
    tools = OpenCodeV2Options().tools_json_chars
    assert tools > 1_000  # OpenCode's built-in tools, not an empty array
    estimate = (request_json_length(tools) + 2) // 4  # floor(x / 4 + 0.5)
    without_tools = (request_json_length(2) + 2) // 4  # "tools":[]
    assert estimate > without_tools + 250
    # The request reports estimate and threshold net of the tools' own estimate (the replay sends no
    # tool definitions), so the accuracy metrics compare like with like; the decision is the same.
    tools_tokens = (tools - 2 + 2) // 4  # the definitions between the brackets
    # one token over the threshold: compactIfNeeded runs (and finds nothing to summarize in one entry); the
    # threshold reported is the smallest estimate that runs it (`> limit`: the limit + 1), here the estimate
    fired = first_request(estimate - 1 + 1_000)
    assert fired.estimate_tokens == estimate - tools_tokens and fired.threshold == estimate - tools_tokens
    assert fired.meta["compaction_refused"] == "nothing to compact"
    # exactly at the threshold: no compaction is attempted
    quiet = first_request(estimate + 1_000)
    assert quiet.estimate_tokens == estimate - tools_tokens and quiet.threshold == estimate + 1 - tools_tokens
    assert "compaction_refused" not in quiet.meta


def test_the_tool_schema_size_is_an_option():
    estimate = (request_json_length(5_000) + 2) // 4
    request = first_request(estimate + 1_000, tools_json_chars=5_000)
    assert request.estimate_tokens + (5_000 - 2 + 2) // 4 == estimate and "compaction_refused" not in request.meta
    assert "compaction_refused" in first_request(estimate - 1 + 1_000, tools_json_chars=5_000).meta


# ----------------------------------------------------------------- files named by URI
SID = "ses_files"


def part(mid: str, n: int, **fields) -> dict:
    return {"id": f"{mid}.p{n}", "sessionID": SID, "messageID": mid, **fields}


def user(mid: str, created: int, parts: list[dict]) -> dict:
    return {"info": {"id": mid, "sessionID": SID, "role": "user", "time": {"created": created}},
            "parts": [part(mid, n, **p) for n, p in enumerate(parts)]}


def assistant(mid: str, created: int, text: str, total: int) -> dict:
    tokens = {"total": total, "input": total - 10, "output": 10, "reasoning": 0, "cache": {"read": 0, "write": 0}}
    return {"info": {"id": mid, "sessionID": SID, "role": "assistant", "time": {"created": created}, "tokens": tokens},
            "parts": [part(mid, 0, type="step-start"), part(mid, 1, type="text", text=text),
                      part(mid, 2, type="step-finish", reason="stop", tokens=tokens)]}


def export_with_files(tmp_path: Path) -> Path:
    doc = {"info": {"id": SID, "time": {"created": 1}}, "messages": [
        user("msg_01", 1, [
            {"type": "text", "text": "Read these"},
            {"type": "file", "mime": "application/pdf", "url": "file:///repo/docs/spec.pdf"},  # no filename
            {"type": "file", "mime": "image/png", "filename": "shot.png", "url": "data:image/png;base64,AAAA"},
        ]),
        assistant("msg_02", 2, "B" * 40_000, 10_000),
        user("msg_03", 3, [{"type": "text", "text": "C" * 40_000}]),
        assistant("msg_04", 4, "Done.", 20_000),
    ]}
    path = tmp_path / "export.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def test_importer_keeps_the_file_url(tmp_path):
    (transcript,) = load_transcripts(export_with_files(tmp_path))
    pdf, png = transcript.by_id["msg_01"].attachments
    assert (pdf.name, pdf.uri) == ("", "file:///repo/docs/spec.pdf")
    assert (png.name, png.uri, png.size) == ("shot.png", "data:image/png;base64,AAAA", 3)


def test_v2_serializes_an_unnamed_file_by_its_uri(tmp_path):
    (transcript,) = load_transcripts(export_with_files(tmp_path))
    # context 30,000: the history (about 20,000 estimated tokens) is over 30,000 - max(15,000, 20,000);
    # the last user message (10,002) is kept as recent text, the first one is summarized
    result = replay(transcript, "opencode-v2", profile="64k", options={"context_limit": 30_000, "keep_tokens": 10_100})
    summary = next(r for r in result.requests if r.kind == "summary")
    prompt = summary.messages[0].content
    user_entry = "[User]: Read these\n[Attached application/pdf: file:///repo/docs/spec.pdf]\n[Attached image/png: shot.png]"
    assert user_entry in prompt


def test_v2_session_message_files_are_read_by_name_and_uri(tmp_path):
    path = tmp_path / "opencode.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE session (id TEXT, time_created INTEGER)")
    con.execute("CREATE TABLE session_message (id TEXT, session_id TEXT, type TEXT, seq INTEGER, data TEXT)")
    con.execute("INSERT INTO session VALUES ('ses_v2', 1)")
    files = [{"mime": "application/pdf", "uri": "file:///repo/a.pdf"}, {"mime": "image/png", "name": "b.png", "uri": "file:///repo/b.png"}]
    con.execute("INSERT INTO session_message VALUES ('msg_a', 'ses_v2', 'user', 0, ?)", (json.dumps({"text": "look", "files": files}),))
    con.commit()
    con.close()
    (transcript,) = load_transcripts(path, format="opencode")
    a, b = transcript.by_id["msg_a"].attachments
    assert (a.name, a.uri) == ("", "file:///repo/a.pdf")
    assert (b.name, b.uri) == ("b.png", "file:///repo/b.png")
