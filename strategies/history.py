"""The append-only item history most strategies keep, and pair-safe grouping of it.

`ItemHistory` records every model-input and model-output item a strategy observed and renders
items to wire messages once each (so repeated requests reuse the same `Message` objects, which
keeps token counting and cache-prefix comparison linear), also with some tool results replaced by
a placeholder and some tool-call inputs cleared (Claude Code microcompact, Anthropic
`clear_tool_uses`, observation masking in the hybrid): each edited message is built once too. `pair_safe_units` groups a slice of
history so that dropping whole units never separates a tool call from its result, and `RemovedCalls`
follows the calls a strategy removed before any result answered them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace

from compaction_bench.log_view import LogView
from compaction_bench.request import Message, ToolCall, fold_run, message_from_item
from compaction_bench.strategy import StrategyContext
from compaction_bench.transcript import Item, answered_call


class FoldMemo:
    """`merge_assistant` with each fold built once: folds are keyed by the identities of the messages
    they fold (kept alive here, so an identity is never reused), so a strategy that renders the same
    messages on every request gets the same folded objects back. At `MESSAGES_KEPT` messages held the
    memo starts anew: a history rendered with one more message cut from a long run at each of its
    retries (Codex's compaction, codex.md §2.1) would otherwise keep every shortened run."""

    MESSAGES_KEPT = 1 << 20

    def __init__(self, combine: Callable[[Sequence[Message]], Message] | None = None) -> None:
        self._folds: dict[tuple[int, ...], tuple[tuple[Message, ...], Message]] = {}
        self._held = 0
        #: how a group of two or more messages becomes one (default: `merge_assistant`'s fold)
        self._combine = combine or fold_run

    def fold(self, group: Sequence[Message]) -> Message:
        if len(group) == 1:
            return group[0]
        key = tuple(map(id, group))
        hit = self._folds.get(key)
        if hit is None:
            if self._held + len(key) > self.MESSAGES_KEPT:
                self._folds, self._held = {}, 0
            hit = self._folds[key] = (tuple(group), self._combine(group))
            self._held += len(key)
        return hit[1]

    def merge(self, messages: Iterable[Message]) -> list[Message]:
        """`merge_assistant(messages)`: a run of assistant messages with tool calls folds into the
        assistant message before it."""
        out: list[Message] = []
        group: list[Message] = []
        for message in messages:
            if group and message.role == "assistant" and message.tool_calls and group[0].role == "assistant":
                group.append(message)
                continue
            if group:
                out.append(self.fold(group))
            group = [message]
        if group:
            out.append(self.fold(group))
        return out


class ItemHistory:
    def __init__(self) -> None:
        self.items: list[Item] = []
        self._messages: dict[str, Message] = {}
        self._folds = FoldMemo()
        #: edited messages by (item id, "text" | "input", the new text or arguments)
        self._edited: dict[tuple[str, str, str], Message] = {}
        #: the whole history's rendering, extended as items are appended: the folded messages of
        #: `items[:_seen]` but the last group, which is still open (a later tool call may join it)
        self._seen_list: list[Item] = self.items
        self._seen = 0
        self._closed: list[Message] = []
        self._open: list[Message] = []
        #: the position in that rendering of each item whose message is not an assistant's (never folded)
        self._index: dict[str, tuple[int, Item]] = {}

    def append(self, item: Item) -> None:
        self.items.append(item)

    def extend(self, items: Iterable[Item]) -> None:
        self.items.extend(items)

    def message(self, item: Item) -> Message:
        cached = self._messages.get(item.id)
        if cached is None:
            cached = self._messages[item.id] = message_from_item(item)
        return cached

    def edited(self, item: Item, replacement: str | None, cleared_input: str | None) -> Message:
        """The item's message with its text replaced (attachments removed) or, for a tool call, its
        arguments cleared (call ids, names and positions stay, so no call loses its result)."""
        message = self.message(item)
        if replacement is not None:
            key = (item.id, "text", replacement)
        elif cleared_input is not None and message.tool_calls:
            key = (item.id, "input", cleared_input)
        else:
            return message
        cached = self._edited.get(key)
        if cached is None:
            if replacement is not None:
                cached = replace(message, content=replacement, attachments=())
            else:
                cached = replace(message, tool_calls=tuple(ToolCall(c.id, c.name, key[2]) for c in message.tool_calls))
            self._edited[key] = cached
        return cached

    def render(
        self,
        items: Sequence[Item] | None = None,
        replacements: Mapping[str, str] | None = None,
        cleared_inputs: Mapping[str, str] | None = None,
    ) -> list[Message]:
        """Wire messages for items (default: the whole history); an assistant's text and tool calls fold together.

        The items whose id is in `replacements` get that text (attachments removed), the tool calls
        whose id is in `cleared_inputs` those arguments (`edited`). Folded messages are memoized by
        the messages they fold, so every request reuses the same objects and a fold is built once,
        not on every request (the grouping is `merge_assistant`'s: a run of assistant messages with
        tool calls folds into the assistant message before it).
        """
        if items is None and not cleared_inputs:
            full = self._render_all()
            if replacements and all(self._index.get(i, (-1,))[0] >= 0 for i in replacements):
                # only unfolded messages change: edit them in place of the whole history's rendering
                for item_id, text in replacements.items():
                    position, item = self._index[item_id]
                    full[position] = self.edited(item, text, None)
                return full
            if not replacements:
                return full
        return self._folds.merge(
            self.edited(item, (replacements or {}).get(item.id), (cleared_inputs or {}).get(item.id))
            if (replacements and item.id in replacements) or (cleared_inputs and item.id in cleared_inputs)
            else self.message(item)
            for item in (self.items if items is None else items)
        )

    def view(self) -> LogView:
        """`render()` of the whole history as a view of the history's own append-only log of folded
        messages (compaction_bench.log_view): built, compared with the previous request and stored in
        time independent of the history's length."""
        self._advance()
        group = self._open
        return LogView(self._closed, len(self._closed), (self._folds.fold(group),) if group else ())

    def _render_all(self) -> list[Message]:
        """`render()` of the whole history (a new list, which callers may edit)."""
        self._advance()
        group = self._open
        return [*self._closed, self._folds.fold(group)] if group else list(self._closed)

    def _advance(self) -> None:
        """Fold the items appended since the last call (the log starts anew, as a new list, when `items`
        was replaced or shortened: earlier views keep theirs)."""
        if self.items is not self._seen_list or len(self.items) < self._seen:
            self._seen_list, self._seen, self._closed, self._open, self._index = self.items, 0, [], [], {}
        group = self._open
        for n in range(self._seen, len(self.items)):
            item = self.items[n]
            message = self.message(item)
            if group and message.role == "assistant" and message.tool_calls and group[0].role == "assistant":
                group.append(message)
                continue
            if group:
                self._closed.append(self._folds.fold(group))
            group = [message]
            if message.role != "assistant":
                # an id seen twice gets position -1: edits of it take the general path
                self._index[item.id] = (-1 if item.id in self._index else len(self._closed), item)
        self._open, self._seen = group, len(self.items)

    def __len__(self) -> int:
        return len(self.items)


def pair_safe_units(items: Sequence[Item]) -> list[list[Item]]:
    """Split items into droppable units: a real user message starts a turn unit, and a model
    response starts a step unit that also holds the tool results answering its calls.

    Neither starts a unit while a call before it still waits for a result that comes later in
    `items` (`answer_positions`): a user message typed while a tool runs joins that step's unit, with
    the result after it. A call that no result in `items` answers (aborted, interrupted) holds
    nothing together: the replay asks a strategy for a request after every input before that
    request (compaction_bench.replay, `run`), so such a call was sent without a result already, and the
    next model response starts a unit as usual (it used to stay open to the end of the session,
    which made the rest of the session one unit; session 42's audit).

    Dropping any prefix of units keeps every tool call with its result.
    """
    answered_at = answer_positions(items)
    units: list[list[Item]] = []
    waiting_until = -1  # the position of the last result a call seen so far waits for
    for n, item in enumerate(items):
        starts_unit = waiting_until < n and (item.is_real_user or (item.is_model_output and (
            not units or not units[-1][-1].is_model_output or units[-1][-1].response != item.response
        )))
        if not units or starts_unit:
            units.append([])
        units[-1].append(item)
        waiting_until = max(waiting_until, answered_at.get(n, -1))
    return units


def answer_positions(items: Sequence[Item]) -> dict[int, int]:
    """The position in `items` of each tool call that a later result answers, mapped to that result's
    position, by `answered_call`'s rule; a result with no call of its id waiting answers nothing."""
    waiting: dict[str, list[int]] = {}
    answered_at: dict[int, int] = {}
    for n, item in enumerate(items):
        if item.kind == "tool_call" and item.call_id:
            waiting.setdefault(item.call_id, []).append(n)
        elif item.kind == "tool_result" and item.call_id and (calls := waiting.get(item.call_id)):
            answered_at[calls.pop() if len(calls) == 1 else answered_call(calls, items)] = n
    return answered_at


class RemovedCalls:
    """The calls a strategy removed from its context that no result had answered, and the results that
    arrive for them afterwards (`late`), which the strategy removes in turn (`drop_late`): sent, such a result would
    answer no call in the request (metrics/integrity.py, ``orphan_result``). Such a result comes after a
    later model step, which the recording sent without it (`pair_safe_units`); none of the corpus's 57
    files has one, but a recording may."""

    def __init__(self) -> None:
        self._ids: set[str] = set()
        self.late: list[str] = []

    def removed(self, items: Sequence[Item]) -> None:
        """Note the calls among `items`, which the strategy removed, that no result among them answers."""
        answered = answer_positions(items)
        self._ids.update(i.call_id for n, i in enumerate(items) if i.kind == "tool_call" and i.call_id and n not in answered)

    def arrived(self, item: Item) -> None:
        """An input arrived: a result answering a removed call is `late`."""
        if item.kind == "tool_result" and item.call_id in self._ids:
            self._ids.discard(item.call_id)
            self.late.append(item.id)

    def drop_late(self, history: ItemHistory, messages: Callable[[], Sequence[Message]], ctx: StrategyContext) -> None:
        """Remove the late results from `history` (`messages` renders the strategy's context), recorded as a
        compaction that is no probe point: a result without its call is no pair any wire format accepts."""
        if not self.late:
            return
        late, self.late = set(self.late), []
        before = messages()
        history.items = [i for i in history.items if i.id not in late]
        ctx.record_compaction(trigger="orphaned-results", before=before, after=messages(), summary=None,
                              details={"dropped_results": sorted(late)}, probe=False)
