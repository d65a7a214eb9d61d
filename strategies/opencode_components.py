"""Shared pieces of the OpenCode strategies `opencode-v1` (docs/specs/opencode.md, SNAP) and `opencode-v2`
(upstream's newer V2 core, `anomalyco/opencode:packages/core/src/session/compaction.ts@031a4a9c`, which
supersedes spec §6: see `compaction_bench.strategies.opencode`).

One place for everything both paths use:

- the session store: OpenCode keeps user and assistant *messages*; an assistant message is one
  model response whose tool parts hold both the call and its result (§3.2, §7.1), so a slice of
  messages never separates a call from its result. Every record has an ascending id, as
  OpenCode's message ids (§3.4);
- model limits, the usable window (§1.1), the compared usage count (§1.2) and the provider-error
  classifier (§1.4);
- the estimator (§2.4): ``round_half_up(utf16_len(JSON.stringify(model messages)) / 4)``, with the
  JSON built per wire message in the AI-SDK shape (no truncation, media counted as data URLs) and
  memoized per message;
- rendering records into wire messages, for a normal request (§3.2) and for the summary input
  (§2.6: media as text, tool output truncated, pruned outputs as the placeholder);
- the view: the wire messages of a sequence of records and the running sum of their JSON lengths,
  brought up to date from the store's log of created and changed records (a request costs what
  changed since the last one, not the history);
- V1's compaction input over the view (`CompactionInput`): the records §2.2 compacts, their turn
  starts, summary-input rendering and running estimate sums, kept in step with the view the same way;
- turns and tail selection (§2.3, §2.5);
- V2's text serialization (`Entries`: each record serialized once per version, its long lines
  given to the token counter), its retained tail starting at a user message (`find_tail_start`) and the
  local part estimates of its trigger (`part_tokens`, kept as running sums by `PartsView`);
- the truncation helpers and the ``[Attached mime: name]`` text (V2: name, else URI, else "inline
  attachment").
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from compaction_bench.profiles import ModelProfile
from compaction_bench.provider import ProviderError
from compaction_bench.request import Message, merge_assistant, message_from_item
from compaction_bench.tokens import opencode_estimate, opencode_estimate_units, utf16_len
from compaction_bench.transcript import MODEL_OUTPUT_KINDS, Attachment, Item, Usage

# ----------------------------------------------------------------- protocol strings (verbatim)
#: §3.2: how a compaction request part reads to the model.
COMPACTION_QUESTION = "What did we do so far?"
#: §3.1: the synthetic follow-up after an automatic compaction without replay.
CONTINUE_TEXT = "Continue if you have next steps, or stop and ask for clarification if you are unsure how to proceed."
#: §3.2, §5: a tool output cleared by prune.
PRUNED_PLACEHOLDER = "[Old tool result content cleared]"
#: §3.2: a tool call that never got its result.
INTERRUPTED_TOOL = "[Tool execution was interrupted]"

#: §1.4: `isContextOverflow`, the 20 case-insensitive patterns of packages/llm/src/provider-error.ts.
OVERFLOW_PATTERNS = tuple(
    re.compile(p, re.IGNORECASE)
    for p in (
        r"prompt is too long",
        r"input is too long for requested model",
        r"exceeds the context window",
        r"input token count.*exceeds the maximum",
        r"tokens in request more than max tokens allowed",
        r"maximum prompt length is \d+",
        r"reduce the length of the messages",
        r"maximum context length is \d+ tokens",
        r"exceeds the limit of \d+",
        r"exceeds the available context size",
        r"greater than the context length",
        r"context window exceeds limit",
        r"exceeded model token limit",
        r"context[_ ]length[_ ]exceeded",
        r"request entity too large",
        r"context length is only \d+ tokens",
        r"input length.*exceeds.*context length",
        r"prompt too long; exceeded (?:max )?context length",
        r"too large for model with \d+ maximum context length",
        r"model_context_window_exceeded",
    )
)
NO_BODY_PATTERN = re.compile(r"^4(00|13)\s*(status code)?\s*\(no body\)", re.IGNORECASE)
MEDIA_PREFIXES = ("image/",)
MEDIA_TYPES = ("application/pdf",)


def is_context_overflow(error: ProviderError) -> bool:
    """§1.4: the message matches a pattern, or HTTP 413, or the error code `context_length_exceeded`."""
    message = error.message
    return (
        error.status == 413
        or error.code == "context_length_exceeded"
        or any(p.search(message) for p in OVERFLOW_PATTERNS)
        or NO_BODY_PATTERN.search(message) is not None
    )


def is_media(mime: str) -> bool:
    """`util/media.ts`: images and PDFs."""
    return mime.startswith(MEDIA_PREFIXES) or mime in MEDIA_TYPES


def attached_text(attachment: Attachment, default: str | None = "file") -> str:
    """``[Attached <mime>: <name>]`` (V1 §2.6/§4, V2 §6.3); without a name, `default` or no name part."""
    name = attachment.name or default
    return f"[Attached {attachment.mime}: {name}]" if name else f"[Attached {attachment.mime}]"


def media_as_text(item: Item) -> str:
    """A user message with its media file parts as ``[Attached mime: name]`` text (§2.6, §4);
    other files were inlined as text upstream and are left out."""
    notes = [attached_text(a) for a in item.attachments if is_media(a.mime)]
    return "\n".join(x for x in [item.text, *notes] if x)


#: File parts that were inlined as text upstream and are never sent as files (§2.6).
INLINED_FILE_TYPES = ("text/plain", "application/x-directory")


def kept_file_parts(item: Item) -> tuple[Attachment, ...]:
    """The file parts that stay file parts in the summary input: neither media (which become
    text) nor text/plain or a directory (already inlined), as upstream's media stripping keeps them."""
    return tuple(a for a in item.attachments if not is_media(a.mime) and a.mime not in INLINED_FILE_TYPES)


def truncate(text: str, limit: int, note: Callable[[int], str]) -> str:
    """The first `limit` characters and a note about the `len - limit` omitted ones, when longer;
    characters are UTF-16 code units, as JavaScript's `length` and `slice` count them."""
    length = utf16_len(text)
    if length <= limit:
        return text
    head, _ = utf16_split_from_end(text, length - limit)
    return head + note(length - limit)


def v1_truncation_note(omitted: int) -> str:
    """§2.6 (`message-v2.ts` L49-53)."""
    return f"\n[Tool output truncated for compaction: omitted {omitted} chars]"


# ----------------------------------------------------------------- limits and usage (§1)
@dataclass(frozen=True)
class ModelLimits:
    """models.dev limits of the model: `context`, `output` and, for some models, `input`."""

    context: int
    output: int
    input: int | None = None


def model_limits(profile: ModelProfile, context: int | None, output: int | None, input: int | None) -> ModelLimits:
    """The limits OpenCode would read for this profile.

    `output` defaults to the profile's max output capped at half its window: the windowed
    profiles inherit GPT-5's 128k output limit, which no model with a 64k window has, and V2's
    trigger (`context - max(output, buffer)`) would otherwise be negative. A real model's profile
    gives models.dev's `limit.context` (`context_limit`, e.g. GPT-5's 400,000) and `limit.input`
    (`input_limit`, 272,000); the options override both.
    """
    window = context if context is not None else (profile.context_limit or profile.context_window)
    out = output if output is not None else min(profile.max_output, window // 2)
    return ModelLimits(context=window, output=out, input=input if input is not None else profile.input_limit)


def max_output_tokens(limits: ModelLimits, output_token_max: int) -> int:
    """§1.1: ``min(limit.output, OUTPUT_TOKEN_MAX) || OUTPUT_TOKEN_MAX``."""
    return min(limits.output, output_token_max) or output_token_max


def usable_window(limits: ModelLimits, output_token_max: int, reserved: int | None, buffer: int) -> int:
    """§1.1 `usable`: with `limit.input`, input minus the reserve; else context minus max output."""
    if limits.context == 0:
        return 0
    max_output = max_output_tokens(limits, output_token_max)
    if limits.input:
        reserve = reserved if reserved is not None else min(buffer, max_output)
        return max(0, limits.input - reserve)
    return max(0, limits.context - max_output)


def usage_count(usage: Usage) -> int:
    """§1.2: ``total || input + output + cache.read + cache.write`` of `Session.getUsage`.

    Our `Usage.input` includes cached and cache-write tokens and `output` includes reasoning;
    getUsage subtracts them out, and reasoning is not added back in the fallback.
    """
    if usage.total:
        return usage.total
    read, write = max(0, usage.cached_input), max(0, usage.cache_write)
    fresh = max(0, usage.input - read - write)
    output = max(0, usage.output - usage.reasoning)
    return fresh + output + read + write


def preserve_budget(usable: int, configured: int | None, minimum: int, maximum: int, ratio: float) -> int:
    """§2.1: ``preserve_recent_tokens ?? min(8000, max(2000, floor(usable * 0.25)))``."""
    if configured is not None:
        return configured
    return min(maximum, max(minimum, int(usable * ratio)))


# ----------------------------------------------------------------- the estimator (§2.4)
def _data_url(attachment: Attachment) -> str:
    """The base64 data URL a file part carries (only its length matters to the estimate)."""
    return f"data:{attachment.mime};base64," + "A" * (4 * ((attachment.size + 2) // 3))


def _tool_input(arguments: str) -> Any:
    try:
        return json.loads(arguments) if arguments else {}
    except json.JSONDecodeError:
        return arguments


def model_message_json(message: Message) -> dict[str, Any]:
    """One wire message in the AI-SDK `ModelMessage` shape that `toModelMessages` produces."""
    files = [
        {"type": "file", "mediaType": a.mime, "filename": a.name, "data": _data_url(a)} for a in message.attachments
    ]
    if message.role in ("system", "developer"):
        return {"role": "system", "content": message.content}
    if message.role == "user":
        return {"role": "user", "content": [{"type": "text", "text": message.content}, *files]}
    if message.role == "reasoning":
        return {"role": "assistant", "content": [{"type": "reasoning", "text": message.content}]}
    if message.role == "tool":
        kind = "error-text" if message.is_error else "text"
        output: dict[str, Any] = {"type": kind, "value": message.content}
        if files:
            output = {"type": "content", "value": [{"type": "text", "text": message.content}, *files]}
        part = {"type": "tool-result", "toolCallId": message.tool_call_id, "toolName": message.name or "", "output": output}
        return {"role": "tool", "content": [part]}
    content: list[dict[str, Any]] = [{"type": "text", "text": message.content}] if message.content else []
    content += [
        {"type": "tool-call", "toolCallId": c.id, "toolName": c.name, "input": _tool_input(c.arguments)}
        for c in message.tool_calls
    ]
    return {"role": "assistant", "content": content}


def json_text(value: Any) -> str:
    """`JSON.stringify` without indentation."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class Estimator:
    """OpenCode's `Token.estimate` of JSON-serialized messages, with per-message lengths memoized.

    The JSON of a list is ``[`` + the items joined by ``,`` + ``]``, so the length of any slice is
    the sum of its messages' lengths plus the separators: slices cost no re-serialization.
    """

    def __init__(self) -> None:
        self._units: dict[Message, int] = {}

    def units(self, message: Message) -> int:
        cached = self._units.get(message)
        if cached is None:
            cached = self._units[message] = utf16_len(json_text(model_message_json(message)))
        return cached

    def slices(self, groups: Sequence[Sequence[Message]], offset: int = 0) -> Callable[[int, int], int]:
        """`estimate(start, end)` of the messages of ``groups[start - offset:end - offset]`` (the
        groups of a history from index `offset` on; `start` >= `offset`), from prefix sums."""
        units, counts = [0], [0]
        for group in groups:
            units.append(units[-1] + sum(self.units(m) for m in group))
            counts.append(counts[-1] + len(group))

        def estimate(start: int, end: int) -> int:
            return self.span(units[end - offset] - units[start - offset], counts[end - offset] - counts[start - offset])

        return estimate

    @staticmethod
    def span(units: int, count: int) -> int:
        """The estimate of a JSON list of `count` messages whose lengths sum to `units`."""
        return opencode_estimate_units(2 + units + max(0, count - 1))


# ----------------------------------------------------------------- the store
@dataclass
class CompactionPart:
    """§3.1: the part of a compaction request message."""

    auto: bool
    overflow: bool
    tail_start_id: int | None = None


#: Record kinds: a real user message, injected context (synthetic user items, not a turn), a model
#: response, and the messages OpenCode writes itself.
RECORD_KINDS = ("user", "context", "step", "compaction", "summary", "continue", "replay")


@dataclass(eq=False)
class Record:
    """One stored OpenCode message. `id` ascends with creation, as OpenCode's message ids."""

    id: int
    kind: str
    items: list[Item] = field(default_factory=list)
    results: dict[str, Item] = field(default_factory=dict)
    text: str = ""
    usage: Usage | None = None
    parent: int | None = None
    compaction: CompactionPart | None = None
    failed: bool = False
    pruned: set[str] = field(default_factory=set)
    version: int = 0

    @property
    def role(self) -> str:
        return "assistant" if self.kind in ("step", "summary") else "user"

    @property
    def starts_turn(self) -> bool:
        """§2.3: a user message without a compaction part (injected context is not a message of its own upstream)."""
        return self.kind in ("user", "continue", "replay")

    @property
    def is_user_message(self) -> bool:
        """A user message as prune (§5) and replay (§4) count them, compaction requests included."""
        return self.role == "user" and self.kind != "context"

    @property
    def completed_summary(self) -> bool:
        return self.kind == "summary" and not self.failed

    def calls(self) -> list[Item]:
        return [i for i in self.items if i.kind == "tool_call"]

    def item_ids(self) -> list[str]:
        ids = [i.id for i in self.items]
        return ids + [r.id for r in self.results.values()]


class SessionStore:
    """Every message of the session in creation order, the system prompt apart; `log` lists the
    records as they are created or changed (`touch`), so views catch up on the changes alone."""

    def __init__(self) -> None:
        self.system: list[Item] = []
        self.records: list[Record] = []
        self.log: list[Record] = []
        self._owner: dict[str, Record] = {}
        self.unpaired_results: list[str] = []
        self._next_id = 0

    def new(self, kind: str, **fields: Any) -> Record:
        if kind not in RECORD_KINDS:
            raise ValueError(f"unknown record kind {kind!r}; expected one of {', '.join(RECORD_KINDS)}")
        record = Record(id=self._next_id, kind=kind, **fields)
        self._next_id += 1
        self.records.append(record)
        self.log.append(record)
        return record

    def touch(self, record: Record) -> None:
        """`record` changed: a new version, rendered again."""
        record.version += 1
        self.log.append(record)

    def observe_input(self, item: Item) -> None:
        """A model input item other than a real user message (and a real user message too)."""
        if item.kind == "system":
            self.system.append(item)
        elif item.kind == "user":
            self.new("user" if item.is_real_user else "context", items=[item])
        elif item.kind == "tool_result":
            owner = self._owner.get(item.call_id or "")
            if owner is None:
                # OpenCode stores a result only inside its call's tool part: without a call it has no place.
                self.unpaired_results.append(item.id)
            else:
                owner.results[item.call_id or ""] = item
                self.touch(owner)
        elif item.kind in MODEL_OUTPUT_KINDS:
            last = self.records[-1] if self.records else None
            target = last if last is not None and last.kind == "step" and last.usage is None else self.new("step")
            self._add_output(target, [item])

    def add_response(self, items: Sequence[Item], usage: Usage | None) -> Record:
        record = self.new("step", usage=usage)
        self._add_output(record, items)
        return record

    def _add_output(self, record: Record, items: Sequence[Item]) -> None:
        record.items.extend(items)
        for item in items:
            if item.kind == "tool_call":
                self._owner[item.call_id or ""] = record
        self.touch(record)


# ----------------------------------------------------------------- rendering (§3.2, §2.6)
class Renderer:
    """Records as wire messages; each record's messages are built once per version and reused."""

    def __init__(self, tool_output_max_chars: int) -> None:
        self.tool_output_max_chars = tool_output_max_chars
        self._cache: dict[tuple[int, int, bool], tuple[Message, ...]] = {}

    def system(self, store: SessionStore) -> list[Message]:
        return [message_from_item(i) for i in store.system]

    def render(self, records: Sequence[Record], *, for_summary: bool = False) -> list[Message]:
        out: list[Message] = []
        for record in records:
            out.extend(self.record(record, for_summary))
        return out

    def record(self, record: Record, for_summary: bool = False) -> tuple[Message, ...]:
        """The messages of one record at its current version."""
        key = (record.id, record.version, for_summary)
        cached = self._cache.get(key)
        if cached is None:
            cached = self._cache[key] = tuple(self._record(record, for_summary))
        return cached

    def _record(self, record: Record, for_summary: bool) -> list[Message]:
        if record.kind == "compaction":
            return [Message("user", COMPACTION_QUESTION)]
        if record.kind == "summary":
            return [] if record.failed else [Message("assistant", record.text)]
        if record.kind in ("continue", "replay"):
            return [Message("user", record.text, item_ids=tuple(i.id for i in record.items))]
        if record.kind in ("user", "context"):
            return [self._user(i, for_summary) for i in record.items if i.text or i.attachments]
        return self._step(record, for_summary)

    def _user(self, item: Item, for_summary: bool) -> Message:
        if not for_summary:
            return Message("user", item.text, item_ids=(item.id,), attachments=item.attachments)
        return Message("user", media_as_text(item), item_ids=(item.id,), attachments=kept_file_parts(item))

    def _step(self, record: Record, for_summary: bool) -> list[Message]:
        out = merge_assistant([message_from_item(i) for i in record.items])
        for call in record.calls():
            result = record.results.get(call.call_id or "")
            if result is None:
                out.append(Message("tool", INTERRUPTED_TOOL, tool_call_id=call.call_id, name=call.tool_name, is_error=True))
                continue
            message = message_from_item(result)
            if call.call_id in record.pruned:
                message = Message(
                    "tool", PRUNED_PLACEHOLDER, tool_call_id=call.call_id, item_ids=message.item_ids, name=message.name
                )
            elif for_summary:
                text = truncate(message.content, self.tool_output_max_chars, v1_truncation_note)
                message = Message(
                    "tool", text, tool_call_id=call.call_id, item_ids=message.item_ids, name=message.name,
                    is_error=message.is_error,
                )
            out.append(message)
        return out


class View:
    """The wire messages of a sequence of store records and the running sum of their estimate
    lengths (§2.4), kept in step with the store: `update` renders again only the records changed
    since the last call (from the first of them in the sequence on) and appends the records created
    since, so a request costs what changed rather than the whole history."""

    def __init__(self, store: SessionStore, renderer: Renderer, estimator: Estimator) -> None:
        self.store, self.renderer, self.estimator = store, renderer, estimator
        #: counts the sequences made (`reset`): a structure that follows the view starts anew on a new one
        self.generation = -1
        self.reset([])

    def reset(self, records: Sequence[Record]) -> None:
        """Make `records` the sequence (a new `generation`)."""
        self.generation += 1
        self.records: list[Record] = []
        self.messages: list[Message] = []
        self._position: dict[int, int] = {}
        self._starts: list[int] = []
        self._units = [0]
        self._cursor = len(self.store.log)
        self._known = len(self.store.records)
        self._extend(records)

    def created(self) -> list[Record]:
        """The records created since the last `reset` or `update`."""
        return self.store.records[self._known :]

    def update(self) -> None:
        """The same sequence, with its changed records rendered again and the new records appended."""
        log = self.store.log
        positions = [p for r in log[self._cursor :] if (p := self._position.get(r.id)) is not None]
        created = self.created()
        self._cursor, self._known = len(log), len(self.store.records)
        if positions:
            first = min(positions)
            redo = self.records[first:]
            cut = self._starts[first]
            del self.records[first:], self._starts[first:], self.messages[cut:], self._units[cut + 1 :]
            for record in redo:
                del self._position[record.id]
            self._extend(redo)
        self._extend(created)

    def _extend(self, records: Sequence[Record]) -> None:
        units = self._units
        for record in records:
            self._position[record.id] = len(self.records)
            self.records.append(record)
            self._starts.append(len(self.messages))
            rendered = self.renderer.record(record)
            self.messages.extend(rendered)
            for message in rendered:
                units.append(units[-1] + self.estimator.units(message))

    @property
    def units(self) -> int:
        """The summed JSON lengths of the messages."""
        return self._units[-1]

    def position(self, record_id: int | None) -> int:
        """Where the record is in the sequence (-1: not in it)."""
        return self._position.get(record_id, -1) if record_id is not None else -1


class CompactionInput:
    """V1's compaction input (§2.2, §2.6) over the projection a `View` holds, kept in step with it.

    `records` are the projection's records that are neither a completed summary nor the compaction
    request one answers, `positions` their places in the projection, `starts_turn` their flags and
    `turn_starts` the indexes of the turn-starting ones (§2.3), `messages` their summary-input
    rendering (§2.6), record `n`'s from ``starts[n]`` on, and `estimate` the §2.4 estimate of a
    slice of them from running sums of their request rendering. The projection's records keep their
    places until it is reset, so records are appended as it grows and rendered again from the first
    changed one (the store's log), like the view's own messages; a new projection, or a completed
    summary appended to it, starts anew.
    """

    def __init__(self, view: View) -> None:
        self.view = view
        self._generation = -1

    def _restart(self) -> None:
        view = self.view
        self._generation, self._seen, self._cursor = view.generation, 0, len(view.store.log)
        self.records: list[Record] = []
        self.positions: list[int] = []
        self.starts_turn: list[bool] = []
        self.turn_starts: list[int] = []
        self.messages: list[Message] = []
        self.starts: list[int] = []
        #: the request rendering's summed JSON lengths and message counts of ``records[:n]``
        self._units = [0]
        self._counts = [0]
        #: the projection's completed summaries: (position, the summary, its compaction request's position or -1)
        self.summaries: list[tuple[int, Record, int]] = []
        self._index: dict[int, int] = {}
        self._answered = {r.parent for r in view.records if r.completed_summary}

    def update(self) -> None:
        """Follow the view (call after the view is brought up to date)."""
        view = self.view
        if view.generation != self._generation or any(r.completed_summary for r in view.records[self._seen :]):
            self._restart()
        log = view.store.log
        changed = [n for r in log[self._cursor :] if (n := self._index.get(r.id)) is not None]
        self._cursor = len(log)
        if changed:
            first = min(changed)
            del self.messages[self.starts[first] :], self.starts[first:], self._units[first + 1 :], self._counts[first + 1 :]
            for record in self.records[first:]:
                self._render(record)
        for position in range(self._seen, len(view.records)):
            record = view.records[position]
            if record.completed_summary:
                self.summaries.append((position, record, view.position(record.parent)))
            elif not (record.kind == "compaction" and record.id in self._answered):
                self._index[record.id] = len(self.records)
                if record.starts_turn:
                    self.turn_starts.append(len(self.records))
                self.records.append(record)
                self.positions.append(position)
                self.starts_turn.append(record.starts_turn)
                self._render(record)
        self._seen = len(view.records)

    def _render(self, record: Record) -> None:
        renderer, units = self.view.renderer, self.view.estimator.units
        self.starts.append(len(self.messages))
        self.messages.extend(renderer.record(record, for_summary=True))
        request = renderer.record(record)
        self._units.append(self._units[-1] + sum(units(m) for m in request))
        self._counts.append(self._counts[-1] + len(request))

    def estimate(self, start: int, end: int) -> int:
        """§2.4: the estimate of the request messages of ``records[start:end]``."""
        return Estimator.span(self._units[end] - self._units[start], self._counts[end] - self._counts[start])

    def cut(self, end: int) -> tuple[list[Record], str | None, bool]:
        """§2.2 for the projection's first `end` records: the records to compact (completed summaries
        and the compaction requests they answer left out), the newest completed summary's text
        (stripped) and whether the records are ``records[:len]`` (a compaction request whose summary
        lies at `end` or later stays in, as upstream decides on the records before `end` alone)."""
        count = bisect.bisect_left(self.positions, end)
        before = [(s, summary, c) for s, summary, c in self.summaries if s < end]
        previous = before[-1][1].text.strip() if before else None
        answered = {c for _, _, c in before}
        kept = [c for s, _, c in self.summaries if 0 <= c < end <= s and c not in answered]
        if not kept:
            return self.records[:count], previous, True
        records = self.view.records
        merged = sorted([*self.positions[:count], *kept])
        return [records[p] for p in merged], previous, False

    def messages_before(self, index: int) -> list[Message]:
        """The summary-input messages of ``records[:index]``."""
        return self.messages[: self.starts[index]] if index < len(self.starts) else list(self.messages)


# ----------------------------------------------------------------- turns and tail (§2.3, §2.5)
@dataclass(frozen=True)
class TailChoice:
    """Where the verbatim tail starts in the history (`start`, None for no tail) and why."""

    start: int | None
    reason: str
    whole_turns: int = 0
    split: bool = False


def turn_spans(starts: Sequence[int], end: int) -> list[tuple[int, int]]:
    """§2.3: (start, end) of the turns starting at `starts` (ascending) in a history of `end`
    messages; a turn runs from a turn-starting message to the next one."""
    return [(s, starts[k + 1] if k + 1 < len(starts) else end) for k, s in enumerate(starts)]


def earliest_fitting_start(low: int, end: int, estimate: Callable[[int, int], int], remaining: int) -> int | None:
    """`splitTurn`'s scan: the first `s` in ``range(low, end)`` with ``estimate(s, end) <= remaining``.

    A suffix's estimate never grows as its start moves later (fewer messages, each of a
    non-negative length, and a non-decreasing rounding), so the fitting starts are a suffix of the
    range and a binary search finds the first one the linear scan would."""
    high = end
    while low < high:
        middle = (low + high) // 2
        if estimate(middle, end) <= remaining:
            high = middle
        else:
            low = middle + 1
    return low if low < end else None


def select_from_turns(
    all_turns: Sequence[tuple[int, int]], estimate: Callable[[int, int], int], tail_turns: int, budget: int
) -> TailChoice:
    """§2.5 `select`: whole turns newest first within the budget; in the first turn that does not
    fit, the earliest start whose suffix fits (`splitTurn`); no tail at index 0.

    `all_turns` are the turns' (start, end) spans (`turn_spans`): all of the history's, or the
    newest `tail_turns`, which are what is selected from. `estimate(start, end)` is the estimate of
    ``history[start:end]``."""
    if tail_turns <= 0:
        return TailChoice(None, "disabled")
    if not all_turns:
        return TailChoice(None, "no-turns")
    recent = all_turns[-tail_turns:]
    total, keep, whole, split = 0, None, 0, False
    for start, end in reversed(recent):
        size = estimate(start, end)
        if total + size <= budget:
            total += size
            keep, whole = start, whole + 1
            continue
        remaining = budget - total
        if remaining > 0 and end - start > 1:
            found = earliest_fitting_start(start + 1, end, estimate, remaining)
            if found is not None:
                keep, split = found, True
        break
    if keep is None:
        return TailChoice(None, "nothing-fits")
    if keep == 0:
        return TailChoice(None, "starts-at-index-0", whole, split)
    return TailChoice(keep, "split-turn" if split else "whole-turns", whole, split)


# ----------------------------------------------------------------- V2 text (compaction.ts@031a4a9c)
def truncate_tool_output(text: str, limit: int) -> str:
    """`truncateToolOutput` (compaction.ts@031a4a9c L208-220): a text longer than `limit` UTF-16 code units
    keeps its first `limit` characters, a surrogate pair counting as one, then "\n[truncated]"; a text
    that many characters hold whole is kept as it is."""
    if len(text) <= limit:  # at most `limit` characters (a text of at most `limit` UTF-16 units is one)
        return text
    return text[:limit] + "\n[truncated]"


def _tool_content(result: Item, limit: int) -> str:
    """`serializeToolContent` (L222-227), then truncated: the text, then ``[Attached mime: name]`` per file."""
    files = [attached_text(a, default=None) for a in result.attachments]
    return truncate_tool_output("\n".join([result.text, *files]) if files else result.text, limit)


def tool_input_text(arguments: str | None) -> str:
    """`<input>` (L251): the input itself when it is a string, else `JSON.stringify(input)` (compact,
    non-ASCII kept); arguments that are not JSON are the raw string the model sent."""
    try:
        value = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return arguments or ""
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), ensure_ascii=False)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _from_utf16(data: bytes) -> str:
    """UTF-16-LE bytes back to text; half of a split surrogate pair becomes U+FFFD, as a JSON
    encoder sends it."""
    return _LONE_SURROGATE.sub("\ufffd", data.decode("utf-16-le", "surrogatepass"))


def utf16_split_from_end(text: str, units: int) -> tuple[str, str]:
    """JavaScript's `(s.slice(0, -n), s.slice(-n))` for `0 < n`: cut `units` UTF-16 code units
    from the end (V1's tool-output truncation cuts the JS string)."""
    data = text.encode("utf-16-le", "surrogatepass")
    cut = max(0, len(data) - 2 * units)
    return _from_utf16(data[:cut]), _from_utf16(data[cut:])


def attachment_label(attachment: Attachment) -> str:
    """V2's ``[Attached mime: name]`` of a user's file (L233-237): its name, else its URI, else "inline attachment".
    A data URL is the file's own bytes, not a location: such a file is an inline attachment."""
    uri = attachment.uri if attachment.uri and not attachment.uri.startswith("data:") else ""
    return f"[Attached {attachment.mime}: {attachment.name or uri or 'inline attachment'}]"


def serialize_record(record: Record, tool_output_max_chars: int) -> str:
    """`serializeRecentMessage` (compaction.ts@031a4a9c L229-270): one record as text with the `[User]`,
    `[Synthetic context]`, `[Assistant]`, ... markers ("" when it has none)."""
    if record.kind in ("user", "context"):
        lines = []
        for item in record.items:
            prefix = "[User]" if item.is_real_user else "[Synthetic context]"
            lines.append(f"{prefix}: {item.text}")
            lines += [attachment_label(a) for a in item.attachments]
        return "\n".join(lines)
    lines = []
    for item in record.items:
        if item.kind == "assistant":  # a text part is serialized even when empty
            lines.append(f"[Assistant]: {item.text}")
        elif item.kind == "reasoning" and item.text:
            lines.append(f"[Assistant reasoning]: {item.text}")
        elif item.kind == "tool_call":
            lines.append(f"[Assistant tool call]: {item.tool_name}({tool_input_text(item.arguments)})")
            result = record.results.get(item.call_id or "")
            if result is not None and result.is_error:
                lines.append(f"[Tool error]: {result.text}")  # the error message, not truncated
            elif result is not None:
                lines.append(f"[Tool result]: {_tool_content(result, tool_output_max_chars)}")
    return "\n".join(lines)


class Entries:
    """The non-empty serialized records since the checkpoint (`findTailStart`'s `conversation`, L282-285):
    each record serialized once per version, the same text object at every compaction that reads it (the
    recent texts that join entries are new at every compaction; the token counter memoizes their long lines,
    `TokenCounter.count`, so a long line of an entry is tokenized once)."""

    def __init__(self, tool_output_max_chars: int) -> None:
        self.tool_output_max_chars = tool_output_max_chars
        self._texts: dict[int, tuple[int, str]] = {}

    def of(self, records: Sequence[Record]) -> list[tuple[int, Record, str]]:
        """(position in `records`, record, text) of the records whose text is not empty, in order; forgets
        other records."""
        texts, known, entries = {}, self._texts, []
        for position, record in enumerate(records):
            text = known.get(record.id)
            if text is None or text[0] != record.version:
                text = (record.version, serialize_record(record, self.tool_output_max_chars))
            texts[record.id] = text
            if text[1]:
                entries.append((position, record, text[1]))
        self._texts = texts
        return entries


@dataclass(frozen=True)
class TailStart:
    """Where the retained tail starts among the records since the checkpoint (`start`; their count: none is
    kept) and which rule of `findTailStart` chose it."""

    start: int
    reason: str


def find_tail_start(
    entries: Sequence[tuple[int, bool, str]], count: int, keep_tokens: int, previous_recent: bool
) -> TailStart | None:
    """`findTailStart` (compaction.ts@031a4a9c L281-312) over the serialized records since the checkpoint:
    `entries` are (position among the `count` records, whether it is a real user message, text), the
    records with text, in order; `previous_recent` says whether the checkpoint kept a recent tail.

    Whole entries from the newest within `keep_tokens` (``round(len / 4)`` each), the newest always
    (L288-296); then back to a user message "so an assistant's tool calls and results stay together"
    (L298-300); when that is the first entry (everything fitted, or the session is one long turn), the
    latest user message if it is not the first (L302-304); else, with a recent tail in the checkpoint,
    everything since it is kept and the checkpoint alone summarized, without one everything is
    summarized (L306-311). None: nothing to compact (L286)."""
    if not entries:
        return None
    total, start = 0, len(entries)
    for index in range(len(entries) - 1, -1, -1):
        following = total + opencode_estimate(entries[index][2])
        if start < len(entries) and following > keep_tokens:
            break
        total, start = following, index
    while start > 0 and not entries[start][1]:
        start -= 1
    if start > 0:
        return TailStart(entries[start][0], "user-boundary")
    latest = next((n for n in range(len(entries) - 1, -1, -1) if entries[n][1]), -1)
    if latest > 0:
        return TailStart(entries[latest][0], "latest-exchange")
    if previous_recent:
        return TailStart(entries[0][0], "all-since-checkpoint")
    return TailStart(count, "none")


# ----------------------------------------------------------------- V2 trigger estimate (compaction.ts@031a4a9c)
def prompt_ceiling(limits: ModelLimits, buffer: int, output_token_max: int) -> int:
    """`required`'s `promptCeiling` (compaction.ts@031a4a9c L564-568): ``min(limit.input - buffer, context -
    max(min(limit.output, OUTPUT_TOKEN_MAX), buffer))``, the first term only for a model with an input limit
    (models.dev's 0 or none: no input limit)."""
    output = min(limits.output, output_token_max)
    ceiling = limits.context - max(output, buffer)
    return min(ceiling, limits.input - buffer) if limits.input else ceiling


def usage_tokens(usage: Usage) -> int:
    """The anchor's measured size in `estimateTokens` (L161-168): input + cache read + cache write + output +
    reasoning of `SessionUsage.tokens` (usage.ts@36a0b04b: `input` the non-cached input, `output` the visible
    output). Our `Usage.input` holds the cached and cache-write tokens and `output` the reasoning, so it is
    input + output."""
    return max(0, usage.input) + max(0, usage.output)


def media_tokens(mime: str, image_tokens: int, pdf_tokens: int) -> int:
    """`estimateMedia` (L187-190): an image part is `IMAGE_TOKEN_ESTIMATE`, a PDF `PDF_TOKEN_ESTIMATE`,
    any other file nothing."""
    kind = mime.lower()
    return image_tokens if kind.startswith("image/") else pdf_tokens if kind == "application/pdf" else 0


@dataclass(frozen=True)
class PartTokens:
    """`estimatePart` (L192-206) summed over one record's model messages: `own` for the record's assistant
    message (text, reasoning and tool-call parts), `rest` for the rest (its tool results, or a user
    message's text and media). The anchor's own message is what its provider usage measured; its tool
    results are not (L149, L159)."""

    own: int
    rest: int

    @property
    def total(self) -> int:
        return self.own + self.rest


def part_tokens(record: Record, image_tokens: int, pdf_tokens: int) -> PartTokens:
    """The `PartTokens` of the messages `Renderer.record` sends for `record`: each text ``round(len / 4)``
    (`Token.estimate`), a tool call ``round(len(name + JSON.stringify(input)) / 4)``, a tool result its
    text (the interrupted-call error included) and its media, each file part by `media_tokens` (the trigger
    assumes a model that reads images and PDFs: `unsupportedParts` rewrites nothing). A failed tool's result
    counts its message: upstream estimates the JSON of its error object (L203-205), some dozen characters
    more, whose fields the recordings do not keep."""
    def media(attachments: Sequence[Attachment]) -> int:
        return sum(media_tokens(a.mime, image_tokens, pdf_tokens) for a in attachments)

    if record.kind in ("user", "context"):
        return PartTokens(0, sum(opencode_estimate(i.text) + media(i.attachments) for i in record.items))
    if record.kind != "step":  # V2 stores no V1 compaction records
        return PartTokens(0, 0)
    own = 0
    for item in record.items:
        if item.kind in ("assistant", "reasoning"):
            own += opencode_estimate(item.text)
        elif item.kind == "tool_call":
            own += opencode_estimate((item.tool_name or "") + json_text(_tool_input(item.arguments or "")))
    rest = 0
    for call in record.calls():
        result = record.results.get(call.call_id or "")
        rest += opencode_estimate(INTERRUPTED_TOOL) if result is None else opencode_estimate(result.text) + media(result.attachments)
    return PartTokens(own, rest)


class PartsView(View):
    """V2's `View`: also the running sum of each record's `PartTokens` total, so the local estimate of what
    follows the anchor (`estimateTokens`, L140-185) costs the records changed since the last request, not
    the history."""

    def __init__(self, store: SessionStore, renderer: Renderer, estimator: Estimator, parts: Callable[[Record], PartTokens]) -> None:
        self._parts_of = parts
        self._memo: dict[tuple[int, int], PartTokens] = {}
        super().__init__(store, renderer, estimator)

    def reset(self, records: Sequence[Record]) -> None:
        self._sums = [0]
        super().reset(records)

    def _extend(self, records: Sequence[Record]) -> None:
        del self._sums[len(self.records) + 1 :]  # `update` took the records from the first changed one off
        super()._extend(records)
        for record in records:
            self._sums.append(self._sums[-1] + self.parts(record).total)

    def parts(self, record: Record) -> PartTokens:
        """The record's `PartTokens` at its current version."""
        key = (record.id, record.version)
        found = self._memo.get(key)
        if found is None:
            found = self._memo[key] = self._parts_of(record)
        return found

    def parts_from(self, position: int) -> int:
        """The summed `PartTokens` totals of ``records[position:]``."""
        return self._sums[-1] - self._sums[position]

    def messages_before(self, position: int) -> list[Message]:
        """The messages of ``records[:position]``."""
        return self.messages[: self._starts[position]] if position < len(self._starts) else list(self.messages)
