"""Codex rollouts: the contextual user fragments Codex injects, and `agent_message` items with encrypted content.

The expectations are upstream's, not the importer's (openai/codex@3aae5d8): the fragment texts are the ones Codex
renders or its own tests use (`core/src/context/contextual_user_message_tests.rs`, the fragment files under
`core/src/context/`, `context-fragments/src/additional_context.rs`, `protocol/src/items.rs`), and the encrypted
`agent_message` is the item `InterAgentCommunication::to_model_input_item` builds (`protocol/src/protocol.rs`
L817-842; `AgentMessageInputContent`, `protocol/src/models.rs` L736-755). Every rollout is built by hand.
"""

from __future__ import annotations

import pytest

from compaction_bench.transcript import Transcript
from tests.test_import_audit4_codex import load

ENCRYPTED = "gAAAAB" + "x" * 58


def user(*texts: str) -> tuple[str, dict]:
    return ("response_item", {"type": "message", "role": "user", "content": [{"type": "input_text", "text": t} for t in texts]})


def users(t: Transcript) -> list[tuple[str, bool]]:
    return [(i.text, i.synthetic) for i in t.items if i.kind == "user"]


# --------------------------------------------------------------------------- contextual user fragments
ADDED_FRAGMENTS = {
    # detects_agents_instructions_fragment (contextual_user_message_tests.rs L30-40): the header without a directory
    "agents_md_without_directory": "# AGENTS.md instructions\n\n<INSTRUCTIONS>\nbody\n</INSTRUCTIONS>",
    # detects_recommended_plugins_fragment (L84-90)
    "recommended_plugins": "<recommended_plugins>\n- Google Drive (google-drive@openai-curated-remote)\n</recommended_plugins>",
    # detects_legacy_goal_context_fragment (L92-98)
    "legacy_goal_context": "<goal_context>\nContinue working toward the active thread goal.\n</goal_context>",
    # AdditionalContextUserFragment::render: "<external_" + "{key}>{value}</external_{key}" + ">" (additional_context.rs L20-36, L85-88)
    "additional_context": "<external_ticket>ABC-123 is the ticket this turn works on</external_ticket>",
    # build_hook_prompt_message: the fragment serialised as <hook_prompt hook_run_id="..."> with escaped text (items.rs L100-107, L596-616)
    "hook_prompt": '<hook_prompt hook_run_id="hook-run-1">Retry with &quot;waves&quot; &amp; &lt;tides&gt;</hook_prompt>',
    # the legacy warnings Codex still filters from old sessions (legacy_*_warning.rs L20-24)
    "unified_exec_limit_warning": "Warning: The maximum number of unified exec processes you can keep open is 64. Close some.",
    "model_mismatch_warning": "Warning: Your account was flagged for potentially high-risk cyber activity and requests were routed.",
    "apply_patch_warning": "Warning: apply_patch was requested via exec_command. Use the apply_patch tool instead of exec_command.",
}


@pytest.mark.parametrize("text", ADDED_FRAGMENTS.values(), ids=ADDED_FRAGMENTS.keys())
def test_a_contextual_fragment_upstream_recognises_is_injected_context(tmp_path, text):
    """A fragment is no user turn: synthetic, and the typed message after it opens the first turn."""
    t = load(tmp_path, user(text), user("fix the bug"))
    assert users(t) == [(text, True), ("fix the bug", False)]
    assert [i.turn for i in t.items if i.kind == "user"] == [0, 0]
    assert "problems" not in t.meta


NOT_FRAGMENTS = {
    # does_not_hide_arbitrary_context_tags (contextual_user_message_tests.rs L106-111)
    "arbitrary_tag": "<project_context>\nbody\n</project_context>",
    # rejects_invalid_internal_model_context_source (L113-119): the source must be [a-z][a-z0-9_]*
    "internal_context_bad_source": '<codex_internal_context source="Extension">\nbody\n</codex_internal_context>',
    # no Codex version renders these as user fragments: <subagents> is a section inside <environment_context>
    # (core/src/context/world_state/environment.rs), plugins are a developer fragment (<plugins_instructions>)
    "subagents_section": "<subagents>\n- agent-1: atlas\n</subagents>",
    "plugins_tag": "<plugins>\n- Google Drive\n</plugins>",
    # the additional-context key must close its own tag (additional_context.rs L37-49)
    "external_unclosed": "<external_ticket>see the ticket</external_other>",
    # a hook prompt needs a run id that is not blank (items.rs L639-647)
    "hook_prompt_blank_run": '<hook_prompt hook_run_id="  ">Retry</hook_prompt>',
    # the apply_patch warning needs its closing sentence too (legacy_apply_patch_exec_command_warning.rs L20-24)
    "apply_patch_warning_cut": "Warning: apply_patch was requested via exec_command.",
}


@pytest.mark.parametrize("text", NOT_FRAGMENTS.values(), ids=NOT_FRAGMENTS.keys())
def test_text_upstream_does_not_recognise_is_a_real_user_message(tmp_path, text):
    t = load(tmp_path, user(text))
    assert users(t) == [(text, False)]


def test_an_internal_context_fragment_with_a_valid_source_is_context(tmp_path):
    """detects_internal_model_context_fragment (contextual_user_message_tests.rs L70-82): the rendered fragment."""
    text = '<codex_internal_context source="extension">\nInternal steering.\n</codex_internal_context>'
    assert users(load(tmp_path, user(text))) == [(text, True)]


def test_a_message_with_a_contextual_part_anywhere_is_context(tmp_path):
    """`is_contextual_user_message_content` asks whether ANY input_text part is a fragment (event_mapping.rs L61-63),
    and such a message is no user turn (`is_user_turn_boundary`, history.rs L820-830): a later rollback of one turn
    takes the typed turn, not the bundled context message."""
    bundled = user("hello", "<environment_context>\n  <cwd>/repo</cwd>\n</environment_context>")
    t = load(tmp_path, bundled)
    (item,) = [i for i in t.items if i.kind == "user"]
    assert item.synthetic is True
    rolled = load(tmp_path, user("turn one"), bundled, ("event_msg", {"type": "thread_rolled_back", "num_turns": 1}))
    assert users(rolled) == []  # the one user turn is rolled back, with the context message that followed it
    (marker,) = rolled.markers("thread_rolled_back")
    assert list(marker.meta["rolled_back_lines"]) == [2, 3]


# --------------------------------------------------------------------------- agent_message with encrypted content
HEADER = "Message Type: NEW_TASK\nTask name: /root/worker\nSender: /root\nPayload:\n"


def agent_message(*content: dict) -> tuple[str, dict]:
    return ("response_item", {"type": "agent_message", "id": "amsg_1", "author": "/root", "recipient": "/root/worker",
                              "content": list(content)})


def test_an_encrypted_agent_message_is_its_header_and_the_size_of_its_payload(tmp_path):
    """The item `to_model_input_item` builds for an encrypted communication: the readable header, then the payload
    only the provider decrypts. The model reads both: the header is the text, the payload's size is kept (Codex
    estimates it at ceil(len*9/16) bytes, history.rs L759-795); nothing is an unknown part."""
    t = load(tmp_path, agent_message({"type": "input_text", "text": HEADER},
                                     {"type": "encrypted_content", "encrypted_content": ENCRYPTED}))
    item = t.by_id["amsg_1"]
    assert (item.kind, item.text, item.synthetic) == ("user", HEADER, True)
    assert {k: item.meta[k] for k in ("codex_type", "author", "recipient", "encrypted_len")} == {
        "codex_type": "agent_message", "author": "/root", "recipient": "/root/worker", "encrypted_len": len(ENCRYPTED)}
    assert "unknown_content" not in item.meta
    assert "problems" not in t.meta


def test_an_agent_message_of_encrypted_content_alone_is_kept_with_its_size(tmp_path):
    """The first form (5f4d06ef1, before the typed header of 5b22a8e5b): one encrypted part, no readable text. The
    item is kept (a user turn for a rollback, `is_user_turn_boundary`), its text empty, its size recorded."""
    t = load(tmp_path, agent_message({"type": "encrypted_content", "encrypted_content": ENCRYPTED}))
    item = t.by_id["amsg_1"]
    assert (item.kind, item.text, item.meta["encrypted_len"]) == ("user", "", len(ENCRYPTED))
    assert "problems" not in t.meta


def test_plain_agent_message_parts_are_joined_as_codex_joins_them(tmp_path):
    """`plaintext_agent_message_content` (models.rs L744-755) joins the input_text parts with a line break."""
    t = load(tmp_path, agent_message({"type": "input_text", "text": "first"}, {"type": "input_text", "text": "second"}))
    item = t.by_id["amsg_1"]
    assert item.text == "first\nsecond" and "encrypted_len" not in item.meta


def test_an_agent_message_part_of_another_kind_is_still_reported(tmp_path):
    """`AgentMessageInputContent` has two kinds; a third (or an encrypted part whose payload is no string) is kept
    in the item's meta and reported, never dropped."""
    odd = {"type": "output_text", "text": "said"}
    broken = {"type": "encrypted_content", "encrypted_content": 5}
    t = load(tmp_path, agent_message(odd, broken))
    item = t.by_id["amsg_1"]
    assert item.text == "said" and [dict(part) for part in item.meta["unknown_content"]] == [odd, broken]
    problems = t.meta["problems"]
    assert len(problems) == 2 and all(":2: unknown agent_message content part" in p for p in problems)
