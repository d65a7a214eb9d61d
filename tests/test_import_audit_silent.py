"""Nothing the importers meet is dropped without a word: an unusable token count, a line that is not a run,
a content block of an unknown kind, a legacy function result and a message of an unknown role are each
kept (or, for a count, left unknown rather than taken as 0) and listed among the transcript's problems,
naming the line (or the message, in a JSON document) and the field. Every file here is built by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from compaction_bench.importing import load_transcripts
from compaction_bench.transcript import Transcript, Usage


def write_lines(path: Path, *lines: Any) -> Path:
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    return path


def step_usages(transcript: Transcript) -> list[Usage | None]:
    return [step.usage for step in transcript.steps()]


def problems_at(transcript: Transcript, where: str) -> list[str]:
    return [p for p in transcript.meta.get("problems", ()) if p.startswith(where)]


# ---------------------------------------------------------------- token counts


def test_claude_code_counts_written_as_text_leave_that_usage_unknown(tmp_path):
    def line(uuid: str, parent: str | None, kind: str, message: dict) -> dict:
        return {"type": kind, "uuid": uuid, "parentUuid": parent, "sessionId": "s1", "message": message}

    path = write_lines(
        tmp_path / "s1.jsonl",
        line("u1", None, "user", {"role": "user", "content": "hi"}),
        line("a1", "u1", "assistant", {"id": "m1", "role": "assistant", "content": [{"type": "text", "text": "one"}],
                                       "usage": {"input_tokens": "3", "output_tokens": 5}}),
        line("u2", "a1", "user", {"role": "user", "content": "again"}),
        line("a2", "u2", "assistant", {"id": "m2", "role": "assistant", "content": [{"type": "text", "text": "two"}],
                                       "usage": {"input_tokens": 7, "cache_read_input_tokens": 3, "output_tokens": 2}}),
    )
    (transcript,) = load_transcripts(path)
    assert step_usages(transcript) == [None, Usage(input=10, cached_input=3, output=2)]
    assert len(problems_at(transcript, f"{path}:2: usage field 'input_tokens'")) == 1


def test_codex_negative_counts_leave_that_usage_unknown(tmp_path):
    def item(payload: dict) -> dict:
        return {"timestamp": "2025-11-13T10:00:00Z", "type": "response_item", "payload": payload}

    def token_count(total: int, last: dict) -> dict:
        info = {"total_token_usage": {"total_tokens": total}, "last_token_usage": last}
        return {"timestamp": "2025-11-13T10:00:01Z", "type": "event_msg", "payload": {"type": "token_count", "info": info}}

    path = write_lines(
        tmp_path / "rollout.jsonl",
        {"timestamp": "2025-11-13T10:00:00Z", "type": "session_meta", "payload": {"id": "sess", "cwd": "/repo"}},
        item({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}),
        item({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "one"}]}),
        token_count(1, {"input_tokens": -5, "output_tokens": 2}),
        item({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "again"}]}),
        item({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "two"}]}),
        token_count(2, {"input_tokens": 40, "cached_input_tokens": 8, "output_tokens": 2, "total_tokens": 42}),
    )
    (transcript,) = load_transcripts(path)
    assert step_usages(transcript) == [None, Usage(input=40, cached_input=8, output=2, total=42)]
    assert len(problems_at(transcript, f"{path}:4: usage field 'input_tokens' is -5")) == 1


def pi_entry(eid: str, parent: str | None, message: dict) -> dict:
    return {"type": "message", "id": eid, "parentId": parent, "timestamp": "2025-11-20T10:00:00Z", "message": message}


PI_HEADER = {"type": "session", "version": 3, "id": "sess", "timestamp": "2025-11-20T10:00:00Z", "cwd": "/repo"}


def test_pi_infinite_count_is_a_problem_not_a_crash(tmp_path):
    infinite = {"input": float("inf"), "output": 2, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 2}
    path = write_lines(  # json.dumps writes the float as the JavaScript literal Infinity
        tmp_path / "pi.jsonl",
        PI_HEADER,
        pi_entry("e1", None, {"role": "user", "content": "hi"}),
        pi_entry("e2", "e1", {"role": "assistant", "content": [{"type": "text", "text": "one"}], "usage": infinite}),
        pi_entry("e3", "e2", {"role": "user", "content": "again"}),
        pi_entry("e4", "e3", {"role": "assistant", "content": [{"type": "text", "text": "two"}],
                              "usage": {"input": 5, "output": 1, "cacheRead": 10, "cacheWrite": 0, "totalTokens": 16}}),
    )
    assert "Infinity" in path.read_text()
    (transcript,) = load_transcripts(path)
    assert step_usages(transcript) == [None, Usage(input=15, cached_input=10, output=1, total=16)]
    assert len(problems_at(transcript, f"{path}:3: usage field 'input' is Infinity")) == 1


def test_openai_messages_counts_as_text_or_of_another_shape_leave_the_usage_unknown(tmp_path):
    path = write_lines(
        tmp_path / "chat.jsonl",
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "one", "usage": {"prompt_tokens": "100", "completion_tokens": 5}},
        {"role": "assistant", "content": "two", "usage": {"tokens": {"prompt_tokens": 100}}},
        {"role": "assistant", "content": "three", "usage": {"prompt_tokens": 120, "completion_tokens": 4}},
    )
    (transcript,) = load_transcripts(path)
    assert step_usages(transcript) == [None, None, Usage(input=120, output=4)]
    assert len(problems_at(transcript, f"{path}:2: line 2: usage field 'prompt_tokens'")) == 1
    assert len(problems_at(transcript, f"{path}:3: line 3: usage records none of the token counts")) == 1


def test_opencode_counts_as_text_leave_the_usage_unknown(tmp_path):
    def message(mid: str, role: str, parts: list[dict]) -> dict:
        return {"info": {"id": mid, "sessionID": "ses_1", "role": role, "time": {"created": 1}},
                "parts": [{"id": f"{mid}.p{n}", "sessionID": "ses_1", "messageID": mid, **p} for n, p in enumerate(parts)]}

    def answer(text: str, tokens: dict) -> list[dict]:
        return [{"type": "step-start"}, {"type": "text", "text": text}, {"type": "step-finish", "tokens": tokens}]

    path = tmp_path / "export.json"
    path.write_text(json.dumps({"info": {"id": "ses_1"}, "messages": [
        message("m1", "user", [{"type": "text", "text": "hi"}]),
        message("m2", "assistant", answer("one", {"input": "812", "output": 40, "total": 852})),
        message("m3", "user", [{"type": "text", "text": "again"}]),
        message("m4", "assistant", answer("two", {"input": 300, "output": 66, "reasoning": 0, "total": 366, "cache": {"read": 0, "write": 0}})),
    ]}), encoding="utf-8")
    (transcript,) = load_transcripts(path)
    assert step_usages(transcript) == [None, Usage(input=300, output=66, total=366)]
    assert len(problems_at(transcript, f"{path}: messages[1]: usage field 'input' is \"812\"")) == 1


# ---------------------------------------------------------------- OpenHands output lines


def test_openhands_lines_that_are_no_run_are_problems_of_every_run(tmp_path):
    def run(name: str) -> dict:
        return {"instance_id": name, "history": [{"id": 0, "action": "message", "source": "user", "args": {"content": f"fix {name}"}}]}

    path = write_lines(tmp_path / "output.jsonl", run("r1"), None, run("r2"), [1, 2, 3], {"instance_id": "lost", "note": "no history"})
    transcripts = load_transcripts(path)
    assert [t.id for t in transcripts] == ["output:r1", "output:r2"]
    for transcript in transcripts:
        assert [len(problems_at(transcript, f"{path}:{line}: not an OpenHands run")) for line in (2, 4, 5)] == [1, 1, 1], transcript.id


# ---------------------------------------------------------------- content blocks


def test_codex_content_parts_of_unknown_kinds_are_reported_and_kept(tmp_path):
    audio = {"type": "input_audio", "audio": "UklGRg=="}
    path = write_lines(
        tmp_path / "rollout.jsonl",
        {"timestamp": "2025-11-13T10:00:00Z", "type": "session_meta", "payload": {"id": "sess", "cwd": "/repo"}},
        {"timestamp": "2025-11-13T10:00:00Z", "type": "response_item", "payload": {
            "type": "message", "role": "user", "content": [audio, {"type": "input_text", "text": {"value": "hello typed by user"}}]}},
        {"timestamp": "2025-11-13T10:00:01Z", "type": "response_item", "payload": {
            "type": "message", "role": "assistant", "content": [{"type": "refusal_text", "text": "I will not."}]}},
    )
    (transcript,) = load_transcripts(path)
    user, assistant = (i for i in transcript.items if i.kind in ("user", "assistant"))
    assert user.text == '{"value": "hello typed by user"}'
    assert list(user.meta["unknown_content"]) == [audio]
    assert assistant.text == "I will not."
    assert len(problems_at(transcript, f"{path}:2: unknown user content part 'input_audio'")) == 1
    assert len(problems_at(transcript, f"{path}:2: the text of content part 1 (input_text) is a JSON object")) == 1
    assert len(problems_at(transcript, f"{path}:3: unknown assistant content part 'refusal_text'")) == 1


def test_pi_unknown_assistant_block_is_a_marker_and_the_rest_of_the_message_stays(tmp_path):
    future = {"type": "futureBlock", "text": "text the model said"}
    call = {"type": "toolCall", "id": "call_1", "name": "read", "arguments": {"path": "a.py"}}
    usage = {"input": 5, "output": 1, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 6}
    path = write_lines(
        tmp_path / "pi.jsonl",
        PI_HEADER,
        pi_entry("e1", None, {"role": "user", "content": [{"type": "text", "text": "read a.py"}, {"type": "voiceNote", "text": "please"}]}),
        pi_entry("e2", "e1", {"role": "assistant", "content": [future, {"type": "text", "text": "Reading."}, call], "usage": usage}),
    )
    (transcript,) = load_transcripts(path)
    kinds = [(i.kind, i.text) for i in transcript.items]
    assert kinds == [
        ("user", "read a.pyplease"),
        ("marker", json.dumps(future)),
        ("assistant", "Reading."),
        ("tool_call", ""),
    ]
    assert transcript.items[0].meta["unknown_content"] == ({"type": "voiceNote", "text": "please"},)
    assert transcript.items[1].meta["event"] == "unknown-block" and "entry" not in transcript.items[1].meta
    assert step_usages(transcript) == [Usage(input=5, output=1, total=6)]
    assert len(problems_at(transcript, f"{path}:2: unknown content block 'voiceNote'")) == 1
    assert len(problems_at(transcript, f"{path}:3: unknown assistant content block 'futureBlock'")) == 1


def test_pi_content_nested_in_a_list_keeps_its_tool_calls(tmp_path):
    calls = [{"type": "toolCall", "id": f"call_{n}", "name": "bash", "arguments": {"command": f"echo {n}"}} for n in range(3)]
    results = [pi_entry(f"r{n}", f"e{n + 1}" if n == 0 else f"r{n - 1}", {
        "role": "toolResult", "toolCallId": f"call_{n}", "toolName": "bash", "content": [[{"type": "text", "text": str(n)}]]})
        for n in range(3)]
    path = write_lines(
        tmp_path / "pi.jsonl",
        PI_HEADER,
        pi_entry("e0", None, {"role": "user", "content": [[{"type": "text", "text": "count"}]]}),
        pi_entry("e1", "e0", {"role": "assistant", "content": [[{"type": "text", "text": "Counting."}, *calls]]}),
        *results,
    )
    (transcript,) = load_transcripts(path)
    assert [i.call_id for i in transcript.items if i.kind == "tool_call"] == ["call_0", "call_1", "call_2"]
    assert [i.text for i in transcript.items if i.kind == "tool_result"] == ["0", "1", "2"]
    assert transcript.items[0].text == "count"
    assert transcript.orphans() == {"calls_without_result": [], "results_without_call": []}
    assert [len(problems_at(transcript, f"{path}:{line}: a content block is a JSON list")) for line in range(2, 7)] == [1] * 5


# ---------------------------------------------------------------- OpenAI-style roles


def test_a_legacy_function_result_answers_the_latest_unanswered_call_of_its_name(tmp_path):
    path = tmp_path / "legacy.json"
    path.write_text(json.dumps([
        {"role": "user", "content": "Please list files."},
        {"role": "assistant", "content": None, "function_call": {"name": "bash", "arguments": '{"cmd": "ls"}'}},
        {"role": "function", "name": "bash", "content": "a.py"},
        {"role": "assistant", "content": None, "function_call": {"name": "bash", "arguments": '{"cmd": "pwd"}'}},
        {"role": "assistant", "content": None, "function_call": {"name": "python", "arguments": '{"code": "1"}'}},
        {"role": "function", "name": "python", "content": "1"},
        {"role": "function", "name": "bash", "content": "/repo"},
        {"role": "assistant", "content": "done"},
    ]), encoding="utf-8")
    (transcript,) = load_transcripts(path)
    calls = {i.call_id: json.loads(i.arguments or "") for i in transcript.items if i.kind == "tool_call"}
    answered = {json.dumps(calls.get(i.call_id or "")): i.text for i in transcript.items if i.kind == "tool_result"}
    assert answered == {'{"cmd": "ls"}': "a.py", '{"code": "1"}': "1", '{"cmd": "pwd"}': "/repo"}
    assert transcript.orphans() == {"calls_without_result": [], "results_without_call": []}
    assert [i.kind for i in transcript.items] == ["user", "tool_call", "tool_result", "tool_call", "tool_call", "tool_result", "tool_result", "assistant"]


def test_a_message_of_an_unknown_role_is_a_reported_marker(tmp_path):
    path = tmp_path / "critic.json"
    path.write_text(json.dumps([
        {"role": "user", "content": "Please list files."},
        {"role": "critic", "content": "This is a critique that matters"},
        {"role": "assistant", "content": "done"},
    ]), encoding="utf-8")
    (transcript,) = load_transcripts(path)
    marker = transcript.items[1]
    assert (marker.kind, marker.text, marker.meta["role"]) == ("marker", "This is a critique that matters", "critic")
    assert len(problems_at(transcript, f"{path}: message 1: unknown role 'critic'")) == 1
    # mini-swe-agent's own closing `exit` message is that format's marker, no problem
    trajectory = tmp_path / "run.traj.json"
    trajectory.write_text(json.dumps({"trajectory_format": "mini-swe-agent-1.1", "info": {}, "messages": [
        {"role": "user", "content": "fix"}, {"role": "assistant", "content": "done"}, {"role": "exit", "content": "diff"}]}), encoding="utf-8")
    (run,) = load_transcripts(trajectory)
    assert run.items[-1].meta["role"] == "exit" and "problems" not in run.meta


def test_an_impossibly_large_count_is_a_problem_and_the_usage_unknown(tmp_path):
    """A count of 10**20 tokens was read as it stood: `inspect` showed it with no problem, and every cell that used
    it failed as its tables were written (a 64-bit overflow), so the strategies using it left the verdict."""
    path = write_lines(
        tmp_path / "chat.jsonl",
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "one", "usage": {"prompt_tokens": 10**20, "completion_tokens": 5}},
        {"role": "assistant", "content": "two", "usage": {"prompt_tokens": 2**31, "completion_tokens": 4}},
    )
    (transcript,) = load_transcripts(path)
    assert step_usages(transcript) == [None, Usage(input=2**31, output=4)]
    assert len(problems_at(transcript, f"{path}:2: line 2: usage field 'prompt_tokens' is 100000000000000000000, not a token count")) == 1
