"""Fifth audit of Claude Code (audit_claude): the lines Claude Code's API normaliser leaves out of a request or puts
in it, and the requests 2.1.112 never sends once its rapid-refill breaker trips (docs/specs/claude-code.md §1.3,
§3.1, §8.3). Every expected value is read off the npm bundles cited in each test, on hand-built sessions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from compaction_bench.importing import load_transcripts
from compaction_bench.replay import replay
from compaction_bench.strategies.claude_code import AUTOCOMPACT_THRASHING
from compaction_bench.transcript import Transcript
from tests.pi_builders import Session

OPUS = {"model": "claude-opus-4-5-20251101", "max_output_tokens_env": 64_000}
MODEL = "claude-opus-4-5-20251101"
ZERO = {"input_tokens": 0, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0, "output_tokens": 0}
OVERLOADED = 'API Error: 529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'


def _line(uuid: str, parent: str | None, kind: str, version: str = "2.0.57", **fields: Any) -> dict[str, Any]:
    return {"parentUuid": parent, "isSidechain": False, "userType": "external", "cwd": "/repo", "sessionId": "s1",
            "version": version, "type": kind, "uuid": uuid, "timestamp": "2025-12-01T10:00:00.000Z", **fields}


def _user(uuid: str, parent: str | None, text: str, **fields: Any) -> dict[str, Any]:
    return _line(uuid, parent, "user", message={"role": "user", "content": text}, **fields)


def _reply(uuid: str, parent: str, message_id: str, text: str, usage: dict[str, int], model: str = MODEL, **fields: Any) -> dict[str, Any]:
    message = {"id": message_id, "type": "message", "role": "assistant", "model": model, "content": [{"type": "text", "text": text}], "usage": usage}
    return _line(uuid, parent, "assistant", message=message, **fields)


def _usage(cache_read: int, cache_write: int, output: int) -> dict[str, int]:
    return {"input_tokens": 10, "cache_read_input_tokens": cache_read, "cache_creation_input_tokens": cache_write, "output_tokens": output}


def _load(tmp_path: Path, lines: list[dict[str, Any]]) -> Transcript:
    path = tmp_path / "session.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    (transcript,) = load_transcripts(path, format="claude-code")
    return transcript


def _turns(transcript: Transcript, strategy: str) -> list[Any]:
    result = replay(transcript, strategy, profile="claude-opus", options=OPUS if strategy.startswith("claude-code") else None)
    return [r for r in result.requests if r.kind == "turn"]


def test_a_failed_calls_line_is_a_marker_no_request_and_in_no_later_request(tmp_path):
    # Claude Code writes an assistant line with `isApiErrorMessage: true` and model "<synthetic>" for a failed call
    # (2.0.57 `WY`/`bH9`, cc@2.0.57 cli.js L4125). Its normaliser drops exactly those lines from every request (2.0.57
    # `Py3` in `BZ`, L4125; 2.1.112 `sY7` in `K0`, cc@2.1.112 cli.js L5257, L5262). The session made two model calls
    # (msg_1, msg_3), so a replay sends two turn requests, none holding the error text. Before: three, the error
    # line a request of its own, and its text an assistant turn of every later request.
    transcript = _load(tmp_path, [
        _user("u1", None, "first question"),
        _reply("a1", "u1", "msg_1", "first answer", _usage(0, 5_000, 20)),
        _user("u2", "a1", "second question"),
        _reply("a2", "u2", "err_1", OVERLOADED, ZERO, model="<synthetic>", isApiErrorMessage=True, error="unknown"),
        _user("u3", "a2", "continue"),
        _reply("a3", "u3", "msg_3", "second answer", _usage(5_000, 40, 25)),
    ])
    assert [[i.text for i in s.items] for s in transcript.steps()] == [["first answer"], ["second answer"]]
    (marker,) = transcript.markers("api-error")
    assert marker.id == "a2" and marker.text == OVERLOADED and marker.meta["error"] == "unknown"
    assert transcript.meta["api_errors"] == 1 and "unsent_responses" not in transcript.meta
    for strategy in ("claude-code", "claude-code-2.1", "none"):
        turns = _turns(transcript, strategy)
        assert len(turns) == 2, strategy
        assert [(m.role, m.content) for m in turns[1].messages][-2:] == [("user", "second question"), ("user", "continue")], strategy
        assert not any("Overloaded" in m.content for r in turns for m in r.messages), strategy


def test_a_synthetic_reply_that_records_no_error_stays_in_the_context_but_is_no_request(tmp_path):
    # 2.0.57 appends `xD({content: "No response requested."})`, model "<synthetic>" and zero usage, to a loaded
    # conversation that ends with a user message (`jMA`, cc@2.0.57 cli.js L1923). No model answered it, but the
    # normaliser keeps it (`BZ` drops only `Py3` lines, L4125; 2.1.112 `K0` only `sY7`, L5262): the next request
    # carries it as an assistant message. Two model calls, so two turn requests; before: three.
    transcript = _load(tmp_path, [
        _user("u1", None, "first question"),
        _reply("a1", "u1", "msg_1", "first answer", _usage(0, 5_000, 20)),
        _user("u2", "a1", "a note typed before the session was resumed"),
        _reply("a2", "u2", "syn_1", "No response requested.", ZERO, model="<synthetic>"),
        _user("u3", "a2", "second question"),
        _reply("a3", "u3", "msg_3", "second answer", _usage(5_000, 40, 25)),
    ])
    assert [[i.text for i in s.items] for s in transcript.steps()] == [["first answer"], ["second answer"]]
    unsent = transcript.by_id["a2"]
    assert unsent.kind == "assistant" and unsent.response is None and unsent.usage is None
    assert transcript.meta["unsent_responses"] == 1 and "api_errors" not in transcript.meta
    for strategy in ("claude-code", "claude-code-2.1", "none"):
        turns = _turns(transcript, strategy)
        assert len(turns) == 2, strategy
        assert [(m.role, m.content) for m in turns[1].messages] == [
            ("user", "first question"), ("assistant", "first answer"), ("user", "a note typed before the session was resumed"),
            ("assistant", "No response requested."), ("user", "second question"),
        ], strategy


STDOUT = "<local-command-stdout>" + "\n".join(f"MCP server {n}: connected" for n in range(40)) + "</local-command-stdout>"


@pytest.mark.parametrize(("version", "sent"), [("2.0.57", False), ("2.1.62", False), ("2.1.63", True), ("2.1.112", True)])
def test_local_command_lines_are_user_text_from_the_version_whose_normaliser_sends_them(tmp_path, version, sent):
    # A slash command and its output as `system`/`local_command` lines (2.0.57 `uX0`, cc@2.0.57 cli.js L4256; 2.1.112
    # `kT`, L5481). 2.0.57's `BZ` drops every system line (L4125), as do 2.1.62 (cli.js L5860) and every version
    # bisected before it; 2.1.63's normaliser keeps `local_command` lines and sends their content as user text
    # (`case"system"`, cc@2.1.63 cli.js L5869), as 2.1.112's does (`mq7`, L5260, L5262). Before, every version's were
    # markers: no replay sent them.
    command = "<command-name>/mcp</command-name>\n<command-message>mcp</command-message>\n<command-args></command-args>"
    lines = [
        _user("u1", None, "hello"),
        _reply("a1", "u1", "msg_1", "hi", _usage(0, 5_000, 5)),
        _line("s1", "a1", "system", subtype="local_command", content=command, level="info", isMeta=False),
        _line("s2", "s1", "system", subtype="local_command", content=STDOUT, level="info", isMeta=False),
        _user("u2", "s2", "which servers failed?"),
        _reply("a2", "u2", "msg_2", "none", _usage(5_000, 2_000, 5)),
    ]
    transcript = _load(tmp_path, [{**line, "version": version} for line in lines])
    for uuid, text in (("s1", command), ("s2", STDOUT)):
        item = transcript.by_id[uuid]
        assert item.text == text
        if sent:
            assert item.kind == "user" and item.synthetic and item.meta["event"] == "local-command"
        else:
            assert item.kind == "marker" and item.meta["event"] == "system-notice"
    assert transcript.by_id["u2"].turn == 1  # a local command opens no user turn
    for strategy in ("claude-code", "claude-code-2.1"):
        last = _turns(transcript, strategy)[-1]
        expected = [("user", "hello"), ("assistant", "hi"), *([("user", command), ("user", STDOUT)] if sent else []),
                    ("user", "which servers failed?")]
        assert [(m.role, m.content) for m in last.messages] == expected, strategy


def _one_query_that_thrashes() -> Session:
    """One user prompt of 7 tool steps and a reply, every response recording 170,000 tokens, then a second prompt whose
    responses record less."""
    s = Session()
    s.user("read the big logs")
    for n in range(7):
        s.assistant(f"step {n}", calls=[(f"c{n}", "Bash", {"command": f"cat big{n}.log"})], total=170_000)
        s.result(f"c{n}", "x" * 4_000, name="Bash")
    s.assistant("done", total=170_000)
    s.user("now the small ones")
    s.assistant("reading", calls=[("d0", "Bash", {"command": "cat small.log"})], total=30_000)
    s.result("d0", "y" * 400, name="Bash")
    s.assistant("all read", total=20_000)
    return s


def test_the_tripped_rapid_refill_breaker_refuses_the_rest_of_the_query_and_the_next_prompt_compacts():
    # 2.1.112, T = 200,000 − min(64,000, 20,000) − 13,000 = 167,000 (§8.1). Every response records 170,000, so the
    # check at steps 1-3 compacts with refill counts 0, 1, 2 (each compaction < 3 turns after the previous one); at
    # step 4 the count would be 3: `QkK` reports the breaker tripped (cc@2.1.112 cli.js L4996) and the query loop
    # returns before calling the model with the "Autocompact is thrashing" error (L4538). The recording goes on in
    # that prompt (steps 5-7); upstream's query has ended with its tracking as it was, so each of these checks, still
    # at or over T, trips again: none of steps 4-7 is sent. The next prompt starts a query with no tracking
    # (`autoCompactTracking: void 0`, L4538): its first check (step 8, still over T) compacts and the request goes out.
    # Before: steps 4-7 were sent uncompacted and billed.
    result = replay(_one_query_that_thrashes().transcript(), "claude-code-2.1", profile="claude-opus", usage="recorded-always",
                    options=OPUS)
    turns = [r for r in result.requests if r.kind == "turn"]
    assert turns[0].threshold == 167_000
    assert [c.step for c in result.compactions if c.trigger == "auto"] == [1, 2, 3, 8]
    refused = [r for r in turns if r.refused]
    assert [(r.step, r.meta["autocompact_thrashing"]) for r in refused] == [(4, 3), (5, 3), (6, 3), (7, 3)]
    for r in refused:
        assert not r.sent and r.error is not None and r.error["message"].startswith(AUTOCOMPACT_THRASHING)
        assert r.cached_tokens == r.cache_write_tokens == r.output_tokens == 0 and r.usage is None
        assert "blocking_limit" not in r.meta  # the query ended before the blocking check
    assert all(r.sent for r in turns if r.step not in (4, 5, 6, 7))
