"""Codex defects of the session-42 audit, on hand-built transcripts whose expected requests follow upstream's rules
(openai/codex@3aae5d8, docs/specs/codex.md), computed by hand, not read from the code:

1. A contextual message Codex records into history when it happens (a `/shell` turn's output,
   `record_conversation_items`, core/src/tasks/user_shell.rs L447-469; a `<turn_aborted>` marker, core/src/tasks/
   mod.rs L912-925; any other format's synthetic message) is history: a compaction takes the whole history
   (`clone_history`, core/src/compact.rs L247-251; the remote request is the history, spec §3.2/§4.1). Only the
   turn's context updates (world-state fragments, `record_context_updates_and_set_reference_context_item`,
   core/src/session/mod.rs L3754-3808) and its additional context (`<external_KEY>`, core/src/session/handlers.rs
   L249-263) are recorded after the pre-turn compaction (core/src/session/turn.rs L169-245), and a world-state
   section new in that turn is part of the full initial context re-injected after it (mod.rs L3469-3665).
2. The initial context is rebuilt from world state only (`build_initial_context_with_world_state`, mod.rs
   L3469-3665): a `/shell` turn before the first prompt (user_shell.rs L459-461) is history, never re-injected.
3. The token-budget guidance precedes the `<context_window>` message (core/tests/suite/token_budget.rs L239-285;
   the test itself is in tests/test_codex_context_updates.py).
4. No fallback prompt once the token limit is reached (`allow_auto_compact_fallback = !should_roll_over &&
   !token_limit_reached`, core/src/session/turn.rs L432; session/token_budget.rs L94).
5. A lone UTF-16 surrogate counts and cuts as the U+FFFD the loaders put in its place (3 UTF-8 bytes).

Layouts use `shape` (tests/test_codex_golden.py): `<PROMPT>` the compaction prompt, `<SUMMARY>` the summary user
message, `<COMPACTION>` the opaque compaction item, else `role:item id`.
"""

from __future__ import annotations

import pytest

from compaction_bench.replay import replay
from compaction_bench.strategies.codex_components import truncate_middle
from compaction_bench.tokens import codex_estimate, utf8_len
from compaction_bench.transcript import Item
from tests.test_codex_golden import AGENTS, CONTEXT, ENV, run, shape, start, summary_requests, turn
from tests.test_codex_strategies import Session

SHELL = "<user_shell_command>\n<command>cat .env</command>\n<result>API_TOKEN=XYZZY-42</result>\n</user_shell_command>"
ABORTED = "<turn_aborted>\nThe user interrupted the previous turn on purpose.\n</turn_aborted>"
#: A synthetic user message of another format (Claude Code's interruption notice).
INTERRUPTED = "[Request interrupted by user]"
EXTRA = "<external_editor>Open file: parser.py</external_editor>"
COLLABORATION = "<collaboration_mode>\nPlan before acting.\n</collaboration_mode>"


def synthetic(session: Session, id: str, text: str) -> Session:
    session.items.append(Item(id, "user", text, synthetic=True))
    return session


def holding(result, needle: str) -> list[str]:
    return [r.kind for r in result.requests if any(needle in (m.content or "") for m in r.messages)]


# --------------------------------------------------------------------------- 1. between-turn history items
@pytest.mark.parametrize(("id", "text"), [("shell", SHELL), ("aborted", ABORTED), ("notice", INTERRUPTED)])
def test_a_contextual_message_between_turns_is_in_the_pre_turn_compaction_request(id, text):
    """a1's 60,000 tokens reach the 64k profile's 57,600 limit: the next turn compacts first. The message recorded
    between the turns is history, so it is in the summary request where it happened, and among the summarized ids;
    the follow-up keeps the real user messages and the summary (a contextual message is none, compact.rs L520-547),
    then the initial context before the incoming message."""
    s = synthetic(start().user("u1", "Fix the failing test").reply("a1", "Looking.", 60_000), id, text)
    result = run(s.user("u2", "Go on").reply("a2", "ok", 100))
    (request,) = summary_requests(result)
    assert shape(request.messages) == [*CONTEXT, "user:u1", "assistant:a1", f"user:{id}", "<PROMPT>"]
    (compaction,) = result.compactions
    assert id in compaction.summarized_ids and id in {i for m in compaction.before for i in m.item_ids}
    assert shape(turn(result, 1).messages) == ["user:u1", "<SUMMARY>", *CONTEXT, "user:u2"]


@pytest.mark.parametrize("strategy", ["codex-remote-v1", "codex-remote-v2"])
def test_the_remote_compaction_request_holds_a_shell_turn_recorded_between_turns(strategy):
    """The remote request is the history itself (spec §3.2, §4.1); the shell output is not retained (§4.3 step 2)."""
    s = synthetic(start().user("u1", "Fix the failing test").reply("a1", "Looking.", 60_000), "shell", SHELL)
    result = run(s.user("u2", "Use the token").reply("a2", "ok", 100), strategy)
    (request,) = summary_requests(result)
    assert shape(request.messages) == [*CONTEXT, "user:u1", "assistant:a1", "user:shell"]
    assert shape(turn(result, 1).messages) == ["user:u1", "<COMPACTION>", *CONTEXT, "user:u2"]


def test_a_token_budget_rollover_accounts_for_a_shell_turn_recorded_between_turns():
    """The new window holds the initial context only (§5.1): the shell output was in the history it replaced."""
    s = synthetic(start().user("u1", "Fix the failing test").reply("a1", "Looking.", 60_000), "shell", SHELL)
    result = run(s.user("u2", "Use the token").reply("a2", "ok", 100), "codex-token-budget")
    (compaction,) = result.compactions
    assert "shell" in {i for m in compaction.before for i in m.item_ids} and "shell" in compaction.dropped_ids
    assert holding(result, "XYZZY") == []  # no request was sent between the shell turn and the rollover


def test_an_interrupted_turns_marker_is_history_and_the_turns_diff_is_not():
    """The call needs a follow-up but the turn is interrupted: the `<turn_aborted>` marker is recorded then (history,
    in the request after the call and its synthetic "aborted" output, §2.1), the new cwd is the next turn's context
    update (not in the request; re-injected after the summary)."""
    s = (start().user("u1", "Run it").call("c1", 60_000))
    s = synthetic(s, "aborted", ABORTED).env("diff", ENV.format(cwd="/elsewhere")).user("u2", "Do something else").reply("a2", "ok", 100)
    result = run(s)
    (request,) = summary_requests(result)
    assert shape(request.messages) == [*CONTEXT, "user:u1", "assistant:c1", "tool:?", "user:aborted", "<PROMPT>"]
    assert shape(turn(result, 1).messages) == ["user:u1", "<SUMMARY>", "developer:dev", "user:agents", "user:diff", "user:u2"]


def test_without_a_compaction_the_between_turn_message_stays_where_it_happened():
    """Recorded when it happened, before the next turn's context update (recorded at the turn's start)."""
    s = synthetic(start().user("u1", "Fix it").reply("a1", "ok", 100).env("diff", ENV.format(cwd="/b")), "shell", SHELL)
    result = run(s.user("u2", "Go on").reply("a2", "ok", 100))
    assert not result.compactions
    assert shape(turn(result, 1).messages) == [*CONTEXT, "user:u1", "assistant:a1", "user:shell", "user:diff", "user:u2"]


def test_the_incoming_turns_additional_context_follows_the_re_injected_context():
    """`<external_KEY>` is the incoming turn's input (handlers.rs L249-263): not in the compaction request, recorded
    after the re-injected initial context, before the user message; the next compaction does not re-inject it."""
    s = start().user("u1", "Fix it").reply("a1", "ok", 60_000).env("x2", EXTRA).user("u2", "Go on").reply("a2", "ok", 60_000)
    # "recorded-always": a2's recorded 60,000 tokens reach the strategy although its context is the replay's own
    result = replay(s.user("u3", "More").reply("a3", "ok", 100).transcript(), "codex-local", profile="64k", usage="recorded-always")
    first, second = summary_requests(result)
    assert shape(first.messages) == [*CONTEXT, "user:u1", "assistant:a1", "<PROMPT>"]
    assert shape(turn(result, 1).messages) == ["user:u1", "<SUMMARY>", *CONTEXT, "user:x2", "user:u2"]
    assert shape(second.messages)[-3:] == ["user:u2", "assistant:a2", "<PROMPT>"]
    assert shape(turn(result, 2).messages) == ["user:u1", "user:u2", "<SUMMARY>", *CONTEXT, "user:u3"]


def test_a_world_state_section_new_in_the_compacting_turn_is_re_injected_with_the_initial_context():
    """A `<collaboration_mode>` section turned on with the compacting turn is part of the world state the full
    initial context renders (mod.rs L3469-3665; a developer section, so in the developer bundle, after `dev`); it is
    not in the compaction request (a context update, recorded after it)."""
    s = start().user("u1", "Fix it").reply("a1", "ok", 60_000).dev("collab", COLLABORATION).user("u2", "Go on").reply("a2", "ok", 100)
    result = run(s)
    (request,) = summary_requests(result)
    assert "developer:collab" not in shape(request.messages)
    assert shape(turn(result, 1).messages) == ["user:u1", "<SUMMARY>", "developer:dev", "developer:collab", "user:agents", "user:env", "user:u2"]


# --------------------------------------------------------------------------- 2. the initial context
def test_a_shell_turn_before_the_first_prompt_is_history_and_not_re_injected():
    s = synthetic(Session().dev("dev").env("agents", AGENTS).env("env", ENV.format(cwd="/repo")), "shell", SHELL)
    result = run(s.user("u1", "Fix it").reply("a1", "ok", 60_000).user("u2", "next").reply("a2", "ok", 100))
    (request,) = summary_requests(result)
    assert shape(request.messages) == [*CONTEXT, "user:shell", "user:u1", "assistant:a1", "<PROMPT>"]
    assert shape(turn(result, 1).messages) == ["user:u1", "<SUMMARY>", *CONTEXT, "user:u2"]


def test_a_shell_turn_before_the_first_prompt_is_not_in_a_mid_turn_re_injection():
    """Mid-turn the initial context goes before the last real user message (§2.2 step 5), without the shell output."""
    s = synthetic(Session().dev("dev").env("agents", AGENTS).env("env", ENV.format(cwd="/repo")), "shell", SHELL)
    s = s.user("u1", "Fix it").call("c1", 60_000).result("r1", "c1", "done").reply("a1", "ok", 100)
    result = run(s)
    assert shape(turn(result, 1).messages) == [*CONTEXT, "user:u1", "<SUMMARY>"]


def test_a_shell_turn_before_the_first_prompt_is_not_in_a_new_token_budget_window():
    s = synthetic(Session().dev("dev").env("agents", AGENTS).env("env", ENV.format(cwd="/repo")), "shell", SHELL)
    result = run(s.user("u1", "Fix it").reply("a1", "ok", 60_000).user("u2", "next").reply("a2", "ok", 100), "codex-token-budget")
    assert "user:shell" in shape(turn(result, 0).messages)
    assert shape(turn(result, 1).messages) == ["developer:dev", "developer:?", "user:agents", "user:env", "user:u2"]


# --------------------------------------------------------------------------- 4. the fallback prompt
FALLBACK = {"auto_compact_fallback_prompt": "FALLBACK: save your notes", "auto_compact_fallback_buffer_tokens": 3_000}


@pytest.mark.parametrize(("total", "sent"), [(58_000, True), (60_700, False)])
def test_the_fallback_prompt_waits_for_no_rollover_and_the_limit_not_reached(total, sent):
    """64k profile (§1.1): usable 60,800, auto-compact limit 57,600, reached at 57,600 + the 3,000 buffer = 60,600.
    A final answer at 58,000 leaves 0 tokens (57,600 - 58,000 < 0) with the limit not reached: the prompt is sent.
    At 60,700 the limit is reached: no prompt (the next turn rolls over instead)."""
    s = start().user("u1", "Fix it").reply("a1", "done", total)
    result = replay(s.transcript(), "codex-token-budget", profile="64k", usage="recorded", options=FALLBACK)
    final = result.requests[-1]
    assert final.kind == "final"
    assert any(m.content == FALLBACK["auto_compact_fallback_prompt"] for m in final.messages) is sent


# --------------------------------------------------------------------------- 5. lone surrogates
def test_a_lone_surrogate_counts_as_the_replacement_character():
    assert utf8_len("\ud83d") == utf8_len("\ufffd") == 3
    assert utf8_len("a\ud83db\ude00") == utf8_len("a\ufffdb\ufffd") == 8
    assert codex_estimate("ab\ud83d") == codex_estimate("ab\ufffd") == 2


def test_truncate_middle_cuts_a_lone_surrogate_as_the_replacement_character():
    """Every budget cuts where the U+FFFD text is cut; the kept surrogates are the text's own characters."""
    text, replaced = "ab\ud83dcd\ud83def", "ab\ufffdcd\ufffdef"
    for budget in range(len(replaced.encode("utf-8")) + 2):
        for unit in ("tokens", "bytes"):
            cut = truncate_middle(text, budget, unit=unit)
            assert cut.replace("\ud83d", "\ufffd") == truncate_middle(replaced, budget, unit=unit)
            assert "\ufffd" not in cut


@pytest.mark.parametrize("strategy", ["codex-local", "codex-remote-v2", "codex-token-budget"])
def test_a_transcript_with_a_lone_surrogate_replays_as_with_the_replacement_character(strategy):
    def session(char: str) -> Session:
        return start().user("u1", f"emoji {char} cut " + "x" * 400).reply("a1", "ok", 60_000).user("u2", "next").reply("a2", "ok", 100)

    lone = replay(session("\ud83d").transcript(), strategy, profile="64k", usage="recorded")
    replaced = replay(session("\ufffd").transcript(), strategy, profile="64k", usage="recorded")
    assert [r.estimate_tokens for r in lone.requests] == [r.estimate_tokens for r in replaced.requests]
    assert [c.details.get("estimate_after") for c in lone.compactions] == [c.details.get("estimate_after") for c in replaced.compactions]
