"""Pi's session tree and what the model sees of it (docs/specs/pi.md §1, §2.4, §2.5).

Owns:
- `PiMessage` (an AgentMessage: user, assistant, toolResult, bashExecution, custom, and the
  synthesized compactionSummary / branchSummary; its estimated characters and the paths of its
  file-tool calls are computed once; `retimed` copies one with another timestamp) and `Entry`
  (one session entry with id/parentId);
- `SessionTree`: the append-only store, the leaf pointer and the active path (§1.1), kept between
  calls with the positions of its compaction entries, so a path a few appends further costs those
  few entries;
- `to_wire`: `convertToLlm` with the exact summary wrappers (§1.4 step 5) and the provider
  transform that drops error/aborted assistants and patches orphan tool calls with
  "No result provided" (§1.4 step 6; pi-ai since fb1fdb60, 2025-12-20); `to_wire_2025` is the
  transform before that commit (pi-ai `transorm-messages.ts@83a6c269`): every message is kept and
  an assistant's tool calls without a result before the next assistant are removed from it,
  except in the last message; `WireFold` / `WireFold2025` compute the same for a list that grows
  at its end, converting only what was appended since the previous call (`WireFold` also copies
  the output of the runs of the previous list that a compaction keeps);
- the token accounting: `calculate_context_tokens`, `estimate_tokens` (chars/4 on UTF-16 lengths,
  image rules per version) and `ContextEstimator`: `estimateContextTokens` (§2.4, §2.5) of a list
  that grows at its end, keeping the sum after the last usable usage;
- `PathIndex`: running sums of the estimates, the messages and the file-tool paths along a
  path, kept between calls like the path, from which the cut walk, kept tails, `tokensBefore`,
  the ranges a compaction summarizes and the session context (`buildSessionContext`, §1.4: the
  latest compaction's summary, the kept entries from `firstKeptEntryId` and everything after it,
  with the LATER variant that also emits older compactions inside the kept range, §10) are read
  without a loop over the path. `to_wire` remains the spec-shaped definition `WireFold` is tested
  against.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from itertools import compress
from typing import Any

from compaction_bench.log_view import common_prefix_length
from compaction_bench.request import Message, ToolCall
from compaction_bench.tokens import pi_estimate_units, utf16_len
from compaction_bench.transcript import Attachment, Usage, parse_timestamp

COMPACTION_SUMMARY_PREFIX = "The conversation history before this point was compacted into the following summary:\n\n<summary>\n"
COMPACTION_SUMMARY_SUFFIX = "\n</summary>"
BRANCH_SUMMARY_PREFIX = "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n"
BRANCH_SUMMARY_SUFFIX = "</summary>"
NO_RESULT_TEXT = "No result provided"

#: Message roles that start a turn for split-turn detection (§3.3 step 5).
TURN_START_ROLES = frozenset({"user", "bashExecution"})
#: The context messages' roles that start a turn since a6f720e6 (`isTurnStartMessage`, `compaction.ts@2efa728d` L323-336).
VISIBLE_TURN_START_ROLES = frozenset({"user", "bashExecution", "custom", "branchSummary", "compactionSummary"})
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


def retimed(message: PiMessage, timestamp: float) -> PiMessage:
    """`dataclasses.replace(message, timestamp=timestamp)`, copying the fields at once instead of
    reading each through `replace`'s introspection (what the message computed from its fields,
    its estimated characters and file-tool paths, does not read the timestamp and is copied too)."""
    copy = object.__new__(PiMessage)
    copy.__dict__.update(message.__dict__)
    object.__setattr__(copy, "timestamp", timestamp)
    return copy


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
    moment = parse_timestamp(value)
    return 0.0 if moment is None else moment.timestamp() * 1000.0


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


def entry_message(entry: Entry, *, summarized: bool = False) -> PiMessage | None:
    """The message an entry contributes to the context (`buildSessionContext`, §1.4 step 3: a
    branch summary only when its summary is non-empty) or, with `summarized`, to a range that is
    summarized or counted (`getMessageFromEntry`, `compaction.ts@83378aad` L79-93 and
    `branch-summarization.ts@83378aad` L143-167, §3.3 step 6, §6): there a branch summary gives its
    message even when empty (`buildSessionContext` alone checks `entry.summary`,
    `session-manager.ts@83378aad` L378)."""
    if entry.type in ("message", "custom_message"):
        return entry.message
    if entry.type == "compaction" or (entry.type == "branch_summary" and (summarized or entry.summary)):
        return entry.summary_message
    return None


def is_hidden_summary(entry: Entry) -> bool:
    """A branch summary that a summarized range holds but the context leaves out (an empty one)."""
    return entry.type == "branch_summary" and not entry.summary


def is_turn_start(entry: Entry, *, context_visible: bool = False) -> bool:
    """An entry that starts a turn for split-turn detection (§3.3 step 5). With `context_visible` (a6f720e6,
    `isTurnStartEntry`, `compaction.ts@2efa728d` L338-343): an entry other than a compaction whose context message
    (`entry_message`) starts a turn, so an empty branch summary no longer does and a legacy custom message does."""
    if context_visible:
        message = entry_message(entry)
        return entry.type != "compaction" and message is not None and message.role in VISIBLE_TURN_START_ROLES
    if entry.type in ("branch_summary", "custom_message"):
        return True
    return entry.type == "message" and entry.role in TURN_START_ROLES


def counts_usage(message: PiMessage, *, nonzero: bool) -> bool:
    """`getAssistantUsage` (§2.4): an assistant with `usable_usage`; with `nonzero` (cd95c274, in ee24a9ec:
    `compaction.ts@2efa728d` L154-167) only one whose usage counts more than 0 context tokens, so an all-zero usage
    (most aborted turns record one) is no usage for `estimateContextTokens`."""
    usage = message.usage
    return message.usable_usage and usage is not None and (not nonzero or calculate_context_tokens(usage) > 0)


def latest_compaction_index(path: Sequence[Entry]) -> int:
    return next((i for i in range(len(path) - 1, -1, -1) if path[i].type == "compaction"), -1)


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
    """`to_wire` for the agent's messages from one request to the next.

    The transform is a left fold that only appends to its output. Between two compactions the
    list grows at its end: the fold state after the previous call's messages is kept and only what
    was appended is folded. A compaction rebuilds the list from runs of the previous one (the kept
    tail; LATER also puts the previous summary back inside it). A message that flushes (an
    assistant, or any message with a wire form other than a tool result) leaves nothing pending
    once its flush has added the patches of the calls before it, so from there on the output only
    depends on the messages that follow: for a run of the previous list's messages that starts at
    such a message, the flush is done with the new state and the run's output is copied from the
    previous output instead of being folded again (the same messages give the same output)."""

    def __init__(self, convert: Callable[[PiMessage], list[Message]] = convert_message) -> None:
        self.convert = convert
        #: (call id, tool name) → its "No result provided" message: the same object at every request
        #: (comparing and counting a request then finds it is the message sent before).
        self._patches: dict[tuple[str, str], Message] = {}
        self._start()

    def _start(self) -> None:
        self.seen: list[PiMessage] = []
        self.out: list[Message] = []
        self.pending: tuple[ToolCall, ...] = ()
        self.answered: set[str] = set()
        #: starts[i], ends[i]: where the output of seen[i] itself (after its flush's patches) starts and ends.
        self.starts: list[int] = []
        self.ends: list[int] = []
        #: flushes[i]: whether seen[i] flushes; `flushing`: id(message) → a position in `seen` of a message that flushes.
        self.flushes: list[bool] = []
        self.flushing: dict[int, int] = {}

    def _flush(self) -> None:
        for call in self.pending:
            if call.id not in self.answered:
                patch = self._patches.get((call.id, call.name))
                if patch is None:
                    patch = Message(role="tool", content=NO_RESULT_TEXT, tool_call_id=call.id, name=call.name, is_error=True)
                    self._patches[call.id, call.name] = patch
                self.out.append(patch)
        self.pending, self.answered = (), set()

    def _step(self, message: PiMessage) -> None:
        """Fold one message. A flush with nothing pending only clears `answered`, which is read
        for pending calls alone and started afresh with the next ones: it is skipped."""
        out = self.out
        flushes = message.role == "assistant"
        if flushes:
            if self.pending:
                self._flush()
            if message.stop_reason not in ("error", "aborted"):
                if message.tool_calls:
                    self.pending, self.answered = message.tool_calls, set()
                self.starts.append(len(out))
                out.extend(self.convert(message))
            else:
                self.starts.append(len(out))
        elif message.role == "toolResult":
            self.answered.add(message.tool_call_id or "")
            self.starts.append(len(out))
            out.extend(self.convert(message))
        else:
            converted = self.convert(message)
            flushes = bool(converted)
            if flushes and self.pending:
                self._flush()
            self.starts.append(len(out))
            out.extend(converted)
        self.ends.append(len(out))
        if flushes:
            self.flushing[id(message)] = len(self.seen)
        self.flushes.append(flushes)
        self.seen.append(message)

    def __call__(self, messages: list[PiMessage]) -> list[Message]:
        """The wire messages of `messages`, as a new list."""
        return list(self.output(messages))

    def output(self, messages: list[PiMessage]) -> list[Message]:
        """The wire messages of `messages`: the fold's own list, which only grows until a call on a
        list that does not extend this one starts a new list (never to be changed by the caller)."""
        n = len(self.seen)
        if len(messages) >= n and messages[:n] == self.seen:
            for message in messages[n:]:
                self._step(message)
            return self.out
        old = (self.seen, self.out, self.starts, self.ends, self.flushes, self.flushing)
        self._start()
        i = 0
        while i < len(messages):
            j = old[5].get(id(messages[i]))  # the previous list keeps its messages, so an id there is theirs
            if j is None:
                self._step(messages[i])
                i += 1
            else:
                i += self._copy_run(messages, i, j, *old)
        return self.out

    def _copy_run(
        self,
        messages: list[PiMessage],
        i: int,
        j: int,
        seen: list[PiMessage],
        out: list[Message],
        starts: list[int],
        ends: list[int],
        flushes: list[bool],
        flushing: dict[int, int],
    ) -> int:
        """Fold messages[i:] where they repeat the previous list from its flushing message seen[j]
        on: flush, copy that run's output, take the state the previous fold had at the run's end.
        Returns the run's length."""
        limit = min(len(messages) - i, len(seen) - j)
        run = common_prefix_length(messages[i : i + limit], seen[j : j + limit])
        if self.pending:
            self._flush()
        shift = len(self.out) - starts[j]
        self.out.extend(out[starts[j] : ends[j + run - 1]])
        base = len(self.seen) - j
        self.starts.extend(map(shift.__add__, starts[j : j + run]))
        self.ends.extend(map(shift.__add__, ends[j : j + run]))
        flushing_at = list(compress(range(j, j + run), flushes[j : j + run]))  # starts with j: seen[j] flushes
        self.flushing.update(zip(map(id, map(seen.__getitem__, flushing_at)), map(base.__add__, flushing_at), strict=True))
        last_flush = flushing_at[-1]
        self.flushes.extend(flushes[j : j + run])
        self.seen.extend(seen[j : j + run])
        # The state after the run: the calls of its last flushing message, if an assistant that
        # was folded, with the tool results after it.
        flusher = seen[last_flush]
        if flusher.role == "assistant" and flusher.stop_reason not in ("error", "aborted") and flusher.tool_calls:
            self.pending = flusher.tool_calls
            self.answered = {m.tool_call_id or "" for m in seen[last_flush + 1 : j + run] if m.role == "toolResult"}
        return run


def to_wire_2025(
    messages: Sequence[PiMessage],
    convert: Callable[[PiMessage], list[Message]] = convert_message,
) -> list[Message]:
    """The provider transform of December 2025 (pi-ai at 83a6c269): error and aborted assistants
    stay; tool calls that no tool result answers before the next assistant are dropped from their
    assistant message, unless it is the last message (an ongoing turn)."""
    return _wire_2025(messages, 0, len(messages), convert)


def _wire_2025(
    messages: Sequence[PiMessage],
    lo: int,
    hi: int,
    convert: Callable[[PiMessage], list[Message]],
) -> list[Message]:
    """`to_wire_2025`'s output for `messages[lo:hi]` (looking ahead over the whole list)."""
    out: list[Message] = []
    last = len(messages) - 1
    for n in range(lo, hi):
        message = messages[n]
        wire = convert(message)
        if message.role == "assistant" and message.tool_calls and n != last:
            answered: set[str] = set()
            for j in range(n + 1, len(messages)):
                later = messages[j]
                if later.role == "assistant":
                    break
                if later.role == "toolResult":
                    answered.add(later.tool_call_id or "")
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
    answered or not by the results before the next assistant. The wire messages before the list's last assistant are kept, with the messages
    up to that assistant; a call on a list that starts with those messages adds the wire messages
    that became final and converts only the rest (the last assistant and what follows it). Any
    other list is converted from the start."""

    def __init__(self, convert: Callable[[PiMessage], list[Message]] = convert_message) -> None:
        self.convert = convert
        #: The messages up to the last assistant seen (empty before any assistant).
        self.seen: list[PiMessage] = []
        #: The wire messages of `seen` without its last assistant.
        self.out: list[Message] = []

    def __call__(self, messages: list[PiMessage]) -> list[Message]:
        """The wire messages of `messages`, as a new list."""
        settled, rest = self.parts(messages)
        return settled + rest

    def parts(self, messages: list[PiMessage]) -> tuple[list[Message], list[Message]]:
        """The wire messages of `messages` in two lists: those before the last assistant, the fold's
        own list (which only grows until a call on a list that does not extend the messages seen
        starts a new one; never to be changed by the caller), then the rest, converted anew."""
        k = len(self.seen)
        if len(messages) < k or messages[:k] != self.seen:
            self.seen, self.out, k = [], [], 0
        settled = k - 1 if k else 0
        last_assistant = next((i for i in range(len(messages) - 1, settled - 1, -1) if messages[i].role == "assistant"), None)
        if last_assistant is not None:
            self.out.extend(_wire_2025(messages, settled, last_assistant, self.convert))
            self.seen.extend(messages[k : last_assistant + 1])
            settled = last_assistant
        return self.out, _wire_2025(messages, settled, len(messages), self.convert)


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


class ContextEstimator:
    """`estimateContextTokens` (§2.4) for a list of messages that grows at its end between calls.

    The estimate only reads the messages after the last usable usage: their estimates are kept
    added up, with that usage, and a call adds what was appended since the previous one (a new
    usable usage starts the sum again). A list that does not start with the messages seen before
    is read from its end back to its last usable usage, as `estimateContextTokens` reads it:
    the last usable usage's tokens plus chars/4 of every message after it. Each message's
    estimate and whether its usage is usable are kept by identity (a compaction's kept messages
    are read again after it). The sums are exact integers: the result equals the spec's estimate
    of the same list. `nonzero_usage`: an all-zero usage is none (`counts_usage`)."""

    def __init__(self, *, image_chars: int, user_images: bool, nonzero_usage: bool = False) -> None:
        self.image_chars = image_chars
        self.user_images = user_images
        self.nonzero_usage = nonzero_usage
        #: id(message) → (message, its estimate, whether its usage is usable); the message is kept so its id stays its own.
        self._known: dict[int, tuple[PiMessage, int, bool]] = {}
        self._start()

    def _start(self) -> None:
        self.seen: list[PiMessage] = []
        self.last_usable: int | None = None
        #: The last usable usage's tokens (0 without one) and the estimates of the messages after it.
        self.usage_tokens = 0
        self.after = 0

    def __call__(self, messages: list[PiMessage]) -> ContextEstimate:
        n = len(self.seen)
        if len(messages) < n or messages[:n] != self.seen:
            self._start()
            n = 0
        known, after = self._known, 0
        for i in range(len(messages) - 1, n - 1, -1):  # newest first, back to the last usable usage
            message = messages[i]
            facts = known.get(id(message))
            if facts is None:
                tokens = estimate_tokens(message, image_chars=self.image_chars, user_images=self.user_images)
                facts = known[id(message)] = (message, tokens, counts_usage(message, nonzero=self.nonzero_usage))
            if facts[2]:
                usage = message.usage
                assert usage is not None  # `counts_usage` guarantees it
                self.last_usable, self.usage_tokens, self.after = i, calculate_context_tokens(usage), after
                break
            after += facts[1]
        else:
            self.after += after
        self.seen.extend(messages[n:])
        return ContextEstimate(self.usage_tokens + self.after, self.last_usable)


class PathIndex:
    """Pi's estimates and summarizable messages along a session path (root first), kept from one
    call to the next.

    `update(path)` brings the index to `path`. Entries never change parent, so two paths agree up
    to their last common entry: what was indexed for that prefix is kept and only the entries after
    it are added (a path a few appends further costs those appends). With the running sums, the
    cut walk's total, the kept tail and `estimateContextTokens` of a range of the path are
    differences of two sums instead of loops over the entries (§2.4, §2.5, §3.3); the messages a
    range summarizes and their read/write/edit paths are slices (§3.3 step 6, §4.4). The sums are
    exact integers, so every answer equals the loop's. The estimates follow the image rules and
    `nonzero_usage` (`counts_usage`) given; the cut walk's rules are the caller's (`context_visible`:
    a6f720e6's walk over every context-visible entry, `find_cut_point`)."""

    def __init__(self, *, image_chars: int, user_images: bool, nonzero_usage: bool = False) -> None:
        self.image_chars = image_chars
        self.user_images = user_images
        self.nonzero_usage = nonzero_usage
        self.entries: list[Entry] = []
        #: message_sums[i]: the estimates of the `message` entries of path[:i] (what the cut walk adds up before a6f720e6).
        self.message_sums: list[int] = [0]
        #: context_sums[i]: the estimates of the messages path[:i] contributes (`entry_message`; what a6f720e6's walk adds up).
        self.context_sums: list[int] = [0]
        #: last_usable[i]: the last position before i whose message has a usable usage (§2.4), -1 if none.
        self.last_usable: list[int] = [-1]
        #: The messages of the path's entries other than compactions as a summarized range reads them
        #: (`entry_message(summarized=True)`: empty branch summaries too), their entry ids, and at[i]: how many
        #: of them path[:i] holds (a compaction range summarizes the messages of its entries, compactions apart).
        self.summarizable: list[PiMessage] = []
        self.summarizable_ids: list[str] = []
        self.summarizable_at: list[int] = [0]
        #: How many of the summarizable messages of path[:i] the context leaves out (`is_hidden_summary`).
        self.hidden_at: list[int] = [0]
        #: The (tool, path) of the file-tool calls of those messages that are assistants, and how many path[:i] holds.
        self.file_paths: list[tuple[str, str]] = []
        self.file_paths_at: list[int] = [0]
        #: The messages of all the path's entries, compactions as their summaries, and how many path[:i] holds.
        self.context_messages: list[PiMessage] = []
        self.context_at: list[int] = [0]
        #: last_compaction[i] / last_turn_start[i] / last_visible_turn_start[i]: the last compaction / turn start (§3.3
        #: step 5; a6f720e6's) in path[:i], -1 if none.
        self.last_compaction: list[int] = [-1]
        self.last_turn_start: list[int] = [-1]
        self.last_visible_turn_start: list[int] = [-1]
        #: Each entry id's position (ids are unique on a path).
        self.positions: dict[str, int] = {}

    def update(self, path: Sequence[Entry]) -> PathIndex:
        entries = self.entries
        n = min(len(entries), len(path))
        while n and entries[n - 1] is not path[n - 1]:
            n -= 1
        if n < len(entries):
            for entry in entries[n:]:
                del self.positions[entry.id]
            del entries[n:], self.message_sums[n + 1 :], self.context_sums[n + 1 :], self.last_usable[n + 1 :]
            del self.summarizable[self.summarizable_at[n] :], self.summarizable_ids[self.summarizable_at[n] :]
            del self.summarizable_at[n + 1 :], self.hidden_at[n + 1 :], self.file_paths[self.file_paths_at[n] :], self.file_paths_at[n + 1 :]
            del self.last_compaction[n + 1 :], self.last_turn_start[n + 1 :], self.last_visible_turn_start[n + 1 :]
            del self.context_messages[self.context_at[n] :], self.context_at[n + 1 :]
        message_sums, context_sums, last_usable = self.message_sums, self.context_sums, self.last_usable
        for i in range(n, len(path)):
            entry = path[i]
            message = entry_message(entry)
            tokens = 0 if message is None else estimate_tokens(message, image_chars=self.image_chars, user_images=self.user_images)
            entries.append(entry)
            message_sums.append(message_sums[-1] + (tokens if entry.type == "message" and entry.message is not None else 0))
            context_sums.append(context_sums[-1] + tokens)
            last_usable.append(i if message is not None and counts_usage(message, nonzero=self.nonzero_usage) else last_usable[-1])
            if message is not None:
                self.context_messages.append(message)
            self.context_at.append(len(self.context_messages))
            hidden = is_hidden_summary(entry)
            summarized = entry.summary_message if hidden else message
            if summarized is not None and entry.type != "compaction":
                self.summarizable.append(summarized)
                self.summarizable_ids.append(entry.id)
                if summarized.role == "assistant":
                    self.file_paths.extend(summarized.file_tool_paths)
            self.summarizable_at.append(len(self.summarizable))
            self.hidden_at.append(self.hidden_at[-1] + hidden)
            self.file_paths_at.append(len(self.file_paths))
            self.last_compaction.append(i if entry.type == "compaction" else self.last_compaction[-1])
            self.last_turn_start.append(i if is_turn_start(entry) else self.last_turn_start[-1])
            self.last_visible_turn_start.append(i if is_turn_start(entry, context_visible=True) else self.last_visible_turn_start[-1])
            self.positions[entry.id] = i
        return self

    def latest_compaction(self) -> int:
        """`latest_compaction_index` of the path."""
        return self.last_compaction[-1]

    def position(self, entry_id: str | None, before: int) -> int | None:
        """The position of the entry `entry_id` if it is on the path before `before`."""
        at = self.positions.get(entry_id) if entry_id is not None else None
        return at if at is not None and at < before else None

    def session_context(self, *, nested_compactions: bool) -> list[PiMessage]:
        """`buildSessionContext` (§1.4) of the path, from slices of the messages listed along it:
        without a compaction, every message; else the latest compaction's summary, the messages of
        the entries from its `firstKeptEntryId` (older compactions among them as summaries only with
        `nested_compactions`, LATER §10) and those of the entries after it."""
        k = self.latest_compaction()
        if k < 0:
            return self._context_of(0, len(self.entries))
        kept = self.position(self.entries[k].first_kept_id, k)
        kept = k if kept is None else kept
        if nested_compactions:
            middle = self.context_messages[self.context_at[kept] : self.context_at[k]]
        else:
            middle = self._context_of(kept, k)
        return [self.entries[k].summary_message, *middle, *self._context_of(k + 1, len(self.entries))]

    def _context_of(self, lo: int, hi: int) -> list[PiMessage]:
        """The context messages of path[lo:hi], compactions apart: the summarizable ones without the
        empty branch summaries (looked for only where the range holds one)."""
        at = self.summarizable_at
        messages = self.summarizable[at[lo] : at[hi]]
        if self.hidden_at[hi] == self.hidden_at[lo]:
            return messages
        return [m for m in messages if not (m.role == "branchSummary" and not m.summary)]

    def turn_start(self, index: int, start: int, *, context_visible: bool = False) -> int:
        """The entry that starts the turn of path[index] (`is_turn_start`), scanning back to `start`; -1 if none."""
        at = (self.last_visible_turn_start if context_visible else self.last_turn_start)[index + 1]
        return at if at >= start else -1

    def summarized(self, lo: int, hi: int, *, context_visible: bool = False) -> tuple[list[PiMessage], list[str]]:
        """The messages of the entries of path[lo:hi] other than compactions, and their entry ids. With
        `context_visible` (a6f720e6, `getMessageFromEntryForCompaction`, `compaction.ts@2efa728d` L80-85) only
        the context's: an empty branch summary is not summarized."""
        a, b = self.summarizable_at[lo], self.summarizable_at[hi]
        messages, ids = self.summarizable[a:b], self.summarizable_ids[a:b]
        if not context_visible or self.hidden_at[hi] == self.hidden_at[lo]:
            return messages, ids
        shown = [not (m.role == "branchSummary" and not m.summary) for m in messages]
        return list(compress(messages, shown)), list(compress(ids, shown))

    def file_tool_paths(self, lo: int, hi: int) -> list[tuple[str, str]]:
        """The (tool, path) of the file-tool calls of the assistants `summarized(lo, hi)` returns."""
        return self.file_paths[self.file_paths_at[lo] : self.file_paths_at[hi]]

    def tail(self, start: int, *, context_visible: bool = False) -> int:
        """The estimates the cut walk adds up from `start` to the end of the path: of the `message`
        entries, or with `context_visible` (a6f720e6) of every entry's context message."""
        sums = self.context_sums if context_visible else self.message_sums
        return sums[-1] - sums[start]

    def walk_back(self, start: int, end: int, keep: int, *, context_visible: bool = False) -> int | None:
        """Where the cut walk stops (§3.3): the last `message` entry i in [start, end) whose
        estimate, added to those of the `message` entries after it up to `end`, reaches `keep`. With
        `context_visible` (a6f720e6, `compaction.ts@2efa728d` L419-439): the last entry with a non-zero estimate
        of its context messages (a compaction's summary included) that reaches `keep` with those after it."""
        sums = self.context_sums if context_visible else self.message_sums
        i = bisect_right(sums, sums[end] - keep, start, end) - 1
        if context_visible:
            while i >= start and sums[i + 1] == sums[i]:  # `if (messageTokens === 0) continue`
                i -= 1
            return i if i >= start else None
        entries = self.entries
        while i >= start and (entries[i].type != "message" or entries[i].message is None):
            i -= 1
        return i if i >= start else None

    def _usage_tokens(self, index: int) -> int:
        message = self.entries[index].message
        assert message is not None and message.usage is not None  # `last_usable` points at usable usages only
        return calculate_context_tokens(message.usage)

    def range_estimate(self, lo: int) -> int:
        """`estimateContextTokens` (§2.4) of the messages of path[lo:]."""
        sums, usable = self.context_sums, self.last_usable[-1]
        if usable >= lo:
            return self._usage_tokens(usable) + sums[-1] - sums[usable + 1]
        return sums[-1] - sums[lo]

    def compacted_estimate(self, k: int, kept: int) -> int:
        """`estimateContextTokens` of `session_context(nested_compactions=True)` when
        the latest compaction is at `k` and its kept entries start at `kept` (<= k): the summary,
        the messages of path[kept:k] and those of path[k + 1:]."""
        sums, usable = self.context_sums, self.last_usable[-1]
        after = sums[-1] - sums[k + 1]
        if usable > k:
            return self.range_estimate(k + 1)
        if usable >= kept:
            return self._usage_tokens(usable) + sums[k] - sums[usable + 1] + after
        return sums[k + 1] - sums[kept] + after


def message_item_ids(messages: Iterable[PiMessage]) -> list[str]:
    """Every transcript item id the messages carry (thinking included)."""
    return [i for m in messages for i in (*m.thinking_ids, *m.item_ids)]
