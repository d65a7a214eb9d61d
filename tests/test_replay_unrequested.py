"""A response recorded before anything it answers is history, not a request (`compaction_bench.replay`'s docstring).

A Claude Code subagent's file opens with the subagent's first reply (its prompt is in the parent session), and a
log can start mid-session: the request that produced such a reply was not recorded, and one of no message is none an
API serves (OpenAI: "messages … at least 1 item"; Anthropic: "at least one message is required"). Before the
forty-fourth pass every strategy sent and billed a request of 0 messages for it (51 output tokens on the corpus's
`agent-dee347d2`)."""

from __future__ import annotations

import pytest

from compaction_bench import load_transcript, replay
from compaction_bench.records import from_rows, to_rows
from compaction_bench.transcript import Item
from tests.conftest import CORPORA
from tests.pi_builders import Session

STRATEGIES = ["none", "truncate", "claude-code", "codex-local", "pi", "opencode-v2", "gemini-cli", "openhands", "aider"]


def _opens_with_a_reply() -> Session:
    s = Session()
    s.items.append(Item(id="sys", kind="system", text="You are a subagent."))
    s.assistant("I will read the file first.", calls=[("c1", "read", {"path": "a.py"})])
    s.result("c1", "print('a')")
    s.assistant("It prints a.")
    s.user("and b.py?")
    s.assistant("It prints b.")
    return s


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_the_opening_reply_is_history_and_the_next_request_holds_it(strategy):
    result = replay(_opens_with_a_reply().transcript(), strategy, profile="64k")
    assert result.unrequested_steps == [0]
    turns = result.turn_requests
    assert [r.step for r in turns] == [1, 2]  # the two steps whose input was recorded
    assert all(len(r.messages) > 0 for r in result.requests)
    # the opening reply and its call's result, as each agent renders them (Aider sends results as user text)
    first = [m for m in turns[0].messages if m.role != "system"]
    assert first[0].role == "assistant" and "I will read the file first." in first[0].content
    assert any("print('a')" in m.content for m in first[1:])


def test_the_unrequested_steps_are_stored_with_the_run():
    result = replay(_opens_with_a_reply().transcript(), "none", profile="64k")
    rows = to_rows(result)
    again = from_rows(result.transcript, result.profile, rows["messages"], rows["requests"], rows["replay"])
    assert again.unrequested_steps == [0] and len(again.requests) == len(result.requests)


def test_a_session_that_opens_with_the_user_is_replayed_whole():
    s = Session()
    s.user("read a.py")
    s.assistant("done")
    assert replay(s.transcript(), "none", profile="64k").unrequested_steps == []


@pytest.mark.corpora
def test_the_corpus_subagent_file_sends_no_empty_request():
    transcript = load_transcript(CORPORA / "claude-code-jsonl/Smartagent-so__Personal_AI_Infrastructure/agent-dee347d2.jsonl")
    result = replay(transcript, "none", profile="64k")
    assert result.unrequested_steps == [0]
    assert len(result.turn_requests) == len(transcript.steps()) - 1
    assert min(len(r.messages) for r in result.requests) > 0
