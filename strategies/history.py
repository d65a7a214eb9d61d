"""The append-only item history most strategies keep, and pair-safe grouping of it.

`ItemHistory` records every model-input and model-output item a strategy observed and renders
items to wire messages once each (so repeated requests reuse the same `Message` objects, which
keeps token counting and cache-prefix comparison linear). `pair_safe_units` groups a slice of
history so that dropping whole units never separates a tool call from its result.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from compaction_bench.request import Message, merge_assistant, message_from_item
from compaction_bench.transcript import Item


class ItemHistory:
    def __init__(self) -> None:
        self.items: list[Item] = []
        self._messages: dict[str, Message] = {}
        self._merged: dict[tuple[str, ...], Message] = {}

    def append(self, item: Item) -> None:
        self.items.append(item)

    def extend(self, items: Iterable[Item]) -> None:
        self.items.extend(items)

    def message(self, item: Item) -> Message:
        cached = self._messages.get(item.id)
        if cached is None:
            cached = self._messages[item.id] = message_from_item(item)
        return cached

    def render(self, items: Sequence[Item] | None = None) -> list[Message]:
        """Wire messages for items (default: the whole history); an assistant's text and tool calls fold together.

        Folded messages are memoized by the ids they carry, so every request reuses the same objects
        and a fold is built once, not on every request (the grouping is `merge_assistant`'s: a run
        of assistant messages with tool calls folds into the assistant message before it).
        """
        out: list[Message] = []
        group: list[Message] = []
        for item in self.items if items is None else items:
            message = self.message(item)
            if group and message.role == "assistant" and message.tool_calls and group[0].role == "assistant":
                group.append(message)
                continue
            if group:
                out.append(self._fold(group))
            group = [message]
        if group:
            out.append(self._fold(group))
        return out

    def _fold(self, group: list[Message]) -> Message:
        if len(group) == 1:
            return group[0]
        ids = tuple(i for m in group for i in m.item_ids)
        merged = self._merged.get(ids)
        if merged is None:
            merged = self._merged[ids] = merge_assistant(group)[0]
        return merged

    def __len__(self) -> int:
        return len(self.items)


def pair_safe_units(items: Sequence[Item]) -> list[list[Item]]:
    """Split items into droppable units: a real user message starts a turn unit, and a model
    response starts a step unit that also holds the tool results answering its calls.

    Dropping any prefix of units keeps every tool call with its result.
    """
    units: list[list[Item]] = []
    open_calls: set[str] = set()
    for item in items:
        starts_unit = (item.is_real_user or (item.is_model_output and not open_calls and (
            not units or not units[-1][-1].is_model_output or units[-1][-1].response != item.response
        )))
        if not units or starts_unit:
            units.append([])
        units[-1].append(item)
        if item.kind == "tool_call" and item.call_id:
            open_calls.add(item.call_id)
        elif item.kind == "tool_result" and item.call_id:
            open_calls.discard(item.call_id)
    return units
