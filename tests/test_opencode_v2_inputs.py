"""What `opencode-v2` reads besides the history: the tool definitions and the system prompt in its trigger
estimate before any response (`anomalyco/opencode:packages/core/src/session/compaction.ts@031a4a9c` L170-184:
``Token.estimate`` of each system part and of each tool's name, description and schema), and the files of a
user message in the recent text, named by their name, else their URI, else "inline attachment" (L233-237),
from a hand-built `opencode export`; tool results in that text cut after 2,000 characters, a surrogate pair
counting as one (L208-220)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from compaction_bench.importing import load_transcripts
from compaction_bench.replay import replay
from compaction_bench.strategies.opencode import OpenCodeV2Options
from compaction_bench.strategies.opencode_components import Record, serialize_record
from compaction_bench.transcript import Item
from tests.test_opencode_helpers import Session

SYSTEM = "You are a coding agent."  # 23 characters: round(5.75) = 6
QUESTION = "Where is the parser defined?"  # 28 characters: 7


def session() -> Session:
    return Session(SYSTEM).user("u0", QUESTION).say("a0", "In parser.py.")


def first_request(context_limit: int, **options):
    # output 1,000 and buffer 1,000: the ceiling is context_limit - 1,000
    opts = {"context_limit": context_limit, "output_limit": 1_000, "buffer": 1_000, **options}
    return replay(session().transcript(), "opencode-v2", profile="64k", options=opts)


def test_before_any_response_the_estimate_is_the_system_prompt_the_message_and_the_tools():
    assert OpenCodeV2Options().tools_json_chars == 2  # by default no tools (`[]`): the replay sends none
    tools = 32_375  # the documented size of OpenCode's eight default tools, the value that replays them
    tools_tokens = (tools - 2 + 2) // 4  # round((32,375 - 2) / 4) = 8,093: the definitions between the brackets
    assert tools_tokens == 8_093
    # the first request reports 6 + 7 (net of the tools, which the replay does not send); the count it decides
    # on is 13 + 8,093: a ceiling of 8,106 compacts it (`>=`, L569), one of 8,107 does not
    fired = first_request(8_106 + 1_000, tools_json_chars=tools)
    first = fired.compactions[0]  # (the final context, over so small a ceiling again, compacts too)
    assert (first.step, first.estimate_tokens, first.threshold) == (0, 13, 13)
    quiet = first_request(8_107 + 1_000, tools_json_chars=tools)
    (request,) = [r for r in quiet.requests if r.kind == "turn"]
    assert [c.step for c in quiet.compactions if c.step == 0] == []
    assert (request.estimate_tokens, request.threshold) == (13, 8_107 - tools_tokens)


def test_the_tool_definitions_size_is_an_option():
    # 5,002 characters: round(5,000 / 4) = 1,250 tokens
    assert first_request(13 + 1_250 + 1_000, tools_json_chars=5_002).compactions[0].step == 0
    assert [c for c in first_request(13 + 1_251 + 1_000, tools_json_chars=5_002).compactions if c.step == 0] == []


def test_a_tool_result_keeps_2000_characters_with_surrogate_pairs_whole():
    step = Record(0, "step", items=[
        Item("c1", "tool_call", call_id="k1", tool_name="read", arguments="{}", response=0),
        Item("c2", "tool_call", call_id="k2", tool_name="read", arguments="{}", response=0),
    ])
    step.results = {
        "k1": Item("o1", "tool_result", "😀" * 1_500, call_id="k1"),  # 3,000 UTF-16 units, 1,500 characters: whole
        "k2": Item("o2", "tool_result", "😀" * 2_001, call_id="k2"),  # 2,001 characters: the first 2,000
    }
    assert serialize_record(step, 2_000) == (
        "[Assistant tool call]: read({})\n[Tool result]: " + "😀" * 1_500 + "\n"
        "[Assistant tool call]: read({})\n[Tool result]: " + "😀" * 2_000 + "\n[truncated]"
    )


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
        user("msg_01", 1, [{"type": "text", "text": "A" * 40_000}]),
        assistant("msg_02", 2, "B" * 40_000, 10_000),
        user("msg_03", 3, [
            {"type": "text", "text": "Read these"},
            {"type": "file", "mime": "application/pdf", "url": "file:///repo/docs/spec.pdf"},  # no filename
            {"type": "file", "mime": "image/png", "filename": "shot.png", "url": "data:image/png;base64,AAAA"},
            {"type": "file", "mime": "image/jpeg", "url": "data:image/jpeg;base64,BBBB"},  # neither name nor location
        ]),
        assistant("msg_04", 4, "Done.", 20_000),
    ]}
    path = tmp_path / "export.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def test_importer_keeps_the_file_url(tmp_path):
    (transcript,) = load_transcripts(export_with_files(tmp_path))
    pdf, png, jpeg = transcript.by_id["msg_03"].attachments
    assert (pdf.name, pdf.uri) == ("", "file:///repo/docs/spec.pdf")
    assert (png.name, png.uri, png.size) == ("shot.png", "data:image/png;base64,AAAA", 3)
    assert (jpeg.name, jpeg.uri) == ("", "data:image/jpeg;base64,BBBB")


def test_v2_names_a_file_by_name_uri_or_inline_attachment(tmp_path):
    (transcript,) = load_transcripts(export_with_files(tmp_path))
    # Step 1: msg_02's usage 10,000 (9,990 input + 10 output), then "Read these" (3), the PDF (2,000) and two
    # images (1,500 each): 15,003 reaches a ceiling of 16,003 - 1,000. The newest user message starts the tail
    # (all fits back to msg_01, the first: the latest exchange is kept), so its files are in the recent text.
    options = {"context_limit": 16_003, "output_limit": 1_000, "buffer": 1_000, "tools_json_chars": 2}
    result = replay(transcript, "opencode-v2", profile="64k", usage="recorded-always", options=options)
    compaction = result.compactions[0]
    assert (compaction.step, compaction.estimate_tokens, compaction.details["tail"]) == (1, 15_003, "latest-exchange")
    (checkpoint,) = [m.content for m in result.requests[compaction.next_request].messages if m.content.startswith("<conversation-checkpoint>")]
    user_entry = ("[User]: Read these\n[Attached application/pdf: file:///repo/docs/spec.pdf]\n[Attached image/png: shot.png]"
                  "\n[Attached image/jpeg: inline attachment]")
    assert f"<recent-context>\n{user_entry}\n</recent-context>" in checkpoint


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
