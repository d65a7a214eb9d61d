"""The Complexity Trap's hybrid as the `hybrid` strategy (docs/specs/evaluation.md §2).

Observation masking while the context grows: the tool outputs of all but the newest `keep_last` (M = 10)
agent steps that produced outputs become a one-line placeholder, as `observation-masking` does. An LLM summary runs only
when masking is not enough: when the masked context still crosses `trigger_ratio` of the window,
or, as in the paper's deferred summary, once `summarize_steps + keep_last` (N + M = 43 + 10) agent
steps are unsummarized (the M a summary keeps count: the next one comes N steps later and covers N). The summary (OpenHands-style, the paper's
LLM-Summary) covers everything before the newest M steps, the previous summary included; the
newest M steps stay verbatim from a pair-safe boundary, so no call loses its result.

The context is rendered incrementally: new history items are rendered and folded once, a masked
result's message is swapped for its placeholder once, and the messages before the oldest result not
yet masked (which never change again until a summary) form the append-only log the requests' views
share (compaction_bench.log_view).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from compaction_bench.log_view import LogView
from compaction_bench.request import Message, Request, merge_assistant
from compaction_bench.strategies.components import keep_last_steps_start, masking_cutoff, observation_lines
from compaction_bench.strategies.history import ItemHistory, RemovedCalls
from compaction_bench.strategy import Range, Strategy, StrategyContext, SummaryOverflow
from compaction_bench.transcript import Item, Usage


@dataclass(frozen=True)
class HybridOptions:
    """M = 10 and N = 43 from the paper (evaluation.md §2); the token trigger is this project's."""

    #: M, in agent steps: the outputs of the newest M steps that produced outputs stay and older ones are masked, and
    #: a summary keeps the newest M steps verbatim; at least 1, as SWE-agent's masking refuses 0 (evaluation.md §2).
    keep_last: int = field(default=10, metadata={"range": Range(1, what="a number of agent steps")})
    #: N, in agent steps: once N + M steps are unsummarized, summarize all but the newest M, so every summary after
    #: the first covers N steps (the paper's `SummarizeEveryNTurns`; evaluation.md §2).
    summarize_steps: int = field(default=43, metadata={"range": Range(0, what="a number of agent steps")})
    #: Also summarize when the masked context's true token count exceeds this fraction of the window (strict `>`;
    #: this project's rule, not the paper's).
    trigger_ratio: float = 0.9
    #: Text that replaces a masked tool output; `{lines}` is the output's line count (evaluation.md §2), counted as
    #: SWE-agent counts it (`len(text.splitlines())`, components.observation_lines).
    placeholder: str = field(default="[Old tool output omitted: {lines} lines]", metadata={"format_fields": ("lines",)})


class Hybrid(Strategy):
    name = "hybrid"
    description = "observation masking (M = 10) while the context grows; an LLM summary of all but the last M steps when masking is not enough"
    spec = "docs/specs/evaluation.md §2"
    Options = HybridOptions
    sends_inputs_verbatim = True

    def __init__(self, ctx: StrategyContext, options: Any = None) -> None:
        super().__init__(ctx, options)
        self.system: list[Item] = []
        self.history = ItemHistory()
        self.summary: str | None = None
        self.masked: set[str] = set()
        #: every tool result with the step it arrived at, in arrival order (steps never decrease),
        #: and how many of them are masked: the masked ones are always a prefix
        self.result_step: list[tuple[str, int]] = []
        self._masked_upto = 0
        #: each step at which tool outputs arrived, once, ascending (`masking_cutoff`)
        self.output_steps: list[int] = []
        self.steps = 0
        self.steps_since_summary = 0
        #: the rendering: what it renders (the history's item list, the system items, the summary
        #: message), how many history items it holds, its messages (`_out`: system, summary, body), the
        #: positions in `_out` of each tool result's messages, and `_out`'s settled start (`_log`)
        self._rendering: tuple[list[Item] | None, int, Message | None] = (None, 0, None)
        self._rendered = 0
        self._out: list[Message] = []
        self._position: dict[str, list[tuple[int, Item]]] = {}
        self._log: list[Message] = []
        self._summary_message: Message | None = None
        self._removed_calls = RemovedCalls()

    def on_user_turn(self, item: Item) -> None:
        self.history.append(item)

    def on_input(self, item: Item) -> None:
        if item.kind == "system":
            self.system.append(item)
            return
        self.history.append(item)
        self._removed_calls.arrived(item)
        if item.kind == "tool_result":
            self.result_step.append((item.id, self.steps))
            if not self.output_steps or self.output_steps[-1] != self.steps:
                self.output_steps.append(self.steps)

    def on_response(self, items: Sequence[Item], usage: Usage | None, needs_follow_up: bool) -> None:
        self.history.extend(items)
        self.steps += 1
        self.steps_since_summary += 1

    def body(self, items: Sequence[Item]) -> list[Message]:
        """Items as sent: masked outputs as the placeholder."""
        replacements = {
            i.id: self.options.placeholder.format(lines=observation_lines(i.text)) for i in items if i.id in self.masked
        }
        return self.history.render(items, replacements)

    def messages(self, unmasked_from: int | None = None) -> LogView:
        """The system items, the summary and the history with masked outputs as the placeholder.

        Messages before the first tool result not yet masked (`result_step[unmasked_from]`, default
        the next to mask) never change again until a summary, and only the last message can fold: they
        move to the append-only log the returned view shares with the earlier requests."""
        if self.summary is not None and (self._summary_message is None or self._summary_message.content is not self.summary):
            self._summary_message = Message("user", self.summary)
        head = self._summary_message if self.summary is not None else None
        key = (self.history.items, len(self.system), head)
        if key[0] is not self._rendering[0] or key[1:] != self._rendering[1:] or self._rendered > len(self.history.items):
            self._rendering, self._rendered, self._position, self._log = key, 0, {}, []
            self._out = [*self.history.render(self.system), *([head] if head is not None else [])]
        out = self._out
        for item in self.history.items[self._rendered:]:
            message = self.history.message(item)
            if item.id in self.masked:
                message = self._placeholder(item)
            if out and message.role == "assistant" and out[-1].role == "assistant" and message.tool_calls:
                out[-1] = merge_assistant([out[-1], message])[0]
                continue
            if item.kind == "tool_result":
                self._position.setdefault(item.id, []).append((len(out), item))
            out.append(message)
        self._rendered = len(self.history.items)
        # the first result not masked yet that is still in the history (a summary may have taken the oldest)
        first = self._masked_upto if unmasked_from is None else unmasked_from
        while first < len(self.result_step) and self.result_step[first][0] not in self._position:
            first += 1
        settled = len(out) - 1
        if first < len(self.result_step):
            settled = min(settled, self._position[self.result_step[first][0]][0][0])
        log = self._log
        log += out[len(log): settled]
        return LogView(log, len(log), tuple(out[len(log):]))

    def _placeholder(self, item: Item) -> Message:
        return self.history.edited(item, self.options.placeholder.format(lines=observation_lines(item.text)), None)

    def _mask(self, ids: Sequence[str]) -> None:
        """Mask results now; those not rendered yet get their placeholder when they are."""
        self.masked.update(ids)
        for rid in ids:
            for position, item in self._position.get(rid, ()):
                self._out[position] = self._placeholder(item)

    def request(self) -> Request:
        o = self.options
        self._removed_calls.drop_late(self.history, self.messages, self.ctx)  # results of calls dropped before
        cutoff = masking_cutoff(self.output_steps, o.keep_last)
        start = self._masked_upto
        while self._masked_upto < len(self.result_step) and self.result_step[self._masked_upto][1] < cutoff:
            self._masked_upto += 1
        newly = [rid for rid, _ in self.result_step[start:self._masked_upto] if rid not in self.masked]
        if newly:
            before = self.messages(unmasked_from=start)
            self._mask(newly)
            self.ctx.record_compaction(trigger="masking", before=before, after=self.messages(), summary=None,
                                       details={"masked": newly}, probe=False)
        messages = self.messages()
        tokens = self.ctx.count_tokens(messages)
        limit = int(self.ctx.profile.context_window * o.trigger_ratio)
        # The token rule is this project's (HybridOptions; evaluation.md §2 gives only the step count) and
        # strict, "crosses `trigger_ratio` of the window": `tokens > limit`. The threshold reported is the
        # smallest count that fires it (`Request.threshold`): `limit + 1`.
        threshold = limit + 1
        if tokens > limit or self.steps_since_summary >= o.summarize_steps + o.keep_last:
            if self._summarize(messages, tokens, threshold, "threshold" if tokens > limit else "steps"):
                messages = self.messages()
                tokens = self.ctx.count_tokens(messages)  # the count of the context sent, as `truncate` reports
        return Request(messages, estimate_tokens=tokens, threshold=threshold)

    def _summarize(self, before: Sequence[Message], tokens: int, threshold: int, trigger: str) -> bool:
        items = self.history.items
        cut = keep_last_steps_start(items, self.options.keep_last)
        head = items[:cut]
        if not head:
            return False
        events = [
            (n, "\n".join([m.content, *(f"{c.name}({c.arguments})" for c in m.tool_calls)]).strip())
            for n, m in enumerate(self.body(head))
        ]
        prompt = self.ctx.render_prompt("openhands_summary.j2", v0=True, events=events, previous=self.summary or "No events summarized")
        try:
            result = self.ctx.summarize(Request([Message("user", prompt)], kind="summary"))
        except SummaryOverflow:
            return False
        self.summary = result.text
        self._removed_calls.removed(head)
        self.history.items = list(items[cut:])
        # the newest M steps it kept are not summarized yet: the next summary comes N steps later and covers N (the
        # paper's `SummarizeEveryNTurns` leaves them unprocessed), not N + M
        self.steps_since_summary = self.options.keep_last
        self.ctx.record_compaction(trigger=trigger, before=before, after=self.messages(), summary=result.text,
                                   summarized_ids=[i.id for i in head], estimate_tokens=tokens, threshold=threshold,
                                   details={"kept_steps": self.options.keep_last})
        return True
