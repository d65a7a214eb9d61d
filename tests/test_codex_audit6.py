"""Codex findings of the session-45 audit, on hand-built rollouts whose expected contexts follow upstream
(openai/codex@3aae5d8 unless another commit is named), not the code:

1. After a compaction Codex records its full initial context again, because the compaction cleared its reference
   context; with a reference context a turn records only the sections that changed, and nothing for an unchanged
   one (`record_context_updates_and_set_reference_context_item`, core/src/session/mod.rs L3754-3808). The rollouts
   follow the upstream snapshot `all__suite__compact__pre_turn_compaction_including_incoming_shapes.snap` (and its
   `compact_remote` twin; the rollback one follows `rollback_past_compaction_shapes`): a replay that keeps the
   history from before the recorded compaction sends the developer bundle and the environment once, and a section
   the compaction's turn changed (the snapshot's cwd override) as its diff.
2. Outputs Codex sends with `success: false` (`FunctionCallError::RespondToModel`): 0.3x codex.rs
   (openai/codex@69cb72f84^) L2816, L2826, L2845, L2915, L3028, L3042, mapped at L2226-2234 / L2300-2308;
   3aae5d8 core/src/tools/events.rs L422-456. Unified exec output is `success: true` whatever its exit code
   (core/src/tools/context.rs L339-348).
3. Remote compaction keeps hook prompts (`should_keep_compacted_history_item`, core/src/compact_remote.rs
   L341-349, before the 64k budget: compact_remote_v2.rs L445-456); the local path keeps user messages only
   (`collect_user_messages`, compact.rs L520-547).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compaction_bench.importing import load_transcript
from compaction_bench.replay import replay
from compaction_bench.scenarios.codex_rollout import codex_failed, decode_output
from compaction_bench.transcript import Transcript
from tests.test_codex_strategies import PREFIX_START

PREFIX = ("Another language model started to solve this problem and produced a summary of its thinking process. "
          "You also have access to the state of the tools that were used by that language model. Use this to build "
          "on the work that has already been done and avoid duplicating work. Here is the summary produced by the "
          "other language model, use the information in this summary to assist with your own analysis:")
PERMISSIONS = "<permissions instructions>\nsandbox: workspace-write\n</permissions instructions>"
U1 = "USER_ONE: the deploy key is ALPHA-7731"
U2 = "USER_TWO: remember port 6143"
U3 = "USER_THREE: what was the deploy key and the port?"
SUMMARY = "SUMMARY: deploy key ALPHA-7731, port 6143."
SKIPPED = "initial context recorded again after a compaction"
HOOK = '<hook_prompt hook_run_id="run-1">HOOK: always run make lint before finishing.</hook_prompt>'


def env(cwd: str) -> str:
    return f"<environment_context>\n  <cwd>{cwd}</cwd>\n</environment_context>"


def message(role: str, text: str) -> tuple[str, dict]:
    kind = "output_text" if role == "assistant" else "input_text"
    return ("response_item", {"type": "message", "role": role, "content": [{"type": kind, "text": text}]})


class Rollout:
    """Rollout lines in the 3aae5d8 shape, with cumulative token counts."""

    def __init__(self) -> None:
        self.total = 0
        self.lines: list[tuple[str, dict]] = [
            ("session_meta", {"id": "sess", "cwd": "/repo", "cli_version": "0.146.0",
                              "base_instructions": {"text": "You are Codex, a coding agent."}}),
            ("event_msg", {"type": "task_started", "turn_id": "t1"}),
            message("developer", PERMISSIONS), message("user", env("/repo")),
            ("turn_context", {"turn_id": "t1", "cwd": "/repo", "model": "gpt-5.5"}),
        ]

    def token_count(self, tokens: int | None = None) -> Rollout:
        """A new count of `tokens`, or the repeated one (`recompute_token_usage` after a compaction) when None."""
        if tokens is not None:
            self.total += tokens
        last = tokens or 0
        usage = {"input_tokens": last, "cached_input_tokens": 0, "output_tokens": 0, "reasoning_output_tokens": 0, "total_tokens": last}
        total = usage | {"input_tokens": self.total, "total_tokens": self.total}
        self.lines.append(("event_msg", {"type": "token_count", "info": {"total_token_usage": total, "last_token_usage": usage}}))
        return self

    def turn(self, user: str, reply: str) -> Rollout:
        self.lines += [message("user", user), message("assistant", reply)]
        return self.token_count(1000)

    def context(self, *texts: tuple[str, str]) -> Rollout:
        self.lines += [message(role, text) for role, text in texts]
        return self

    def local_compaction(self, users: list[str]) -> Rollout:
        text = f"{PREFIX}\n{SUMMARY}"
        history = [message("user", u)[1] for u in [*users, text]]
        self.lines.append(message("assistant", SUMMARY))
        self.token_count(300)
        self.lines.append(("compacted", {"message": text, "replacement_history": history}))
        return self.token_count()

    def remote_compaction(self, users: list[str]) -> Rollout:
        history = [message("user", u)[1] for u in users] + [{"type": "compaction", "encrypted_content": "gAAAA" + "y" * 400}]
        self.lines.append(("compacted", {"message": "", "replacement_history": history}))
        return self.token_count()

    def load(self, tmp_path: Path) -> Transcript:
        path = tmp_path / "rollout-2026-08-08T10-00-00-sess.jsonl"
        path.write_text("".join(json.dumps({"timestamp": "2026-08-08T10:00:00.000Z", "type": t, "payload": p}) + "\n"
                                for t, p in self.lines), encoding="utf-8")
        return load_transcript(path)


def final_context(transcript: Transcript, strategy: str, **options: object) -> list[str]:
    result = replay(transcript, strategy, profile="64k", options=options or None)
    return [m.content or "" for m in result.requests[-1].messages]


def labelled(content: str) -> str:
    """A message's text, or `<SUMMARY>` for the strategy's own summary message."""
    return "<SUMMARY>" if content.startswith(PREFIX_START) else content


def count(context: list[str], text: str) -> int:
    return sum(1 for content in context if content == text)


def compaction_shape(kind: str, third_env: str) -> Rollout:
    """The snapshot's session: two turns, a pre-turn compaction before USER_THREE (local or remote v2), then the
    initial context Codex records again (its environment `third_env`) and the third turn."""
    r = Rollout().turn(U1, "FIRST_REPLY").turn(U2, "SECOND_REPLY")
    r.lines.append(("event_msg", {"type": "task_started", "turn_id": "t3"}))
    r = r.local_compaction([U1, U2]) if kind == "local" else r.remote_compaction([U1, U2])
    return r.context(("developer", PERMISSIONS), ("user", env(third_env))).turn(U3, "THIRD_REPLY")


# --------------------------------------------------------------------------- 1. the initial context recorded again
@pytest.mark.parametrize("kind", ["local", "remote"])
@pytest.mark.parametrize("strategy", ["codex-local", "codex-remote-v2", "none"])
def test_a_recorded_compaction_leaves_one_copy_of_the_initial_context(tmp_path, kind, strategy):
    """No replay compacts here (64k): each keeps its reference context, so the unchanged permissions and environment
    are not recorded again. Expected: DEV, ENV, U1, R1, U2, R2, U3, R3 (and the base instructions)."""
    transcript = compaction_shape(kind, "/repo").load(tmp_path)
    assert transcript.meta["skipped"][SKIPPED] == 2
    context = final_context(transcript, strategy)
    assert count(context, PERMISSIONS) == 1 and count(context, env("/repo")) == 1
    assert context[1:] == [PERMISSIONS, env("/repo"), U1, "FIRST_REPLY", U2, "SECOND_REPLY", U3, "THIRD_REPLY"]


@pytest.mark.parametrize("strategy", ["codex-local", "codex-remote-v2", "none"])
def test_a_section_the_compacted_turn_changed_is_kept_as_its_diff(tmp_path, strategy):
    """The snapshot's own case: the turn after the compaction overrides the cwd. Upstream with its reference context
    records that section's change alone: the permissions once, the new environment before USER_THREE."""
    transcript = compaction_shape("local", "/preturn").load(tmp_path)
    assert transcript.meta["skipped"][SKIPPED] == 1
    context = final_context(transcript, strategy)
    assert context[1:] == [PERMISSIONS, env("/repo"), U1, "FIRST_REPLY", U2, "SECOND_REPLY", env("/preturn"), U3, "THIRD_REPLY"]


@pytest.mark.parametrize("strategy", ["codex-local", "codex-remote-v2", "none"])
def test_a_rollback_past_a_compaction_leaves_one_copy_of_the_initial_context(tmp_path, strategy):
    """`rollback_past_compaction_shapes`: a manual compaction, a turn (with the context recorded again before it),
    a rollback of that turn, then the context recorded again and a new turn. Without the compaction the reference
    context of the first turn stands: nothing is recorded again."""
    r = Rollout().turn(U1, "FIRST_REPLY")
    r.lines.append(("event_msg", {"type": "task_started", "turn_id": "tc"}))
    r.local_compaction([U1]).context(("developer", PERMISSIONS), ("user", env("/repo"))).turn("EDITED: port 9999", "SECOND_REPLY")
    r.lines.append(("event_msg", {"type": "thread_rolled_back", "num_turns": 1}))
    transcript = r.context(("developer", PERMISSIONS), ("user", env("/repo"))).turn("AFTER_ROLLBACK", "THIRD_REPLY").load(tmp_path)
    context = final_context(transcript, strategy)
    assert context[1:] == [PERMISSIONS, env("/repo"), U1, "FIRST_REPLY", "AFTER_ROLLBACK", "THIRD_REPLY"]


def test_a_replay_that_compacts_there_injects_the_initial_context_once(tmp_path):
    """A replay that compacts before USER_THREE itself (a 2,500-token window) re-injects the current initial context
    after its summary, once (compact.rs `build_compacted_history` then the full context of the turn)."""
    r = Rollout().turn(U1, "FIRST_REPLY").turn(U2, "SECOND_REPLY " + "filler " * 2500)
    r.lines.append(("event_msg", {"type": "task_started", "turn_id": "t3"}))
    transcript = r.local_compaction([U1, U2]).context(("developer", PERMISSIONS), ("user", env("/repo"))).turn(U3, "R3").load(tmp_path)
    context = final_context(transcript, "codex-local", model_context_window=2500)
    assert [labelled(c) for c in context[1:]] == [U1, U2, "<SUMMARY>", PERMISSIONS, env("/repo"), U3, "R3"]


# --------------------------------------------------------------------------- 2. failures by their wording
@pytest.mark.parametrize("output", [
    "exec command rejected by user",  # 0.3x L2816, L3042; 3aae5d8 events.rs L443
    "exec command aborted by user",  # 0.3x L2826
    'exec command rejected: "writing outside of the project; rejected by user approval settings"',  # 0.3x L2845
    'execution error: Io(Os { code: 2, kind: NotFound, message: "No such file or directory" })',  # 0.3x L2915; events.rs L424
    "retry failed: sandbox error: timeout",  # 0.3x L3028
    "patch rejected by user",  # events.rs L445
])
def test_outputs_codex_sends_as_failures_are_errors(output):
    text, envelope, _ = decode_output(output)
    assert codex_failed(output, text, envelope)


@pytest.mark.parametrize("output", [
    "Chunk ID: c1\nWall time: 0.1 seconds\nProcess exited with code 1\nOriginal token count: 3\nOutput:\nboom",
    "Exit code: 0\nWall time: 0.1 seconds\nOutput:\nok",
    "the test printed: execution error: none",  # the wording inside an output is no failure: anchored at the start
    "exec command rejected by user, then approved",
])
def test_successful_outputs_stay_successes(output):
    text, envelope, _ = decode_output(output)
    assert not codex_failed(output, text, envelope)


def test_an_imported_rejection_is_an_error_result(tmp_path):
    r = Rollout()
    r.lines += [message("user", U1),
                ("response_item", {"type": "function_call", "name": "shell", "arguments": "{}", "call_id": "c1"}),
                ("response_item", {"type": "function_call_output", "call_id": "c1", "output": "exec command rejected by user"})]
    (result,) = [i for i in r.load(tmp_path).items if i.kind == "tool_result"]
    assert result.is_error


# --------------------------------------------------------------------------- 3. hook prompts in a remote compaction
def hook_session(tmp_path: Path) -> Transcript:
    """Two turns (the second long), a hook prompt recorded before the third: a 2,500-token window compacts before
    USER_THREE, with the hook prompt in the history."""
    r = Rollout().turn(U1, "FIRST_REPLY").turn(U2, "SECOND_REPLY " + "filler " * 2500)
    return r.context(("user", HOOK)).turn(U3, "R3").load(tmp_path)


@pytest.mark.parametrize("strategy", ["codex-remote-v1", "codex-remote-v2"])
def test_a_remote_compaction_retains_a_hook_prompt(tmp_path, strategy):
    transcript = hook_session(tmp_path)
    assert [i.meta.get("hook_prompt") for i in transcript.items if i.text == HOOK] == [True]
    result = replay(transcript, strategy, profile="64k", options={"model_context_window": 2500})
    (compaction,) = result.compactions
    assert [m.content for m in compaction.after if m.role == "user"] == [U1, U2, HOOK]


def test_a_local_compaction_keeps_no_hook_prompt(tmp_path):
    result = replay(hook_session(tmp_path), "codex-local", profile="64k", options={"model_context_window": 2500})
    (compaction,) = result.compactions
    assert [labelled(m.content) for m in compaction.after if m.role == "user"] == [U1, U2, "<SUMMARY>"]


@pytest.mark.parametrize(("parts", "expected"), [
    ([HOOK], True),
    ([env("/repo"), HOOK], True),  # another contextual fragment alongside (contextual_user_message.rs L46-73)
    ([HOOK, "and a typed request"], False),  # a part that is neither: no hook prompt
    ([env("/other")], False),
])
def test_a_hook_prompt_message_is_marked(tmp_path, parts, expected):
    r = Rollout()
    r.lines += [("response_item", {"type": "message", "role": "user", "content": [{"type": "input_text", "text": t} for t in parts]}),
                message("user", U1)]
    (item,) = [i for i in r.load(tmp_path).items if i.kind == "user" and i.text == "".join(parts)]
    assert bool(item.meta.get("hook_prompt")) is expected
