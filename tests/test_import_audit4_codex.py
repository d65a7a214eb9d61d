"""Codex rollouts: `thread_rolled_back` and `inter_agent_communication` lines (docs/specs/codex.md §7.1, §7.3).

Every expectation comes from upstream, not from the importer: the histories Codex's own tests expect after a
rollback (openai/codex@3aae5d8 `core/src/context_manager/history_tests.rs`, `core/src/session/
rollout_reconstruction_tests.rs`, `core/tests/suite/compact_resume_fork.rs` and its snapshots) and the
`agent_message` item `InterAgentCommunication::to_model_input_item` builds (`protocol/src/protocol.rs` L817-850).
The rollouts are hand-built line by line; line numbers are 1-based as the importer reports them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compaction_bench.importing import load_transcript
from compaction_bench.replay import replay
from compaction_bench.transcript import Transcript

ROLLBACK = ("event_msg", {"type": "thread_rolled_back", "num_turns": 1})
SUMMARY = "Another language model started to solve this problem and produced a summary of its thinking process."


def message(role: str, *texts: str, turn_id: str | None = None) -> tuple[str, dict]:
    kind = "output_text" if role == "assistant" else "input_text"
    payload: dict = {"type": "message", "role": role, "content": [{"type": kind, "text": t} for t in texts]}
    if turn_id is not None:
        payload["internal_chat_message_metadata_passthrough"] = {"turn_id": turn_id}
    return ("response_item", payload)


def user(text: str, turn_id: str | None = None) -> tuple[str, dict]:
    return message("user", text, turn_id=turn_id)


def assistant(text: str) -> tuple[str, dict]:
    return message("assistant", text)


def rollback(num_turns: object) -> tuple[str, dict]:
    return ("event_msg", {"type": "thread_rolled_back", "num_turns": num_turns})


def token_count(total: int, last: int) -> tuple[str, dict]:
    def usage(t: int) -> dict:
        return {"input_tokens": t - 10, "cached_input_tokens": 0, "output_tokens": 10, "reasoning_output_tokens": 0, "total_tokens": t}

    return ("event_msg", {"type": "token_count", "info": {"total_token_usage": usage(total), "last_token_usage": usage(last)}})


def communication(author: str, recipient: str, content: str, trigger_turn: bool, **extra: object) -> dict:
    """An `InterAgentCommunication` as serde writes it (protocol.rs L740-756)."""
    return {"author": author, "recipient": recipient, "other_recipients": [], "content": content, "trigger_turn": trigger_turn, **extra}


def load(tmp_path: Path, *lines: tuple[str, dict]) -> Transcript:
    rows = [("session_meta", {"id": "sess", "cwd": "/repo"}), *lines]
    path = tmp_path / "rollout-2026-08-08T10-00-00-sess.jsonl"
    path.write_text("".join(json.dumps({"timestamp": "2026-08-08T10:00:00.000Z", "type": t, "payload": p}) + "\n" for t, p in rows),
                    encoding="utf-8")
    return load_transcript(path)


def live_texts(t: Transcript) -> list[str]:
    """The texts of the items a strategy is given as model input (markers are not)."""
    return [i.text for i in t.items if i.kind != "marker"]


def rollback_marker(t: Transcript):
    (marker,) = t.markers("thread_rolled_back")
    return marker


# --------------------------------------------------------------------------- thread_rolled_back
def test_a_rolled_back_turn_leaves_the_history_with_its_usage_and_is_kept_in_the_marker(tmp_path):
    """The audit's case: turn 2 ("use postgres") rolled back before turn 3. Codex persists, before the event, the
    token_count of its estimate of the smaller context (`recompute_token_usage`, handlers.rs L527-530)."""
    t = load(tmp_path,
             user("turn 1"), assistant("ok 1"), token_count(100, 100),                            # lines 2-4
             user("use postgres"), assistant("postgres it is"), token_count(300, 200),            # lines 5-7
             token_count(300, 150), rollback(1),                                                  # lines 8-9
             user("turn 3"), assistant("ok 3"), token_count(700, 400))                            # lines 10-12
    assert live_texts(t) == ["turn 1", "ok 1", "turn 3", "ok 3"]
    assert [i.text for i in t.real_user_messages()] == ["turn 1", "turn 3"]
    # the usage recorded after the rollback is turn 3's, of the context that remains; turn 2's went with it
    assert [s.usage.total for s in t.steps()] == [100, 400]
    marker = rollback_marker(t)
    assert (marker.meta["num_turns"], list(marker.meta["rolled_back_lines"]), t.meta["off_branch"]) == (1, [5, 6, 7, 8], 4)
    kept = marker.meta["rolled_back"][0]
    assert kept["line"] == 5 and kept["rollout"]["payload"]["content"][0]["text"] == "use postgres"
    assert "problems" not in t.meta and "event_msg:thread_rolled_back" not in t.meta.get("skipped", {})


def test_a_usage_recorded_before_its_rolled_back_response_is_given_to_no_later_response(tmp_path):
    """Codex ≤0.58 wrote a response's token_count before its items (the importer's `usage_alignment`): the count
    on line 5 is the usage of turn 2's response, which the rollback took, not of turn 3's."""
    t = load(tmp_path, user("turn 1"), token_count(100, 100), assistant("ok 1"),
             token_count(300, 200), user("use postgres"), assistant("postgres it is"), rollback(1),
             user("turn 3"), assistant("ok 3"))
    assert t.meta["usage_alignment"] == "before_response" and live_texts(t) == ["turn 1", "ok 1", "turn 3", "ok 3"]
    assert [s.usage.total if s.usage else None for s in t.steps()] == [100, None]
    assert t.meta["unattached_token_counts"] == 1


def test_the_replayed_requests_after_a_rollback_hold_no_rolled_back_turn(tmp_path):
    t = load(tmp_path, user("turn 1"), assistant("ok 1"), user("use postgres"), assistant("postgres it is"), rollback(1),
             user("turn 3"), assistant("ok 3"))
    last = replay(t, "codex-local", profile="gpt-5").requests[-1]
    contents = [m.content for m in last.messages]
    assert "turn 1" in contents and "turn 3" in contents
    assert not any("postgres" in c for c in contents)


@pytest.mark.parametrize(("lines", "kept"), [
    pytest.param(  # reconstruct_history_rollback_skips_non_user_turns_for_history_and_metadata
        [user("turn 1 user"), assistant("turn 1 assistant"), user("turn 2 user"), assistant("turn 2 assistant"),
         assistant("standalone assistant"), rollback(1)],
        ["turn 1 user", "turn 1 assistant"], id="a turn without a user message is no user turn"),
    pytest.param(  # drop_last_n_user_turns_ignores_session_prefix_user_messages
        [user("<environment_context>ctx</environment_context>"), user("<user_shell_command>echo 42</user_shell_command>"),
         user("turn 1 user"), assistant("turn 1 assistant"), user("turn 2 user"), assistant("turn 2 assistant"), rollback(1)],
        ["<environment_context>ctx</environment_context>", "<user_shell_command>echo 42</user_shell_command>",
         "turn 1 user", "turn 1 assistant"], id="contextual user messages are no user turns"),
    pytest.param(  # drop_last_n_user_turns_treats_inter_agent_assistant_messages_as_instruction_turns
        [user("first"), assistant("done"), assistant(json.dumps(communication("/root", "/root/worker", "continue", True))),
         assistant("worker reply"), rollback(1)],
        ["first", "done"], id="an assistant inter-agent instruction is a user turn"),
    pytest.param(  # legacy_inter_agent_assistant_messages_are_not_turn_boundaries
        [user("first"), assistant("done"), assistant("author: /root\nrecipient: /root/worker\nother_recipients: []\nContent: continue"),
         assistant("worker reply"), rollback(1)],
        [], id="a legacy inter-agent text is no user turn"),
    pytest.param(  # rollout_reconstruction.rs L270-273, L333-339: the line becomes an agent_message, a user turn
        [user("first"), assistant("done"), ("inter_agent_communication", communication("/root", "/root/worker", "go", True)),
         assistant("worker reply"), rollback(1)],
        ["first", "done"], id="an inter_agent_communication line is a user turn"),
])
def test_a_rollback_counts_the_user_turns_codex_counts(tmp_path, lines, kept):
    assert live_texts(load(tmp_path, *lines)) == kept


@pytest.mark.parametrize(("num_turns", "kept"), [
    (1, ["session prefix item", "u1", "a1"]),
    (2, ["session prefix item"]),
    (99, ["session prefix item"]),  # more turns than there are: what came before the first user turn stays
])
def test_a_rollback_past_the_turns_present_keeps_what_came_before_them(tmp_path, num_turns, kept):
    """drop_last_n_user_turns_preserves_prefix (history_tests.rs L926-959)."""
    t = load(tmp_path, assistant("session prefix item"), user("u1"), assistant("a1"), user("u2"), assistant("a2"), rollback(num_turns))
    assert live_texts(t) == kept


@pytest.mark.parametrize("updates", [
    pytest.param([message("developer", "<apps_instructions>\nROLLED_BACK_APPS"), message("developer", "<plugins_instructions>\nROLLED_BACK"),
                  message("developer", "<environments_instructions>\nROLLED_BACK"),
                  message("developer", "<collaboration_mode>ROLLED_BACK_DEV_INSTRUCTIONS</collaboration_mode>"),
                  message("developer", "<multi_agent_mode>ROLLED_BACK</multi_agent_mode>"),
                  user("<environment_context><cwd>PRETURN_CONTEXT_DIFF_CWD</cwd></environment_context>")],
                 id="trims_context_updates_above_rolled_back_turn"),
    pytest.param([message("developer", 'Approved command prefix saved:\n- ["touch"]')], id="trims_saved_prefix_update"),
    pytest.param([message("developer", "<permissions instructions>contextual permissions</permissions instructions>",
                          "persistent plugin instructions"),
                  user("<environment_context><cwd>PRETURN_CONTEXT_DIFF_CWD</cwd></environment_context>")],
                 id="mixed_developer_context_bundles"),
])
def test_a_rollback_takes_the_context_updates_of_its_turn(tmp_path, updates):
    """drop_last_n_user_turns_trims_* (history_tests.rs L1062-1170): the updates right before the rolled-back turn go."""
    t = load(tmp_path, assistant("session prefix item"), user("turn 1 user"), assistant("turn 1 assistant"), *updates,
             user("turn 2 user"), assistant("turn 2 assistant"), rollback(1))
    assert live_texts(t) == ["session prefix item", "turn 1 user", "turn 1 assistant"]


def test_a_rollback_past_a_compaction_keeps_the_compacted_history(tmp_path):
    """snapshot_rollback_past_compaction_replays_append_only_history (compact_resume_fork.rs L424-511): after the
    rollback the request holds the compacted history, then the re-injected context and the new turn only."""
    t = load(tmp_path,
             user("hello world"), assistant("FIRST_REPLY"),
             ("compacted", {"message": SUMMARY, "replacement_history": [user("hello world")[1], user(SUMMARY)[1]]}),
             message("developer", "<permissions instructions>p</permissions instructions>"),
             user("<environment_context><cwd>/repo</cwd></environment_context>"),
             user("EDITED_AFTER_COMPACT"), assistant("SECOND_REPLY"), rollback(1),
             message("developer", "<permissions instructions>p</permissions instructions>"),
             user("<environment_context><cwd>/repo</cwd></environment_context>"),
             user("AFTER_ROLLBACK"))
    assert live_texts(t) == ["hello world", "FIRST_REPLY", "<permissions instructions>p</permissions instructions>",
                             "<environment_context><cwd>/repo</cwd></environment_context>", "AFTER_ROLLBACK"]
    assert [m.meta["event"] for m in t.items if m.kind == "marker"] == ["compaction", "thread_rolled_back"]
    assert list(rollback_marker(t).meta["rolled_back_lines"]) == [5, 6, 7, 8] and "problems" not in t.meta


def test_a_rollback_into_the_history_a_compaction_left_is_reported(tmp_path):
    """Codex drops the last user turn of the compacted history (here its summary message, a user turn:
    history.rs L820-830) and keeps the compaction; the transcript can only keep the compaction whole, so says so."""
    t = load(tmp_path, user("u1"), assistant("a1"), user("u2"), assistant("a2"),
             ("compacted", {"message": SUMMARY, "replacement_history": [user("u1")[1], user("u2")[1], user(SUMMARY)[1]]}),
             rollback(1))
    assert live_texts(t) == ["u1", "a1", "u2", "a2"] and t.markers("compaction")
    (problem,) = t.meta["problems"]
    assert ":7: thread_rolled_back (num_turns 1)" in problem and "compaction at line 6" in problem


def test_a_rollback_does_not_undo_a_compaction_of_the_rolled_back_turn(tmp_path):
    """record_initial_history_resumed_rollback_drops_incomplete_user_turn_compaction_metadata (rollout_reconstruction_
    tests.rs L906-1001): the compaction's empty history has no user turn left to drop; the turn's lines stay before it."""
    t = load(tmp_path, user("seed"), user("rolled back"), ("compacted", {"message": "", "replacement_history": []}), rollback(1))
    assert live_texts(t) == ["seed", "rolled back"] and t.markers("compaction")
    assert list(rollback_marker(t).meta["rolled_back_lines"]) == [] and "off_branch" not in t.meta and "problems" not in t.meta


def test_a_rollback_to_before_the_first_turn_takes_that_turns_model_switch_parts(tmp_path):
    """history.rs L250-271: a cut at the first user turn removes `<model_switch>` parts from that turn's developer
    messages (a message left empty goes); the parts are kept in the item's meta and the marker."""
    switch = "<model_switch>\nThe user was previously using a different model.\n</model_switch>"
    t = load(tmp_path,
             message("developer", "<permissions instructions>p</permissions instructions>", switch, turn_id="t1"),
             message("developer", switch, turn_id="t1"),
             user("turn 1", turn_id="t1"), assistant("ok"), rollback(1))
    assert live_texts(t) == ["<permissions instructions>p</permissions instructions>"]
    assert [p["text"] for p in t.items[0].meta["rolled_back_parts"]] == [switch]
    assert list(rollback_marker(t).meta["rolled_back_lines"]) == [3, 4, 5]


def test_a_turn_context_after_a_rollback_configures_the_turn_after_it(tmp_path):
    """A turn whose user message got no response (interrupted), rolled back; the next turn's context comes after
    the event, so its model switch stays after the rollback marker, before the next user message."""
    t = load(tmp_path, user("turn 1"), assistant("ok"), user("turn 2"), rollback(1),
             ("turn_context", {"turn_id": "t3", "model": "gpt-5.5"}), user("turn 3"))
    assert [(i.kind, i.meta.get("event")) for i in t.items] == [
        ("user", None), ("assistant", None), ("marker", "thread_rolled_back"), ("marker", "model_switch"), ("user", None)]


@pytest.mark.parametrize("num_turns", ["1", -1, 2**32, None, 1.5])
def test_a_rollback_codex_cannot_read_is_reported_and_not_applied(tmp_path, num_turns):
    t = load(tmp_path, user("u1"), assistant("a1"), rollback(num_turns))
    assert live_texts(t) == ["u1", "a1"]
    (problem,) = t.meta["problems"]
    assert f":4: thread_rolled_back with num_turns {num_turns!r}" in problem and "not applied" in problem


# --------------------------------------------------------------------------- inter_agent_communication
def test_an_inter_agent_communication_is_the_agent_message_the_model_saw(tmp_path):
    """record_initial_history_reconstructs_typed_inter_agent_message (rollout_reconstruction_tests.rs L111-135):
    the line becomes `to_model_input_item()`, an agent_message whose one input_text part is the content."""
    t = load(tmp_path, user("spawn a worker"), assistant("spawned"),
             ("inter_agent_communication", communication("/root/worker", "/root", "child done", False, id="msg_7")))
    item = t.by_id["msg_7"]
    assert (item.kind, item.text, item.synthetic) == ("user", "child done", True)
    assert {k: item.meta[k] for k in ("codex_type", "author", "recipient", "trigger_turn")} == {
        "codex_type": "agent_message", "author": "/root/worker", "recipient": "/root", "trigger_turn": False}
    assert "skipped" not in t.meta and "problems" not in t.meta


def test_an_encrypted_inter_agent_communication_is_its_header_and_payload_size(tmp_path):
    """`to_model_input_item` of `new_encrypted` (protocol.rs L817-842): an input_text header, then the encrypted part."""
    t = load(tmp_path, ("inter_agent_communication", communication("/root", "/root/worker", "", True, encrypted_content="E" * 40)))
    (item,) = t.items
    assert item.text == "Message Type: NEW_TASK\nTask name: /root/worker\nSender: /root\nPayload:\n"
    assert item.meta["encrypted_len"] == 40


@pytest.mark.parametrize(("payload", "says"), [
    ({"author": "worker", "recipient": "/root", "content": "x", "trigger_turn": True}, "author 'worker' is no agent path"),
    ({"author": "/root", "recipient": "/root/worker", "trigger_turn": True}, "content is a JSON null"),
    ({"author": "/root", "recipient": "/root/worker", "content": "x"}, "trigger_turn is a JSON null"),
])
def test_an_inter_agent_communication_codex_cannot_read_is_reported(tmp_path, payload, says):
    t = load(tmp_path, ("inter_agent_communication", payload))
    (problem,) = t.meta["problems"]
    assert ":2: inter_agent_communication Codex cannot read: " + says in problem
