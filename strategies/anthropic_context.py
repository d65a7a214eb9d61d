"""Anthropic's server-side context management, emulated at the provider boundary
(docs/specs/anthropic-context-management.md).

The client (the agent) keeps its whole history and sends it every time; the edit is applied to
what the model sees, as the API applies it (§1 "server-side, before the prompt reaches the model"):

- `anthropic-clear-tool-uses`, `clear_tool_uses_20250919` (§2): when the prompt's input tokens
  exceed `trigger` (or the tool uses exceed it, `trigger_type="tool_uses"`), every tool result but
  the newest `keep` is replaced by a placeholder (and the call's input too with
  `clear_tool_inputs`), `exclude_tools` never; if that removes fewer than `clear_at_least` tokens,
  nothing is applied. Recomputed from the full history on every request (§7), so each newly cleared
  result rewrites the prompt from that point: the cache effect shows in the cache metrics (§2.3).
  Each request's `meta["applied_edits"]` is the response's `{cleared_tool_uses, cleared_input_tokens}`.
- `anthropic-compact`, `compact_20260112` (§4): when the input (system + messages) exceeds
  `trigger` before sampling, the same model summarises system + history with the default prompt or
  `instructions` (which replaces it); the compaction block then stands for everything before it on
  every later request (§4.5); the summary call is its own request, billed apart from the message
  iteration (§4.6); with `pause_after_compaction` the client resends the block followed by the
  current turn (§4.4), else only the block and what follows it remain (§4.2 step 3).

Open points taken as follows: the clearing placeholder text is unverified (an option); the
comparisons are `>` ("exceeds"); the input counts system + messages (tool definitions are not in the
transcripts); clearing clears everything older than `keep` (§7, §8.3).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from compaction_bench.request import Message, Request
from compaction_bench.strategies.history import ItemHistory
from compaction_bench.strategy import OptionError, Strategy, StrategyContext, SummaryOverflow
from compaction_bench.transcript import Item, Usage

#: §4.1 the smallest trigger the API accepts.
MIN_COMPACT_TRIGGER = 50_000


class _ClientHistory(Strategy):
    """The client side: every item kept, as sent; system items in front."""

    def __init__(self, ctx: StrategyContext, options: Any = None) -> None:
        super().__init__(ctx, options)
        self.system: list[Item] = []
        self.history = ItemHistory()

    def on_user_turn(self, item: Item) -> None:
        self.history.append(item)

    def on_input(self, item: Item) -> None:
        if item.kind == "system":
            self.system.append(item)
        else:
            self.history.append(item)

    def on_response(self, items: Sequence[Item], usage: Usage | None, needs_follow_up: bool) -> None:
        self.history.extend(items)


@dataclass(frozen=True)
class ClearToolUsesOptions:
    """`clear_tool_uses_20250919` with the documented defaults (§2.1)."""

    #: input_tokens | tool_uses
    trigger_type: str = "input_tokens"
    trigger_value: int = 100_000
    keep_tool_uses: int = 3
    #: None: no minimum
    clear_at_least: int | None = None
    #: comma-separated tool names never cleared
    exclude_tools: str = ""
    clear_tool_inputs: bool = False
    #: comma-separated tools whose inputs are cleared (the list form of clear_tool_inputs)
    clear_tool_inputs_for: str = ""
    #: the placeholder is not documented (§8.1)
    placeholder: str = "[Old tool result content cleared]"
    cleared_input: str = "{}"


class ClearToolUses(_ClientHistory):
    name = "anthropic-clear-tool-uses"
    description = "Anthropic clear_tool_uses_20250919 at the provider: past 100k input tokens, all but the newest 3 tool results cleared"
    spec = "docs/specs/anthropic-context-management.md §1, §2, §7"
    Options = ClearToolUsesOptions

    def __init__(self, ctx: StrategyContext, options: Any = None) -> None:
        super().__init__(ctx, options)
        o = self.options
        if o.trigger_type not in ("input_tokens", "tool_uses"):
            raise OptionError(f"option {self.name}.trigger_type: expected input_tokens or tool_uses, got {o.trigger_type!r}")
        self.exclude = {t.strip() for t in o.exclude_tools.split(",") if t.strip()}
        self.clear_inputs_for = {t.strip() for t in o.clear_tool_inputs_for.split(",") if t.strip()}
        self._applied: tuple[str, ...] = ()
        #: `tool_pairs` of the history, extended as items arrive: the calls in order, the first result of each call id
        self._calls: list[Item] = []
        self._results: dict[str, Item] = {}
        self._paired = 0

    def answered_pairs(self) -> list[tuple[Item, Item]]:
        """`tool_pairs(history)` without the unanswered calls, reading only the items new since the last call."""
        items = self.history.items
        for item in items[self._paired:]:
            if item.kind == "tool_result" and item.call_id and item.call_id not in self._results:
                self._results[item.call_id] = item
            elif item.kind == "tool_call":
                self._calls.append(item)
        self._paired = len(items)
        return [(c, r) for c in self._calls if (r := self._results.get(c.call_id or "")) is not None]

    def request(self) -> Request:
        o = self.options
        full = [*self.history.render(self.system), *self.history.render()]
        tokens = self.ctx.count_tokens(full)
        pairs = self.answered_pairs()
        fired = tokens > o.trigger_value if o.trigger_type == "input_tokens" else len(pairs) > o.trigger_value
        messages: list[Message] = full
        cleared: tuple[str, ...] = ()
        removed = 0
        if fired:
            clearable = [(c, r) for c, r in pairs if c.tool_name not in self.exclude]
            old = clearable[: max(0, len(clearable) - o.keep_tool_uses)]
            if old:
                replacements = {r.id: o.placeholder for _, r in old if r is not None}
                inputs = {c.id: o.cleared_input for c, _ in old if o.clear_tool_inputs or c.tool_name in self.clear_inputs_for}
                edited = [*self.history.render(self.system), *self.history.render(None, replacements, inputs)]
                removed = tokens - self.ctx.count_tokens(edited)
                if o.clear_at_least is None or removed >= o.clear_at_least:
                    messages, cleared = edited, tuple(c.call_id or "" for c, _ in old)
                else:
                    removed = 0
        if cleared != self._applied:
            before_ids = set(self._applied)
            self.ctx.record_compaction(
                trigger="clear_tool_uses", before=full if not self._applied else self._render(self._applied), after=messages,
                summary=None, estimate_tokens=tokens, threshold=o.trigger_value if o.trigger_type == "input_tokens" else None,
                details={"cleared_tool_uses": len(cleared), "newly_cleared": [c for c in cleared if c not in before_ids],
                         "cleared_input_tokens": removed},
                probe=False,
            )
            self._applied = cleared
        meta: dict[str, Any] = {}
        if cleared:
            meta["applied_edits"] = [{"type": "clear_tool_uses_20250919", "cleared_tool_uses": len(cleared), "cleared_input_tokens": removed}]
        return Request(messages, estimate_tokens=tokens, threshold=o.trigger_value if o.trigger_type == "input_tokens" else None, meta=meta)

    def _render(self, cleared: Sequence[str]) -> list[Message]:
        """The prompt the previous request sent: the same edit over the current history."""
        o = self.options
        ids = set(cleared)
        pairs = [(c, r) for c, r in self.answered_pairs() if c.call_id in ids]
        replacements = {r.id: o.placeholder for _, r in pairs}
        inputs = {c.id: o.cleared_input for c, _ in pairs if o.clear_tool_inputs or c.tool_name in self.clear_inputs_for}
        return [*self.history.render(self.system), *self.history.render(None, replacements, inputs)]


@dataclass(frozen=True)
class CompactOptions:
    """`compact_20260112` with the documented defaults (§4.1)."""

    trigger: int = 150_000
    pause_after_compaction: bool = False
    #: custom summarisation prompt; replaces the default entirely
    instructions: str | None = None


class ServerCompact(_ClientHistory):
    name = "anthropic-compact"
    description = "Anthropic compact_20260112 at the provider: past 150k input tokens the history becomes one compaction block"
    spec = "docs/specs/anthropic-context-management.md §1, §4, §7"
    Options = CompactOptions

    def __init__(self, ctx: StrategyContext, options: Any = None) -> None:
        super().__init__(ctx, options)
        if self.options.trigger < MIN_COMPACT_TRIGGER:
            raise OptionError(f"option {self.name}.trigger: the API requires at least {MIN_COMPACT_TRIGGER:,}, got {self.options.trigger:,}")
        self.block: Message | None = None
        #: index into the client's history of the first item after the latest compaction block
        self.start = 0

    def messages(self) -> list[Message]:
        block = [self.block] if self.block is not None else []
        # before the first compaction the whole history, whose rendering is kept up to date incrementally
        body = self.history.render() if self.start == 0 else self.history.render(self.history.items[self.start:])
        return [*self.history.render(self.system), *block, *body]

    def request(self) -> Request:
        o = self.options
        messages = self.messages()
        tokens = self.ctx.count_tokens(messages)
        if tokens > o.trigger:
            self._compact(messages, tokens)
            messages = self.messages()
        return Request(messages, estimate_tokens=tokens, threshold=o.trigger)

    def _compact(self, messages: list[Message], tokens: int) -> None:
        o = self.options
        prompt = self.ctx.render_prompt("anthropic_compact.j2", instructions=o.instructions)
        try:
            result = self.ctx.summarize(Request([*messages, Message("user", prompt)], kind="summary"), purpose="compaction")
        except SummaryOverflow:
            return  # §4.9: a 400; the request goes on without a new compaction
        items = self.history.items
        start = len(items)
        if o.pause_after_compaction:
            # §4.4: the client resends the block plus what it keeps; here the current turn.
            last_user = max((n for n in range(self.start, len(items)) if items[n].is_real_user), default=None)
            start = last_user if last_user is not None else len(items)
        summarized = [i for m in messages for i in m.item_ids if i not in {x.id for x in items[start:]}]
        self.block = Message("compaction", result.text)
        self.start = start
        self.ctx.record_compaction(
            trigger="compact_20260112", before=messages, after=self.messages(), summary=result.text,
            summarized_ids=[i for i in summarized if i not in {s.id for s in self.system}], estimate_tokens=tokens,
            threshold=o.trigger,
            details={"iteration": {"type": "compaction", "input_tokens": result.input_tokens, "output_tokens": result.output_tokens},
                     "paused": o.pause_after_compaction},
        )
