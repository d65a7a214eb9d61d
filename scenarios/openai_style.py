"""OpenAI-style chat messages → canonical items: the one conversion every OpenAI-shaped format uses.

Owns `add_messages` (system/user/assistant/tool messages with `tool_calls` and `tool_call_id`, legacy
`function_call` / `function` messages paired by name, content as a string or a list of parts,
`reasoning_content`), `openai_usage` (OpenAI and LiteLLM usage dicts, DeepSeek and Anthropic cache
fields; a count that is no token count is a problem and leaves the usage unknown) and
`sniff_messages`. Used by the mini-swe-agent, OpenAI-messages (and tau-bench), Hugging Face dataset
and OpenHands importers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from compaction_bench.scenarios.builder import (
    TranscriptBuilder,
    as_arguments,
    as_text,
    image_attachment,
    mapping_of,
    token_counts,
)
from compaction_bench.transcript import Attachment, Item, Usage, json_type

ROLES = ("system", "developer", "user", "assistant", "tool", "function")

#: A message list or JSONL line starts with an object that has a chat `role`.
_ROLE_RE = re.compile(r'"role"\s*:\s*"(system|developer|user|assistant|tool)"')


#: The token counts of an OpenAI / LiteLLM `usage` object that `openai_usage` reads (DeepSeek's and
#: Anthropic's names for the cached part among them).
OPENAI_COUNTS = (
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
    "prompt_tokens_details.cached_tokens",
    "prompt_cache_hit_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
    "completion_tokens_details.reasoning_tokens",
)


def openai_usage(data: Any, report: Callable[[str], None]) -> Usage | None:
    """Usage from an OpenAI / LiteLLM `usage` dict (`prompt_tokens` includes the cached part); None when there
    is none or a count is unusable (said through `report`)."""
    counts = token_counts(data, OPENAI_COUNTS, report)
    if counts is None:
        return None
    return Usage(
        input=counts["prompt_tokens"],
        cached_input=counts["prompt_tokens_details.cached_tokens"] or counts["prompt_cache_hit_tokens"] or counts["cache_read_input_tokens"],
        cache_write=counts["cache_creation_input_tokens"],
        output=counts["completion_tokens"],
        reasoning=counts["completion_tokens_details.reasoning_tokens"],
        total=counts["total_tokens"],
    )


def content_parts(content: Any) -> tuple[str, tuple[Attachment, ...]]:
    """Text and attachments of an OpenAI `content` (string, or list of text / image_url parts)."""
    if not isinstance(content, list):
        return as_text(content), ()
    texts, attachments = [], []
    for part in content:
        if isinstance(part, Mapping) and part.get("type") in ("image_url", "image"):
            url = part.get("image_url")
            url = url.get("url") if isinstance(url, Mapping) else url
            mime, _, data = str(url or "").partition(";base64,")
            attachments.append(image_attachment(mime.removeprefix("data:") if data else "image/url", data))
        else:
            texts.append(as_text([part]))
    return "\n".join(t for t in texts if t), tuple(attachments)


#: Parts `openai_style.content_parts` takes an image from.
IMAGE_PARTS = ("image_url", "image")


def fields_of(message: Mapping[str, Any]) -> str:
    """The fields a message holds a value in, as an error lists them."""
    return ", ".join(str(k) for k, v in message.items() if v is not None) or "none"


def readable_part(part: Any) -> bool:
    """A content part `content_parts` reads: text (a string, or an object with `text` or `content`) or an image."""
    if isinstance(part, str):
        return True
    return isinstance(part, Mapping) and (
        part.get("type") in IMAGE_PARTS or isinstance(part.get("text"), str) or isinstance(part.get("content"), (str, list))
    )


def describe_value(value: Any) -> str:
    """A value as a problem names it: its JSON type and its start (an object: its fields)."""
    if isinstance(value, Mapping):
        return f"an object with fields {fields_of(value)}"
    shown = json.dumps(value, ensure_ascii=False, default=str)
    return f"a JSON {json_type(value)} ({shown[:40]}{'…' if len(shown) > 40 else ''})"


def content_problem(content: Any) -> str | None:
    """What `content_parts` does with a content that is neither text nor a list of text/image parts, else None."""
    if content is None or isinstance(content, str):
        return None
    if not isinstance(content, list):
        return f"content is {describe_value(content)}, not text or a list of parts; kept as its JSON text"
    bad = [n for n, part in enumerate(content) if not readable_part(part)]
    if not bad:
        return None
    if len(bad) == 1:
        return f"content part {bad[0]} is {describe_value(content[bad[0]])}, no text or image part; left out of the message's text"
    return (
        f"content parts {', '.join(map(str, bad))} are no text or image parts (the first: {describe_value(content[bad[0]])}); "
        "left out of the message's text"
    )


def is_chat_entry(value: Any) -> bool:
    """A chat message (an object with a chat `role`) or a session record (an object holding `messages`)."""
    return isinstance(value, Mapping) and (value.get("role") in ROLES or isinstance(value.get("messages"), list))


def sniff_messages(head: str) -> bool:
    """True when the head looks like a JSON list of chat messages, or JSONL whose first line is one.

    A JSON list is told by its first element, parsed whatever its keys' order (a pydantic / LiteLLM dump writes
    `content` before `role`) and length; a first element longer than the head still counts when a chat `role`
    shows in the head's first 4,000 characters."""
    stripped = head.lstrip()
    if stripped.startswith("["):
        try:
            first, _ = json.JSONDecoder().raw_decode(stripped[1:].lstrip())
        except (ValueError, RecursionError):  # not JSON, cut off by the head's end, too deep, or a huge number
            first = None
        return is_chat_entry(first) or bool(_ROLE_RE.search(stripped[:4000]))
    try:
        first = json.loads(stripped.split("\n", 1)[0])
    except (ValueError, RecursionError):  # not JSON, too deep, or a number beyond the digit limit
        return False
    return is_chat_entry(first)


def add_messages(
    builder: TranscriptBuilder,
    messages: Sequence[Any],
    *,
    usage_of: Callable[[Mapping[str, Any], Callable[[str], None]], Usage | None] = lambda m, report: openai_usage(m.get("usage"), report),
    where: Callable[[int], str] = lambda n: f"message {n}",
    line_of: Callable[[int], int | None] = lambda n: None,
    is_demonstration: Callable[[Mapping[str, Any]], bool] = lambda m: False,
    written_by_agent: Callable[[Mapping[str, Any]], Mapping[str, Any] | None] = lambda m: None,
    marker_roles: Collection[str] = (),
    failed: Callable[[str], bool] = lambda text: False,
) -> None:
    """Append OpenAI-style messages to `builder`.

    `usage_of` finds a message's usage (formats keep it in different places) and says what is wrong
    with it through the report it is given; `where`/`line_of` name a message in problem reports;
    `is_demonstration` tells a demonstration (an example of another task shown to the agent): a
    synthetic user message marked `meta["demonstration"]`, whose sentences are no fact of this session
    (the miner asks nothing from it). `written_by_agent` gives the meta of a user-role message the agent
    program wrote itself (a format-error notice, a command's output; None for one a person wrote): a
    synthetic user item marked `meta["from_agent"]`, sent to the model as recorded but no user turn, and
    mined for nothing the user said (as Aider's own messages, `scenarios/aider.py`). `failed` tells, from its
    text, a tool result that reports a failed call, for a format whose tool messages carry no error flag but
    whose environment words every failure one way (tau-bench's `Error: …`): marked `is_error`.

    A legacy `role: "function"` message (no `tool_call_id`) answers the most recent unanswered
    `function_call` of its `name`. A message of another role is kept as a marker: one of
    `marker_roles` (the format's own messages that are no model input) as it is, any other reported.
    """
    functions: dict[str, list[str]] = {}  # name -> call ids of the legacy function_calls not answered yet
    for n, message in enumerate(messages):
        if not isinstance(message, Mapping):
            builder.problem(f"{where(n)}: expected a message object, got {type(message).__name__}; kept as a marker", line_of(n))
            builder.add("marker", json.dumps(message, ensure_ascii=False), meta={"event": "unreadable-message"})
            continue
        role = message.get("role")
        text, attachments = content_parts(message.get("content"))
        if role in ("system", "developer"):
            builder.add("system", text, meta={"role": role} if role != "system" else {})
        elif role == "user":
            builder.add("user", text, attachments=attachments, **user_origin(message, is_demonstration, written_by_agent))
        elif role == "assistant":
            response = builder.new_response()
            reasoning = message.get("reasoning_content") or message.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                builder.add("reasoning", reasoning, response=response)
            calls = message.get("tool_calls") or []
            if text or attachments or not (calls or message.get("function_call")):
                builder.add("assistant", text, response=response, attachments=attachments)
            if not isinstance(calls, list):
                builder.problem(f"{where(n)}: tool_calls is not a list; kept as one call", line_of(n))
                calls = [calls]
            for call in calls:
                add_tool_call(builder, call, response, where(n), line_of(n))
            if message.get("function_call"):
                legacy = add_tool_call(builder, {"function": message["function_call"]}, response, where(n), line_of(n))
                functions.setdefault(legacy.tool_name or "", []).append(legacy.call_id or "")
            builder.set_usage(response, usage_of(message, builder.reporter(line_of(n), where(n))))
        elif role in ("tool", "function"):
            call_id = message.get("tool_call_id")
            name = str(message.get("name") or "")
            if not call_id and role == "function" and functions.get(name):
                call_id = functions[name].pop()
            call_id = call_id or name
            if not call_id:
                missing = "tool_call_id" if role == "tool" else "name"
                builder.problem(f"{where(n)}: {role} message without {missing}; kept as an orphan result", line_of(n))
                call_id = f"missing-call-{n}"
            builder.add("tool_result", text, call_id=str(call_id), tool_name=message.get("name"), attachments=attachments,
                        is_error=failed(text))
        else:
            if not isinstance(role, str):
                builder.problem(f"{where(n)}: message without a role; kept as a marker", line_of(n))
            elif role not in marker_roles:
                builder.problem(f"{where(n)}: unknown role {role!r} (expected one of {', '.join(ROLES)}); kept as a marker", line_of(n))
            builder.add("marker", text, meta={"event": "message", "role": str(role)})


def user_origin(
    message: Mapping[str, Any],
    is_demonstration: Callable[[Mapping[str, Any]], bool],
    written_by_agent: Callable[[Mapping[str, Any]], Mapping[str, Any] | None],
) -> dict[str, Any]:
    """`synthetic` and `meta` of a user-role message: the agent program's own (`meta["from_agent"]`), a
    demonstration (`meta["demonstration"]`), or what a person wrote (neither)."""
    agent_meta = written_by_agent(message)
    if agent_meta is not None:
        return {"synthetic": True, "meta": {**agent_meta, "from_agent": True}}
    if is_demonstration(message):
        return {"synthetic": True, "meta": {"demonstration": True}}
    return {"synthetic": False, "meta": {}}


def add_tool_call(builder: TranscriptBuilder, call: Any, response: int, where: str, line: int | None) -> Item:
    """One OpenAI `tool_calls` entry (or legacy `function_call`) as a tool_call item (the item added)."""
    if not isinstance(call, Mapping):
        builder.problem(f"{where}: a tool call is not an object; kept as a marker", line)
        return builder.add("marker", json.dumps(call, ensure_ascii=False), meta={"event": "unreadable-tool-call"})
    function = mapping_of(call.get("function"))
    call_id = call.get("id") or f"call-{len(builder.items)}"
    return builder.add(
        "tool_call",
        id=str(call_id),
        call_id=str(call_id),
        tool_name=str(function.get("name") or call.get("name") or ""),
        arguments=as_arguments(function.get("arguments", call.get("arguments"))),
        response=response,
    )


#: A Markdown fenced code block: its info string and its body.
_FENCED = re.compile(r"```[^\n`]*\n(.*?)```", re.S)


def without_block(text: str, command: str) -> str:
    """`text` without the last fenced code block whose body is `command` (SWE-agent's parser takes the
    last block as the action, mini-swe-agent the first bash block: the command appears in one block),
    its surrounding blank lines folded; `text` itself when no block holds the command."""
    blocks = [m for m in _FENCED.finditer(text) if m.group(1).strip() == command.strip()]
    if not blocks:
        return text
    block = blocks[-1]
    return (text[: block.start()].rstrip() + "\n\n" + text[block.end() :].lstrip()).strip()


def text_beside_block(message: Mapping[str, Any], command: str) -> Any:
    """A text-protocol message's content without the fenced block holding `command` (`without_block`); a
    content that is no string as it is."""
    content = message.get("content")
    return without_block(content, command) if isinstance(content, str) else content


def actions_to_tool_calls(
    messages: Sequence[Any],
    command_of: Callable[[Mapping[str, Any]], tuple[str, str] | None],
    refuses_action: Callable[[Any], bool] = lambda m: False,
    text_beside: Callable[[Mapping[str, Any], str], Any] = text_beside_block,
) -> list[Any]:
    """Rewrite text-protocol agents into tool calling: an assistant message whose action
    `command_of(message)` finds (as `(tool name, command)`) gets a tool call `action-<n>`, and the
    user message that follows it becomes that call's tool result. The message's content becomes
    `text_beside(message, command)`, what it says beside the command (by default the fenced block the
    command was written in leaves it: `text_beside_block`): the model wrote the command once, so the
    replay counts it once, as the call. An assistant message followed by one that `refuses_action`
    (the agent's format error: nothing was run) keeps its text and gets no call."""
    out: list[Any] = []
    pending: str | None = None
    for n, message in enumerate(messages):
        if not isinstance(message, Mapping):
            out.append(message)
            continue
        role = message.get("role")
        if role == "user" and pending is not None:
            out.append({**message, "role": "tool", "tool_call_id": pending})
            pending = None
            continue
        pending = None
        refused = n + 1 < len(messages) and refuses_action(messages[n + 1])
        found = command_of(message) if role == "assistant" and not message.get("tool_calls") and not refused else None
        if found is not None:
            name, command = found
            pending = f"action-{n}"
            call = {"id": pending, "function": {"name": name, "arguments": json.dumps({"command": command}, ensure_ascii=False)}}
            message = {**message, "tool_calls": [call], "content": text_beside(message, command)}
        out.append(message)
    return out
