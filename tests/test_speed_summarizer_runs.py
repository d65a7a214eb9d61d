"""The offline models' input read per run of messages (`compaction_bench.llm._WireRuns`, issue 18)
against converting and reading each request whole.

A request of `Message`s is converted, counted and read by the summarizer in runs that are each
converted once per process. The straightforward computation is the one a request of plain dicts
still takes: `chat_messages` of the whole request, `payload_tokens` of that payload and
`extractive_summary` of it. Checked on a real Codex rollout's messages (sliding windows, as a
remote compaction's retained messages slide, with summary prompts) and on hand-built requests that
exercise every rule of the run boundaries (merged assistant messages, dropped reasoning and
compaction items, orphan results, system, developer and summary messages).
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
from typing import Any

import pytest

from compaction_bench.importing import load_transcripts
from compaction_bench.llm import DEFAULT_ANSWERER, DEFAULT_SUMMARIZER, LLMClient, _wire_runs, payload_tokens
from compaction_bench.offline_models import extractive_summary, summarize_readings
from compaction_bench.request import Message, ToolCall, message_from_item
from compaction_bench.wire import chat_messages
from tests.conftest import CORPORA

ROLLOUT = CORPORA / "codex-rollout-jsonl/MoonLadderStudios__MoonMind/rollout-2025-11-13T18-21-11-019a802a-aab1-7c31-9831-d2510c7a74a2.jsonl"
PROMPT = "Summarize the conversation.\n\n## Goal\n\n## Errors\n\n## Files\n\n## Next steps"


def _runs_of(messages, model: str, provider: str):
    """The runs `_WireRuns` reads a request as, in order (None unless its messages are all `Message`s)."""
    read = _wire_runs.read_request(messages, model, provider)
    return None if read is None else read.sent.runs


def as_dicts(messages: list[Message]) -> list[dict[str, Any]]:
    """The messages as plain dicts, which the client converts and reads whole (never by run)."""
    return [
        {"role": m.role, "content": m.content, "tool_call_id": m.tool_call_id, "name": m.name,
         "tool_calls": [{"id": c.id, "function": {"name": c.name, "arguments": c.arguments}} for c in m.tool_calls]}
        for m in messages
        if m.role not in ("reasoning", "compaction")  # plain dicts have no such roles
    ]


def without_ids(payload: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A payload without its wire tool call ids (each run numbers its own; the offline models never read them)."""
    out = []
    for entry in payload:
        entry = {k: v for k, v in entry.items() if k != "tool_call_id"}
        if "tool_calls" in entry:
            entry["tool_calls"] = [{k: v for k, v in call.items() if k != "id"} for call in entry["tool_calls"]]
        out.append(entry)
    return out


def check(messages: list[Message]) -> None:
    """Read by runs, the request has the whole request's payload (but for ids), input tokens and summary."""
    for provider in ("offline", "openai"):
        runs = _runs_of(messages, DEFAULT_SUMMARIZER, provider)
        assert runs is not None
        whole = chat_messages(messages, provider=provider)
        assert without_ids([entry for run in runs for entry in run.payload]) == without_ids(whole)
        assert sum(run.tokens for run in runs) == payload_tokens(whole)
        for max_tokens in (None, 300):
            assert summarize_readings([run.reading for run in runs], max_tokens) == extractive_summary(whole, max_tokens)


def tricky() -> list[Message]:
    call = ToolCall(id="c1", name="bash", arguments='{"cmd": "pytest src/app.py"}')
    other = ToolCall(id="c2", name="read", arguments="raw text, not JSON")
    return [
        Message("tool", "an orphan result before anything: error in src/x.py", tool_call_id="zz"),
        Message("system", "You are a coding agent. Never push to main."),
        Message("developer", "<previous-summary>\n## Goal\n- port the CLI\n</previous-summary>"),
        Message("user", "Please fix the failing test in src/app.py; do not touch setup.cfg"),
        Message("reasoning", ""),
        Message("assistant", "I will run the tests first, then fix them."),
        Message("reasoning", "   "),
        Message("assistant", "", tool_calls=(call,)),
        Message("tool", "FAILED src/app.py::test_x - AssertionError", tool_call_id="c1"),
        Message("tool", "a result for no call", tool_call_id="c9"),
        Message("assistant", "", tool_calls=(other,)),
        Message("compaction", ""),
        Message("assistant", "", tool_calls=(call,)),
        Message("tool", "done: fixed the import in src/app.py", tool_call_id="c1"),
        Message("compaction", "Summary of the conversation so far: tests fail in src/app.py."),
        Message("user", "This session is being continued. <summary>the earlier summary</summary>"),
        Message("reasoning", "The fix is next: update the test because the API changed."),
        Message("assistant", "", tool_calls=(other,)),
        Message("user", ""),
        Message("tool", "an orphan after a user message", tool_call_id="c2"),
        Message("system", "## Goal\n## Next steps"),
        Message("user", PROMPT),
    ]


def test_hand_built_requests_read_by_runs_as_whole():
    messages = tricky()
    for start in range(len(messages)):
        for end in range(start, len(messages) + 1):
            check(messages[start:end])


@pytest.fixture(scope="module")
def rollout() -> list[Message]:
    (transcript,) = load_transcripts(ROLLOUT)
    return [message_from_item(item) for item in transcript.items if item.kind != "marker"]


def test_sliding_windows_of_a_real_session_read_by_runs_as_whole(rollout):
    prompt = Message("user", PROMPT)
    step = max(len(rollout) // 12, 1)
    for start in range(0, len(rollout), step):
        check([*rollout[start : start + 4 * step], prompt])
        check([rollout[start], *[m for m in rollout[start : start + 6 * step] if m.role == "user"], prompt])


def test_runs_are_read_once_and_requests_of_new_objects_alike(rollout):
    window = [*rollout[:200], Message("user", PROMPT)]
    first = _runs_of(window, DEFAULT_SUMMARIZER, "offline")
    again = _runs_of(list(window), DEFAULT_SUMMARIZER, "offline")
    assert first is not None and again is not None and all(a is b for a, b in zip(first, again, strict=True))
    # equal messages, new objects (a system message or a prompt made again for each request): new runs, which hold
    # the new objects, with the conversions and readings of the last request's equal runs
    copies = [dataclasses.replace(m) for m in window]
    fresh = _runs_of(copies, DEFAULT_SUMMARIZER, "offline")
    assert fresh is not None and not any(a is b for a, b in zip(first, fresh, strict=True))
    assert all(all(map(operator.is_, r.messages, copies[n : n + len(r.messages)])) for n, r in zip(_starts(fresh), fresh, strict=True))
    assert all(a.payload is b.payload and a.reading is b.reading and a.tokens == b.tokens for a, b in zip(first, fresh, strict=True))
    check(copies)
    # the very first message, then equal copies: the piece shared with the last request is compared by value, so
    # its runs are the last request's (equal messages convert and read alike), and the result is the whole request's
    last = _runs_of(window, DEFAULT_SUMMARIZER, "offline")
    mixed = [window[0], *copies[1:]]
    mixed_runs = _runs_of(mixed, DEFAULT_SUMMARIZER, "offline")
    assert last is not None and mixed_runs is not None and all(a is b for a, b in zip(last, mixed_runs, strict=True))
    check(mixed)
    # a message that differs in one field is converted anew
    changed = [*copies[:-1], Message("user", PROMPT + " Keep it short.")]
    runs = _runs_of(changed, DEFAULT_SUMMARIZER, "offline")
    assert runs is not None and runs[-1].reading is not fresh[-1].reading and runs[-1].reading.entries[-1][1].endswith("short.")
    check(changed)


def _starts(runs) -> list[int]:
    """The position of each run's first message in its request."""
    return list(itertools.accumulate((len(r.messages) for r in runs[:-1]), initial=0))


def test_the_clients_offline_results_equal_those_of_the_whole_request(rollout):
    """`complete` with `Message`s (read by runs, memoized) against plain dicts (converted and read whole)."""
    for model in (DEFAULT_SUMMARIZER, DEFAULT_ANSWERER):
        client = LLMClient(model)
        for end in (30, 120, 400, len(rollout)):
            messages = [*rollout[:end], Message("user", PROMPT if model == DEFAULT_SUMMARIZER else "Which file failed?")]
            plain = [m for m in messages if m.role not in ("reasoning", "compaction")]
            by_runs = client.complete(plain, max_tokens=500)
            whole = client.complete(as_dicts(plain), max_tokens=500)
            assert (by_runs.text, by_runs.input_tokens, by_runs.output_tokens) == (whole.text, whole.input_tokens, whole.output_tokens)
            assert by_runs.text


def test_consecutive_requests_keep_the_runs_they_share():
    """A request that shares a piece with the last one (after a new first message, with the piece's first
    message read in another state, with messages added, removed or moved) is read as whole, and the runs
    inside the piece are the last request's."""
    tools = ToolCall(id="c1", name="bash", arguments='{"cmd": "ls src/"}')
    body = [
        Message("assistant", "I will look at src/ first."),
        Message("reasoning", ""),  # dropped: what comes after it is read as if it came after the message before it
        Message("assistant", "", tool_calls=(tools,)),  # merged into the message before it, unless a user's or nothing is
        Message("tool", "a.py b.py", tool_call_id="c1"),
        *[Message("user", f"Request {n}: fix src/m{n}.py, never touch setup.cfg") for n in range(30)],
        Message("assistant", "", tool_calls=(tools,)),
        Message("tool", "error: missing module", tool_call_id="c1"),
        Message("compaction", "Summary of the conversation so far: the error is in src/m3.py."),
    ]
    prompt = Message("user", PROMPT)
    fresh = [Message("reasoning", ""), Message("assistant", "", tool_calls=(tools,)), Message("tool", "c.py", tool_call_id="c1")]
    requests = [
        [Message("system", "one"), *body, prompt],
        [Message("system", "two"), *body[1:], prompt],  # the piece starts at the dropped reasoning: its tool call is not merged here
        [Message("system", "three"), *body[1:], Message("user", "new"), prompt],
        [Message("assistant", "new text"), *body[1:], prompt],  # now the tool call is merged into the new message
        [Message("user", "go"), *fresh],  # shares nothing: its tool call is not merged (a user's message comes before)
        [Message("assistant", "I will list them."), *fresh],  # the same piece, read after an assistant's message: merged
        [*body[3:20], *body[25:], prompt],  # a piece, then another one the last request held apart
        [*body[5:], *body[:5], Message("system", "four")],
        [Message("developer", "dev"), *body[2:]],
        as_dicts(body),  # not `Message`s: converted whole
        [*body],
    ]
    last: list[Any] | None = None
    kept = 0
    for request in requests:
        if not all(isinstance(m, Message) for m in request):
            assert _runs_of(request, DEFAULT_SUMMARIZER, "offline") is None
            continue
        check(request)
        runs = _runs_of(request, DEFAULT_SUMMARIZER, "offline")
        assert runs is not None and all(a is b for a, b in zip(runs, _runs_of(list(request), DEFAULT_SUMMARIZER, "offline"), strict=True))
        if last is not None:  # the run of each user message the last request held is the last request's
            held = {id(run.messages[0]): run for run in last}
            inside = [run for run in runs if run.messages[0].role == "user" and id(run.messages[0]) in held]
            assert all(held[id(run.messages[0])] is run for run in inside)
            kept += len(inside)
        last = runs
    assert kept > 100


def test_the_longest_shared_piece_is_adopted_after_the_same_first_message():
    """A remote Codex compaction sends the same system message, then the last one's retained messages less
    the oldest, then new ones: the piece shared with the last request is the long run of retained
    messages, not the system message alone (which also starts both requests), and the request still
    reads as whole."""
    system, prompt = Message("system", "You are a coding agent."), Message("user", PROMPT)
    retained = [Message("user", f"Request {n}: fix src/m{n}.py, keep setup.cfg") for n in range(40)]
    summary = Message("compaction", "Summary of the conversation so far: src/m3.py is fixed.")
    first = [system, *retained, summary, prompt]
    second = [system, *retained[3:], Message("user", "Request 40: now src/m40.py"), summary, prompt]
    for request, shared in ((first, None), (second, len(retained) - 3)):
        read = _wire_runs.read_request(request, DEFAULT_SUMMARIZER, "offline")
        assert read is not None
        if shared is not None:
            # the retained messages both hold, one run each, less the piece's first (walked, the piece adopted after
            # it) and its last (which might run on past the piece)
            assert read.length == shared - 2
            assert read.sent.runs[read.where : read.where + read.length] == read.earlier.runs[read.first : read.first + read.length]
        check(request)


def test_a_request_is_answered_from_the_memo_only_for_the_very_same_messages():
    """The client's memo of offline completions finds a request by its length and its first and last
    message objects, then compares every message by identity: a request of other messages between the
    same first and last gets its own completion (the one plain dicts, never memoized, get)."""
    client = LLMClient(DEFAULT_SUMMARIZER)
    system, prompt = Message("system", "You are a coding agent."), Message("user", PROMPT)
    first = [system, Message("user", "Fix the failing test in src/a.py; never push to main."), prompt]
    second = [system, Message("user", "Decision: keep setup.cfg as it is. Next: port src/b.py to the new API."), prompt]
    texts = [client.complete(request, max_tokens=300).text for request in (first, second, first, second)]
    assert texts[:2] == [client.complete(as_dicts(request), max_tokens=300).text for request in (first, second)]
    assert texts[0] != texts[1] and texts[2:] == texts[:2]
