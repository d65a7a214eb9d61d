"""Shortcuts of the Codex and OpenCode strategies against the straightforward computation.

- `PromptView.messages_trimmed` (the remote compaction request after §3.1's pre-trim: the prompt
  view's messages but the trimmed outputs) against `render` of the trimmed items, and
  `PromptView.normalized_as_is` (a compaction's new history rendered by the prompt view) against
  `for_prompt` changing nothing, on random histories;
- `earliest_fitting_start` (OpenCode V1's `splitTurn` scan as a binary search) against the linear
  scan the spec describes, on random non-negative message sizes and budgets;
- `retain_for_remote` (§4.3's newest-first walk, done as bisections over running costs) against
  the walk one message at a time, on random candidates and budgets;
- `PromptView` over histories a compaction replaces by plain messages (rendered in bulk, no call or
  output among them) and that then grow again, against `render(for_prompt(history))`, and its running
  estimates against the sums over `for_prompt(history)` and `history`; its system message is one object
  while the base instructions stay the same (what reads requests recognises it).
"""

from __future__ import annotations

import random
from dataclasses import replace

from compaction_bench.strategies.codex_components import (
    CodexItem,
    ItemConverter,
    PromptView,
    estimate_history,
    for_prompt,
    pretrim_tool_outputs,
    render,
    truncate_middle,
)
from compaction_bench.strategies.history import FoldMemo
from compaction_bench.strategies.opencode_components import Estimator, earliest_fitting_start
from compaction_bench.transcript import Attachment
from tests.test_codex_components import retain_for_remote
from tests.test_speed_codex_opencode import _codex_item


def test_trimmed_request_is_the_rendering_of_the_trimmed_items():
    make = ItemConverter().make
    trimmed_some = 0
    for seed in range(300):
        rng = random.Random(seed)
        history: list[CodexItem] = [_codex_item(rng, n) for n in range(rng.randrange(1, 40))]
        # end on a run of tool outputs most of the time (what the pre-trim rewrites)
        for n in range(rng.randrange(0, 4)):
            history.append(CodexItem(type="function_call_output", call_id=f"c{rng.randrange(6)}", text="x" * 400, item_ids=(f"t{n}",)))
        base = rng.choice(["", "base instructions"])
        view = PromptView(make, FoldMemo())
        items = list(view.update(history, base))
        usable = rng.randrange(0, 2_000)
        _, estimate = pretrim_tool_outputs(items, estimate_history(items, base), usable, "TRIMMED")
        assert estimate == estimate_history(items, base)
        trimmed_some += any(a is not b for a, b in zip(items, view.items, strict=True))
        assert list(view.messages_trimmed(history, base, items)) == render(items, base, FoldMemo())
        assert view.normalized_as_is == (for_prompt(history, make) == history)
        if view.normalized_as_is:
            assert list(view.messages(history, base)) == render(history, base, FoldMemo())
    assert trimmed_some > 50


def test_binary_split_scan_finds_what_the_linear_scan_finds():
    rng = random.Random(7)
    for _ in range(2_000):
        n = rng.randrange(1, 30)
        sizes = [rng.choice([0, 0, 1, 3, 40, 500, 4_000]) for _ in range(n)]
        starts = [0]
        for size in sizes:
            starts.append(starts[-1] + size)

        def estimate(s: int, e: int, starts: list[int] = starts) -> int:
            return Estimator.span(starts[e] - starts[s], e - s)

        low = rng.randrange(0, n)
        remaining = rng.randrange(0, 3_000)
        linear = next((s for s in range(low, n) if estimate(s, n) <= remaining), None)
        assert earliest_fitting_start(low, n, estimate, remaining) == linear


def _retain_one_by_one(items: list[CodexItem], budget: int, max_agent: int) -> list[CodexItem]:
    """§4.3 steps 1-3 as the spec walks them: candidates newest first, each kept while its cost fits; the
    crossing message truncated to what remains (dropped if empty and imageless) and the walk stops; an
    agent message that does not fit is skipped."""
    candidates = [
        i for i in items
        if (i.type == "message" and i.role == "user" and not i.contextual and not i.summary)
        or (i.type == "agent_message" and not i.text.startswith("Message Type: FINAL_ANSWER\n") and i.estimate <= max_agent)
    ]
    remaining, kept = budget, []
    for item in reversed(candidates):
        if remaining == 0:
            break
        cost = max(1, -(-len(item.text.encode()) // 4)) if item.type == "message" else item.estimate
        if cost <= remaining:
            kept.append(item)
            remaining -= cost
        elif item.type == "message":
            text = truncate_middle(item.text, remaining * 4)
            if text or item.images:
                kept.append(replace(item, text=text))
            remaining = 0
    return kept[::-1]


def test_retention_by_bisection_keeps_what_the_walk_keeps():
    image = Attachment(mime="image/png")
    truncated = skipped = 0
    for seed in range(400):
        rng = random.Random(seed)
        items: list[CodexItem] = []
        for n in range(rng.randrange(0, 40)):
            text = "é" * rng.choice([0, 1, 3, 50, 400, 3_000])
            kind = rng.random()
            if kind < 0.6:
                images = (image,) if rng.random() < 0.1 else ()
                items.append(CodexItem(type="message", role="user", text=text, images=images, contextual=rng.random() < 0.1,
                                       item_ids=(f"u{n}",)))
            elif kind < 0.85:
                prefix = "Message Type: FINAL_ANSWER\n" if rng.random() < 0.2 else ""
                items.append(CodexItem(type="agent_message", text=prefix + text, item_ids=(f"a{n}",)))
            else:
                items.append(CodexItem(type="message", role="assistant", text=text, item_ids=(f"m{n}",)))
        budget, max_agent = rng.choice([0, 1, 10, 300, 2_000, 64_000]), rng.choice([100, 10_000])
        expected = _retain_one_by_one(items, budget, max_agent)
        kept = retain_for_remote(items, budget=budget, max_agent_message_tokens=max_agent)
        assert [(k.item_ids, k.text, k.images) for k in kept] == [(k.item_ids, k.text, k.images) for k in expected]
        texts, kept_at = {i.item_ids: i.text for i in items}, [n for n, i in enumerate(items) if i.item_ids in {k.item_ids for k in kept}]
        truncated += any(k.text != texts[k.item_ids] for k in kept)
        # an agent message that did not fit, with an older message kept after it
        skipped += any(
            i.type == "agent_message" and not i.text.startswith("Message") and i.estimate <= max_agent and n not in kept_at
            and kept_at and kept_at[0] < n
            for n, i in enumerate(items)
        )
    assert truncated > 20 and skipped > 20


def test_prompt_view_follows_histories_replaced_by_plain_messages():
    make = ItemConverter().make
    for seed in range(60):
        rng = random.Random(seed)
        view = PromptView(make, FoldMemo())
        history: list[CodexItem] = []
        systems: set[int] = set()
        for n in range(40):
            if rng.random() < 0.15:
                # a remote compaction: the real user and agent messages kept, then the compaction item
                kept = [i for i in history if i.type in ("message", "agent_message") and i.role != "assistant"]
                history = [*kept[rng.randrange(len(kept) + 1) :], CodexItem(type="compaction", text=f"summary {n}")]
            else:
                history.extend(_codex_item(rng, 10 * n + k) for k in range(rng.randrange(1, 6)))
            expected = for_prompt(history, make)
            messages = view.messages(history, "base")
            assert list(messages) == render(expected, "base", FoldMemo())
            assert (view.items_estimate, view.history_estimate) == (sum(i.estimate for i in expected), sum(i.estimate for i in history))
            # one system message object for the same base instructions, however often the view starts again
            systems.add(id(messages[0]))
            assert len(systems) == 1
        other = view.messages(history, "other base")
        assert other[0].content == "other base" and list(other[1:]) == list(messages[1:])
