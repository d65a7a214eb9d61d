"""`ItemHistory`'s incremental and edited renderings equal the plain algorithm they replace
(`merge_assistant` over every item's message, with `dataclasses.replace` for the edited ones),
request after request, including after the item list is replaced."""

from __future__ import annotations

from dataclasses import replace

from compaction_bench.request import ToolCall, merge_assistant, message_from_item
from compaction_bench.scenarios.synthetic import generate
from compaction_bench.strategies.history import FoldMemo, ItemHistory


def _reference(items, replacements=None, cleared=None):
    replacements, cleared = replacements or {}, cleared or {}
    out = []
    for item in items:
        message = message_from_item(item)
        if item.id in replacements:
            message = replace(message, content=replacements[item.id], attachments=())
        elif item.id in cleared and message.tool_calls:
            message = replace(message, tool_calls=tuple(ToolCall(c.id, c.name, cleared[item.id]) for c in message.tool_calls))
        out.append(message)
    return merge_assistant(out)


def test_renderings_equal_the_full_rerender_at_every_step():
    items = [i for i in generate("short-turns", seed=3, target_tokens=30_000).transcript.items if i.kind != "marker"]
    history = ItemHistory()
    checked = 0
    for n, item in enumerate(items):
        history.append(item)
        if n % 7:
            continue
        assert history.render() == _reference(history.items)
        results = [i.id for i in history.items if i.kind == "tool_result"]
        calls = [i.id for i in history.items if i.kind == "tool_call"]
        replacements = {rid: "[cleared]" for rid in results[: len(results) // 2]}
        cleared = {cid: "{}" for cid in calls[: len(calls) // 3]}
        assert history.render(None, replacements) == _reference(history.items, replacements)
        assert history.render(None, replacements, cleared) == _reference(history.items, replacements, cleared)
        checked += 1
        if n == 350:  # a strategy dropping history replaces the list: the rendering starts over
            history.items = history.items[len(history.items) // 2:]
            assert history.render() == _reference(history.items)
    assert checked > 20 and any(i.kind == "tool_call" for i in items)


def test_fold_memo_merges_like_merge_assistant_and_reuses_folds():
    items = [i for i in generate("short-turns", seed=4, target_tokens=10_000).transcript.items if i.kind != "marker"]
    messages = [message_from_item(i) for i in items]
    memo = FoldMemo()
    first = memo.merge(messages)
    assert first == merge_assistant(messages)
    second = memo.merge(messages)
    assert all(a is b for a, b in zip(first, second, strict=True))
