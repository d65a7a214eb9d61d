"""Baseline strategies: `none`, `truncate` and `observation-masking`.

- `none` never compacts; its overflows are recorded, which shows where a session would fail.
- `truncate` drops the oldest pair-safe units (a turn's user message, each model step with its tool
  results) once the true token count passes `trigger_ratio` of the window, until it is under
  `target_ratio`, and then the rest of a turn whose user message went: the window opens at a real
  user message (when one is left), as a client that trims history does, since a turn without its
  request reads as an answer to nothing and the Gemini API refuses contents whose function call
  turn does not follow a user turn (`compaction_bench.metrics.integrity`, ``gemini``). It never
  separates a tool call from its result (`history.pair_safe_units`; a call that never got a result holds
  nothing together), counts each candidate as the whole context it would send, and records no
  truncation that drops nothing; a result that arrives only after its call was dropped (after a later
  step: the recording's own break) is removed too, recorded as an ``orphaned-results`` compaction.
- `observation-masking` (JetBrains, "The Complexity Trap", docs/specs/evaluation.md §2): the tool outputs
  of all but the newest `keep_last` (M = 10) agent steps that produced outputs become a one-line
  placeholder; reasoning and actions stay. SWE-agent's `LastNObservations` keeps its last n observations,
  one a step, so this keeps exactly M steps' outputs (`components.masking_cutoff`; parallel outputs of one
  step count once, a step without outputs not at all). Every
  masking rewrite is recorded (it moves the cache prefix) but, being continuous, is not a probe
  point: masking's retention is probed on the final context.

What the baselines send for a tool call that never got a result (an aborted or interrupted call):
the call as recorded, with no synthetic result. They model no agent, so they have no provider
layer that would repair it (Pi's pi-ai transform answers it with "No result provided", OpenCode
with an interrupted-tool error result, Codex with an "aborted" output); the integrity metrics
count such a request against them.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from compaction_bench.log_view import LogView
from compaction_bench.request import Message, Request, merge_assistant
from compaction_bench.strategies.components import masking_cutoff, observation_lines
from compaction_bench.strategies.history import ItemHistory, RemovedCalls, pair_safe_units
from compaction_bench.strategy import OptionError, Range, Strategy
from compaction_bench.transcript import Item, Usage


class _Recording(Strategy):
    """Shared plumbing of the baselines: every observed item goes into one history."""

    sends_inputs_verbatim = True

    def __init__(self, ctx, options=None) -> None:
        super().__init__(ctx, options)
        self.history = ItemHistory()

    def on_user_turn(self, item: Item) -> None:
        self.history.append(item)

    def on_input(self, item: Item) -> None:
        self.history.append(item)

    def on_response(self, items: Sequence[Item], usage: Usage | None, needs_follow_up: bool) -> None:
        self.history.extend(items)

    def messages(self) -> Sequence[Message]:
        """The whole history as a view of its append-only log (compaction_bench.log_view)."""
        return self.history.view()


class NoCompaction(_Recording):
    name = "none"
    description = "never compacts; overflows are recorded"
    spec = "baseline"

    def request(self) -> Request:
        return Request(self.messages())


@dataclass(frozen=True)
class TruncateOptions:
    #: Truncate once the true token count exceeds this fraction of the context window (strict `>`); a baseline rule.
    trigger_ratio: float = 0.9
    #: Once fired, drop the oldest pair-safe units until the true count is at most this fraction of the window
    #: (less than trigger_ratio).
    target_ratio: float = 0.6

    def __post_init__(self) -> None:
        """The rule between the two ratios (this module's docstring; a baseline, no upstream): a target at or
        above the trigger would leave every request past the trigger over it at once, so each would drop
        nothing (session 42's audit)."""
        if self.target_ratio >= self.trigger_ratio:
            raise OptionError(
                f"options truncate.target_ratio={self.target_ratio:g} and truncate.trigger_ratio={self.trigger_ratio:g}: "
                "target_ratio must be less than trigger_ratio (truncation drops down to the target once the count "
                "passes the trigger)"
            )


class Truncate(_Recording):
    name = "truncate"
    description = "drops the oldest turns and steps, opening at a user message, never splitting a tool call from its result"
    spec = "baseline"
    Options = TruncateOptions

    def __init__(self, ctx, options=None) -> None:
        super().__init__(ctx, options)
        self._removed_calls = RemovedCalls()

    def on_input(self, item: Item) -> None:
        super().on_input(item)
        self._removed_calls.arrived(item)

    def request(self) -> Request:
        self._removed_calls.drop_late(self.history, self.messages, self.ctx)  # results of calls dropped before
        messages = self.messages()
        window = self.ctx.profile.context_window
        limit = int(window * self.options.trigger_ratio)
        # The rule is strict ("once the true token count passes `trigger_ratio` of the window", this
        # module's docstring; a baseline, no upstream): it drops at `tokens > limit`, so the smallest count
        # that fires it, the threshold reported (`Request.threshold`), is `limit + 1`.
        threshold = limit + 1
        tokens = self.ctx.count_tokens(messages)
        if tokens > limit:
            keep = self._drop_until(int(window * self.options.target_ratio))
            # A truncation that can drop nothing (all but the newest unit and the pinned items are gone) is
            # no compaction: nothing is recorded and no probe point made (session 42's audit).
            if len(keep) < len(self.history.items):
                before = messages
                self._removed_calls.removed(self._left_out(keep))
                self.history.items = keep
                messages = self.messages()
                self.ctx.record_compaction(
                    trigger="threshold", before=before, after=messages, summary=None, estimate_tokens=tokens, threshold=threshold
                )
                tokens = self.ctx.count_tokens(messages)
        return Request(messages, estimate_tokens=tokens, threshold=threshold)

    def _drop_until(self, target: int) -> list[Item]:
        """The history without its oldest pair-safe units, the fewest that bring the count of the context
        sent to `target` tokens or under (else as many as may go: all but the newest unit), and without what is
        left of a turn whose user message was dropped: the kept items open at a real user message (`_kept_starts`).

        System items and the newest real user message always stay. Each candidate is counted as the
        whole context it would send, not as the history's count less each dropped unit's count alone:
        alone, a unit has no user message, so its encrypted reasoning bills there, while in the context
        reasoning before the last user message bills nothing (`compaction_bench.tokens.HiddenTokens`), and
        that difference stopped the truncation above its target (session 42's audit). Fewer units
        dropped never count less, so the fewest is found by bisection: a handful of counts of a context
        the window bounds (a count reads memoized per-message counts) whatever the session's length.
        """
        items = self.history.items
        last_user = next((i for i in reversed(items) if i.is_real_user), None)
        pinned = {i.id for i in items if i.kind == "system"} | ({last_user.id} if last_user else set())
        starts = _kept_starts(pair_safe_units(items), last_user)
        if not starts:
            return list(items)

        def kept(dropped_units: int) -> list[Item]:
            start = starts[dropped_units]
            return [i for i in items[:start] if i.id in pinned] + list(items[start:])

        def fits(dropped_units: int) -> bool:
            return self.ctx.count_tokens(self.history.render(kept(dropped_units))) <= target

        return kept(bisect.bisect_left(range(len(starts) - 1), True, key=fits))

    def _left_out(self, keep: Sequence[Item]) -> list[Item]:
        kept_ids = {i.id for i in keep}
        return [i for i in self.history.items if i.id not in kept_ids]


def _kept_starts(units: Sequence[Sequence[Item]], last_user: Item | None) -> list[int]:
    """For each number of leading units dropped (0 to all but the newest), the position in the items where the
    kept ones start (`_opening_unit`). Starts never decrease as more units go."""
    positions = list(itertools.accumulate((len(u) for u in units), initial=0))
    openings = [n for n, unit in enumerate(units) if unit and unit[0].is_real_user]
    inside = next((n for n, unit in enumerate(units) if any(i is last_user for i in unit[1:])), -1)
    return [positions[_opening_unit(dropped, openings, inside)] for dropped in range(len(units))]


def _opening_unit(dropped: int, openings: Sequence[int], inside: int) -> int:
    """The unit the kept items start at when the first `dropped` units go, so that they open at a real user message,
    as a client that trims history opens at a user turn (this module's docstring): the first unit left that opens with
    one (`openings`, ascending); when none does, the unit right after the dropped ones, where the newest user message
    (pinned) leads the kept items. But when that message sits inside a unit that is kept (`inside`: typed while a tool
    ran, `pair_safe_units` keeps the call, it and the result together), the kept items would open with that call: they
    start at the last unit before that opens with a real user message instead (fewer units go), if there is one."""
    later = bisect.bisect_left(openings, dropped)
    if later < len(openings):
        return openings[later]
    if dropped <= inside and later > 0:
        return openings[later - 1]
    return dropped


@dataclass(frozen=True)
class MaskingOptions:
    #: M: the outputs of the newest M agent steps that produced outputs stay, older ones are masked (SWE-agent's
    #: `LastNObservations` keeps exactly its n observations, one a step, and refuses n < 1; evaluation.md §2)
    keep_last: int = field(default=10, metadata={"range": Range(1, what="a number of agent steps")})
    #: Text that replaces a masked tool output; `{lines}` is the output's line count (evaluation.md §2), counted as
    #: SWE-agent counts it (`len(text.splitlines())`, components.observation_lines).
    placeholder: str = field(default="[Old tool output omitted: {lines} lines]", metadata={"format_fields": ("lines",)})


class ObservationMasking(_Recording):
    name = "observation-masking"
    description = "replaces tool outputs but those of the newest M agent steps with a placeholder"
    spec = "docs/specs/evaluation.md §2"
    Options = MaskingOptions

    def __init__(self, ctx, options=None) -> None:
        super().__init__(ctx, options)
        self._steps = 0
        self._masked: set[str] = set()
        self._result_step: dict[str, int] = {}
        #: each step at which tool outputs arrived, once, ascending (`masking_cutoff`)
        self._output_steps: list[int] = []
        #: tool results in the order they arrived (so in step order); those before `_next_unmasked` are masked
        self._results: list[str] = []
        self._next_unmasked = 0
        # The context rendered incrementally: history items rendered so far, their merged messages,
        # and where each tool result's message sits (tool messages never fold into a neighbour).
        self._rendered = 0
        self._out: list[Message] = []
        self._position: dict[str, tuple[int, Item]] = {}
        #: `_out`'s settled start, shared by the requests' views (compaction_bench.log_view)
        self._log: list[Message] = []

    def on_input(self, item: Item) -> None:
        super().on_input(item)
        if item.kind == "tool_result":
            if item.id not in self._result_step:
                self._results.append(item.id)
            self._result_step[item.id] = self._steps
            if not self._output_steps or self._output_steps[-1] != self._steps:
                self._output_steps.append(self._steps)

    def on_response(self, items: Sequence[Item], usage: Usage | None, needs_follow_up: bool) -> None:
        super().on_response(items, usage, needs_follow_up)
        self._steps += 1

    def _render(self, unmasked_from: int | None = None) -> LogView:
        """The current context: new history items are rendered and folded once (as `merge_assistant`
        would), masked results are swapped for their placeholder once; earlier messages are reused.

        Messages before the first tool result not yet masked (`_results[unmasked_from]`) never change
        again (only results are masked, in order, and only the last message can fold): they move to
        the append-only log the returned view shares with every earlier request."""
        out = self._out
        for item in self.history.items[self._rendered :]:
            message = self.history.message(item)
            if item.id in self._masked:
                message = self._placeholder(item, message)
            if out and message.role == "assistant" and out[-1].role == "assistant" and message.tool_calls:
                out[-1] = merge_assistant([out[-1], message])[0]
            else:
                if message.role == "tool":
                    self._position[item.id] = (len(out), item)
                out.append(message)
        self._rendered = len(self.history.items)
        first = self._next_unmasked if unmasked_from is None else unmasked_from
        settled = len(out) - 1
        if first < len(self._results) and self._results[first] in self._position:
            settled = min(settled, self._position[self._results[first]][0])
        log = self._log
        log.extend(out[len(log) : settled])
        return LogView(log, len(log), tuple(out[len(log) :]))

    def _placeholder(self, item: Item, message: Message) -> Message:
        lines = observation_lines(item.text)
        return replace(message, content=self.options.placeholder.format(lines=lines), attachments=())

    def _mask(self, ids: Sequence[str]) -> None:
        """Mask results now; those not rendered yet get their placeholder when they are."""
        self._masked.update(ids)
        for rid in ids:
            if rid in self._position:
                position, item = self._position[rid]
                self._out[position] = self._placeholder(item, self._out[position])

    def request(self) -> Request:
        cutoff = masking_cutoff(self._output_steps, self.options.keep_last)
        start = self._next_unmasked
        while self._next_unmasked < len(self._results) and self._result_step[self._results[self._next_unmasked]] < cutoff:
            self._next_unmasked += 1
        newly = self._results[start : self._next_unmasked]
        if newly:
            before = self._render(unmasked_from=start)
            self._mask(newly)
            after = self._render()
            self.ctx.record_compaction(
                trigger="masking", before=before, after=after, summary=None, details={"masked": newly}, probe=False
            )
            return Request(after)
        return Request(self._render())
