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
- `anthropic-compact`, `compact_20260112` (§4): when the input (system + messages) reaches
  `trigger` before sampling, the same model summarises system + history with the default prompt or
  `instructions` (which replaces it); the compaction block then stands for everything before it on
  every later request (§4.5); the summary call is its own request, billed apart from the message
  iteration (§4.6); with `pause_after_compaction` the client resends the block followed by the
  newest messages it keeps (below), else only the block and what follows it remain (§4.2 step 3).
  A compaction iteration that does not fit fails the call (§4.9 "summary would exceed the window →
  400"): the summary is sent as an iteration of the turn's request (`summarize(in_request=True)`), so
  the one request fails with that 400, whether or not the uncompacted prompt alone would fit, and no
  failed summary request is counted besides it.

What each request and compaction reports of the server's count. The server decides on the exact count
(the provider's, `count_tokens`) of the prompt the client sent, before it edits or compacts it; the client
holds no estimate. So `estimate_tokens` is that count only where it is the count of the context the record
labels, else None: a request's when the server sent the model the prompt it decided on (nothing cleared;
no compaction in this call; the client's own call after a paused compaction, which the server decides on
by the count of what it holds), a clearing record's when the context before it is the unedited prompt (the
first clearing). `threshold` goes with it on clearing records: a later clearing's context before it is the
previous edited prompt, which the server never compared with the trigger, so it would be judged premature
on a count nobody decided on. A request keeps the trigger as its threshold (the count at which the server
edits): with no estimate, or the exact one, no trigger can count as missed. Clearing compares with `>`
(the docs' "exceeds": §2.1, its operator open in §8 item 2), so the threshold it reports is the smallest
count that fires it, `trigger + 1` (`Request.threshold`). Compaction compares with `>=`: §7 leaves the
operator open ("`>` vs `≥` unverified"), and the compaction page itself says the API summarises "when it
reaches the configured token threshold" and "detects when input tokens reach your specified trigger
threshold" (`build-with-claude/compaction.md`, the "How compaction works" section, as mirrored in
gpambrozio/ClaudeDocs), so it reports `trigger` itself. The server's code is not public.

What a client keeps after a pause the docs leave to it (§4.4: "any additional messages you want to
preserve verbatim"). Their example "Preserving recent messages after compaction" (the compaction page,
CP-2) keeps the last three messages: `preserved = messages[-3:]` ("latest exchange + current user msg"),
then sends `[assistant: compaction block] + preserved`. §4.4 says only "e.g. the last few turns"; the
docs' example wins, and this client does the same (option `pause_keep_messages`, default 3; 0 is the
plain pausing example, which appends the block after everything and so keeps nothing): the newest three messages as the Messages API groups the items (one
response is one assistant message; the user text and tool results between two responses one user
message). One change to the literal example: when the first kept message holds tool results whose
calls would be summarised (in a tool loop `messages[-3:]` starts with the previous step's results), the
message with those calls is kept too, since the API rejects a `tool_result` whose `tool_use` is not in
the assistant message before it. A long single-turn run thus compacts again only when the context
regrows past the trigger, as the docs' client does (keeping the whole current turn, the turn alone soon
exceeds the trigger and every request compacts).

Open points taken as follows: the clearing placeholder text is unverified (an option); clearing
compares with `>` ("exceeds") and compaction with `>=` ("reaches"); the input counts system + messages (tool definitions are not in the
transcripts); clearing clears everything older than `keep` (§7, §8.3).

The requests are views of append-only logs (compaction_bench.log_view), the cleared prompt included,
kept up to date as items arrive, so a request costs what changed, not the history's length.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from compaction_bench.log_view import LogView
from compaction_bench.request import Message, Request
from compaction_bench.strategies.history import ItemHistory
from compaction_bench.strategy import Range, Strategy, StrategyContext, SummaryOverflow
from compaction_bench.transcript import Item, Usage, answered_call

#: §4.1 the smallest trigger the API accepts.
MIN_COMPACT_TRIGGER = 50_000


class _ClientHistory(Strategy):
    """The client side: every item kept, as sent; system items in front."""

    sends_inputs_verbatim = True
    provider_only = "anthropic"  # the edits are the Messages API's own (§1)

    def __init__(self, ctx: StrategyContext, options: Any = None) -> None:
        super().__init__(ctx, options)
        self.system: list[Item] = []
        self.history = ItemHistory()
        #: `full()`'s append-only log: the system messages, then the history's log as far as it was copied
        self._log: list[Message] = []
        self._log_source: list[Message] | None = None
        self._log_system = 0
        self._copied = 0

    def full(self) -> LogView:
        """`[*history.render(system), *history.render()]`, the whole client history, as a view of an
        append-only log (compaction_bench.log_view), so that the request is built, compared with the
        previous one and stored without a pass over the history: the system messages, then the history's
        own log, copied as it grows; started anew when a system item arrives or the history's log is new."""
        body = self.history.view()
        if body.log is not self._log_source or len(self.system) != self._log_system:
            self._log = self.history.render(self.system)
            self._log_source, self._log_system, self._copied = body.log, len(self.system), 0
        self._log.extend(body.log[self._copied : body.length])
        self._copied = body.length
        return LogView(self._log, len(self._log), body.tail)

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

    #: `trigger.type`: the edit fires when the prompt's input tokens, or its answered tool uses, exceed
    #: `trigger_value` (§2.1).
    trigger_type: Literal["input_tokens", "tool_uses"] = "input_tokens"
    #: input tokens or tool uses, as `trigger_type` says
    trigger_value: int = field(default=100_000, metadata={"range": Range(0, what="a number of input tokens or tool uses")})
    #: `keep`: the newest this many tool use/result pairs of clearable tools stay intact; 0 clears them all (§2.1).
    keep_tool_uses: int = field(default=3, metadata={"range": Range(0, what="a number of tool uses")})
    #: input tokens; None: no minimum
    clear_at_least: int | None = field(default=None, metadata={"range": Range(0, what="a number of input tokens")})
    #: comma-separated tool names never cleared
    exclude_tools: str = ""
    #: `clear_tool_inputs: true`: the cleared tool uses also get their input replaced by `cleared_input` (§2.1).
    clear_tool_inputs: bool = False
    #: comma-separated tools whose inputs are cleared (the list form of clear_tool_inputs)
    clear_tool_inputs_for: str = ""
    #: the placeholder is not documented (§8.1)
    placeholder: str = "[Old tool result content cleared]"
    #: What a cleared tool use's input becomes (JSON text); the API's replacement is not documented (§8).
    cleared_input: str = "{}"


class ClearToolUses(_ClientHistory):
    name = "anthropic-clear-tool-uses"
    description = "Anthropic clear_tool_uses_20250919 at the provider: past 100k input tokens, all but the newest 3 tool results cleared"
    spec = "docs/specs/anthropic-context-management.md §1, §2, §7"
    Options = ClearToolUsesOptions

    def __init__(self, ctx: StrategyContext, options: Any = None) -> None:
        super().__init__(ctx, options)
        o = self.options
        self.exclude = {t.strip() for t in o.exclude_tools.split(",") if t.strip()}
        self.clear_inputs_for = {t.strip() for t in o.clear_tool_inputs_for.split(",") if t.strip()}
        self._applied: tuple[str, ...] = ()
        #: The history's tool calls and their results, extended as items arrive (`_pair`): the calls in order (a call's
        #: index here is its sequence number) and their ids, the results that came before any call of their id
        #: (by id, in order), the calls not answered yet by id (a result answers one of them by `answered_call`'s
        #: rule, as the wire pairs them); the answered pairs in call order with their sequence numbers; the
        #: clearable ones (tool not excluded), their call ids and their results by id
        self._paired = 0
        self._calls: list[Item] = []
        self._call_ids: set[str] = set()
        self._results: dict[str, list[Item]] = {}
        self._waiting: dict[str, list[int]] = {}
        self._answered: list[tuple[Item, Item]] = []
        self._answered_seq: list[int] = []
        self._clearable: list[tuple[Item, Item]] = []
        self._clearable_seq: list[int] = []
        self._clearable_ids: list[str] = []
        self._clearable_results: dict[str, Item] = {}
        #: The incremental edit holds while no tool input is to be cleared, item ids and call ids are
        #: unique and no result comes before its call: the cleared results are then those of a prefix of
        #: `_clearable` (in call order, as the answered pairs), and each result has one place in the
        #: history. Otherwise every request takes the straightforward path, for good.
        self._plain = o.clear_tool_inputs or bool(self.clear_inputs_for)
        self._item_ids: set[str] = set()
        #: The edited contexts are views of one append-only log (`_cleared_log`): the system messages,
        #: then the history's messages with every clearable result cleared. Clearing the results of
        #: `_clearable[:k]` is that log up to the next clearable result, then the history from there.
        #: `_positions`: the position in the history's rendering of each tool result's message.
        self._cleared_log: list[Message] = []
        self._cleared_source: list[Message] | None = None
        self._cleared_system = 0
        self._positions: dict[str, int] = {}

    def _pair(self) -> None:
        """Read the items appended since the last call into the pairing state."""
        items = self.history.items
        for n in range(self._paired, len(items)):
            item = items[n]
            if item.id in self._item_ids:
                self._plain = True
            self._item_ids.add(item.id)
            if item.kind == "tool_call":
                call_id = item.call_id or ""
                if call_id in self._call_ids:
                    self._plain = True
                self._call_ids.add(call_id)
                seq = len(self._calls)
                self._calls.append(item)
                early = self._results.get(call_id)
                if early:
                    self._plain = True  # a result before its call
                    self._answer(seq, item, early.pop(0))
                else:
                    self._waiting.setdefault(call_id, []).append(seq)
            elif item.kind == "tool_result" and item.call_id:
                waiting = self._waiting.get(item.call_id)
                if waiting:  # one result answers one call of its id
                    seq = answered_call(waiting, self._calls)
                    self._answer(seq, self._calls[seq], item)
                else:
                    self._results.setdefault(item.call_id, []).append(item)
        self._paired = len(items)

    def _answer(self, seq: int, call: Item, result: Item) -> None:
        """A call is answered: it joins the answered (and clearable) pairs at its place in call order
        (parallel calls may be answered in another order)."""
        at = bisect.bisect(self._answered_seq, seq)
        self._answered_seq.insert(at, seq)
        self._answered.insert(at, (call, result))
        if call.tool_name in self.exclude:
            return
        at = bisect.bisect(self._clearable_seq, seq)
        self._clearable_seq.insert(at, seq)
        self._clearable.insert(at, (call, result))
        self._clearable_ids.insert(at, call.call_id or "")
        self._clearable_results[result.id] = result

    def _extend(self, body: LogView, system: Sequence[Message]) -> None:
        """Bring the cleared log up to the history's (closed) log, and note where tool results are."""
        if body.log is not self._cleared_source or len(self.system) != self._cleared_system:
            self._cleared_log = list(system)
            self._cleared_source, self._cleared_system = body.log, len(self.system)
        log = self._cleared_log
        start = len(log) - self._cleared_system
        for n in range(start, len(body)):
            message = body[n]
            if message.role == "tool":
                for item_id in message.item_ids:
                    self._positions[item_id] = n
            if n < body.length:
                result = self._clearable_results.get(message.item_ids[0]) if message.role == "tool" and message.item_ids else None
                log.append(message if result is None else self.history.edited(result, self.options.placeholder, None))

    def _edited(self, body: LogView, cleared: tuple[str, ...]) -> LogView:
        """The request with the results of the calls `cleared` cleared: the cleared log up to the first
        result that stays, then the history from there, with the cleared results that stand after it
        (parallel calls answered out of call order) cleared. `cleared` is a prefix of `_clearable_ids`
        (a call answered late may since stand among them: then any of them)."""
        if tuple(self._clearable_ids[: len(cleared)]) == cleared:
            kept = self._clearable[len(cleared) :]
        else:  # a call answered since, placed before calls cleared then
            ids = set(cleared)
            kept = [pair for pair, call_id in zip(self._clearable, self._clearable_ids, strict=True) if call_id not in ids]
        end = min([body.length, *(self._positions[result.id] for _, result in kept)])  # nothing kept with `keep_tool_uses=0`
        kept_ids = {result.id for _, result in kept}
        results, placeholder = self._clearable_results, self.options.placeholder
        tail = tuple(
            self.history.edited(results[m.item_ids[0]], placeholder, None)
            if m.role == "tool" and m.item_ids and m.item_ids[0] in results and m.item_ids[0] not in kept_ids
            else m
            for m in body[end:]
        )
        return LogView(self._cleared_log, self._cleared_system + end, tail)

    def request(self) -> Request:
        o = self.options
        body = self.history.view()
        self._pair()
        if self._plain:
            return self._request_plain([*self.history.render(self.system), *self.history.render()])
        full = self.full()
        self._extend(body, full[: len(full) - len(body)])
        tokens = self.ctx.count_tokens(full)
        fired = tokens > o.trigger_value if o.trigger_type == "input_tokens" else len(self._answered) > o.trigger_value
        messages: Sequence[Message] = full
        cleared: tuple[str, ...] = ()
        removed = 0
        k = max(0, len(self._clearable) - o.keep_tool_uses)
        if fired and k:
            edited = self._edited(body, tuple(self._clearable_ids[:k]))
            removed = tokens - self.ctx.count_tokens(edited)
            if o.clear_at_least is None or removed >= o.clear_at_least:
                messages, cleared = edited, tuple(self._clearable_ids[:k])
            else:
                removed = 0
        if cleared != self._applied:
            # the previous request's edit over the current history
            applied = self._applied
            before = self._edited(body, applied) if applied else full
            if cleared[: len(applied)] == applied:
                newly = list(cleared[len(applied) :])
            else:  # a call answered since was placed before calls cleared then
                was = set(applied)
                newly = [c for c in cleared if c not in was]
            self._record(tokens, before, messages, cleared, newly, removed)
        return self._finish(messages, tokens, cleared, removed)

    def _request_plain(self, full: list[Message]) -> Request:
        """The edit computed from the whole history (tool inputs cleared, or repeated ids)."""
        o = self.options
        tokens = self.ctx.count_tokens(full)
        pairs = self._answered
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
            before = full if not self._applied else self._render(self._applied)
            self._record(tokens, before, messages, cleared, [c for c in cleared if c not in before_ids], removed)
        return self._finish(messages, tokens, cleared, removed)

    def _record(
        self, tokens: int, before: Sequence[Message], after: Sequence[Message], cleared: tuple[str, ...], newly: list[str], removed: int,
    ) -> None:
        """One change of the edit. The server decided on `tokens`, the exact count of the unedited prompt: the
        record reports it, and the trigger, only when its context before is that prompt (nothing was cleared
        on the previous request); else its context before is the previous edited prompt, on which nothing was
        decided, and it reports neither (a threshold over that context would judge the clearing premature)."""
        decided = not self._applied
        self.ctx.record_compaction(
            trigger="clear_tool_uses", before=before, after=after, summary=None,
            estimate_tokens=tokens if decided else None,
            threshold=self._threshold() if decided else None,
            details={"cleared_tool_uses": len(cleared), "newly_cleared": newly, "cleared_input_tokens": removed},
            probe=False,
        )
        self._applied = cleared

    def _finish(self, messages: Sequence[Message], tokens: int, cleared: tuple[str, ...], removed: int) -> Request:
        """The request the model gets. `estimate_tokens`: the server's exact count `tokens` when that prompt is
        the one sent (nothing cleared), else None (it counted the unedited prompt, not the edited one sent)."""
        meta: dict[str, Any] = {}
        if cleared:
            meta["applied_edits"] = [{"type": "clear_tool_uses_20250919", "cleared_tool_uses": len(cleared), "cleared_input_tokens": removed}]
        return Request(messages, estimate_tokens=None if cleared else tokens, threshold=self._threshold(), meta=meta)

    def _threshold(self) -> int | None:
        """The smallest input count at which the edit fires: the trigger is strict, `tokens > trigger_value`
        ("exceeds", §2.1; the operator unverified, §8 item 2), so `trigger_value + 1`. None for a trigger in
        tool uses: no token count fires it."""
        o = self.options
        return o.trigger_value + 1 if o.trigger_type == "input_tokens" else None

    def _render(self, cleared: Sequence[str]) -> list[Message]:
        """The prompt the previous request sent: the same edit over the current history."""
        o = self.options
        ids = set(cleared)
        pairs = [(c, r) for c, r in self._answered if c.call_id in ids]
        replacements = {r.id: o.placeholder for _, r in pairs}
        inputs = {c.id: o.cleared_input for c, _ in pairs if o.clear_tool_inputs or c.tool_name in self.clear_inputs_for}
        return [*self.history.render(self.system), *self.history.render(None, replacements, inputs)]


@dataclass(frozen=True)
class CompactOptions:
    """`compact_20260112` with the documented defaults (§4.1)."""

    #: `trigger`, in input tokens: compact before sampling once the request's input (system, messages, tools)
    #: reaches this (§4.1, §4.2; the compaction page's "reach", module docstring).
    trigger: int = field(default=150_000, metadata={"range": Range(MIN_COMPACT_TRIGGER, what="a number of input tokens; the API accepts no fewer, §4.1")})
    #: Stop right after the summary (`stop_reason: "compaction"`); the client then resends the block and its newest
    #: `pause_keep_messages` messages (§4.1, §4.4).
    pause_after_compaction: bool = False
    #: custom summarisation prompt; replaces the default entirely
    instructions: str | None = None
    #: the client's side of a pause: how many of the newest messages (as the Messages API groups them) it
    #: sends again after the compaction block; 3 as in the docs' example (`messages[-3:]`)
    pause_keep_messages: int = field(default=3, metadata={"range": Range(0, what="a number of messages")})


class ServerCompact(_ClientHistory):
    name = "anthropic-compact"
    description = "Anthropic compact_20260112 at the provider: once the input reaches 150k tokens the history becomes one compaction block"
    spec = "docs/specs/anthropic-context-management.md §1, §4, §7"
    Options = CompactOptions

    def __init__(self, ctx: StrategyContext, options: Any = None) -> None:
        super().__init__(ctx, options)
        self.block: Message | None = None
        #: index into the client's history of the first item after the latest compaction block
        self.start = 0
        #: the summarisation prompt, rendered once (it depends only on the options)
        self._prompt: Message | None = None

    def messages(self) -> Sequence[Message]:
        if self.block is None:
            return self.full()  # before the first compaction the whole history
        return [*self.history.render(self.system), self.block, *self.history.render(self.history.items[self.start:])]

    def request(self) -> Request:
        """The turn's request. `estimate_tokens`: the server's exact count of the prompt it decided on when that
        is the prompt sent; after a compaction in this call the model gets the compacted prompt, which the
        server did not decide on (None), but after a paused one the request is the client's next call, with
        the block and the messages it keeps, which the server decides on by its exact count."""
        o = self.options
        messages = self.messages()
        tokens = self.ctx.count_tokens(messages)
        estimate: int | None = tokens
        if tokens >= o.trigger and self._compact(messages, tokens):
            messages = self.messages()
            estimate = self.ctx.count_tokens(messages) if o.pause_after_compaction else None
        # "when input tokens reach your specified trigger threshold" (the compaction page; §7 leaves the operator
        # open): the smallest count that compacts is `trigger` itself
        return Request(messages, estimate_tokens=estimate, threshold=o.trigger)

    def _compact(self, messages: Sequence[Message], tokens: int) -> bool:
        """Compact (§4.2); False when the summary iteration overflowed (§4.9): nothing changed, and the request
        `request()` returns fails with its 400 (the iteration is part of that call, `in_request`)."""
        o = self.options
        if self._prompt is None:
            self._prompt = Message("user", self.ctx.render_prompt("anthropic_compact.j2", instructions=o.instructions))
        prompt = self._prompt
        # the history and the prompt: a view of the same log when the history is one
        sent = LogView(messages.log, messages.length, (*messages.tail, prompt)) if isinstance(messages, LogView) else [*messages, prompt]
        try:
            result = self.ctx.summarize(Request(sent, kind="summary"), purpose="compaction", in_request=True)
        except SummaryOverflow:
            return False  # §4.9: a 400 for the whole call, which the engine records on the turn's request
        items = self.history.items
        start = self._kept_from() if o.pause_after_compaction else len(items)
        kept = {x.id for x in items[start:]}
        system = {x.id for x in self.system}
        summarized = [i for m in messages for i in m.item_ids if i not in kept and i not in system]
        self.block = Message("compaction", result.text)
        self.start = start
        self.ctx.record_compaction(
            trigger="compact_20260112", before=messages, after=self.messages(), summary=result.text,
            summarized_ids=summarized, estimate_tokens=tokens,
            threshold=o.trigger,
            details={"iteration": {"type": "compaction", "input_tokens": result.input_tokens, "output_tokens": result.output_tokens},
                     "paused": o.pause_after_compaction},
        )
        return True

    def _kept_from(self) -> int:
        """§4.4 where the messages the client sends again after a paused compaction start (an index into the
        history): the newest `pause_keep_messages` messages, counted as the Messages API groups the items
        (one response is an assistant message; the user text and tool results between two responses are one
        user message), never reaching back before the current block. When a kept message holds a tool result
        whose call would be summarised, the message with that call is kept too."""
        items = self.history.items
        starts = _message_starts(items, self.start)
        keep = self.options.pause_keep_messages
        start = starts[-keep] if 0 < keep <= len(starts) else (self.start if keep else len(items))
        calls = {item.call_id: n for n in range(self.start, start) if (item := items[n]).kind == "tool_call" and item.call_id}
        while True:
            orphaned = [calls[r.call_id] for r in items[start:] if r.kind == "tool_result" and r.call_id in calls]
            earlier = min((n for n in orphaned if n < start), default=None)
            if earlier is None:
                return start
            start = max(m for m in starts if m <= earlier)


def _message_starts(items: Sequence[Item], begin: int) -> list[int]:
    """The index of the first item of each Messages API message in `items[begin:]`: a run of one response's
    output items is an assistant message, a run of other items (user text, tool results) a user message."""
    starts: list[int] = []
    previous: Item | None = None
    for n in range(begin, len(items)):
        item = items[n]
        if previous is None or item.is_model_output != previous.is_model_output or (
            item.is_model_output and item.response != previous.response
        ):
            starts.append(n)
        previous = item
    return starts
