"""Upstream Codex's compaction snapshot tests, ported as layout tests (docs/specs/codex.md §1.4, §2.2, §3, §4).

Each test names the insta snapshot of openai/codex `codex-rs/core/tests/suite/compact*.rs` whose
layout it reproduces: the kind, role and order of the compaction request and of the request after
it. The upstream suites mock the model; here a hand-built transcript plays the same session, with
recorded usage putting the trigger where the upstream test forces it. Placeholders follow the
snapshots: `<PROMPT>` is the compaction prompt message, `<SUMMARY>` the summary user message,
`<COMPACTION>` the opaque compaction item; everything else is the transcript item id.

Representation: upstream's newer snapshots bundle consecutive contextual fragments into one
multi-part message (`message/user[2]: <AGENTS_MD> | <ENVIRONMENT_CONTEXT>`); a transcript holds
them as separate items, so they appear here as consecutive messages in the same order.

Snapshots the emulation cannot express, and why:
- `compaction_cold_resume_after_completion`, `remote_compact_resume_restates_realtime_end_shapes`
  (resume), `rollback_followup_turn_trims_context_updates`, `rollback_past_compaction_shapes`
  (`compact_resume_fork.rs`: thread rollback and fork): the replay never resumes, rolls back or forks a thread.
- `manual_compact_without_prev_user_shapes`, `remote_manual_compact_without_prev_user_shapes`,
  `remote_mid_turn_compaction_multi_summary_reinjects_above_last_summary_shapes`: they need a
  manual `/compact` issued by the user; the Codex strategies compact only on their own triggers.
  (`manual_compact_with_history_shapes` is the DoNotInject layout of a pre-turn compaction and is
  ported below through that path.)
- `remote_manual_compact_with_history_shapes`, `remote_mid_turn_compaction_summary_only_shapes`,
  `remote_mid_turn_compaction_summary_only_reinjects_context_shapes`,
  `remote_mid_turn_compaction_multi_summary_shapes`: the mocked server returns only a compaction
  item; the emulated server always returns the retained user messages of §4.3 plus the item.
- `remote_manual_compact_restates_realtime_start_shapes`, `remote_pre_turn_compaction_restates_realtime_{start,end}_shapes`,
  `remote_mid_turn_compaction_does_not_restate_realtime_end_shapes`: realtime (voice) conversation
  items, which no transcript format carries.
- `remote_manual_compact_api_auth_prompt_cache_key_request_diff`, `remote_manual_compact_chatgpt_auth_service_tier_prompt_cache_key_request_diff`:
  request headers and fields (prompt_cache_key, service_tier), not item layouts.
- `compact_remote_parity.rs` and `compact_remote_trimming.rs` have no layout snapshots (they
  assert on the trimmed request by value; the pre-trim is tested in tests/test_codex_components.py).
"""

from __future__ import annotations

import pytest

from compaction_bench.replay import ReplayResult, replay
from tests.test_codex_strategies import PREFIX_START, Session

REMOTE = ("codex-remote-v1", "codex-remote-v2")
AGENTS = "# AGENTS.md instructions for /repo\n\n<INSTRUCTIONS>\nbe careful\n</INSTRUCTIONS>"
ENV = "<environment_context>\n  <cwd>{cwd}</cwd>\n</environment_context>"
SWITCH = "<model_switch>\nThe user was previously using a different model."


def shape(messages) -> list[str]:
    out = []
    for m in messages:
        if m.role == "system":
            continue
        if m.role == "compaction":
            out.append("<COMPACTION>")
        elif m.item_ids:
            out.append(f"{m.role}:{','.join(m.item_ids)}")
        elif m.role == "user" and m.content.startswith(PREFIX_START):
            out.append("<SUMMARY>")
        elif m.role == "user":
            out.append("<PROMPT>")
        else:
            out.append(f"{m.role}:?")
    return out


def start(cwd: str = "/repo") -> Session:
    s = Session().dev("dev").env("agents", AGENTS).env("env", ENV.format(cwd=cwd))
    return s


def summary_requests(result: ReplayResult):
    return [r for r in result.requests if r.kind == "summary"]


def turn(result: ReplayResult, step: int):
    return next(r for r in result.requests if r.kind == "turn" and r.step == step and not r.overflow)


def run(s: Session, strategy: str = "codex-local", profile: str = "64k") -> ReplayResult:
    return replay(s.transcript(), strategy, profile=profile, usage="recorded")


CONTEXT = ["developer:dev", "user:agents", "user:env"]


# --------------------------------------------------------------------------- compact.rs (local)
def test_pre_turn_compaction_including_incoming_shapes():
    """compact.rs `pre_turn_compaction_including_incoming_shapes`: the turn's context diff (a new
    cwd) and the incoming user message are not in the compaction request; the follow-up carries
    users + summary, then the *current* initial context (new cwd), then the incoming message."""
    s = (start().user("u1", "USER_ONE").reply("a1", "FIRST_REPLY", 100).user("u2", "USER_TWO").reply("a2", "SECOND_REPLY", 60_000)
         .env("diff", ENV.format(cwd="/preturn")).user("u3", "USER_THREE").reply("a3", "done", 100))
    result = run(s)
    (request,) = summary_requests(result)
    assert shape(request.messages) == [*CONTEXT, "user:u1", "assistant:a1", "user:u2", "assistant:a2", "<PROMPT>"]
    assert shape(turn(result, 2).messages) == ["user:u1", "user:u2", "<SUMMARY>", "developer:dev", "user:agents", "user:diff", "user:u3"]
    assert "/preturn" in turn(result, 2).messages[5].content


def test_pre_turn_compaction_context_window_exceeded_shapes():
    """compact.rs `pre_turn_compaction_context_window_exceeded_shapes`: the first compaction
    attempt excludes the incoming user message (the attempt then overflows)."""
    s = (start().user("u1", "USER_ONE").reply("a1", "FIRST_REPLY", 60_000).user("u2", "x " * 80_000).reply("a2", "ok", 100))
    result = run(s)
    assert shape(summary_requests(result)[0].messages) == [*CONTEXT, "user:u1", "assistant:a1", "<PROMPT>"]


def test_manual_compact_with_history_shapes_through_the_pre_turn_path():
    """compact.rs `manual_compact_with_history_shapes` (a84024bc): the DoNotInject layout, users +
    summary, then the initial context before the next user message."""
    s = start().user("u1", "USER_ONE").reply("a1", "FIRST_REPLY", 60_000).user("u2", "USER_TWO").reply("a2", "ok", 100)
    result = run(s)
    assert shape(summary_requests(result)[0].messages) == [*CONTEXT, "user:u1", "assistant:a1", "<PROMPT>"]
    assert shape(turn(result, 1).messages) == ["user:u1", "<SUMMARY>", *CONTEXT, "user:u2"]


def test_mid_turn_compaction_shapes():
    """compact.rs `mid_turn_compaction_shapes`: the request holds the tool call and output; the
    continuation has the initial context before the last user message and the summary last."""
    s = start().user("u1", "USER_ONE").call("c1", 60_000).result("r1", "c1", "error").reply("a2", "done", 100)
    result = run(s)
    assert shape(summary_requests(result)[0].messages) == [*CONTEXT, "user:u1", "assistant:c1", "tool:r1", "<PROMPT>"]
    assert shape(turn(result, 1).messages) == [*CONTEXT, "user:u1", "<SUMMARY>"]


#: A client's additional context (`AdditionalContextUserFragment`, `<external_KEY>VALUE</external_KEY>`,
#: openai/codex:codex-rs/context-fragments/src/additional_context.rs@3aae5d8 L37-49, L85-88): the input of the turn it
#: comes with, ahead of its user message (core/src/session/handlers.rs L249-263), recorded after the turn's pre-turn
#: compaction and context updates (session/turn.rs L169-245), never part of the initial context a compaction
#: re-injects (`build_initial_context_with_world_state`, session/mod.rs L3469-3665, does not render it).
#: The snapshots these three tests were first ported from (`*_replaces_ephemeral_context_shapes`, with an
#: `<additional_context_for_this_turn>` wrapper) are not in 3aae5d8's suite, whose rules they now follow.
EXTRA = "<external_editor>Context from my editor</external_editor>"
EXTRA_NOW = "<external_editor>Context from my editor, now</external_editor>"


def test_pre_turn_compaction_keeps_the_incoming_additional_context_out_of_the_request():
    """The earlier turn's additional context stays in the compaction request (it is history); the incoming turn's is
    not (recorded after the compaction), and the follow-up carries it after the re-injected initial context, before
    the incoming user message."""
    s = (start().env("x1", EXTRA).user("u1", "USER_ONE").reply("a1", "FIRST_REPLY", 100).user("u2", "USER_TWO")
         .reply("a2", "SECOND_REPLY", 60_000).env("x3", EXTRA_NOW).user("u3", "USER_THREE").reply("a3", "ok", 100))
    result = run(s)
    assert shape(summary_requests(result)[0].messages) == [
        *CONTEXT, "user:x1", "user:u1", "assistant:a1", "user:u2", "assistant:a2", "<PROMPT>",
    ]
    assert shape(turn(result, 2).messages) == ["user:u1", "user:u2", "<SUMMARY>", *CONTEXT, "user:x3", "user:u3"]


def test_mid_turn_compaction_summarizes_the_additional_context_and_does_not_re_inject_it():
    """Both additional contexts are history, so both are in the request; the continuation re-injects only the
    initial context before the last user message (a contextual message is no real user message to keep,
    `collect_user_messages`, compact.rs L520-547)."""
    s = (start().env("x1", EXTRA).user("u1", "SETUP_USER").reply("a1", "FIRST_REPLY", 100)
         .env("x2", EXTRA_NOW).user("u2", "function call limit push")
         .call("c1", 60_000).result("r1", "c1", "unsupported call").reply("a3", "ok", 100))
    result = run(s)
    assert shape(summary_requests(result)[0].messages) == [
        *CONTEXT, "user:x1", "user:u1", "assistant:a1", "user:x2", "user:u2", "assistant:c1", "tool:r1", "<PROMPT>",
    ]
    assert shape(turn(result, 2).messages) == ["user:u1", *CONTEXT, "user:u2", "<SUMMARY>"]


def test_pre_turn_compaction_strips_incoming_model_switch_shapes():
    """compact.rs `pre_turn_compaction_strips_incoming_model_switch_shapes` (e2765bfa): the
    `<model_switch>` developer message is not in the compaction request; after it, it comes back
    first, before the developer bundle."""
    s = (start().marker("m0", "gpt-5.4").user("u1", "BEFORE_SWITCH_USER").reply("a1", "BEFORE_SWITCH_REPLY", 60_000)
         .marker("m1", "gpt-5.5").dev("switch", SWITCH).user("u2", "AFTER_SWITCH_USER").reply("a2", "ok", 100))
    result = run(s)
    assert [c.trigger for c in result.compactions] == ["pre-turn"]  # same comp_hash: no switch compaction
    assert shape(summary_requests(result)[0].messages) == [*CONTEXT, "user:u1", "assistant:a1", "<PROMPT>"]
    assert shape(turn(result, 1).messages) == ["user:u1", "<SUMMARY>", "developer:switch", *CONTEXT, "user:u2"]


def test_pre_sampling_model_switch_compaction_shapes():
    """compact.rs `pre_sampling_model_switch_compaction_shapes`: a switch to a smaller window
    compacts the previous turns with the previous model; the follow-up carries the compacted
    history, the model-switch message with the developer bundle, then the new user message."""
    s = (start().marker("m0", "o3", context_window=128_000).user("u1", "before switch").reply("a1", "before switch", 60_000)
         .marker("m1", "o4-mini", context_window=64_000).dev("switch", SWITCH).user("u2", "after switch").reply("a2", "ok", 100))
    result = run(s, profile="128k")
    assert [(c.trigger, c.details["reason"]) for c in result.compactions] == [("model-switch", "ModelDownshift")]
    assert shape(summary_requests(result)[0].messages) == [*CONTEXT, "user:u1", "assistant:a1", "<PROMPT>"]
    assert shape(turn(result, 1).messages) == ["user:u1", "<SUMMARY>", "developer:switch", *CONTEXT, "user:u2"]


# --------------------------------------------------------------------------- compact_remote.rs
@pytest.mark.parametrize("strategy", REMOTE)
def test_remote_mid_turn_compaction_shapes(strategy):
    """compact_remote.rs `remote_mid_turn_compaction_shapes`: no prompt message in the compaction
    request; the continuation has the context before the last user message, the item last."""
    s = start().user("u1", "USER_ONE").call("c1", 60_000).result("r1", "c1", "error").reply("a2", "done", 100)
    result = run(s, strategy)
    assert shape(summary_requests(result)[0].messages) == [*CONTEXT, "user:u1", "assistant:c1", "tool:r1"]
    assert shape(turn(result, 1).messages) == [*CONTEXT, "user:u1", "<COMPACTION>"]


@pytest.mark.parametrize("strategy", REMOTE)
def test_remote_pre_turn_compaction_including_incoming_shapes(strategy):
    """compact_remote.rs `remote_pre_turn_compaction_including_incoming_shapes`: the incoming user
    message and the turn's context diff stay out of the request (as in the local snapshot
    73cdde6a); the follow-up re-injects the current context after the compaction item."""
    s = (start().user("u1", "USER_ONE").reply("a1", "REMOTE_FIRST_REPLY", 100).user("u2", "USER_TWO")
         .reply("a2", "REMOTE_SECOND_REPLY", 60_000).env("diff", ENV.format(cwd="/preturn")).user("u3", "USER_THREE").reply("a3", "ok", 100))
    result = run(s, strategy)
    assert shape(summary_requests(result)[0].messages) == [*CONTEXT, "user:u1", "assistant:a1", "user:u2", "assistant:a2"]
    assert shape(turn(result, 2).messages) == ["user:u1", "user:u2", "<COMPACTION>", "developer:dev", "user:agents", "user:diff", "user:u3"]


@pytest.mark.parametrize("strategy", REMOTE)
@pytest.mark.parametrize("snapshot", ["remote_pre_turn_compaction_failure_shapes", "remote_pre_turn_compaction_context_window_exceeded_shapes"])
def test_remote_pre_turn_compaction_failure_shapes(strategy, snapshot):
    """compact_remote.rs `remote_pre_turn_compaction_failure_shapes` and
    `remote_pre_turn_compaction_context_window_exceeded_shapes`: the request excludes the incoming
    user message; the compaction fails (here: the request does not fit the 32k window) and the
    turn stops with the user message unrecorded."""
    big = "word " * 40_000  # about 40,000 tokens: the compaction request exceeds 32,000
    s = start().user("u1", "USER_ONE").reply("a1", big, 30_000).user("u2", "USER_TWO").reply("a2", "ok", 100)
    result = run(s, strategy, profile="32k")
    assert shape(summary_requests(result)[0].messages) == [*CONTEXT, "user:u1", "assistant:a1"]
    assert summary_requests(result)[0].overflow and result.compactions == []
    assert not any("u2" in m.item_ids for r in result.requests for m in r.messages)


@pytest.mark.parametrize("strategy", REMOTE)
def test_remote_pre_turn_compaction_strips_incoming_model_switch_shapes(strategy):
    """compact_remote.rs `remote_pre_turn_compaction_strips_incoming_model_switch_shapes`."""
    s = (start().marker("m0", "gpt-5.4").user("u1", "BEFORE_SWITCH_USER").reply("a1", "BEFORE_SWITCH_REPLY", 60_000)
         .marker("m1", "gpt-5.5").dev("switch", SWITCH).user("u2", "AFTER_SWITCH_USER").reply("a2", "ok", 100))
    result = run(s, strategy)
    assert shape(summary_requests(result)[0].messages) == [*CONTEXT, "user:u1", "assistant:a1"]
    assert shape(turn(result, 1).messages) == ["user:u1", "<COMPACTION>", "developer:switch", *CONTEXT, "user:u2"]


@pytest.mark.parametrize("strategy", REMOTE)
def test_remote_mid_turn_compaction_summarizes_the_additional_context_and_does_not_re_inject_it(strategy):
    """As the local one, with the compaction item last and no prompt message; a contextual message is not retained
    (`should_keep_compacted_history_item`, spec §4.3 step 2)."""
    s = (start().env("x1", EXTRA).user("u1", "SETUP_USER").reply("a1", "FIRST_REPLY", 100)
         .env("x2", EXTRA_NOW).user("u2", "function call limit push")
         .call("c1", 60_000).result("r1", "c1", "unsupported call").reply("a3", "ok", 100))
    result = run(s, strategy)
    assert shape(summary_requests(result)[0].messages) == [
        *CONTEXT, "user:x1", "user:u1", "assistant:a1", "user:x2", "user:u2", "assistant:c1", "tool:r1",
    ]
    assert shape(turn(result, 2).messages) == ["user:u1", *CONTEXT, "user:u2", "<COMPACTION>"]
