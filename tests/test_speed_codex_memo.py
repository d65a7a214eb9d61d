"""Shortcuts of the Codex and OpenCode strategies against the straightforward computation.

- `PromptView.messages_trimmed` (the remote compaction request after §3.1's pre-trim: the prompt
  view's messages but the trimmed outputs) against `render` of the trimmed items, and
  `PromptView.normalized_as_is` (a compaction's new history rendered by the prompt view) against
  `for_prompt` changing nothing, on random histories;
- `earliest_fitting_start` (OpenCode V1's `splitTurn` scan as a binary search) against the linear
  scan the spec describes, on random non-negative message sizes and budgets.
"""

from __future__ import annotations

import random

from compaction_bench.strategies.codex_components import (
    CodexItem,
    ItemConverter,
    PromptView,
    for_prompt,
    pretrim_tool_outputs,
    render,
)
from compaction_bench.strategies.history import FoldMemo
from compaction_bench.strategies.opencode_components import Estimator, earliest_fitting_start
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
        pretrim_tool_outputs(items, base, usable, "TRIMMED")
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
