"""Shortcuts of `codex-local`'s summary request and OpenCode V2's entries against the straightforward computation.

- `CodexLocal.summary_request(..., whole=True)` (the prompt view's messages behind the compaction
  prompt) against `render` of the same items, and the view's running estimate against
  `estimate_history`, on random histories;
- `Entries` (OpenCode V2's serialized entries, each record serialized once per version) against
  `serialize_record` (with their positions among the records); counting the texts that join entries as the recent text and the checkpoint
  do gives tiktoken's count of the whole text.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from compaction_bench.profiles import ModelProfile, get_profile
from compaction_bench.strategies.codex import CodexLocal
from compaction_bench.strategies.codex_components import CodexItem, approx_tokens, estimate_history, render
from compaction_bench.strategies.history import FoldMemo
from compaction_bench.strategies.opencode_components import (
    Entries,
    SessionStore,
    serialize_record,
)
from compaction_bench.tokens import LINES_FROM, TokenCounter
from compaction_bench.transcript import Item, Usage
from tests.test_speed_codex_opencode import _codex_item

PROMPT = "Summarize the conversation so far.\nKeep file paths."


@dataclass
class _Context:
    """What building a summary request reads of the engine: the profile and the prompt templates."""

    profile: ModelProfile

    def render_prompt(self, template: str, **variables: Any) -> str:
        return PROMPT


def test_summary_request_from_the_prompt_view_is_the_rendering_of_the_items():
    for seed in range(200):
        rng = random.Random(seed)
        strategy = CodexLocal(_Context(get_profile("64k")))
        strategy.base = rng.choice(["", "base instructions"])
        history: list[CodexItem] = []
        for step in range(rng.randrange(1, 6)):  # the view follows the history as it grows between requests
            history.extend(_codex_item(rng, 10 * step + n) for n in range(rng.randrange(1, 12)))
            strategy.history = history
            items = list(strategy.prompt.update(history, strategy.base))
            request = strategy.summary_request(items, "codex_summary.j2", whole=True)
            assert list(request.messages) == [*render(items, strategy.base, FoldMemo()), *strategy.summary_request(items, "t").messages[-1:]]
            assert request.messages[-1].role == "user" and request.messages[-1].content == PROMPT
            # no estimate on the local path's summary request (codex.md §2.1); the view's running estimate, which
            # the remote pre-trim decides on, is `estimate_history` of its items
            assert request.estimate_tokens is None and request.kind == "summary"
            assert approx_tokens(strategy.base) + strategy.prompt.items_estimate == estimate_history(items, strategy.base)


def _session(rng: random.Random) -> SessionStore:
    """Steps with tool calls whose inputs are long one-line JSON (a whole file), short calls, text and user turns."""
    store = SessionStore()
    for n in range(40):
        kind = rng.choice(["user", "call", "long_call", "text"])
        if kind == "user":
            store.observe_input(Item(id=f"u{n}", kind="user", text=f"please look at file {n}\nand fix it"))
            continue
        if kind == "text":
            store.add_response([Item(id=f"a{n}", kind="assistant", text=f"done {n}\n  indented {n}")], Usage(input=10, output=2))
            continue
        size = rng.randrange(LINES_FROM - 40, 3 * LINES_FROM) if kind == "long_call" else rng.randrange(1, 60)
        content = "\n".join(f"line {k} of file {n}: " + "x" * rng.randrange(0, 30) for k in range(size // 20 + 1))
        arguments = json.dumps({"path": f"src/f{n}.py", "content": content[:size]})
        store.add_response([Item(id=f"c{n}", kind="tool_call", call_id=f"k{n}", tool_name="write", arguments=arguments)], Usage(input=10, output=2))
        if rng.random() < 0.9:  # a call may still wait for its result at a compaction
            store.observe_input(Item(id=f"r{n}", kind="tool_result", call_id=f"k{n}", text=f"wrote {n}\n" * rng.randrange(1, 4)))
    return store


def test_entries_are_the_serialized_records_once_per_version():
    encoding = TokenCounter("o200k_base").encoding
    long_seen = 0
    for seed in range(20):
        rng = random.Random(seed)
        store = _session(rng)
        counter = TokenCounter("o200k_base")
        entries = Entries(2_000)
        first = entries.of(store.records)
        expected = [(n, r, t) for n, r in enumerate(store.records) if (t := serialize_record(r, 2_000))]
        assert first == expected
        long_seen += sum(len(line) >= LINES_FROM for _, _, text in first for line in text.split("\n"))
        # as the recent text and the checkpoint join entries (the counter reads their long lines from its memo the second time)
        for joined in ("\n\n".join(t for _, _, t in first), "<recent-context>\n" + "\n\n".join(t for _, _, t in first) + "\n</recent-context>"):
            assert counter.count(joined) == len(encoding.encode_ordinary(joined))
        # serialized once per version: the same objects again; a record that changed is serialized again
        again = entries.of(store.records)
        assert all(a[2] is b[2] for a, b in zip(first, again, strict=True))
        step = next(r for r in store.records if r.kind == "step")
        step.items.append(Item(id="late", kind="assistant", text="[Assistant]: " + "y" * LINES_FROM))
        store.touch(step)
        tail = store.records[store.records.index(step) :]
        later = entries.of(tail)
        before = next(t for _, r, t in first if r is step)
        assert later[0][2] == serialize_record(step, 2_000) and later[0][2] is not before
        assert later == [(n, r, t) for n, r in enumerate(tail) if (t := serialize_record(r, 2_000))]
    assert long_seen > 20

