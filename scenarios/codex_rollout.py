"""Importer for Codex CLI rollout files (`~/.codex/sessions/**/rollout-*.jsonl`, also `.jsonl.zst`).

Owns the mapping of Codex's rollout lines (docs/specs/codex.md §7, corpora/MANIFEST.md) to canonical items:

- the ``{timestamp, [ordinal], type, payload}`` envelope, and the pre-envelope legacy variant
  (first line ``{id, timestamp, instructions, git}``, then bare response items and
  ``{"record_type": "state"}`` lines);
- ``response_item`` messages: ``developer``/``system`` roles become system items (developer ones
  with ``meta.role = "developer"``); a content part of a kind Codex does not write is a problem, kept
  in ``meta.unknown_content`` (its text, if any, in the message), and so is a text that is no string
  (kept as its JSON text); user messages that are contextual fragments (AGENTS.md instructions,
  ``<environment_context>``, ...: ``is_contextual``) are ``synthetic`` (a hook prompt message,
  ``_is_hook_prompt_message``, also has ``meta.hook_prompt``); assistant messages, reasoning (encrypted size in
  ``meta.encrypted_len``), function/custom/local-shell calls and their outputs (an output that is a JSON string
  ``{"output": ..., "metadata": ...}`` is decoded: the text is the output, the rest stays in
  ``meta.output_envelope`` so the wire form can be rebuilt exactly; an output is ``is_error`` when Codex sent it
  as a failed call, by its envelope's exit code or its wording: ``codex_failed``);
  ``agent_message`` items are user-role items with ``meta.codex_type = "agent_message"`` (their input text the
  text, the size of an encrypted part in ``meta.encrypted_len``);
  every item keeps the Codex payload type in ``meta.codex_type``;
- model responses: consecutive model-output items; a new ``token_count`` (a changed cumulative
  total) starts a new response. Its ``last_token_usage`` becomes the `Usage` of the response it
  belongs to (a count that is no token count is a problem and leaves that usage unknown): Codex
  ≤0.58 writes the event before the response's items, newer versions after them; the file's own
  order decides (``meta.usage_alignment``);
- ``turn_context`` model changes become ``marker`` items (``event: "model_switch"``, ``model``,
  ``previous_model``, ``comp_hash``/``context_window`` when recorded), placed before the user
  message of the turn they configure; ``compacted`` lines become markers (``event:
  "compaction"``, ``_RolloutReader.compacted``: the real user messages the ``replacement_history`` kept, and the
  summary request's own response a local compaction writes before the line, which is no conversation item:
  ``_summary_response``); the entries of the initial context Codex records again, unchanged, after a compaction
  are left out and counted in ``meta.skipped`` (``_RolloutReader.reinjected``: the replay keeps the history from
  before the compaction, whose reference context stands); ``turn_aborted`` events and ``ghost_snapshot`` items
  become markers;
- ``inter_agent_communication`` lines are the ``agent_message`` item Codex gives the model for them
  (§7.3 step 3): a user-role item with ``meta.codex_type = "agent_message"``, its text the message
  (for an encrypted one the header Codex puts before the encrypted payload, the payload's size in
  ``meta.encrypted_len``); one Codex cannot read is a problem naming its line;
- ``thread_rolled_back`` events (§7.3) take the rolled-back turns out of the transcript as Codex takes
  them out of its history (`_RollbackReplay`): the lines of those turns, their usage included, are kept
  verbatim in the rollback's marker (``event: "thread_rolled_back"``, ``rolled_back``) and counted in
  ``meta.off_branch``, as the Claude Code importer counts the lines off its live branch; a rollback that
  reaches into the history a compaction left is a problem (the replay keeps that history whole);
- everything else (UI duplicates such as ``user_message``/``agent_message`` events, world state)
  is counted in ``meta.skipped`` and malformed lines are listed in ``meta.problems``.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from compaction_bench.importing import Importer, ImportFailure
from compaction_bench.scenarios.builder import (
    UNKNOWN_CONTENT,
    TranscriptBuilder,
    image_attachment,
    list_of,
    text_of,
    token_counts,
    unknown_block_text,
)
from compaction_bench.scenarios.readers import read_jsonl
from compaction_bench.transcript import Attachment, Transcript, Usage, json_type

ENVELOPE_TYPES = frozenset(
    {"session_meta", "response_item", "event_msg", "turn_context", "compacted", "world_state",
     "inter_agent_communication", "inter_agent_communication_metadata"}
)
#: The parts of a message's `content` Codex writes (`ContentItem`): text, and images (attachments).
TEXT_PARTS = frozenset({"input_text", "output_text"})
MESSAGE_PARTS = TEXT_PARTS | {"input_image"}
CALL_TYPES = {"function_call": "function_call", "custom_tool_call": "custom_tool_call", "local_shell_call": "local_shell_call"}
OUTPUT_TYPES = frozenset({"function_call_output", "custom_tool_call_output", "local_shell_call_output"})
MARKER_ITEM_TYPES = frozenset({"ghost_snapshot", "compaction", "compaction_summary", "context_compaction", "web_search_call",
                               "image_generation_call", "tool_search_call", "tool_search_output"})


#: The contextual user fragments Codex injects, by the markers it recognises them with: the matchers of
#: `CONTEXTUAL_USER_FRAGMENT_MATCHERS` and the hook prompt of `is_contextual_user_fragment` (openai/codex:
#: codex-rs/core/src/context/contextual_user_message.rs@3aae5d8 L18-45), and the wrappers of the Codex versions
#: before them (the versions that wrote the rollouts of the corpus: `is_session_prefix`, core/src/session_prefix.rs
#: @07aefffb1^ L20-25, `is_user_shell_command_text`, core/src/user_shell_command.rs@07aefffb1^ L13-17, and
#: `is_user_instructions` / `is_skill_instructions`, core/src/instructions/user_instructions.rs@07aefffb1^ L7-9,
#: L19-24, L56-61), which matched a start marker alone; `<plugins>` and `<subagents>` were never user fragments
#: (`<subagents>` is a section of `<environment_context>`, plugins a developer fragment). Each is
#: `(start, end, ignore_case)`: the text, stripped, starts with `start` and ends with `end` ("" for none). Upstream
#: files, all @3aae5d8 under codex-rs/: UserInstructions core/src/context/user_instructions.rs L18-20;
#: EnvironmentsState core/src/context/world_state/environment.rs L165-167, L377-382 (protocol/src/protocol.rs
#: L104-105); SkillInstructions ext/skills/src/fragments.rs L80-82; UserShellCommand core/src/context/
#: user_shell_command.rs L38-40; TurnAborted turn_aborted.rs L28-30; SubagentNotification subagent_notification.rs
#: L29-31; RecommendedPluginsInstructions recommended_plugins_instructions.rs L37-39 (start and end, any case:
#: `matches_marked_text`, context-fragments/src/fragment.rs L89-103); the legacy goal context of
#: InternalModelContextFragment internal_model_context.rs L9-10, L117-120 (start and end, exact case); the three
#: legacy warnings legacy_unified_exec_process_limit_warning.rs L20-24, legacy_model_mismatch_warning.rs L20-24
#: (start, exact case) and legacy_apply_patch_exec_command_warning.rs L20-24 (start and end, exact case).
CONTEXTUAL_FRAGMENTS: tuple[tuple[str, str, bool], ...] = (
    ("# AGENTS.md instructions", "", True),  # also the older "# AGENTS.md instructions for <dir>" header
    ("<environment_context>", "", True),
    ("<user_instructions>", "", True),  # the AGENTS.md wrapper before 07aefffb1 (USER_INSTRUCTIONS_OPEN_TAG_LEGACY)
    ("<skill>", "", True),
    ("<user_shell_command>", "", True),
    ("<turn_aborted>", "", True),
    ("<subagent_notification>", "", True),
    ("<recommended_plugins>", "</recommended_plugins>", True),
    ("<goal_context>", "</goal_context>", False),
    ("Warning: The maximum number of unified exec processes you can keep open is", "", False),
    ("Warning: Your account was flagged for potentially high-risk cyber activity", "", False),
    ("Warning: apply_patch was requested via ", "Use the apply_patch tool instead of exec_command.", False),
)
#: `<codex_internal_context source="...">...</codex_internal_context>` with a source of `[a-z][a-z0-9_]*`
#: (InternalModelContextFragment::matches_text, core/src/context/internal_model_context.rs@3aae5d8 L91-108, L122-129).
INTERNAL_CONTEXT = re.compile(r'<codex_internal_context source="[a-z][a-z0-9_]*">.*</codex_internal_context>', re.S)
#: A hook prompt: one `<hook_prompt hook_run_id="...">text</hook_prompt>` element with a run id that is not blank
#: (`parse_hook_prompt_fragment`, protocol/src/items.rs@3aae5d8 L100-107, L639-647; its text is XML-escaped, so it
#: holds no `<`).
HOOK_PROMPT = re.compile(r'<hook_prompt\s+hook_run_id\s*=\s*(["\'])(?P<run>.*?)\1\s*>[^<]*</hook_prompt>', re.S)


def _matches_fragment(text: str, start: str, end: str, ignore_case: bool) -> bool:
    head, tail = text[:len(start)], text[len(text) - len(end):] if end else ""
    if ignore_case:
        return head.lower() == start.lower() and tail.lower() == end.lower()
    return head == start and tail == end


def _is_additional_context(text: str) -> bool:
    """`<external_KEY>VALUE</external_KEY>` (AdditionalContextUserFragment::matches_text, context-fragments/src/
    additional_context.rs@3aae5d8 L37-49)."""
    if not text.startswith("<external_"):
        return False
    key, closed, rest = text[len("<external_"):].partition(">")
    return bool(closed) and rest.endswith(f"</external_{key}>")


def _is_hook_prompt(text: str) -> bool:
    match = HOOK_PROMPT.fullmatch(text)
    return match is not None and bool(match["run"].strip())


def _is_hook_prompt_message(payload: dict[str, Any]) -> bool:
    """A user message Codex reads as a hook prompt (`TurnItem::HookPrompt`, `parse_visible_hook_prompt_message`,
    openai/codex:codex-rs/core/src/context/contextual_user_message.rs@3aae5d8 L46-73): every content part is input
    text, each a hook prompt fragment or another contextual fragment, at least one a hook prompt."""
    texts = [p.get("text") if isinstance(p, dict) and p.get("type") == "input_text" else None for p in _content_parts(payload)]
    if not all(isinstance(text, str) for text in texts):
        return False
    hooks = [_is_hook_prompt(str(text).strip()) for text in texts]
    return any(hooks) and all(hook or is_contextual(str(text)) for hook, text in zip(hooks, texts, strict=True))


def is_contextual(text: str) -> bool:
    """A text part that is a contextual user fragment Codex injected rather than something the user typed
    (`CONTEXTUAL_FRAGMENTS`, the internal context, additional context and hook prompt fragments)."""
    stripped = text.strip()
    return (any(_matches_fragment(stripped, *fragment) for fragment in CONTEXTUAL_FRAGMENTS)
            or INTERNAL_CONTEXT.fullmatch(stripped) is not None or _is_additional_context(stripped) or _is_hook_prompt(stripped))


def encode_output(text: str, envelope: dict[str, Any]) -> str:
    """The exec output envelope as Codex serialized it (compact serde JSON, ``output`` first)."""
    return json.dumps({"output": text, **envelope}, separators=(",", ":"), ensure_ascii=False)


def decode_output(raw: Any) -> tuple[str, dict[str, Any] | None, list[Attachment]]:
    """Text, JSON envelope (when the output was a JSON string that re-encodes exactly) and images."""
    if isinstance(raw, list):  # content items
        texts = [p.get("text", "") for p in raw if isinstance(p, dict) and isinstance(p.get("text"), str)]
        images = [image_attachment(_data_url_mime(p.get("image_url")), p.get("image_url"))
                  for p in raw if isinstance(p, dict) and p.get("type") == "input_image"]
        return "".join(texts), None, images
    if isinstance(raw, dict):
        return decode_output(raw.get("content", ""))
    text = raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False)
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            return text, None, []
        if isinstance(data, dict) and isinstance(data.get("output"), str) and list(data)[0] == "output":
            envelope = {k: v for k, v in data.items() if k != "output"}
            if encode_output(data["output"], envelope) == text:
                return data["output"], envelope, []
    return text, None, []


def _data_url_mime(url: Any) -> str:
    if isinstance(url, str) and url.startswith("data:"):
        return url[5:].split(";", 1)[0]
    return "image/unknown"


#: The start of a plain-text tool output (no JSON envelope) Codex sends as a failed call, `success: Some(false)`, a flag
#: the rollout does not keep (`FunctionCallOutputPayload` serializes its text alone: openai/codex@001cb8e2
#: codex-rs/protocol/src/models.rs, test `serializes_failure_as_string`):
#: - Codex 0.3x's sandbox failure and timeout, `failed in sandbox {sandbox_type:?} with execution error: …` and
#:   `command timed out after N milliseconds`, built with `success: Some(false)` (codex-rs/core/src/codex.rs
#:   `handle_sandbox_error` of the 0.3x line, which wrote the corpus's 0.34.0 rollouts; read in the code index, whose
#:   copy names no commit);
#: - `apply_patch verification failed: …`, which the handler returns as an error (openai/codex@001cb8e2
#:   codex-rs/core/src/tools/handlers/apply_patch.rs, `FunctionCallError::RespondToModel`);
#: - the freeform exec output `Exit code: N\nWall time: …` of a command that exited non-zero, which
#:   `ToolEmitter::finish` returns as an error too (openai/codex@019402a8 codex-rs/core/src/tools/mod.rs
#:   `format_exec_output_for_model_freeform`, openai/codex@001f15e9 codex-rs/core/src/tools/events.rs `finish`).
#: - the exec handler's own errors, `FunctionCallError::RespondToModel` in every version: in the 0.3x line
#:   (openai/codex@69cb72f84^ codex-rs/core/src/codex.rs) `exec command rejected by user` (L2816, and L3042 for a
#:   denied retry), `exec command aborted by user` (L2826), `exec command rejected: {reason:?}` (L2845, a safety
#:   check's rejection), `execution error: {e:?}` (L2915) and `retry failed: {e}` (L3028), which L2226-2234 and
#:   L2300-2308 send with `success: Some(false)`; at openai/codex@3aae5d8 (codex-rs/core/src/tools/events.rs
#:   L422-456) `execution error: {err:?}` and the normalized rejections `exec command rejected by user` and
#:   `patch rejected by user`.
#: Such an error is sent with `success: Some(false)` (openai/codex@04de4bbe codex-rs/core/src/tools/parallel.rs
#: `ToolCallRuntime::failure_response`), as is a structured exec output's non-zero `metadata.exit_code`. Not a failure:
#: the 0.3x apply_patch `error: …`, which codex.rs builds with `success: None` (its `CorrectnessError` branch), and
#: the unified exec output (`Chunk ID: …` … `Process exited with code N`), which is `success: Some(true)` whatever N
#: is (openai/codex@3aae5d8 codex-rs/core/src/tools/context.rs L339-348). Each alternative is anchored at the start
#: (`codex_failed` uses `match`).
CODEX_FAILED_OUTPUT = re.compile(
    r"failed in sandbox \w+ with execution error: |command timed out after \d+ milliseconds|apply_patch verification failed: "
    r"|Exit code: (?!0\n)-?\d+\nWall time: "
    r"|execution error: |retry failed: |exec command (?:rejected|aborted) by user$|exec command rejected: |patch rejected by user$"
)


def codex_failed(raw: Any, text: str, envelope: dict[str, Any] | None) -> bool:
    """Whether a tool output is one Codex sent as a failed call: a JSON exec envelope's non-zero `metadata.exit_code`,
    an output object's `success: false`, or a plain-text output Codex words as a failure (`CODEX_FAILED_OUTPUT`)."""
    if envelope is not None:
        metadata = envelope.get("metadata")
        exit_code = metadata.get("exit_code") if isinstance(metadata, dict) else None
        return isinstance(exit_code, int) and not isinstance(exit_code, bool) and exit_code != 0
    if isinstance(raw, dict):
        return raw.get("success") is False
    return isinstance(raw, str) and CODEX_FAILED_OUTPUT.match(text) is not None


#: `Usage` field -> the token count of Codex's `last_token_usage` it is read from.
CODEX_COUNTS = {
    "input": "input_tokens",
    "cached_input": "cached_input_tokens",
    "cache_write": "cache_write_input_tokens",
    "output": "output_tokens",
    "reasoning": "reasoning_output_tokens",
    "total": "total_tokens",
}


def _usage(info: dict[str, Any], report: Callable[[str], None]) -> Usage | None:
    """A token_count's `last_token_usage`; None when there is none or a count is unusable (said through `report`)."""
    counts = token_counts(info.get("last_token_usage"), tuple(CODEX_COUNTS.values()), report)
    return None if counts is None else Usage(**{field: counts[name] for field, name in CODEX_COUNTS.items()})


def _legacy_to_envelope(lines: list[tuple[int, Any]]) -> list[tuple[int, Any]]:
    """The pre-envelope variant (Sept 2025): line 1 is the session header, then bare items."""
    out: list[tuple[int, Any]] = []
    for position, (number, data) in enumerate(lines):
        if not isinstance(data, dict):
            out.append((number, data))
        elif position == 0:
            out.append((number, {"type": "session_meta", "timestamp": data.get("timestamp"), "payload": data}))
        elif data.get("record_type") == "state":
            out.append((number, {"type": "state", "payload": data}))
        else:
            out.append((number, {"type": "response_item", "timestamp": data.get("timestamp"), "payload": data}))
    return out


def _is_model_output(data: Any) -> bool:
    if not isinstance(data, dict) or data.get("type") != "response_item" or not isinstance(data.get("payload"), dict):
        return False
    payload = data["payload"]
    kind = payload.get("type")
    return kind in ("reasoning", *CALL_TYPES) or (kind == "message" and payload.get("role") == "assistant")


def _is_real_user_line(data: Any) -> bool:
    if not isinstance(data, dict) or data.get("type") != "response_item" or not isinstance(data.get("payload"), dict):
        return False
    payload = data["payload"]
    return payload.get("type") == "message" and payload.get("role") == "user" and not _is_contextual_message(payload)


def _is_rollback_line(data: Any) -> bool:
    """A `thread_rolled_back` event: a turn context after it never belongs to a turn before it."""
    return isinstance(data, dict) and data.get("type") == "event_msg" and isinstance(data.get("payload"), dict) \
        and data["payload"].get("type") == "thread_rolled_back"


def _hoist_turn_contexts(lines: list[tuple[int, Any]]) -> list[tuple[int, Any]]:
    """Move a `turn_context` that follows its turn's user message (Codex ≤0.58 order) before it,
    so model-switch markers reach a strategy before the new user message (pre-turn checks)."""
    out: list[tuple[int, Any]] = []
    user_at: int | None = None
    for number, data in lines:
        if isinstance(data, dict) and data.get("type") == "turn_context" and user_at is not None:
            out.insert(user_at, (number, data))
            user_at += 1
            continue
        if _is_real_user_line(data):
            user_at = len(out)
        elif _is_model_output(data) or _is_rollback_line(data):
            user_at = None
        out.append((number, data))
    return out


def _message_content(payload: dict[str, Any], report: Callable[[str], None]) -> tuple[str, list[Any]]:
    """A message's text (its `content` string, or its text parts joined as Codex joins them) and the parts
    of a kind Codex does not write (`MESSAGE_PARTS`), for the item's `meta["unknown_content"]`: their text,
    if they have some, is in the message too. Each such part, and a text that is no string (kept as its
    JSON text), is reported (`report`)."""
    content = payload.get("content")
    if content is None or isinstance(content, str):
        return content or "", []
    if not isinstance(content, list):
        return text_of(content, "message content", report), []
    texts, unknown = [], []
    for n, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in TEXT_PARTS:
            texts.append(text_of(part.get("text"), f"the text of content part {n} ({kind})", report))
        elif kind not in MESSAGE_PARTS:
            what = repr(kind) if isinstance(part, dict) else f"(a JSON {json_type(part)}, not an object)"
            texts.append(unknown_block_text(part, f"unknown {payload.get('role')} content part {what}", report))
            unknown.append(part)
    return "".join(texts), unknown


def _with_unknown(meta: dict[str, Any], unknown: list[Any]) -> dict[str, Any]:
    """An item's meta holding the content parts of its message that no field holds."""
    return meta | {UNKNOWN_CONTENT: unknown} if unknown else meta


def _message_images(payload: dict[str, Any]) -> list[Attachment]:
    parts = list_of(payload.get("content"))
    return [image_attachment(_data_url_mime(p.get("image_url")), p.get("image_url"))
            for p in parts if isinstance(p, dict) and p.get("type") == "input_image"]


# ------------------------------------------------------------------ inter-agent messages
#: An agent path as `AgentPath` accepts it: `/morpheus`, or `/root` and agent names of lowercase letters, digits
#: and underscores, `root` reserved (openai/codex:codex-rs/protocol/src/agent_path.rs@3aae5d8 L123-172).
AGENT_PATH = re.compile(r"/morpheus|/root(?:/(?!root(?:/|$))[a-z0-9_]+)*")


def _is_agent_path(value: Any) -> bool:
    return isinstance(value, str) and AGENT_PATH.fullmatch(value) is not None


def _communication_problem(payload: dict[str, Any]) -> str | None:
    """Why Codex cannot read `payload` as an `InterAgentCommunication` (openai/codex:codex-rs/protocol/src/
    protocol.rs@3aae5d8 L740-756: author, recipient, content and trigger_turn required), or None."""
    for key in ("author", "recipient"):
        if not _is_agent_path(payload.get(key)):
            return f"{key} {payload.get(key)!r} is no agent path (/root/..., /morpheus)"
    others = payload.get("other_recipients", [])
    if not isinstance(others, list) or not all(map(_is_agent_path, others)):
        return "other_recipients is no list of agent paths"
    if not isinstance(payload.get("content"), str):
        return f"content is a JSON {json_type(payload.get('content'))}, not a string"
    if not isinstance(payload.get("trigger_turn"), bool):
        return f"trigger_turn is a JSON {json_type(payload.get('trigger_turn'))}, not true or false"
    if payload.get("encrypted_content") is not None and not isinstance(payload["encrypted_content"], str):
        return "encrypted_content is no string"
    return None


def _communication_text(payload: dict[str, Any]) -> str:
    """The text of the `agent_message` item Codex gives the model for a communication (`to_model_input_item`,
    protocol.rs@3aae5d8 L817-850): its content, or for an encrypted one the header before the encrypted payload."""
    if payload.get("encrypted_content") is None:
        return str(payload["content"])
    kind = "NEW_TASK" if payload["trigger_turn"] else "MESSAGE"
    return f"Message Type: {kind}\nTask name: {payload['recipient']}\nSender: {payload['author']}\nPayload:\n"


def _content_parts(payload: dict[str, Any]) -> list[Any]:
    content = payload.get("content")
    return [{"type": "input_text", "text": content}] if isinstance(content, str) else list_of(content)


def _is_inter_agent_instruction(payload: dict[str, Any]) -> bool:
    """An assistant message whose one text part is an `InterAgentCommunication` as JSON (`from_message_content`,
    protocol.rs@3aae5d8 L852-864)."""
    parts = _content_parts(payload)
    part = parts[0] if len(parts) == 1 and isinstance(parts[0], dict) else {}
    if part.get("type") not in TEXT_PARTS or not isinstance(part.get("text"), str):
        return False
    try:
        data = json.loads(part["text"])
    except (ValueError, RecursionError):
        return False
    return isinstance(data, dict) and _communication_problem(data) is None


# ------------------------------------------------------------------ thread rollbacks
#: Developer-message fragments a rollback takes with the turn they precede (`CONTEXTUAL_DEVELOPER_PREFIXES`,
#: openai/codex:codex-rs/core/src/event_mapping.rs@3aae5d8 L40-59, tags from protocol/src/protocol.rs L106-124
#: and core/src/context/approved_command_prefix_saved.rs L3-4), matched case-insensitively.
CONTEXTUAL_DEVELOPER_PREFIXES = (
    "<permissions instructions>", "approved command prefix saved:", "<model_switch>", "<apps_instructions>",
    "<collaboration_mode>", "<multi_agent_mode>", "<environments_instructions>", "<git_attribution>",
    "<plugins_instructions>", "<realtime_conversation>", "<skills_instructions>", "<tools>", "<personality_spec>",
    "<token_budget>", "<context_window>", "<context_window_guidance>", "<rollout_budget>",
)
#: The markers of a `<model_switch>` fragment (core/src/context/model_switch_instructions.rs@3aae5d8 L30-32).
MODEL_SWITCH_MARKERS = ("<model_switch>", "</model_switch>")
#: The response items Codex keeps in its history: the `ResponseItem` variants (protocol/src/models.rs@3aae5d8
#: L814-1047; any other type reads as `Other`) that `is_api_message` accepts (core/src/context_manager/
#: history.rs@3aae5d8 L485-505); a `system` message is not kept either.
HISTORY_ITEM_TYPES = frozenset({
    "additional_tools", "message", "agent_message", "reasoning", "local_shell_call", "function_call", "tool_search_call",
    "function_call_output", "custom_tool_call", "custom_tool_call_output", "tool_search_output", "web_search_call",
    "image_generation_call", "compaction", "compaction_summary", "context_compaction",
})
MAX_U32 = 2**32 - 1


def _input_texts(payload: dict[str, Any]) -> list[str]:
    """The `input_text` parts of a message: contextual fragments are only ever input text
    (core/src/context/contextual_user_message.rs@3aae5d8 L39-45, event_mapping.rs L82-92)."""
    return [p["text"] for p in _content_parts(payload)
            if isinstance(p, dict) and p.get("type") == "input_text" and isinstance(p.get("text"), str)]


def _is_contextual_message(payload: dict[str, Any]) -> bool:
    """A message one of whose input text parts is a contextual fragment, which makes the whole message context
    (`is_contextual_user_message_content`, core/src/event_mapping.rs@3aae5d8 L61-63: any part)."""
    return any(is_contextual(text) for text in _input_texts(payload))


def _is_contextual_developer_text(text: str) -> bool:
    head = text.lstrip().lower()
    return any(head.startswith(prefix) for prefix in CONTEXTUAL_DEVELOPER_PREFIXES)


def _is_model_switch_text(text: str) -> bool:
    """`matches_marked_text` of the model-switch fragment (context-fragments/src/fragment.rs@3aae5d8 L89-103)."""
    body = text.strip().lower()
    return body.startswith(MODEL_SWITCH_MARKERS[0]) and body.endswith(MODEL_SWITCH_MARKERS[1])


#: The contextual user fragments that are entries of Codex's initial context (`build_initial_context_with_world_state`,
#: core/src/session/mod.rs@3aae5d8 L3469-3665): AGENTS.md (and its older `<user_instructions>` wrapper), the
#: environment and the recommended plugins, matched case-insensitively at the start.
INITIAL_CONTEXT_USER_FRAGMENTS = ("# agents.md instructions", "<user_instructions>", "<environment_context>", "<recommended_plugins>")


def _initial_context_slot(role: str, text: str) -> tuple[str, str] | None:
    """Which entry of the initial context a developer or contextual user message is: its role and leading tag
    (``<environment_context>``, ``<permissions instructions>``...) or, without one, its first line. None for a message
    that is no entry: a `<model_switch>` (the diff of one turn) or another contextual user fragment (a history item)."""
    head = text.lstrip()
    if role == "developer" and head.lower().startswith(MODEL_SWITCH_MARKERS[0]):
        return None
    if role == "user" and not head.lower().startswith(INITIAL_CONTEXT_USER_FRAGMENTS):
        return None
    if head.startswith("<"):
        end = min((i for i in (head.find(">"), head.find(" "), head.find("\n")) if i > 0), default=len(head))
        return role, head[:end]
    return role, head.split("\n", 1)[0]


def _is_turn_boundary(payload: dict[str, Any]) -> bool:
    """A user turn as a rollback counts it (`is_user_turn_boundary`, history.rs@3aae5d8 L820-830): an
    `agent_message`, a user message without a contextual fragment, or an assistant inter-agent instruction."""
    if payload.get("type") == "agent_message":
        return True
    if payload.get("type") != "message":
        return False
    if payload.get("role") == "user":
        return not _is_contextual_message(payload)
    return payload.get("role") == "assistant" and _is_inter_agent_instruction(payload)


def _is_context_update(payload: dict[str, Any]) -> bool:
    """A context update a rollback takes with the turn it precedes (`trim_pre_turn_context_updates`,
    history.rs@3aae5d8 L432-460): a developer or user message with a contextual fragment."""
    if payload.get("type") != "message":
        return False
    texts = _input_texts(payload)
    if payload.get("role") == "developer":
        return any(_is_contextual_developer_text(text) for text in texts)
    return payload.get("role") == "user" and _is_contextual_message(payload)


def _turn_id(payload: dict[str, Any]) -> str | None:
    """`ResponseItem::turn_id` (models.rs@3aae5d8 L1122-1126): the non-empty turn id of the item's passthrough metadata."""
    passthrough = payload.get("internal_chat_message_metadata_passthrough")
    turn = passthrough.get("turn_id") if isinstance(passthrough, dict) else None
    return turn if isinstance(turn, str) and turn else None


def _model_switch_parts(payload: dict[str, Any]) -> tuple[int, ...]:
    """The content parts of a developer message that are `<model_switch>` fragments (by index)."""
    if payload.get("type") != "message" or payload.get("role") != "developer":
        return ()
    return tuple(n for n, p in enumerate(_content_parts(payload)) if isinstance(p, dict) and p.get("type") == "input_text"
                 and isinstance(p.get("text"), str) and _is_model_switch_text(p["text"]))


def _in_history(payload: dict[str, Any]) -> bool:
    return payload.get("type") in HISTORY_ITEM_TYPES and not (payload.get("type") == "message" and payload.get("role") == "system")


@dataclass(frozen=True, slots=True)
class _Entry:
    """One item of Codex's in-memory history, as much of it as a rollback reads."""

    position: int | None  # the index of the rollout line that recorded it; None: an item of a compaction's history
    boundary: bool  # a user turn (`_is_turn_boundary`)
    context_update: bool  # taken with the turn it precedes (`_is_context_update`)
    turn_id: str | None = None
    model_switch_parts: tuple[int, ...] = ()
    parts: int = 0  # how many content parts it has


def _entry(payload: dict[str, Any], position: int | None) -> _Entry:
    return _Entry(position, _is_turn_boundary(payload), _is_context_update(payload), _turn_id(payload),
                  _model_switch_parts(payload), len(_content_parts(payload)))


@dataclass(frozen=True, slots=True)
class _Cut:
    """What one rollback does to the history: the entries it keeps, the ones it drops from the cut on, and the
    kept developer messages that lose their `<model_switch>` parts (`stripped`; `emptied`: nothing else was in them)."""

    kept: list[_Entry]
    dropped: list[_Entry] = field(default_factory=list)
    stripped: list[_Entry] = field(default_factory=list)
    emptied: list[_Entry] = field(default_factory=list)


def _drop_last_user_turns(history: list[_Entry], num_turns: int) -> _Cut:
    """Codex's `drop_last_n_user_turns` (core/src/context_manager/history.rs@3aae5d8 L212-274): no user turn, or
    `num_turns` 0, changes nothing; otherwise the history is cut at the `num_turns`-th last user turn, or at the first
    one when there are fewer (what came before it stays), and the context updates right before the cut go with it.
    A cut at the first user turn also takes the `<model_switch>` parts of that turn's earlier developer messages."""
    boundaries = [n for n, entry in enumerate(history) if entry.boundary]
    if num_turns == 0 or not boundaries:
        return _Cut(kept=history)
    first = boundaries[0]
    cut = first if num_turns >= len(boundaries) else boundaries[-num_turns]
    while cut > first and history[cut - 1].context_update:
        cut -= 1
    turn = history[first].turn_id
    if cut != first or turn is None:
        return _Cut(kept=history[:cut], dropped=history[cut:])
    switched = [e for e in history[:cut] if e.turn_id == turn and e.model_switch_parts]
    emptied = [e for e in switched if len(e.model_switch_parts) == e.parts]
    gone = set(map(id, emptied))
    return _Cut(kept=[e for e in history[:cut] if id(e) not in gone], dropped=history[cut:],
                stripped=[e for e in switched if id(e) not in gone], emptied=emptied)


@dataclass
class _RollbackPlan:
    """What the file's `thread_rolled_back` events take out of the live history, by rollout line number."""

    owner: dict[int, int] = field(default_factory=dict)  # a rolled-back line -> the line of the rollback that took it
    stripped: dict[int, tuple[int, ...]] = field(default_factory=dict)  # a developer line -> its content parts taken out
    num_turns: dict[int, int] = field(default_factory=dict)  # a rollback applied -> its num_turns
    problems: dict[int, str] = field(default_factory=dict)  # a rollback line -> what the replay cannot do as Codex did


class _RollbackReplay:
    """Codex's history replayed line by line as `reconstruct_history_from_rollout` rebuilds it (spec §7.3 step 3;
    openai/codex:codex-rs/core/src/session/rollout_reconstruction.rs@3aae5d8 L325-373), as far as rollbacks read it.

    Codex rolls a thread back by replaying its stored lines plus the new `thread_rolled_back` event through that
    function (core/src/session/handlers.rs@3aae5d8 L451-553), so a forward replay gives the history a rollback left:
    a `response_item` or a readable `inter_agent_communication` adds an item, a `compacted` line replaces the
    history with its `replacement_history` (a rollback never undoes a compaction), a rollback drops the last N user
    turns of the history it finds (`_drop_last_user_turns`). A rollback takes out the lines from the first item it
    drops up to itself (the turns' events and usage included; `session_meta` stays), or, when it drops items of a
    compaction's history, every line after that compaction: the items themselves are not lines, which is a problem.
    """

    def __init__(self, lines: list[tuple[int, Any]]) -> None:
        self.lines = lines
        self.history: list[_Entry] = []
        self.compaction: int | None = None  # the index of the compaction line the history starts from
        self.plan = _RollbackPlan()

    def run(self) -> _RollbackPlan:
        for position, (_, data) in enumerate(self.lines):
            if isinstance(data, dict) and isinstance(data.get("payload"), dict):
                self.line(position, data.get("type"), data["payload"])
        return self.plan

    def line(self, position: int, kind: Any, payload: dict[str, Any]) -> None:
        if kind == "response_item" and _in_history(payload):
            self.history.append(_entry(payload, position))
        elif kind == "inter_agent_communication" and _communication_problem(payload) is None:
            self.history.append(_Entry(position, boundary=True, context_update=False, turn_id=_turn_id(payload)))
        elif kind == "compacted":
            self.compacted(position, payload)
        elif kind == "event_msg" and payload.get("type") == "thread_rolled_back":
            self.rolled_back(position, payload.get("num_turns"))

    def compacted(self, position: int, payload: dict[str, Any]) -> None:
        """The history a compaction leaves: its `replacement_history`; a legacy one without it, the user turns it
        kept and its summary (§7.3 step 4; at most those turns: Codex keeps the newest within 20k tokens)."""
        replacement = payload.get("replacement_history")
        if isinstance(replacement, list):
            self.history = [_entry(item, None) for item in replacement if isinstance(item, dict) and _in_history(item)]
        else:
            turns = [replace(entry, position=None) for entry in self.history if entry.boundary]
            self.history = [*turns, _Entry(None, boundary=True, context_update=False)]
        self.compaction = position

    def rolled_back(self, position: int, num_turns: Any) -> None:
        number = self.lines[position][0]
        if isinstance(num_turns, bool) or not isinstance(num_turns, int) or not 0 <= num_turns <= MAX_U32:
            self.plan.problems[number] = (f"thread_rolled_back with num_turns {num_turns!r}, not a whole number from 0 to "
                                          f"{MAX_U32} (Codex's u32); the rollback is not applied")
            return
        cut = _drop_last_user_turns(self.history, num_turns)
        self.history = cut.kept
        self.plan.num_turns[number] = num_turns
        for taken in self.lines_taken(cut, position):
            self.plan.owner.setdefault(self.lines[taken][0], number)
        for entry in cut.stripped:
            if entry.position is not None:
                self.plan.stripped[self.lines[entry.position][0]] = entry.model_switch_parts
        self.report_compacted_items(number, num_turns, cut)

    def lines_taken(self, cut: _Cut, position: int) -> list[int]:
        taken = [e.position for e in cut.emptied if e.position is not None]
        if not cut.dropped:
            return taken
        first = cut.dropped[0].position
        start = first if first is not None else (self.compaction or 0) + 1
        return taken + [p for p in range(start, position) if not _is_session_meta(self.lines[p][1])]

    def report_compacted_items(self, number: int, num_turns: int, cut: _Cut) -> None:
        compacted = [e for e in (*cut.dropped, *cut.stripped, *cut.emptied) if e.position is None]
        if not compacted or self.compaction is None:
            return
        turns = sum(1 for e in compacted if e.boundary)
        self.plan.problems[number] = (
            f"thread_rolled_back (num_turns {num_turns}) also takes {len(compacted)} item(s), {turns} of them user turns, "
            f"out of the history the compaction at line {self.lines[self.compaction][0]} left; the transcript keeps that "
            "compaction whole, so the replayed context after this line holds more than Codex's did")


def _is_session_meta(data: Any) -> bool:
    return isinstance(data, dict) and data.get("type") == "session_meta"


def _without_parts(payload: dict[str, Any], indexes: tuple[int, ...]) -> tuple[dict[str, Any], list[Any]]:
    """A message without the content parts at `indexes`, and those parts."""
    parts = _content_parts(payload)
    kept = [p for n, p in enumerate(parts) if n not in indexes]
    return payload | {"content": kept}, [parts[n] for n in indexes]


# ------------------------------------------------------------------ compactions
#: A memory citation, stripped from an assistant message's visible text: literal, not nested, one left open runs to the
#: end (`strip_citations`, openai/codex:codex-rs/utils/stream-parser/src/citation.rs@3aae5d8 L11-12, L64-77).
MEMORY_CITATION = re.compile(r"<oai-mem-citation>.*?(?:</oai-mem-citation>|\Z)", re.S)


def _line_payload(data: Any, kind: str) -> dict[str, Any] | None:
    """The payload of a rollout line of type `kind`, else None."""
    if isinstance(data, dict) and data.get("type") == kind and isinstance(data.get("payload"), dict):
        return data["payload"]
    return None


def _is_token_count_line(data: Any) -> bool:
    payload = _line_payload(data, "event_msg")
    return payload is not None and payload.get("type") == "token_count"


def _summary_output(data: Any) -> dict[str, Any] | None:
    """The payload of an output item a summary request can give: a reasoning item or an assistant message (the request
    has no tools: `Prompt{..Default}`, core/src/compact.rs@3aae5d8 L272-276), else None."""
    payload = _line_payload(data, "response_item")
    if payload is None:
        return None
    if payload.get("type") == "reasoning" or (payload.get("type") == "message" and payload.get("role") == "assistant"):
        return payload
    return None


def _visible_assistant_text(payload: dict[str, Any]) -> str | None:
    """The text Codex takes from an assistant message for a summary, or None when it skips the message
    (`last_assistant_message_from_item`, core/src/stream_events_utils.rs@3aae5d8 L468-482: the `output_text` parts
    joined with "" (`raw_assistant_output_text_from_item`, L60-73), memory citations stripped, None if blank)."""
    if payload.get("type") != "message" or payload.get("role") != "assistant":
        return None
    parts = _content_parts(payload)
    combined = "".join(p["text"] for p in parts if isinstance(p, dict) and p.get("type") == "output_text" and isinstance(p.get("text"), str))
    visible = MEMORY_CITATION.sub("", combined)
    return visible if visible.strip() else None


@dataclass(frozen=True, slots=True)
class _SummaryResponse:
    """The lines a local compaction's summary request wrote before its `compacted` line (`_summary_response`)."""

    items: tuple[int, ...]  # the line numbers of its output items (reasoning, assistant messages)
    usage: int  # the line number of its token_count


def _summary_response(lines: list[tuple[int, Any]], at: int) -> _SummaryResponse | None:
    """The summary request's response a local compaction wrote before its `compacted` line at position `at`, or None.

    Since 1c7832ffa (2026-05-28) Codex's local compaction records each output item of its summary request into the
    history and the rollout as it is done (`drain_to_completed`, openai/codex:codex-rs/core/src/compact.rs@3aae5d8
    L692-752: `record_conversation_items`, core/src/session/mod.rs@3aae5d8 L3042-3067), then, at `response.completed`,
    one `token_count` event (`update_token_usage_info`, mod.rs L3830-3841), then writes the `compacted` line
    (`replace_compacted_history`, mod.rs L3311-3357) whose `message` is `SUMMARY_PREFIX + "\n" + ` the visible text
    of the last assistant message of the history (compact.rs L342-346; `get_last_assistant_message_from_turn`,
    core/src/session/turn.rs@3aae5d8 L2743-2750). Remote compactions (v1, v2) write no output item and an empty
    `message` (compact_remote.rs L286-295, compact_remote_v2.rs L312-321). So the response is the run of reasoning and
    assistant message lines right before that one `token_count` line, and it is the summary's when the last of its
    assistant messages Codex would take has the text the `message` ends with. A run without such a message (the
    summary request gave none, and Codex took an older message) or with other lines between it and the
    `compacted` line is not recognised: its lines stay conversation items."""
    text = (_line_payload(lines[at][1], "compacted") or {}).get("message")
    if not isinstance(text, str) or not text or at < 2 or not _is_token_count_line(lines[at - 1][1]):
        return None
    start = at - 1
    while start > 0 and _summary_output(lines[start - 1][1]) is not None:
        start -= 1
    outputs = [_summary_output(data) or {} for _, data in lines[start:at - 1]]
    summary = next((visible for visible in map(_visible_assistant_text, reversed(outputs)) if visible is not None), None)
    if summary is None or not text.endswith("\n" + summary):
        return None
    return _SummaryResponse(tuple(number for number, _ in lines[start:at - 1]), lines[at - 1][0])


def _summary_responses(lines: list[tuple[int, Any]]) -> dict[int, int]:
    """Each line of a compaction's summary response (`_summary_response`) -> the line number of its `compacted` line."""
    owner: dict[int, int] = {}
    for at, (number, data) in enumerate(lines):
        if _line_payload(data, "compacted") is not None:
            found = _summary_response(lines, at)
            if found is not None:
                owner |= dict.fromkeys((*found.items, found.usage), number)
    return owner


def replacement_user_texts(history: list[Any], summary: str) -> list[str]:
    """The real user messages of a `replacement_history`, oldest first: user messages that are no contextual fragment
    (any text part makes one: `is_contextual_user_message_content`, core/src/event_mapping.rs@3aae5d8 L61-63) and not
    the summary (`collect_user_messages`, core/src/compact.rs@3aae5d8 L520-547); their text parts joined with "", as
    `_message_content` joins a user message's."""
    texts = []
    for entry in history:
        if isinstance(entry, dict) and entry.get("type") == "message" and entry.get("role") == "user":
            parts = _text_parts(entry.get("content"))
            text = "".join(parts)
            if not _is_summary(text, summary) and not any(map(is_contextual, parts)):
                texts.append(text)
    return texts


def _is_summary(text: str, summary: str) -> bool:
    """Whether a user message of the replacement history is the compaction's summary: its `message`, which Codex
    writes behind `SUMMARY_PREFIX` and a line break (spec §2.2 step 1) and records with it (§7.2) or, in some
    writers, without it."""
    return text == summary or text.endswith("\n" + summary)


def _text_parts(content: Any) -> list[str]:
    """The texts of a Codex message's content: a string, or its text parts (`ContentItem`, spec §7)."""
    if isinstance(content, str):
        return [content]
    return [p["text"] for p in list_of(content) if isinstance(p, dict) and p.get("type") in TEXT_PARTS and isinstance(p.get("text"), str)]


class _RolloutReader:
    """One pass over the lines of one rollout, feeding a `TranscriptBuilder`."""

    def __init__(self, path: Path, lines: list[tuple[int, Any]], legacy: bool, rollbacks: _RollbackPlan) -> None:
        self.path = path
        self.lines = lines
        self.rollbacks = rollbacks
        self.rolled_back: defaultdict[int, list[dict[str, Any]]] = defaultdict(list)  # rollback line -> the lines it took
        self.summaries = _summary_responses(lines)  # a line of a compaction's summary response -> its compacted line
        self.summary_lines: defaultdict[int, list[dict[str, Any]]] = defaultdict(list)  # compacted line -> those lines
        self.summary_usage: dict[int, Usage] = {}  # compacted line -> the usage of its summary request
        self.b = TranscriptBuilder(path, "codex")
        self.legacy = legacy
        self.meta: dict[str, Any] = {"variant": "legacy" if legacy else "envelope"}
        self.skipped: Counter[str] = Counter()
        self.response: int | None = None
        self.newest_response: int | None = None
        self.pending_usage: Usage | None = None
        self.last_usage_response: int | None = None
        self.last_total: Any = None
        self.unattached = 0
        self.model: str | None = None
        #: The text of each entry of the initial context, by `_initial_context_slot`: the full render, then the changes.
        self.initial_context: dict[tuple[str, str], str] = {}
        #: A compaction was read and no turn input since: Codex is recording its initial context again (`reinjected`).
        self.after_compaction = False
        self.usage_before = self._usage_comes_first()
        self.meta["usage_alignment"] = "before_response" if self.usage_before else "after_response"

    def _usage_comes_first(self) -> bool:
        for _, data in self.lines:
            if _is_model_output(data):
                return False
            if isinstance(data, dict) and data.get("type") == "event_msg":
                payload = data.get("payload") or {}
                if payload.get("type") == "token_count" and payload.get("info"):
                    return True
        return False

    # ------------------------------------------------------------------ responses
    def close_response(self) -> None:
        self.response = None

    def model_response(self) -> int:
        if self.response is None:
            self.response = self.newest_response = self.b.new_response()
            if self.usage_before and self.pending_usage is not None:
                self.b.set_usage(self.response, self.pending_usage)
                self.last_usage_response = self.response
                self.pending_usage = None
        return self.response

    def token_count(self, number: int, payload: dict[str, Any]) -> None:
        info = payload.get("info")
        if not isinstance(info, dict):
            self.skipped["token_count without info"] += 1
            return
        total = info.get("total_token_usage")
        if total is not None and total == self.last_total:
            self.skipped["token_count repeated"] += 1
            return
        self.last_total = total
        usage = _usage(info, self.b.reporter(number))
        if "model_context_window" in info:
            self.meta["model_context_window"] = info["model_context_window"]
        self.close_response()
        if self.usage_before:
            if self.pending_usage is not None:
                self.unattached += 1
            self.pending_usage = usage
            return
        newest = self.newest_response  # the newest response, if it has no usage yet
        if newest is not None and newest != self.last_usage_response:
            self.b.set_usage(newest, usage)
            self.last_usage_response = newest
        else:
            self.unattached += 1

    # ------------------------------------------------------------------ lines
    def read(self) -> Transcript:
        session_id = None
        for number, data in self.lines:
            if not isinstance(data, dict) or not isinstance(data.get("payload"), dict) or not isinstance(data.get("type"), str):
                self.b.problem("not a rollout line ({timestamp, type, payload}); line kept out", number)
                continue
            if number in self.rollbacks.owner:
                self.rolled_back[self.rollbacks.owner[number]].append({"line": number, "rollout": data})
                continue
            if number in self.summaries:
                self.summary_line(number, data)
                continue
            kind, payload, ts = data["type"], data["payload"], data.get("timestamp")
            if kind == "session_meta":
                session_id = session_id or payload.get("id")
                self.session_meta(payload, ts)
            elif kind == "response_item":
                self.response_item(number, payload, ts)
            elif kind == "event_msg":
                self.event(number, payload, ts)
            elif kind == "turn_context":
                self.turn_context(payload, ts)
            elif kind == "inter_agent_communication":
                self.inter_agent_communication(number, payload, ts)
            elif kind == "compacted":
                self.compacted(number, payload, ts)
            else:
                self.skipped[kind] += 1
        if self.pending_usage is not None:
            self.unattached += 1
        if self.unattached:
            self.meta["unattached_token_counts"] = self.unattached
        if self.rollbacks.owner:
            self.meta["off_branch"] = len(self.rollbacks.owner)
        if self.skipped:
            self.meta["skipped"] = dict(sorted(self.skipped.items()))
        self.b.model = self.model
        return self.b.finish(str(session_id or self.path.name.split(".")[0]), source={"session_id": session_id}, meta=self.meta)

    def compacted(self, number: int, payload: dict[str, Any], ts: str | None) -> None:
        """A compaction marker: its text the `message` (the summary of a local compaction, "" for a remote one), with
        the window ids, the size of the `replacement_history` and the texts of the real user messages it kept
        (`replacement_user_messages`, None when the line records no history: `replacement_user_texts`), and the
        summary request's own response (`summary_response`, its lines verbatim; `summary_usage`), which is no
        conversation item (`_summary_response`)."""
        self.close_response()
        history = payload.get("replacement_history")
        message = str(payload.get("message") or "")
        meta: dict[str, Any] = {
            "event": "compaction",
            "window_number": payload.get("window_number"),
            "window_id": payload.get("window_id"),
            "previous_window_id": payload.get("previous_window_id"),
            "replacement_items": len(history) if isinstance(history, list) else None,
            "replacement_user_messages": replacement_user_texts(history, message) if isinstance(history, list) else None,
        }
        if number in self.summary_lines:
            meta["summary_response"] = self.summary_lines.pop(number)
        if number in self.summary_usage:
            meta["summary_usage"] = self.summary_usage.pop(number).to_dict()
        self.b.add("marker", message, timestamp=ts, meta=meta)
        self.after_compaction = True

    def summary_line(self, number: int, data: dict[str, Any]) -> None:
        """A line of a compaction's summary response (`_summary_response`), kept for its marker. Its `token_count` ends
        the response and, when its total is new, is the summary request's usage (a repeated one is no usage, as in
        `token_count`), which no conversation response gets."""
        owner = self.summaries[number]
        self.summary_lines[owner].append({"line": number, "rollout": data})
        if not _is_token_count_line(data):
            return
        self.close_response()
        info = data["payload"].get("info")
        total = info.get("total_token_usage") if isinstance(info, dict) else None
        if isinstance(info, dict) and (total is None or total != self.last_total):
            self.last_total = total
            usage = _usage(info, self.b.reporter(number))
            if usage is not None:
                self.summary_usage[owner] = usage

    def session_meta(self, payload: dict[str, Any], ts: str | None) -> None:
        for key in ("cwd", "originator", "cli_version", "model_provider", "source"):
            if payload.get(key) is not None:
                self.meta[key] = payload[key]
        if isinstance(payload.get("git"), dict):
            self.meta["git"] = payload["git"]
        if isinstance(payload.get("instructions"), str):
            self.meta["user_instructions_chars"] = len(payload["instructions"])
        base = payload.get("base_instructions")
        text = base.get("text") if isinstance(base, dict) else base if isinstance(base, str) else None
        if text:
            self.b.add("system", text, id="base-instructions", synthetic=True, timestamp=ts, meta={"codex_type": "base_instructions"})

    def turn_context(self, payload: dict[str, Any], ts: str | None) -> None:
        model = payload.get("model")
        if not isinstance(model, str) or model == self.model:
            self.skipped["turn_context"] += 1
            return
        meta: dict[str, Any] = {"event": "model_switch", "model": model, "previous_model": self.model}
        for key, target in (("comp_hash", "comp_hash"), ("model_context_window", "context_window"), ("context_window", "context_window")):
            if payload.get(key) is not None:
                meta[target] = payload[key]
        self.model = model
        self.b.add("marker", f"model: {model}", timestamp=ts, meta=meta)

    def event(self, number: int, payload: dict[str, Any], ts: str | None) -> None:
        kind = payload.get("type")
        if kind == "token_count":
            self.token_count(number, payload)
        elif kind == "turn_aborted":
            self.close_response()
            self.b.add("marker", str(payload.get("reason") or ""), timestamp=ts, meta={"event": "turn_aborted"})
        elif kind == "thread_rolled_back":
            self.thread_rolled_back(number, ts)
        else:
            self.skipped[f"event_msg:{kind}"] += 1

    def thread_rolled_back(self, number: int, ts: str | None) -> None:
        """A marker holding the lines the rollback took out of the live history (`_RollbackReplay`), verbatim. A usage
        still waiting for its response (Codex ≤0.58 order) was recorded for a response the rollback took: none after it."""
        self.close_response()
        if self.pending_usage is not None:
            self.unattached += 1
            self.pending_usage = None
        if number in self.rollbacks.problems:
            self.b.problem(self.rollbacks.problems[number], number)
        taken = self.rolled_back.pop(number, [])
        num_turns = self.rollbacks.num_turns.get(number)
        text = f"rolled back {num_turns} user turn(s)" if num_turns is not None else "rollback not applied"
        self.b.add("marker", text, timestamp=ts, meta={
            "event": "thread_rolled_back", "num_turns": num_turns,
            "rolled_back_lines": [line["line"] for line in taken], "rolled_back": taken,
        })

    def inter_agent_communication(self, number: int, p: dict[str, Any], ts: str | None) -> None:
        """The `agent_message` item Codex gives the model for the line (§7.3 step 3; `_communication_text`)."""
        problem = _communication_problem(p)
        if problem is not None:
            self.b.problem(f"inter_agent_communication Codex cannot read: {problem}; line kept out", number)
            return
        self.close_response()
        self.after_compaction = False
        meta: dict[str, Any] = {"codex_type": "agent_message", "rollout_type": "inter_agent_communication",
                                "author": p["author"], "recipient": p["recipient"],
                                "other_recipients": p.get("other_recipients", []), "trigger_turn": p["trigger_turn"]}
        if p.get("encrypted_content") is not None:
            meta["encrypted_len"] = len(p["encrypted_content"])
        source_id = p.get("id") if isinstance(p.get("id"), str) else None
        self.b.add("user", _communication_text(p), id=source_id, synthetic=True, timestamp=ts, meta=meta)

    def response_item(self, number: int, p: dict[str, Any], ts: str | None) -> None:
        stripped: list[Any] = []
        if number in self.rollbacks.stripped:  # a later rollback takes these parts out (`_drop_last_user_turns`)
            p, stripped = _without_parts(p, self.rollbacks.stripped[number])
        kind = p.get("type")
        self.after_compaction = self.after_compaction and kind == "message"
        source_id = p.get("id") if isinstance(p.get("id"), str) else None
        if kind == "message":
            role = p.get("role")
            text, unknown = _message_content(p, self.b.reporter(number))
            if self.reinjected(role, p, text):
                self.skipped["initial context recorded again after a compaction"] += 1
                return
            if role == "assistant":
                said: dict[str, Any] = {"codex_type": "message"} | ({"phase": p["phase"]} if p.get("phase") else {})
                self.b.add("assistant", text, id=source_id, response=self.model_response(), timestamp=ts, meta=_with_unknown(said, unknown))
                return
            self.close_response()
            if role in ("developer", "system"):
                said = {"codex_type": "message", "role": role} | ({"rolled_back_parts": stripped} if stripped else {})
                self.b.add("system", text, id=source_id, synthetic=True, timestamp=ts, meta=_with_unknown(said, unknown))
            elif role == "user":
                said = {"codex_type": "message"} | ({"hook_prompt": True} if _is_hook_prompt_message(p) else {})
                self.b.add("user", text, id=source_id, synthetic=_is_contextual_message(p), attachments=tuple(_message_images(p)),
                           timestamp=ts, meta=_with_unknown(said, unknown))
            else:
                self.b.problem(f"message with unknown role {role!r}; line kept out", number)
        elif kind == "reasoning":
            summary = list_of(p.get("summary"))
            text = "\n".join(s.get("text", "") for s in summary if isinstance(s, dict) and isinstance(s.get("text"), str))
            encrypted = p.get("encrypted_content")
            self.b.add("reasoning", text, id=source_id, response=self.model_response(), timestamp=ts,
                       meta={"codex_type": "reasoning", "encrypted_len": len(encrypted) if isinstance(encrypted, str) else 0})
        elif kind in CALL_TYPES:
            call_id = p.get("call_id") or p.get("id")
            if not call_id:
                self.b.problem(f"{kind} without call_id; line kept out", number)
                return
            arguments = p.get("arguments") if kind == "function_call" else p.get("input") if kind == "custom_tool_call" else p.get("action")
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)
            meta: dict[str, Any] = {"codex_type": kind} | ({"status": p["status"]} if p.get("status") is not None else {})
            self.b.add("tool_call", call_id=str(call_id), tool_name=str(p.get("name") or "local_shell"), arguments=arguments,
                       id=source_id, response=self.model_response(), timestamp=ts, meta=meta)
        elif kind in OUTPUT_TYPES:
            self.close_response()
            call_id = p.get("call_id")
            if not call_id:
                self.b.problem(f"{kind} without call_id; line kept out", number)
                return
            text, envelope, images = decode_output(p.get("output"))
            meta = {"codex_type": kind} | ({"output_envelope": envelope} if envelope is not None else {})
            self.b.add("tool_result", text, call_id=str(call_id), id=source_id, is_error=codex_failed(p.get("output"), text, envelope),
                       attachments=tuple(images), timestamp=ts, meta=meta)
        elif kind == "agent_message":
            self.agent_message(number, p, source_id, ts)
        elif kind in MARKER_ITEM_TYPES:
            self.b.add("marker", "", id=source_id, timestamp=ts, meta={"event": kind, "codex_type": kind})
        else:
            self.b.problem(f"unknown response item type {kind!r}; line kept out", number)

    def reinjected(self, role: Any, payload: dict[str, Any], text: str) -> bool:
        """Whether a message is an entry of the initial context that Codex recorded again, unchanged, because a
        compaction cleared its reference context, and that the replay, which keeps the history from before the
        compaction, does not record.

        A turn records its full initial context only when there is no reference context (after a compaction, or a
        rollback past one), and otherwise only the sections that changed: an unchanged one gives no item
        (`record_context_updates_and_set_reference_context_item`, openai/codex:codex-rs/core/src/session/
        mod.rs@3aae5d8 L3754-3808; the re-recorded context in the upstream snapshots
        `all__suite__compact__pre_turn_compaction_including_incoming_shapes.snap` and its `compact_remote` twin). So
        between a `compacted` line and the next item that is no developer or contextual user message, an entry whose
        text is the one its slot last had is left out (counted in ``meta.skipped``); a changed one is kept, as
        the diff of its section would be. Every other initial-context message sets its slot's text."""
        if role != "developer" and not (role == "user" and _is_contextual_message(payload)):
            self.after_compaction = False  # the turn's own input: no more re-recorded context
            return False
        slot = _initial_context_slot(role, text)
        if slot is None:
            return False
        if self.after_compaction and self.initial_context.get(slot) == text:
            return True
        self.initial_context[slot] = text
        return False

    def agent_message(self, number: int, p: dict[str, Any], source_id: str | None, ts: str | None) -> None:
        """An `agent_message` item: a user-role item (`_agent_message_content`); an encrypted part's size is in
        `meta.encrypted_len`, as for an encrypted inter-agent communication."""
        self.close_response()
        message = p.get("message")
        text, encrypted, unknown = (message, 0, []) if isinstance(message, str) else _agent_message_content(p, self.b.reporter(number))
        meta: dict[str, Any] = {"codex_type": "agent_message"}
        meta |= {key: p[key] for key in ("author", "recipient") if isinstance(p.get(key), str)}
        if encrypted:
            meta["encrypted_len"] = encrypted
        self.b.add("user", text, id=source_id, synthetic=True, timestamp=ts, meta=_with_unknown(meta, unknown))


def _agent_message_content(payload: dict[str, Any], report: Callable[[str], None]) -> tuple[str, int, list[Any]]:
    """The text of an `agent_message` item's content, the size of its encrypted parts, and its parts of another kind.

    The parts are `AgentMessageInputContent`s (protocol/src/models.rs@3aae5d8 L736-741). The `input_text` parts are
    the text the model reads, joined by a line break as `plaintext_agent_message_content` joins them (L744-755). An
    `encrypted_content` part is an encrypted inter-agent message that only the model provider decrypts: the model
    reads it, so it is no unknown part, but nothing of it is readable here. `to_model_input_item` (protocol.rs
    L817-842) puts a readable header before it (since 5b22a8e5b; from 5f4d06ef1 until then the item held the
    encrypted part alone). The transcript keeps its size, which Codex's estimate counts as `ceil(len*9/16)` bytes
    (core/src/context_manager/history.rs L759-795, spec §6). A part of any other kind is reported and kept
    (`unknown_block_text`)."""
    content = payload.get("content")
    if content is not None and not isinstance(content, (str, list)):
        report(f"agent_message content is a JSON {json_type(content)}, not a list of parts; kept as its JSON text")
        return json.dumps(content, ensure_ascii=False), 0, [content]
    texts, encrypted, unknown = [], 0, []
    for n, part in enumerate(_content_parts(payload)):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "input_text":
            texts.append(text_of(part.get("text"), f"the text of agent_message content part {n}", report))
        elif kind == "encrypted_content" and isinstance(part.get("encrypted_content"), str):
            encrypted += len(part["encrypted_content"])
        else:
            what = repr(kind) if isinstance(part, dict) else f"(a JSON {json_type(part)}, not an object)"
            if kind == "encrypted_content":
                what += " whose encrypted_content is no string"
            texts.append(unknown_block_text(part, f"unknown agent_message content part {what}", report))
            unknown.append(part)
    return "\n".join(text for text in texts if text), encrypted, unknown


class CodexRolloutImporter(Importer):
    format = "codex"
    description = "OpenAI Codex CLI rollout JSONL (envelope and pre-envelope legacy variants, .jsonl.zst)"
    suffixes: ClassVar[tuple[str, ...]] = (".jsonl", ".jsonl.zst")
    priority = 10

    @classmethod
    def sniff(cls, path: Path, head: str) -> bool:
        first = head.split("\n", 1)[0].strip()
        try:
            data = json.loads(first)
        except (ValueError, RecursionError):  # not JSON, too deep, or a number beyond the digit limit
            return False
        if not isinstance(data, dict):
            return False
        if data.get("type") in ENVELOPE_TYPES and isinstance(data.get("payload"), dict):
            return True
        return _is_legacy_header(data) and ('"record_type"' in head or '"type":"message"' in head.replace(" ", ""))

    def load(self, path: Path, **options: Any) -> list[Transcript]:
        jsonl = read_jsonl(path)
        lines = jsonl.lines
        first = lines[0][1]
        legacy = isinstance(first, dict) and "payload" not in first and _is_legacy_header(first)
        if not legacy and not (isinstance(first, dict) and first.get("type") in ENVELOPE_TYPES):
            raise ImportFailure(f"{path}:{lines[0][0]}: not a Codex rollout line (expected {{timestamp, type, payload}})")
        if legacy:
            lines = _legacy_to_envelope(lines)
        reader = _RolloutReader(path, _hoist_turn_contexts(lines), legacy, _RollbackReplay(lines).run())
        reader.b.problems.extend(jsonl.problems)
        return [reader.read()]


def _is_legacy_header(data: dict[str, Any]) -> bool:
    return "type" not in data and "id" in data and "timestamp" in data and ("instructions" in data or "git" in data)
