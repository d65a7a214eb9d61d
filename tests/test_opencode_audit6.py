"""The sixth audit's OpenCode findings (audit_opencode), each on hand-built input whose right answer follows from
the bench's convention or upstream's source:

- F1: no trigger counts tool definitions the replay does not send (the bench's convention): `opencode-v2`'s default
  reports the rule's ceiling and compacts where `opencode-v1` does; `tools_json_chars=32375` (OpenCode's eight
  default tools) compacts earlier by their 8,093 estimated tokens;
- F2: V1's overflow replay copies every part of the replayed user message but compaction parts (spec §4), the
  synthetic parts of an ``@file`` mention included;
- F3: the V2 `session_message` reader keeps what upstream's `serializeRecentMessage` (compaction.ts@031a4a9c)
  reads: a user's activated skills, a file's ``source.uri``, files in a tool's content, a running tool's result and
  a shell row's ``output.output``;
- F4: a tool part whose state is not an object, of an unknown status, or completed without output is a problem
  naming the part.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from compaction_bench.importing import load_transcripts
from compaction_bench.replay import replay
from tests.test_opencode_helpers import Session

#: 64k profile: V1's usable window 64,000 - min(32,000, 32,000); V2's ceiling 64,000 - max(min(32,000, 32,000), 20,000)
WINDOW_RULE = 32_000
#: round((32,375 - 2) / 4): OpenCode's eight default tool definitions
TOOLS_TOKENS = 8_093


def ramp() -> Session:
    """Recorded usages below the 32,000 rule, then 25,000 (under it alone, over it with the tools' 8,093), then
    40,000 (over it either way)."""
    return (
        Session()
        .user("u0", "Fix the parser").tool("c0", "def parse(): pass", usage=1_000).say("a0", "Fixed.", usage=2_000)
        .user("u1", "Add tests").tool("c1", "created", usage=3_000).say("a1", "Added.", usage=25_000)
        .user("u2", "Run them").tool("c2", "3 passed", usage=30_000).say("a2", "Green.", usage=40_000)
        .user("u3", "Commit").say("a3", "Committed.", usage=500)
    )


def first_compacted_request(strategy: str, **options) -> int:
    """The index of the first request sent after the first compaction."""
    result = replay(ramp().transcript(), strategy, profile="64k", usage="recorded", options=options)
    next_request = result.compactions[0].next_request
    assert next_request is not None
    return next_request


# ----------------------------------------------------------------------------- F1
def test_v2_default_threshold_is_the_rule_without_a_tools_term():
    result = replay(ramp().transcript(), "opencode-v2", profile="64k", usage="recorded")
    assert {r.threshold for r in result.turn_requests} - {None} == {WINDOW_RULE}
    assert result.compactions[0].details["tools_estimate_tokens"] == 0
    tools = replay(ramp().transcript(), "opencode-v2", profile="64k", usage="recorded", options={"tools_json_chars": 32_375})
    assert {r.threshold for r in tools.turn_requests} - {None} == {WINDOW_RULE - TOOLS_TOKENS}


def test_v2_default_compacts_where_v1_does_and_the_tools_option_earlier():
    v1 = first_compacted_request("opencode-v1")
    v2 = first_compacted_request("opencode-v2")
    with_tools = first_compacted_request("opencode-v2", tools_json_chars=32_375)
    # 40,000 is over the rule for both; 25,000 + 8,093 is over it only with the tools counted
    assert v2 == v1
    assert with_tools < v2


# ----------------------------------------------------------------------------- F2
SECRET = "MAGIC_CONSTANT_XYZZY = 4242"


def message(mid: str, role: str, created: int, parts: list[dict], **info) -> dict:
    full = [{"id": f"prt_{mid}_{n:02d}", "sessionID": "ses_1", "messageID": mid, **p} for n, p in enumerate(parts)]
    return {"info": {"id": mid, "sessionID": "ses_1", "role": role, "time": {"created": created}, **info}, "parts": full}


def zero_tokens() -> dict:
    return {"total": 0, "input": 0, "output": 0, "reasoning": 0, "cache": {"read": 0, "write": 0}}


def at_file_export(tmp_path: Path) -> Path:
    """A first turn whose tool output is some 27,000 tokens, then a user message mentioning ``@big.py``: its text, the
    two synthetic text parts OpenCode adds (the Read line and the file's contents, some 10,000 tokens) and the file
    part. Together over what the 64k profile accepts (64,000 - 32,000 of output), the file alone under it."""
    log = " ".join(f"row{n} = {n}" for n in range(4_000))
    body = " ".join(f"line{n} = {n}" for n in range(1_500))
    messages = [
        message("msg_00", "user", 1, [{"type": "text", "text": "Show me the build log"}]),
        message("msg_01", "assistant", 2, [
            {"type": "step-start"},
            {"type": "tool", "callID": "c0", "tool": "bash", "state": {"status": "completed", "input": {"command": "make"}, "output": log}},
            {"type": "step-finish", "tokens": zero_tokens()},
            {"type": "step-start"}, {"type": "text", "text": "The build passes."}, {"type": "step-finish", "tokens": zero_tokens()},
        ], modelID="m"),
        message("msg_02", "user", 3, [
            {"type": "text", "text": "Read @big.py and fix the bug in it"},
            {"type": "text", "synthetic": True, "text": 'Called the Read tool with the following input: {"filePath":"big.py"}'},
            {"type": "text", "synthetic": True, "text": f"<file>\n{SECRET}\n{body}\n</file>"},
            {"type": "file", "mime": "text/plain", "filename": "big.py", "url": "file:///repo/big.py"},
        ]),
        message("msg_03", "assistant", 4, [{"type": "step-start"}, {"type": "text", "text": "Fixed it."},
                                           {"type": "step-finish", "tokens": zero_tokens()}], modelID="m"),
    ]
    path = tmp_path / "session.json"
    path.write_text(json.dumps({"info": {"id": "ses_1"}, "messages": messages}))
    return path


def test_overflow_replay_keeps_the_synthetic_parts_of_the_replayed_message(tmp_path):
    (transcript,) = load_transcripts(at_file_export(tmp_path))
    # no tail (`tail_turns=0`): the replayed message is all that can carry the file after the summary
    result = replay(transcript, "opencode-v1", profile="64k", options={"tail_turns": 0})
    (compaction,) = result.compactions
    assert (compaction.trigger, compaction.details["replay"], compaction.details["tail"]) == ("overflow", True, "disabled")
    assert compaction.summarized_ids == ("msg_00", "prt_msg_01_01", "prt_msg_01_01.result", "prt_msg_01_04")
    assert compaction.dropped_ids == ()
    retry = result.requests[compaction.next_request]
    assert not retry.overflow
    replayed = retry.messages[-1]
    assert replayed.item_ids == ("msg_02", "prt_msg_02_01", "prt_msg_02_02")
    assert replayed.content.startswith('Read @big.py and fix the bug in it\nCalled the Read tool with the following input:')
    assert SECRET in replayed.content


# ----------------------------------------------------------------------------- F3, F4
def v2_database(tmp_path: Path, rows: list[tuple[str, dict]]) -> Path:
    path = tmp_path / "opencode.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE session (id TEXT, time_created INTEGER)")
    con.execute("CREATE TABLE session_message (id TEXT, session_id TEXT, type TEXT, seq INTEGER, data TEXT)")
    con.execute("INSERT INTO session VALUES ('ses_v2', 1)")
    for seq, (kind, data) in enumerate(rows):
        con.execute("INSERT INTO session_message VALUES (?, 'ses_v2', ?, ?, ?)", (f"msg_{seq}", kind, seq, json.dumps(data)))
    con.commit()
    con.close()
    return path


TOKENS = {"input": 10, "output": 5, "reasoning": 0, "cache": {"read": 0, "write": 0}}


def test_v2_user_skills_and_source_uri(tmp_path):
    rows = [("user", {
        "text": "Use the review skill",
        "skills": [{"name": "review", "text": "Always run the linter first."}, {"name": "idle"}],
        "files": [{"mime": "application/pdf", "source": {"type": "uri", "uri": "file:///repo/spec.pdf"}},
                  {"mime": "image/png", "source": {"type": "data"}}],
    })]
    (t,) = load_transcripts(v2_database(tmp_path, rows), format="opencode")
    user, skill = t.items
    assert (user.kind, user.synthetic, user.text) == ("user", False, "Use the review skill")
    assert [a.uri for a in user.attachments] == ["file:///repo/spec.pdf", ""]
    # upstream: `[Skill activated: ${skill.name}]\n${skill.text}`, a skill without text left out
    assert (skill.kind, skill.synthetic, skill.text) == ("user", True, "[Skill activated: review]\nAlways run the linter first.")
    assert "problems" not in t.meta


def test_v2_tool_files_running_tools_and_shell_output(tmp_path):
    rows = [
        ("user", {"text": "Take a screenshot"}),
        ("assistant", {"tokens": TOKENS, "content": [
            {"type": "tool", "id": "t1", "name": "read", "state": {"status": "completed", "input": {"p": 1}, "content": [
                {"type": "text", "text": "file text"}, {"type": "file", "mime": "image/png", "name": "shot.png"}]}},
            {"type": "tool", "id": "t2", "name": "bash", "state": {"status": "running", "input": {"command": "sleep"}}},
        ]}),
        ("shell", {"command": "git status", "output": {"output": "On branch main"}}),
    ]
    (t,) = load_transcripts(v2_database(tmp_path, rows), format="opencode")
    by = t.by_id
    shot = by["msg_1.0.result"]
    assert (shot.text, [(a.mime, a.name) for a in shot.attachments], shot.is_error) == ("file text", [("image/png", "shot.png")], False)
    running = by["msg_1.1.result"]
    assert (running.text, running.is_error) == ("[Tool execution was interrupted]", True)
    assert by["msg_2"].text == "git status\nOn branch main"


def test_malformed_tool_states_are_problems_naming_the_part(tmp_path):
    messages = [
        message("msg_01", "user", 1, [{"type": "text", "text": "Fix the parser"}]),
        message("msg_02", "assistant", 2, [
            {"type": "step-start"},
            {"type": "tool", "callID": "c1", "tool": "read", "state": "BROKEN"},
            {"type": "tool", "callID": "c2", "tool": "read", "state": {"status": "completed", "input": {"filePath": "/a"}}},
            {"type": "tool", "callID": "c3", "tool": "bash", "state": {"status": "weird", "input": {"command": "ls"}}},
            {"type": "tool", "callID": "c4", "tool": "bash", "state": {"status": "completed", "input": {}, "output": "ok"}},
            {"type": "step-finish", "tokens": zero_tokens()},
        ], modelID="m"),
    ]
    path = tmp_path / "session.json"
    path.write_text(json.dumps({"info": {"id": "ses_1"}, "messages": messages}))
    (t,) = load_transcripts(path)
    problems = [p.split(": ", 1)[1] for p in t.meta["problems"]]
    assert problems == [
        "messages[1]: part prt_msg_02_01: tool state is not an object",
        "messages[1]: part prt_msg_02_02: completed tool without 'output'",
        "messages[1]: part prt_msg_02_03: unknown tool status 'weird'",
    ]
    # the fallback reading is kept: calls without a result, and an empty result for the completed one
    results = {i.call_id: i.text for i in t.items if i.kind == "tool_result"}
    assert results == {"c2": "", "c4": "ok"}


def test_malformed_v2_tool_state_is_a_problem_naming_the_content_part(tmp_path):
    rows = [("assistant", {"tokens": TOKENS, "content": [{"type": "tool", "id": "t1", "name": "read", "state": {"status": "done"}}]})]
    (t,) = load_transcripts(v2_database(tmp_path, rows), format="opencode")
    assert [p.split(": ", 1)[1] for p in t.meta["problems"]] == ["session_message msg_0: content[0]: unknown tool status 'done'"]
