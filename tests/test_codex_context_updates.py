"""Codex rules an audit found missing (issue 14), on hand-built sessions: interrupted steps, a
failed mid-turn compaction ending the turn, the remote request without a prompt, the
token-budget initial context, and the summary text (docs/specs/codex.md §1.4, §2.2, §3.2, §4.1, §5.1)."""

from __future__ import annotations

import pytest

from compaction_bench.llm import LLMClient, LLMResult
from compaction_bench.replay import replay
from compaction_bench.strategies.codex_components import window_uuid
from tests.test_codex_golden import CONTEXT, ENV, shape, start, summary_requests, turn


class FixedSummarizer(LLMClient):
    """Returns one fixed text and remembers what it was sent."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text
        self.sent: list = []

    def complete(self, messages, *, max_tokens=None, purpose="summary", **kw) -> LLMResult:
        self.sent.append(list(messages))
        return LLMResult(text=self.text, model="fixed", purpose=purpose)


@pytest.mark.parametrize("strategy", ["codex-local", "codex-remote-v2"])
def test_an_interrupted_step_compacts_as_pre_turn_without_injection(strategy):
    # the call needs a follow-up, but the turn ends (interrupted) and the next user message comes
    s = (start().user("u1", "Run it").call("c1", 60_000).result("r1", "c1", "partial")
         .user("u2", "Stop, do something else").reply("a2", "ok", 100))
    result = replay(s.transcript(), strategy, profile="64k", usage="recorded")
    (compaction,) = result.compactions
    assert compaction.trigger == "pre-turn" and compaction.details["injection"] == "DoNotInject"
    last = "<SUMMARY>" if strategy == "codex-local" else "<COMPACTION>"
    assert shape(turn(result, 1).messages) == ["user:u1", last, *CONTEXT, "user:u2"]


def test_a_failed_mid_turn_compaction_ends_the_turn():
    big = "word " * 40_000  # the compaction request cannot fit the 32k window
    s = (start().user("u1", "go").call("c1", 30_000).result("r1", "c1", big)
         .call("c2", 30_000).result("r2", "c2", "more").call("c3", 30_000).result("r3", "c3", "more")
         .reply("a4", "done", 100).user("u2", "next").reply("a5", "ok", 100))
    result = replay(s.transcript(), "codex-remote-v2", profile="32k", usage="recorded")
    # one attempt in the first turn (after c1's step); c2 and c3 need follow-ups too but the turn has ended
    attempts = [r.turn for r in summary_requests(result)]
    assert attempts.count(attempts[0]) == 1


def test_remote_request_has_no_prompt_but_the_emulated_server_gets_instructions():
    summarizer = FixedSummarizer("opaque")
    s = start().user("u1", "USER_ONE").call("c1", 60_000).result("r1", "c1", "x").reply("a2", "done", 100)
    result = replay(s.transcript(), "codex-remote-v1", profile="64k", usage="recorded", summarizer=summarizer)
    (request,) = summary_requests(result)
    assert request.messages[-1].role == "tool"  # the history itself, nothing appended
    (sent,) = summarizer.sent
    assert len(sent) == len(request.messages) + 1 and sent[-1].role == "user"


@pytest.mark.parametrize(("text", "expected"), [("", "\n"), ("  Summary body \n", "\n  Summary body \n")])
def test_local_summary_text_is_the_prefix_newline_and_the_reply_as_returned(text, expected):
    s = start().user("u1", "USER_ONE").call("c1", 60_000).result("r1", "c1", "x").reply("a2", "done", 100)
    result = replay(s.transcript(), "codex-local", profile="64k", usage="recorded", summarizer=FixedSummarizer(text))
    summary = result.compactions[0].summary
    prefix = summary.split("\n", 1)[0]
    assert summary == prefix + expected and "(no summary available)" not in summary


def test_token_budget_guidance_precedes_the_context_window_on_lines_of_its_own():
    """Upstream's `token_budget_guidance_precedes_standalone_context_window` (openai/codex:codex-rs/core/tests/suite/
    token_budget.rs@3aae5d8 L239-285): among the developer texts the guidance, exactly
    `<context_window_guidance>\n{message}\n</context_window_guidance>`, comes before the `<context_window>` message
    (the guidance is a section of the developer bundle, the window a message of its own after it); the window names
    the root agent, `/root` (`AgentPath::root()`)."""
    s = start().user("u1", "work").reply("a1", "ok", 100)
    result = replay(s.transcript(), "codex-token-budget", profile="64k", usage="recorded", options={"guidance_message": "Save notes first."})
    messages = turn(result, 0).messages
    w0 = window_uuid("thread", 0)
    developer = [m.content for m in messages if m.role == "developer"]
    guidance = developer.index("<context_window_guidance>\nSave notes first.\n</context_window_guidance>")
    window = next(n for n, text in enumerate(developer) if text.startswith("<context_window>"))
    assert guidance < window
    assert [m.role for m in messages] == ["developer", "developer", "developer", "user", "user", "user"]
    assert messages[2].content == f"<context_window>\nAgent name: /root\nFirst context window id: {w0}\nCurrent context window id: {w0}\n</context_window>"
    assert [m.item_ids for m in messages[3:]] == [("agents",), ("env",), ("u1",)]


def test_only_initial_context_slots_are_updated_and_re_injected():
    # a new cwd replaces the environment entry; a <turn_aborted> marker is history, never re-injected
    s = (start().user("u1", "one").reply("a1", "ok", 60_000).env("aborted", "<turn_aborted>\nThe user interrupted.\n</turn_aborted>")
         .env("diff", ENV.format(cwd="/elsewhere")).user("u2", "two").reply("a2", "ok", 100))
    result = replay(s.transcript(), "codex-local", profile="64k", usage="recorded")
    assert shape(turn(result, 1).messages) == ["user:u1", "<SUMMARY>", "developer:dev", "user:agents", "user:diff", "user:u2"]
