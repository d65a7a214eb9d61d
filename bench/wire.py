"""The wire adapter: request messages → valid OpenAI Chat Completions messages, for every model call.

Strategies build requests in this project's provider-neutral shape (`compaction_bench.request`:
roles `reasoning` and `compaction`, tool calls as `{id, name, arguments}` with item ids). Every
model call (summarizer, answerer, judge) goes through `chat_messages`, whose output is what the
OpenAI Chat Completions API accepts; litellm then translates it for other providers (Anthropic
Messages, OpenAI-compatible servers). `metrics/integrity.py` measures how a strategy's own
request breaks the wire rules; this module makes every payload actually sent satisfy them:

- roles: ``system``, ``user``, ``assistant``, ``tool``; ``developer`` only for OpenAI itself (other
  providers get ``system``); ``compaction`` (an opaque Codex compaction item) becomes a user message
  with its text; only the keys each role has in the API (no ``item_ids``, ``is_error``, ``attachments``).
- reasoning: a reasoning item's visible text (a reasoning summary) is carried as assistant text,
  which every provider accepts; an item with no visible text (encrypted content only) is dropped,
  because encrypted reasoning is only valid on the Responses API of the model that produced it and
  Anthropic thinking blocks need that model's own signature.
- tool calls: ``{id, type: "function", function: {name, arguments}}`` with string arguments; an
  argument string that is not a JSON object (Codex custom tools send raw patch text) is wrapped as
  ``{"input": <text>}`` so providers that parse arguments (Anthropic ``tool_use.input``) accept it;
  empty arguments become ``{}``; ids are made valid for every provider (``[A-Za-z0-9_-]``, ≤ 64
  characters, unique within the request: a call id a transcript reuses for several calls still gives
  each call its own wire id, and each result is paired with its own call).
- pairing: an assistant message's calls must be answered by the tool messages right after it. A
  call without its result there is written into the assistant's text (``[tool call NAME(ARGS) had no
  recorded result]``); a tool result without its call becomes a user message
  (``[result of tool call ID (NAME)]`` + text). Nothing is invented and nothing is lost.
- Gemini's opening turn: Gemini refuses a function call turn that comes neither right after a user
  turn nor after a function response turn ("Please ensure that function call turn comes immediately
  after a user turn or after a function response turn", gemini-cli #11814; `metrics/integrity.py`'s
  ``misplaced_call``), and litellm lifts every system message into ``systemInstruction``, so a
  request whose first message after the system ones is an assistant's calls (a summary request or an
  answerer's context that opens inside a turn) opens ``contents`` with a call turn. A Gemini-bound
  payload (`GEMINI_PROVIDERS`) gets the user message ``.`` (`OPENING_USER_TURN`) in front of that
  assistant message: the placeholder litellm itself puts before an Anthropic request that opens with
  an assistant turn (``litellm.modify_params``), which says nothing the model could take for the
  user's words. Only this one message is added; other providers' payloads are left as they are.
- content: a final assistant message (a prefill) loses its trailing whitespace (Anthropic refuses it);
  empty user/system text is dropped (there is nothing to say); an empty or whitespace-only tool
  output is sent as ``(no output)`` (Anthropic rejects empty text blocks; it and Bedrock Converse
  reject text blocks of whitespace only); attachments are content parts: the
  transcripts keep only an attachment's type, name and size, so each becomes a text part naming it
  (``[image attachment: NAME, MIME, SIZE bytes]``) after the message's text part.

Plain dicts (the answerer's question, judge prompts) are read as the same messages first, so a
whole call is converted in one pass.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

from compaction_bench.request import Message, ToolCall, merge_assistant

CHAT_ROLES = ("system", "developer", "user", "assistant", "tool")
#: litellm providers whose requests go out as Gemini `contents` (Google AI Studio, Vertex AI).
GEMINI_PROVIDERS = ("gemini", "vertex_ai", "vertex_ai_beta")
#: The user message put before a Gemini request's opening call turn (litellm's placeholder user turn, "."), module docstring.
OPENING_USER_TURN = "."
EMPTY_TOOL_OUTPUT = "(no output)"
ID_CHARS = re.compile(r"[^A-Za-z0-9_-]")
MAX_ID = 64

WireInput: TypeAlias = Message | Mapping[str, Any]


#: How a Codex tool output's JSON envelope starts on the wire (`strategies.codex_components.wire_output`).
ENVELOPE_START = '{"output":"'
#: A JSON string escape (`\n`, `\"`, `\u00e9`, ...).
JSON_ESCAPE = re.compile(r'\\(["\\/bfnrt]|u[0-9a-fA-F]{4})')
JSON_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def readable_output(content: str) -> str:
    """A tool output as a model reads it: one in a Codex JSON envelope with its string escapes undone (the model reads
    the envelope's `\\n` as a line break and `\\"` as a quote; a fact kept word for word in it is kept), whole or cut by
    a truncation (the escapes are undone wherever they are); any other output as it is. Retention's presence and the
    offline models read outputs through it."""
    if not content.startswith(ENVELOPE_START) or "\\" not in content:
        return content
    return JSON_ESCAPE.sub(lambda m: JSON_ESCAPES.get(m.group(1)) or chr(int(m.group(1)[1:], 16)), content)


def _parse_dict(entry: Mapping[str, Any]) -> Message:
    """A Chat-style (or internal-style) message dict as a `Message`."""
    role = str(entry.get("role", ""))
    content = entry.get("content")
    if isinstance(content, list):
        content = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping) and p.get("type") == "text")
    calls: list[ToolCall] = []
    for raw in entry.get("tool_calls") or ():
        function = raw.get("function") if isinstance(raw.get("function"), Mapping) else raw
        arguments = function.get("arguments", "")
        calls.append(
            ToolCall(
                id=str(raw.get("id") or ""),
                name=str(function.get("name") or ""),
                arguments=arguments if isinstance(arguments, str) else json.dumps(arguments),
            )
        )
    call_id = entry.get("tool_call_id")
    return Message(
        role=role,
        content=content if isinstance(content, str) else "",
        tool_calls=tuple(calls),
        tool_call_id=str(call_id) if call_id is not None else None,
        name=entry.get("name") if isinstance(entry.get("name"), str) else None,
    )


@functools.lru_cache(maxsize=1 << 14)
def wire_arguments(arguments: str) -> str:
    """Arguments as a JSON-object string (raw text wrapped as {"input": text}). Memoized: every
    context a probe is asked in sends the same calls again."""
    if not arguments.strip():
        return "{}"
    try:
        parsed = json.loads(arguments)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        return arguments
    return json.dumps({"input": arguments}, ensure_ascii=False)


class _Ids:
    """Valid wire ids, unique within the request: every call gets its own id, even when a transcript
    reuses a call id (the result paired with that call carries the same wire id)."""

    def __init__(self) -> None:
        self._used: set[str] = set()

    def new(self, call_id: str) -> str:
        base = ID_CHARS.sub("_", call_id)[:MAX_ID] or "call"
        candidate, n = base, 1
        while candidate in self._used:
            suffix = f"_{n}"
            candidate, n = base[: MAX_ID - len(suffix)] + suffix, n + 1
        self._used.add(candidate)
        return candidate


def _content(message: Message) -> str | list[dict[str, Any]]:
    if not message.attachments:
        return message.content
    parts: list[dict[str, Any]] = [{"type": "text", "text": message.content}] if message.content.strip() else []
    for a in message.attachments:
        kind = "image" if a.is_image else "file"
        parts.append({"type": "text", "text": f"[{kind} attachment: {a.name or 'unnamed'}, {a.mime}, {a.size} bytes]"})
    return parts


def _demoted_call(call: ToolCall) -> str:
    return f"[tool call {call.name}({call.arguments}) had no recorded result]"


def _demoted_result(message: Message) -> str:
    name = f" ({message.name})" if message.name else ""
    return f"[result of tool call {message.tool_call_id or 'unknown'}{name}]\n{message.content or EMPTY_TOOL_OUTPUT}"


def chat_messages(messages: Sequence[WireInput], *, provider: str = "openai") -> list[dict[str, Any]]:
    """The messages of one model call as valid OpenAI Chat Completions messages (rules above)."""
    parsed = [m if isinstance(m, Message) else _parse_dict(m) for m in messages]
    plain: list[Message] = []
    for m in parsed:
        if m.role == "reasoning":
            if m.content.strip():
                plain.append(Message("assistant", m.content, item_ids=m.item_ids))
        elif m.role == "compaction":
            if m.content.strip():
                plain.append(Message("user", m.content, item_ids=m.item_ids))
        elif m.role == "developer" and provider != "openai":
            plain.append(Message("system", m.content, item_ids=m.item_ids, attachments=m.attachments))
        elif m.role in CHAT_ROLES:
            plain.append(m)
        else:
            raise ValueError(f"message role {m.role!r} has no Chat Completions form")
    plain = merge_assistant(plain)
    ids = _Ids()
    out: list[dict[str, Any]] = []
    index = 0
    while index < len(plain):
        m = plain[index]
        index += 1
        if m.role == "tool":  # a result not preceded by its call
            out.append({"role": "user", "content": _demoted_result(m)})
            continue
        if m.role != "assistant" or not m.tool_calls:
            content = _content(m)
            if content if isinstance(content, list) else content.strip():
                out.append({"role": m.role, "content": content})
            continue
        run: list[Message] = []
        while index < len(plain) and plain[index].role == "tool":
            run.append(plain[index])
            index += 1
        # Each call is paired with the first unclaimed result carrying its id, in order, so a call id
        # reused by several calls pairs call k with result k and each pair gets its own wire id.
        claimed: set[int] = set()
        answered: list[tuple[ToolCall, Message]] = []
        unanswered: list[ToolCall] = []
        for c in m.tool_calls:
            match = next((j for j, r in enumerate(run) if j not in claimed and r.tool_call_id == c.id), None)
            if match is None:
                unanswered.append(c)
            else:
                claimed.add(match)
                answered.append((c, run[match]))
        orphans = [r for j, r in enumerate(run) if j not in claimed]
        wire_ids = [ids.new(c.id) for c, _ in answered]
        text = "\n".join([m.content, *(_demoted_call(c) for c in unanswered)]).strip()
        entry: dict[str, Any] = {"role": "assistant", "content": text or None}
        if answered:
            entry["tool_calls"] = [
                {"id": wid, "type": "function", "function": {"name": c.name or "tool", "arguments": wire_arguments(c.arguments)}}
                for wid, (c, _) in zip(wire_ids, answered, strict=True)
            ]
        if entry["content"] is not None or answered:
            out.append(entry)
        for wid, (_, result) in zip(wire_ids, answered, strict=True):
            output = result.content
            out.append({"role": "tool", "tool_call_id": wid, "content": output if output and not output.isspace() else EMPTY_TOOL_OUTPUT})
        if orphans:
            out.append({"role": "user", "content": "\n\n".join(_demoted_result(o) for o in orphans)})
    if out and out[-1]["role"] == "assistant" and isinstance(out[-1].get("content"), str):
        out[-1]["content"] = out[-1]["content"].rstrip() or None  # Anthropic refuses a final assistant turn ending in whitespace
        if out[-1]["content"] is None and not out[-1].get("tool_calls"):
            out.pop()
    if provider in GEMINI_PROVIDERS:
        opening = next((k for k, entry in enumerate(out) if entry["role"] != "system"), None)
        if opening is not None and out[opening].get("tool_calls"):
            out.insert(opening, {"role": "user", "content": OPENING_USER_TURN})
    return out


def provider_of(model: str) -> str:
    """The litellm provider prefix of a model id (`openai/gpt-5` → `openai`; a bare id → `openai`)."""
    return model.split("/", 1)[0] if "/" in model else "openai"
