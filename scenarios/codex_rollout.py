"""Importer for Codex CLI rollout files (`~/.codex/sessions/**/rollout-*.jsonl`, also `.jsonl.zst`).

Owns the mapping of Codex's rollout lines (docs/specs/codex.md §7, corpora/MANIFEST.md) to canonical items:

- the ``{timestamp, [ordinal], type, payload}`` envelope, and the pre-envelope legacy variant
  (first line ``{id, timestamp, instructions, git}``, then bare response items and
  ``{"record_type": "state"}`` lines);
- ``response_item`` messages: ``developer``/``system`` roles become system items (developer ones
  with ``meta.role = "developer"``); a content part of a kind Codex does not write is a problem, kept
  in ``meta.unknown_content`` (its text, if any, in the message), and so is a text that is no string
  (kept as its JSON text); user messages that are contextual fragments (AGENTS.md
  instructions, ``<environment_context>``, ...) are ``synthetic``; assistant messages, reasoning
  (encrypted size in ``meta.encrypted_len``), function/custom/local-shell calls and their outputs
  (an output that is a JSON string ``{"output": ..., "metadata": ...}`` is decoded: the text is the
  output, the rest stays in ``meta.output_envelope`` so the wire form can be rebuilt exactly);
  ``agent_message`` items are user-role items with ``meta.codex_type = "agent_message"``;
  every item keeps the Codex payload type in ``meta.codex_type``;
- model responses: consecutive model-output items; a new ``token_count`` (a changed cumulative
  total) starts a new response. Its ``last_token_usage`` becomes the `Usage` of the response it
  belongs to (a count that is no token count is a problem and leaves that usage unknown): Codex
  ≤0.58 writes the event before the response's items, newer versions after them; the file's own
  order decides (``meta.usage_alignment``);
- ``turn_context`` model changes become ``marker`` items (``event: "model_switch"``, ``model``,
  ``previous_model``, ``comp_hash``/``context_window`` when recorded), placed before the user
  message of the turn they configure; ``compacted`` lines become markers (``event:
  "compaction"``); ``turn_aborted`` events and ``ghost_snapshot`` items become markers;
- everything else (UI duplicates such as ``user_message``/``agent_message`` events, world state)
  is counted in ``meta.skipped`` and malformed lines are listed in ``meta.problems``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
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
#: Start markers of contextual user fragments (contextual_user_message.rs), matched case-insensitively.
CONTEXTUAL_PREFIXES = (
    "# agents.md instructions for ",
    "<environment_context>",
    "<user_instructions>",
    "<skill>",
    "<plugins>",
    "<subagents>",
    "<user_shell_command>",
    "<turn_aborted>",
    "<subagent_notification>",
    "<codex_internal_context",
)
#: The parts of a message's `content` Codex writes (`ContentItem`): text, and images (attachments).
TEXT_PARTS = frozenset({"input_text", "output_text"})
MESSAGE_PARTS = TEXT_PARTS | {"input_image"}
CALL_TYPES = {"function_call": "function_call", "custom_tool_call": "custom_tool_call", "local_shell_call": "local_shell_call"}
OUTPUT_TYPES = frozenset({"function_call_output", "custom_tool_call_output", "local_shell_call_output"})
MARKER_ITEM_TYPES = frozenset({"ghost_snapshot", "compaction", "compaction_summary", "context_compaction", "web_search_call",
                               "image_generation_call", "tool_search_call", "tool_search_output"})


def is_contextual(text: str) -> bool:
    """A user message that is injected context rather than something the user typed."""
    head = text.lstrip()[:64].lower()
    return any(head.startswith(prefix) for prefix in CONTEXTUAL_PREFIXES)


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
    return payload.get("type") == "message" and payload.get("role") == "user" and not is_contextual(_message_content(payload, _ignore)[0])


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
        elif _is_model_output(data):
            user_at = None
        out.append((number, data))
    return out


def _ignore(message: str) -> None:
    """The `report` of a look at a message that is read again, and reported, when its item is made."""


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


class _RolloutReader:
    """One pass over the lines of one rollout, feeding a `TranscriptBuilder`."""

    def __init__(self, path: Path, lines: list[tuple[int, Any]], legacy: bool) -> None:
        self.path = path
        self.lines = lines
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
            elif kind == "compacted":
                self.close_response()
                history = payload.get("replacement_history")
                self.b.add("marker", str(payload.get("message") or ""), timestamp=ts, meta={
                    "event": "compaction",
                    "window_number": payload.get("window_number"),
                    "window_id": payload.get("window_id"),
                    "previous_window_id": payload.get("previous_window_id"),
                    "replacement_items": len(history) if isinstance(history, list) else None,
                })
            else:
                self.skipped[kind] += 1
        if self.pending_usage is not None:
            self.unattached += 1
        if self.unattached:
            self.meta["unattached_token_counts"] = self.unattached
        if self.skipped:
            self.meta["skipped"] = dict(sorted(self.skipped.items()))
        self.b.model = self.model
        return self.b.finish(str(session_id or self.path.name.split(".")[0]), source={"session_id": session_id}, meta=self.meta)

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
        else:
            self.skipped[f"event_msg:{kind}"] += 1

    def response_item(self, number: int, p: dict[str, Any], ts: str | None) -> None:
        kind = p.get("type")
        source_id = p.get("id") if isinstance(p.get("id"), str) else None
        if kind == "message":
            role = p.get("role")
            text, unknown = _message_content(p, self.b.reporter(number))
            if role == "assistant":
                said: dict[str, Any] = {"codex_type": "message"} | ({"phase": p["phase"]} if p.get("phase") else {})
                self.b.add("assistant", text, id=source_id, response=self.model_response(), timestamp=ts, meta=_with_unknown(said, unknown))
                return
            self.close_response()
            if role in ("developer", "system"):
                self.b.add("system", text, id=source_id, synthetic=True, timestamp=ts,
                           meta=_with_unknown({"codex_type": "message", "role": role}, unknown))
            elif role == "user":
                self.b.add("user", text, id=source_id, synthetic=is_contextual(text), attachments=tuple(_message_images(p)),
                           timestamp=ts, meta=_with_unknown({"codex_type": "message"}, unknown))
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
            meta = {"codex_type": kind}
            exit_code = None
            if envelope is not None:
                meta["output_envelope"] = envelope
                metadata = envelope.get("metadata")
                exit_code = metadata.get("exit_code") if isinstance(metadata, dict) else None
            is_error = (isinstance(exit_code, int) and exit_code != 0) or (isinstance(p.get("output"), dict) and p["output"].get("success") is False)
            self.b.add("tool_result", text, call_id=str(call_id), id=source_id, is_error=is_error, attachments=tuple(images),
                       timestamp=ts, meta=meta)
        elif kind == "agent_message":
            self.close_response()
            message = p.get("message")
            text, unknown = (message, []) if isinstance(message, str) else _message_content(p, self.b.reporter(number))
            self.b.add("user", text, id=source_id, synthetic=True, timestamp=ts, meta=_with_unknown({"codex_type": "agent_message"}, unknown))
        elif kind in MARKER_ITEM_TYPES:
            self.b.add("marker", "", id=source_id, timestamp=ts, meta={"event": kind, "codex_type": kind})
        else:
            self.b.problem(f"unknown response item type {kind!r}; line kept out", number)


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
        reader = _RolloutReader(path, _hoist_turn_contexts(lines), legacy)
        reader.b.problems.extend(jsonl.problems)
        return [reader.read()]


def _is_legacy_header(data: dict[str, Any]) -> bool:
    return "type" not in data and "id" in data and "timestamp" in data and ("instructions" in data or "git" in data)
