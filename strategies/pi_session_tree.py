"""Pi's session tree and what the model sees of it (docs/specs/pi.md §1, §2.4, §2.5).

Owns:
- `PiMessage` (an AgentMessage: user, assistant, toolResult, bashExecution, custom, and the
  synthesized compactionSummary / branchSummary; its estimated characters and the paths of its
  file-tool calls are computed once) and `Entry` (one session entry with id/parentId);
- `SessionTree`: the append-only store, the leaf pointer and the active path (§1.1), kept between
  calls with the positions of its compaction entries, so a path a few appends further costs those
  few entries;
- `build_session_context`: latest compaction on the path → summary message + kept entries from
  `firstKeptEntryId` + everything after it (§1.4), with the LATER variant that also emits older
  compaction entries found inside the kept range (§10);
- `to_wire`: `convertToLlm` with the exact summary wrappers (§1.4 step 5) and the provider
  transform that drops error/aborted assistants and patches orphan tool calls with
  "No result provided" (§1.4 step 6; pi-ai since fb1fdb60, 2025-12-20); `to_wire_2025` is the
  transform before that commit (pi-ai `transorm-messages.ts@83a6c269`): every message is kept and
  an assistant's tool calls without a result before the next assistant are removed from it,
  except in the last message; `WireFold` / `WireFold2025` compute the same for a list that grows
  at its end, converting only what was appended since the previous call;
- the token accounting: `calculate_context_tokens`, `estimate_tokens` (chars/4 on UTF-16 lengths,
  image rules per version) and `estimate_context_tokens` (§2.4, §2.5), with `ContextEstimator`
  keeping running sums for a growing list.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import cached_property
from typing import Any

from compaction_bench.request import Message, ToolCall
from compaction_bench.tokens import pi_estimate_units, utf16_len
from compaction_bench.transcript import Attachment, Usage

COMPACTION_SUMMARY_PREFIX = "The conversation history before this point was compacted into the following summary:\n\n<summary>\n"
COMPACTION_SUMMARY_SUFFIX = "\n</summary>"
BRANCH_SUMMARY_PREFIX = "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n"
BRANCH_SUMMARY_SUFFIX = "</summary>"
NO_RESULT_TEXT = "No result provided"

#: Message roles that start a turn for split-turn detection (§3.3 step 5).
TURN_START_ROLES = frozenset({"user", "bashExecution"})
#: The tools whose `path` argument the file-operation lists record (§4.4).
FILE_TOOLS = frozenset({"read", "write", "edit"})
#: Message roles that are valid cut points (§3.2); toolResult never is.
CUT_POINT_ROLES = frozenset({"user", "assistant", "bashExecution", "custom", "branchSummary", "compactionSummary"})


@dataclass(frozen=True)
class PiMessage:
    """One AgentMessage. `item_ids` are the transcript items it carries (thinking ones apart)."""

    role: str
    texts: tuple[str, ...] = ()
    images: tuple[Attachment, ...] = ()
    thinking: tuple[str, ...] = ()
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    tool_name: str | None = None
    is_error: bool = False
    stop_reason: str | None = None
    error_message: str | None = None
    usage: Usage | None = None
    timestamp: float = 0.0
    command: str = ""
    output: str = ""
    exclude: bool = False
    summary: str = ""
    item_ids: tuple[str, ...] = ()
    thinking_ids: tuple[str, ...] = ()
    #: (provider, model id) of an assistant message, where recorded.
    model: tuple[str, str] | None = None

    @property
    def text(self) -> str:
        return "".join(self.texts)

    @cached_property
    def estimate_chars(self) -> int:
        """The characters `estimateTokens` counts, images apart (§2.5); computed once per message."""
        role = self.role
        if role in ("user", "toolResult", "custom"):
            return sum(utf16_len(t) for t in self.texts)
        if role == "assistant":
            n = sum(utf16_len(t) for t in (*self.texts, *self.thinking))
            return n + sum(utf16_len(c.name) + utf16_len(c.arguments) for c in self.tool_calls)
        if role == "bashExecution":
            return utf16_len(self.command) + utf16_len(self.output)
        if role in ("branchSummary", "compactionSummary"):
            return utf16_len(self.summary)
        return 0

    @cached_property
    def file_tool_paths(self) -> tuple[tuple[str, str], ...]:
        """(tool, path) of each read/write/edit call whose JSON arguments hold a non-empty string
        `path` (§4.4), in call order; parsed once per message."""
        out = []
        for call in self.tool_calls:
            if call.name not in FILE_TOOLS:
                continue
            try:
                path = json.loads(call.arguments or "{}").get("path")
            except (json.JSONDecodeError, AttributeError):
                continue
            if isinstance(path, str) and path:
                out.append((call.name, path))
        return tuple(out)

    @property
    def usable_usage(self) -> bool:
        """An assistant whose usage counts for `estimateContextTokens` (§2.4)."""
        return self.role == "assistant" and self.usage is not None and self.stop_reason not in ("aborted", "error")


@dataclass
class Entry:
    """One session entry (§1.2). `message` for `message` and `custom_message` entries; summary
    fields for `compaction` and `branch_summary`; anything else in `data`."""

    id: str
    parent: str | None
    type: str
    timestamp: float
    message: PiMessage | None = None
    summary: str = ""
    first_kept_id: str | None = None
    tokens_before: int = 0
    details: Mapping[str, Any] | None = None
    from_hook: bool = False
    from_id: str | None = None
    data: Mapping[str, Any] = field(default_factory=dict)

    @property
    def role(self) -> str | None:
        return self.message.role if self.type == "message" and self.message else None

    @cached_property
    def summary_message(self) -> PiMessage:
        """The compactionSummary / branchSummary message of this entry (built once)."""
        role = "compactionSummary" if self.type == "compaction" else "branchSummary"
        return PiMessage(role=role, summary=self.summary, timestamp=self.timestamp)


def iso_to_ms(value: str | None) -> float:
    """ISO-8601 timestamp → epoch milliseconds (0 when absent or unreadable)."""
    if not value:
        return 0.0
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000.0
    except ValueError:
        return 0.0


class SessionTree:
    """Append-only entries with a leaf pointer (§1.1)."""

    def __init__(self) -> None:
        self.entries: dict[str, Entry] = {}
        self.leaf: str | None = None
        # The last path built, root first, and each of its ids' positions: entries are append-only
        # and never change parent, so a later path shares its prefix up to the first common entry.
        self._path: list[Entry] = []
        self._position: dict[str, int] = {}
        #: Positions of the compaction entries on `_path`, in order.
        self._compactions: list[int] = []
        #: Bumped whenever `_path` loses entries (a path to another leaf was built): a reader that
        #: kept a position on the path knows its prefix may have changed.
        self.generation = 0

    def append(self, entry: Entry) -> Entry:
        if entry.id in self.entries:
            raise ValueError(f"duplicate Pi entry id {entry.id!r}")
        self.entries[entry.id] = entry
        self.leaf = entry.id
        return entry

    def branch(self, entry_id: str | None) -> None:
        """Move the leaf (navigation); the next append becomes a child of it."""
        self.leaf = entry_id

    def _walk(self, leaf: str | None) -> list[Entry]:
        """Bring `_path` to `leaf`, walking up only to the nearest entry of the previous path, so a
        leaf a few appends further costs a few steps, not the whole history."""
        walked: list[Entry] = []
        current = leaf
        position = self._position
        while current is not None and current not in position:
            entry = self.entries[current]
            walked.append(entry)
            current = entry.parent
        keep = 0 if current is None else position[current] + 1
        cached = self._path
        if keep < len(cached):
            self.generation += 1
            for entry in cached[keep:]:
                del position[entry.id]
            del cached[keep:]
            compactions = self._compactions
            while compactions and compactions[-1] >= keep:
                compactions.pop()
        for entry in reversed(walked):
            if entry.type == "compaction":
                self._compactions.append(len(cached))
            position[entry.id] = len(cached)
            cached.append(entry)
        return cached

    def path(self, leaf: str | None = None) -> list[Entry]:
        """Root-first entries from the root to `leaf` (default: the current leaf), as a new list."""
        return list(self._walk(self.leaf if leaf is None else leaf))

    def active_path(self) -> list[Entry]:
        """The path to the current leaf without a copy: the tree's own list, to read before the
        next call on the tree (which may extend or cut it in place)."""
        return self._walk(self.leaf)

    def latest_compaction(self) -> Entry | None:
        """The last compaction entry on the path to the current leaf."""
        self._walk(self.leaf)
        return self._path[self._compactions[-1]] if self._compactions else None


def entry_message(entry: Entry) -> PiMessage | None:
    """The message an entry contributes when its range is summarized (§3.3 step 6)."""
    if entry.type in ("message", "custom_message"):
        return entry.message
    if (entry.type == "branch_summary" and entry.summary) or entry.type == "compaction":
        return entry.summary_message
    return None


def latest_compaction_index(path: Sequence[Entry]) -> int:
    return next((i for i in range(len(path) - 1, -1, -1) if path[i].type == "compaction"), -1)


def build_session_context(path: Sequence[Entry], *, nested_compactions: bool) -> list[PiMessage]:
    """`buildSessionContext` (§1.4): the messages the agent holds for this path.

    `nested_compactions` (LATER) emits compaction entries inside the kept range as summaries.
    """
    k = latest_compaction_index(path)
    if k < 0:
        return [m for m in (entry_message(e) for e in path if e.type != "compaction") if m is not None]
    compaction = path[k]
    out = [compaction.summary_message]
    # Entry ids are unique on a path: searching back from the compaction finds the same entry sooner.
    start = next((i for i in range(k - 1, -1, -1) if path[i].id == compaction.first_kept_id), k)
    for entry in path[start:k]:
        if entry.type == "compaction" and not nested_compactions:
            continue
        message = entry_message(entry)
        if message is not None:
            out.append(message)
    out.extend(m for m in (entry_message(e) for e in path[k + 1 :]) if m is not None)
    return out


# --------------------------------------------------------------------------- wire messages
def _user(text: str, ids: tuple[str, ...], images: tuple[Attachment, ...] = ()) -> Message:
    return Message(role="user", content=text, item_ids=ids, attachments=images)


def convert_message(message: PiMessage) -> list[Message]:
    """`convertToLlm` for one message (§1.4 step 5); empty for excluded bash executions."""
    role = message.role
    if role == "compactionSummary":
        return [_user(COMPACTION_SUMMARY_PREFIX + message.summary + COMPACTION_SUMMARY_SUFFIX, ())]
    if role == "branchSummary":
        return [_user(BRANCH_SUMMARY_PREFIX + message.summary + BRANCH_SUMMARY_SUFFIX, message.item_ids)]
    if role == "bashExecution":
        return [] if message.exclude else [_user(message.text, message.item_ids)]
    if role in ("user", "custom"):
        return [_user(message.text, message.item_ids, message.images)]
    if role == "toolResult":
        return [
            Message(
                role="tool",
                content=message.text,
                tool_call_id=message.tool_call_id,
                name=message.tool_name,
                is_error=message.is_error,
                item_ids=message.item_ids,
                attachments=message.images,
            )
        ]
    out: list[Message] = []
    if message.thinking:
        out.append(Message(role="reasoning", content="\n".join(message.thinking), item_ids=message.thinking_ids))
    if message.texts or message.tool_calls or not out:
        out.append(Message(role="assistant", content="\n".join(message.texts), tool_calls=message.tool_calls, item_ids=message.item_ids))
    return out


def to_wire(messages: Iterable[PiMessage], convert: Callable[[PiMessage], list[Message]] = convert_message) -> list[Message]:
    """convertToLlm + the provider transform (§1.4 step 6): error/aborted assistants are dropped,
    tool calls left without results get a "No result provided" error result before the next
    assistant or user message."""
    return WireFold(convert)(list(messages))


class WireFold:
    """`to_wire` for a list of messages that grows at its end between calls (the agent's messages
    between two compactions).

    The transform is a left fold that only appends to its output, so the output for a prefix is a
    prefix of the output for the whole list: the fold state after the messages of the previous
    call is kept and only the messages after them are folded. A list that does not start with
    those messages (a compaction or a retry rebuilt the context) is folded from the start."""

    def __init__(self, convert: Callable[[PiMessage], list[Message]] = convert_message) -> None:
        self.convert = convert
        self._start()

    def _start(self) -> None:
        self.seen: list[PiMessage] = []
        self.out: list[Message] = []
        self.pending: tuple[ToolCall, ...] = ()
        self.answered: set[str] = set()

    def _flush(self) -> None:
        for call in self.pending:
            if call.id not in self.answered:
                self.out.append(Message(role="tool", content=NO_RESULT_TEXT, tool_call_id=call.id, name=call.name, is_error=True))
        self.pending, self.answered = (), set()

    def __call__(self, messages: list[PiMessage]) -> list[Message]:
        """The wire messages of `messages`, as a new list."""
        n = len(self.seen)
        if len(messages) < n or messages[:n] != self.seen:
            self._start()
            n = 0
        convert, out = self.convert, self.out
        for message in messages[n:]:
            if message.role == "assistant":
                self._flush()
                if message.stop_reason in ("error", "aborted"):
                    continue
                if message.tool_calls:
                    self.pending, self.answered = message.tool_calls, set()
                out.extend(convert(message))
            elif message.role == "toolResult":
                self.answered.add(message.tool_call_id or "")
                out.extend(convert(message))
            else:
                converted = convert(message)
                if converted:
                    self._flush()
                out.extend(converted)
        self.seen.extend(messages[n:])
        return list(out)


def to_wire_2025(
    messages: Sequence[PiMessage],
    convert: Callable[[PiMessage], list[Message]] = convert_message,
    never_ran: AbstractSet[str] = frozenset(),
) -> list[Message]:
    """The provider transform of December 2025 (pi-ai at 83a6c269): error and aborted assistants
    stay; tool calls that no tool result answers before the next assistant are dropped from their
    assistant message, unless it is the last message (an ongoing turn). Calls in `never_ran`
    (aborted before they executed) have no result to come and are dropped wherever they are."""
    return _wire_2025(messages, 0, len(messages), convert, never_ran)


def _wire_2025(
    messages: Sequence[PiMessage],
    lo: int,
    hi: int,
    convert: Callable[[PiMessage], list[Message]],
    never_ran: AbstractSet[str],
) -> list[Message]:
    """`to_wire_2025`'s output for `messages[lo:hi]` (looking ahead over the whole list)."""
    out: list[Message] = []
    last = len(messages) - 1
    for n in range(lo, hi):
        message = messages[n]
        wire = convert(message)
        if message.role == "assistant" and message.tool_calls and (n != last or never_ran):
            answered: set[str] = set()
            for j in range(n + 1, len(messages)):
                later = messages[j]
                if later.role == "assistant":
                    break
                if later.role == "toolResult":
                    answered.add(later.tool_call_id or "")
            if n == last:
                answered = {c.id for c in message.tool_calls if c.id not in never_ran}
            if not all(c.id in answered for c in message.tool_calls):
                wire = [
                    replace(w, tool_calls=tuple(c for c in w.tool_calls if c.id in answered)) if w.role == "assistant" else w
                    for w in wire
                ]
        out.extend(wire)
    return out


class WireFold2025:
    """`to_wire_2025` for a list of messages that grows at its end between calls.

    A message before an assistant of the list has its final wire form: its tool calls are
    answered or not by the results before the next assistant, and only the last message depends
    on `never_ran`. The wire messages before the list's last assistant are kept, with the messages
    up to that assistant; a call on a list that starts with those messages adds the wire messages
    that became final and converts only the rest (the last assistant and what follows it). Any
    other list is converted from the start."""

    def __init__(self, convert: Callable[[PiMessage], list[Message]] = convert_message) -> None:
        self.convert = convert
        #: The messages up to the last assistant seen (empty before any assistant).
        self.seen: list[PiMessage] = []
        #: The wire messages of `seen` without its last assistant.
        self.out: list[Message] = []

    def __call__(self, messages: list[PiMessage], never_ran: AbstractSet[str] = frozenset()) -> list[Message]:
        """The wire messages of `messages`, as a new list."""
        k = len(self.seen)
        if len(messages) < k or messages[:k] != self.seen:
            self.seen, self.out, k = [], [], 0
        settled = k - 1 if k else 0
        last_assistant = next((i for i in range(len(messages) - 1, settled - 1, -1) if messages[i].role == "assistant"), None)
        if last_assistant is not None:
            self.out.extend(_wire_2025(messages, settled, last_assistant, self.convert, never_ran))
            self.seen.extend(messages[k : last_assistant + 1])
            settled = last_assistant
        return self.out + _wire_2025(messages, settled, len(messages), self.convert, never_ran)


# --------------------------------------------------------------------------- token accounting
def calculate_context_tokens(usage: Usage) -> int:
    """`totalTokens` if non-zero, else input + output + cacheRead + cacheWrite (§2.3).

    Canonical `Usage.input` already holds the cache fields, and `Usage.total` defaults to
    input + output, so this is `usage.total`.
    """
    return usage.total


def estimate_tokens(message: PiMessage, *, image_chars: int, user_images: bool) -> int:
    """`estimateTokens` (§2.5): ceil(UTF-16 chars / 4). `user_images` (LATER) counts user images."""
    n = message.estimate_chars
    if message.images and (message.role in ("toolResult", "custom") or (message.role == "user" and user_images)):
        n += image_chars * len(message.images)
    return pi_estimate_units(n)


@dataclass(frozen=True)
class ContextEstimate:
    tokens: int
    usage_index: int | None  # index of the assistant whose usage was used


def estimate_context_tokens(messages: Sequence[PiMessage], *, image_chars: int, user_images: bool) -> ContextEstimate:
    """`estimateContextTokens` (§2.4): last usable usage + chars/4 of everything after it."""
    index = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].usable_usage), None)
    start = 0 if index is None else index + 1
    usage = None if index is None else messages[index].usage  # `usable_usage` guarantees it is there
    tokens = 0 if usage is None else calculate_context_tokens(usage)
    tokens += sum(estimate_tokens(m, image_chars=image_chars, user_images=user_images) for m in messages[start:])
    return ContextEstimate(tokens, index)


class ContextEstimator:
    """`estimate_context_tokens` for a list of messages that grows at its end between calls.

    Keeps the running sums of the messages' estimates and the position of the last usable usage,
    so a call costs what was appended since the previous one; a list that does not start with
    the messages seen before is summed from the start. The sums are exact integers: the result
    equals `estimate_context_tokens` of the same list."""

    def __init__(self, *, image_chars: int, user_images: bool) -> None:
        self.image_chars = image_chars
        self.user_images = user_images
        self._start()

    def _start(self) -> None:
        self.seen: list[PiMessage] = []
        #: sums[i]: the estimates of seen[:i] added up.
        self.sums: list[int] = [0]
        self.last_usable: int | None = None

    def __call__(self, messages: list[PiMessage]) -> ContextEstimate:
        n = len(self.seen)
        if len(messages) < n or messages[:n] != self.seen:
            self._start()
            n = 0
        sums, total = self.sums, self.sums[-1]
        for i in range(n, len(messages)):
            message = messages[i]
            total += estimate_tokens(message, image_chars=self.image_chars, user_images=self.user_images)
            sums.append(total)
            if message.usable_usage:
                self.last_usable = i
        self.seen.extend(messages[n:])
        index = self.last_usable
        if index is None:
            return ContextEstimate(total, None)
        usage = messages[index].usage
        assert usage is not None  # `usable_usage` guarantees it
        return ContextEstimate(calculate_context_tokens(usage) + total - sums[index + 1], index)


def message_item_ids(messages: Iterable[PiMessage]) -> list[str]:
    """Every transcript item id the messages carry (thinking included)."""
    return [i for m in messages for i in (*m.thinking_ids, *m.item_ids)]
