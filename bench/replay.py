"""The replay engine: walks a transcript through one strategy and records what happened.

For each real user message the strategy's `on_user_turn` runs, for every other input item
`on_input`, and for each recorded model response the strategy's `request()` goes to the simulated
provider; overflows go to `on_overflow` with bounded retries; then `on_response` gets the
recorded output (open loop: recorded outputs are replayed as recorded). A response recorded before any
message the model could have answered (a user message or a tool result: a subagent's file whose prompt was not
recorded, a log that starts mid-session) is history, not a request: its context was not recorded, and a request of
no message (or of the system prompt alone) is none an API serves, so `on_response` gets it without one
(`ReplayResult.unrequested_steps`). Probe points are the
first request after one or more compactions (those recorded with `probe=True`) and the final
context.

The engine owns the bookkeeping (records: `compaction_bench.records`):
- every request (turn, summary and final) with its messages, true tokens, the strategy's
  estimate, overflow and the provider's cached, written and re-billed tokens; a summary the strategy
  sends as an iteration of the request it is building (`summarize(in_request=True)`: server-side
  compaction is one call) that does not fit is no request of its own: that request fails with its
  error (`meta["failed_in"]`), one failed request as on the real API;
- every compaction with the context before and after, the summary, the ids summarized, kept
  verbatim and dropped without either, and its summarizer calls, each linked to the summary
  request it answered (`CompactionRecord.summary_request_indices`, `RequestRecord.llm_call`);
- between consecutive turn requests (and the final context), item ids that left the context
  without a recorded compaction that removed them: an `unreported` compaction whose silent loss
  is exactly those ids, or a `ReplayError` with `strict=True`;
- a summary request goes to the summarizer's model: when that is the session's model (or the offline
  summarizer, which stands in for it, as upstream agents summarize with the session's model) it
  shares the session's cache; a summarizer of another model, or the offline one standing in for the
  model the strategy summarizes with (`Strategy.summary_model`: Aider's weak model), has a provider and cache of its own
  (`summary_profile`; providers cache per model, so its requests neither read nor write the
  session's entries and leave the turns' cache numbers as they would be without them), counted and
  cached by that model's profile. A summary the provider accepted but the model itself refused as
  too long (`ContextOverflow`) is recorded as an overflow that read, wrote and billed nothing, and
  its cache entry is withdrawn (`SimulatedProvider.withdraw`): no later request reads from it;
- with `usage="recorded"`, the transcript's usage is fed to the strategy only while the replayed
  context holds the same transcript items as the recording had at that step (`recorded_contexts`);
  from the first difference on, simulated usage is fed (`usage="recorded-always"` feeds it at
  every step regardless). `RequestRecord.usage_source` says which.

Per request the engine's own work is proportional to what changed: the provider counts only the
messages after the prefix a request shares with a kept entry (`compaction_bench.provider`), a
request that extends the previous turn request is known to have lost nothing without looking at
its items (as is one that extends what a recorded compaction rewrote from a context extending it, but
for messages whose ids it still holds: what it lost, that compaction removed), and compaction records
hold references to the strategy's messages, not copies. A compaction whose context after it is a new
one, not a view of the old one's log, and that starts from what the previous such compaction left
(Codex's remote compaction before every turn keeps runs of the retained messages in a new history)
is read against what the engine carried from that one (`_Carried`): the runs it kept are found by
identity and only the messages around them are read.
"""

from __future__ import annotations

import collections
import copy
import itertools
from collections.abc import Iterable, KeysView, Mapping, Sequence
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any, NoReturn

from compaction_bench.caching import CacheOutcome
from compaction_bench.collector import spaced_collections
from compaction_bench.llm import DEFAULT_SUMMARIZER, ContextOverflow, LLMClient, LLMResult, is_offline
from compaction_bench.log_view import LogView, as_messages, common_prefix_length, first_difference, identical_run, iter_from
from compaction_bench.profiles import DEFAULT_PROFILE, ModelProfile, get_profile, strips_earlier_thinking
from compaction_bench.provider import AGENT_REFUSAL, Outcome, ProviderError, SimulatedProvider, overflow_error
from compaction_bench.records import UNREPORTED, CompactionRecord, KeptIds, ProbePoint, ReplayResult, RequestRecord
from compaction_bench.registry import strategy_class
from compaction_bench.request import Message, Request, message_from_item, message_item_ids
from compaction_bench.strategy import Strategy, SummaryOverflow
from compaction_bench.templates import PromptSet
from compaction_bench.tokens import HiddenTokens
from compaction_bench.transcript import INPUT_KINDS, Step, Transcript, Usage

#: How often one step may be re-sent after a strategy recovered from an overflow.
MAX_OVERFLOW_RETRIES = 3
#: The input items a model answers (a system prompt alone asks nothing): a response recorded before the first of
#: them is history, no request (the module docstring).
ANSWERABLE_KINDS = INPUT_KINDS - {"system"}
#: `simulated`: the provider's counts; `recorded`: the transcript's usage while the replayed context is
#: the recording's, then simulated; `recorded-always`: the transcript's usage at every step that has
#: some, even after the contexts differ (trigger-fidelity studies, hand-built sessions that script a trigger).
USAGE_MODES = ("simulated", "recorded", "recorded-always")


class ReplayError(RuntimeError):
    """A strategy that broke the protocol (the message names strategy and step)."""


#: Recorded-compaction marker fields that name the first item the recording kept verbatim (Pi, OpenCode).
KEPT_START_FIELDS = ("firstKeptEntryId", "tail_start_id")


def recorded_contexts(transcript: Transcript) -> dict[int, frozenset[str] | None]:
    """Per step index: the transcript items the recording's own request for that step held.

    That is every model-input item before the step, except after a recorded compaction: there the
    context is the items from the first one the recording kept (a marker field of
    `KEPT_START_FIELDS`) on, plus later items; a recorded compaction that does not say what it kept,
    or a move to another branch of a session tree, leaves the recorded context unknown (None) from
    then on. The recorded summary itself is a marker, not an item, so it has no id to compare.
    """
    out: dict[int, frozenset[str] | None] = {}
    ids: list[str] = []
    known = True
    steps = {s.items[0].response: s.index for s in transcript.steps()}
    for item in transcript.items:
        if item.is_model_output and item.response is not None and steps.get(item.response) is not None:
            index = steps.pop(item.response)
            out[index] = frozenset(ids) if known else None
        if item.kind == "marker":
            event = item.meta.get("event")
            if event == "compaction":
                kept = next((item.meta.get(f) for f in KEPT_START_FIELDS if item.meta.get(f)), None)
                if kept in ids:
                    ids = ids[ids.index(kept) :]
                elif "preTokens" in item.meta:
                    # Claude Code's compact_boundary keeps nothing verbatim (docs/specs/claude-code.md §4).
                    ids = []
                else:
                    known = False
            elif event == "branch":
                known = False
            continue
        ids.append(item.id)
    return out


def removed_ids(before: Sequence[Message], after: Sequence[Message]) -> dict[str, None]:
    """The item ids of `before` that no message of `after` carries, in order, each once.

    Only the part between the two contexts' common prefix and common suffix is read, and the rest
    of `after` only when that part lost an id: a rewrite of a few messages (masking, clearing)
    costs what it changed, not the context's length."""
    shared = first_difference(before, after)
    # the parts after the common prefix, as tuples (a `LogView`'s slice is one), compared from their ends in C
    rest_before, rest_after = tuple(before[shared:]), tuple(after[shared:])
    suffix = common_prefix_length(rest_before[::-1], rest_after[::-1])
    end_before, end_after = len(rest_before) - suffix, len(rest_after) - suffix
    still = set(message_item_ids(rest_after[:end_after]))
    candidates = list(itertools.filterfalse(still.__contains__, message_item_ids(rest_before[:end_before])))
    if not candidates:
        return {}
    outside = set(message_item_ids(after[:shared]))
    outside.update(message_item_ids(rest_after[end_after:]))
    return dict.fromkeys(itertools.filterfalse(outside.__contains__, candidates))


def _surely_carries(messages: Sequence[Message], other: Sequence[Message]) -> bool:
    """True when `messages` carries every item id `other` carries, seen from the parts after their common
    leading messages alone (a request that extends a compaction's context after it, but for the message it
    grew, say): the rest of `other` has no id the rest of `messages` does not carry. False says nothing."""
    if messages is other:
        return True
    shared = first_difference(other, messages)
    return set(message_item_ids(other[shared:])).issubset(message_item_ids(messages[shared:]))


#: How many messages a compaction's context after it holds at least for the engine to carry what it knows of it
#: to the next compaction (`_Carried`): a shorter one costs little to read again.
CARRIED_FROM = 64
#: How many messages at the end of the last compaction's context after it may have changed (or gone) in the
#: next one's context before it for `_Carried` to read that compaction (a prompt's last message grows, say).
CARRIED_CHANGES = 16


class _Carried:
    """What the engine knows of the last compaction's context after it, for the next compaction's `removed_ids`.

    A compaction that follows another (Codex's remote compaction before every turn, say) usually
    starts from that one's context plus a few messages, and keeps runs of it (the retained user
    messages) as the same message objects. `messages` is that context; `serial` gives each of its
    message objects (by identity) its position plus `first`, and `counts` how many of its messages
    carry each item id. When `before` starts with (equal messages to) `messages`, the next compaction's
    context after it is read as runs of those message objects, found by identity (looked up in
    `serial`, checked in C with `is`), and messages outside any run; only the latter and the messages
    of `before` outside the runs are read, and `counts` becomes the new context's by adding and
    removing theirs. The ids `before` lost are the ids of its messages outside the runs that no
    message of the new context carries: those of the runs are in it, and an id never in a run's
    message has its first place in `before` outside them."""

    __slots__ = ("counts", "first", "messages", "serial")

    def __init__(self, messages: Sequence[Message]) -> None:
        self.messages = messages
        self.serial = dict(zip(map(id, messages), itertools.count()))
        self.first = 0
        self.counts = collections.Counter(message_item_ids(messages))

    @classmethod
    def of(cls, messages: Sequence[Message]) -> _Carried | None:
        """The state of a compaction's context after it (None when a message object occurs twice in it)."""
        carried = cls(messages)
        return carried if len(carried.serial) == len(messages) else None

    def removed(self, before: Sequence[Message], after: Sequence[Message]) -> tuple[dict[str, None], bool] | None:
        """`removed_ids(before, after)` and whether this state now describes `after` (else it is to be built
        anew: a message object occurs twice in `after`); None, this state unchanged, when `before` does not
        start with (nearly all of) `messages` or two runs overlap (a message kept twice)."""
        carried = self.messages
        n = first_difference(carried, before)  # `before` starts with carried[:n]; the rest changed (a grown message, say)
        if len(carried) - n > CARRIED_CHANGES:
            return None
        serial, first = self.serial, self.first
        runs: list[tuple[int, int, int]] = []  # (position in `messages`, length, position in `after`)
        outside: list[int] = []  # positions in after of its messages outside the runs
        at, total = 0, len(after)
        while at < total:
            where = serial.get(id(after[at]), first + n) - first
            length = _identical_run(after, at, carried, where, n) if where < n else 0
            if length:
                runs.append((where, length, at))
                at += length
            else:
                outside.append(at)
                at += 1
        runs.sort()
        gone: list[Message] = []  # carried messages outside the runs, in order (equal to those of `before` there)
        end = 0
        for where, length, _ in runs:
            if where < end:
                return None
            gone.extend(carried[end:where])
            end = where + length
        gone.extend(carried[end:n])
        left = [*gone, *carried[n:]]  # the carried messages `after` does not hold as they were
        counts = self.counts
        counts.subtract(message_item_ids(left))
        counts.update(message_item_ids(after[at] for at in outside))
        candidates = itertools.chain(message_item_ids(gone), message_item_ids(before[n:]))
        removed = dict.fromkeys(i for i in candidates if not counts[i])
        for i in message_item_ids(left):
            if not counts.get(i, 1):
                del counts[i]
        for message in left:
            serial.pop(id(message), None)
        self.messages = after
        if not runs:
            return removed, False
        # the longest run's messages keep their serials; every other message of `after` is numbered from it
        where, length, at = max(runs, key=lambda run: run[1])
        self.first = first = serial[id(after[at])] - at
        for n_, message in itertools.chain(enumerate(after[:at]), zip(itertools.count(at + length), after[at + length :])):
            serial[id(message)] = first + n_
        return removed, len(serial) == total


#: How many of the last compaction's summarized ids may be gone, and how many new ones added, for `_SummarizedIds`
#: to derive the next compaction's from them instead of reading them all.
SUMMARIZED_CHANGES = 256


class _SummarizedIds:
    """The last compaction's summarized ids, each once in order and as a set, for the next compaction's.

    A compaction that summarizes the last one's ids but a few of the first and a few after them, then a
    few new ones (Codex's remote compaction before every turn, whose summary covers the retained
    messages again), shares one run of the very id strings with the last one: that run is found by
    the identity of its first id and compared in C by slices (equal ids: the same string objects pass
    without their text being read), its ids are distinct as the last ones were, and the set is
    the last one's less the ids outside the run, plus the new ones (a new one already there is an id
    said twice: then everything is read again)."""

    __slots__ = ("ids", "once")

    def __init__(self) -> None:
        self.ids: tuple[str, ...] = ()
        self.once: set[str] = set()

    def distinct(self, ids: Sequence[str]) -> tuple[tuple[str, ...], set[str]]:
        """`ids` each once, in order, and as a set (which the caller does not change)."""
        ids = tuple(ids)
        last = self.ids
        start = next((n for n in range(min(SUMMARIZED_CHANGES, len(last))) if ids and last[n] is ids[0]), -1)
        if start >= 0:
            length = common_prefix_length(last[start:], ids)
            gone, new = len(last) - length, ids[length:]
            if gone + len(new) <= SUMMARIZED_CHANGES:
                once = self.once
                once.difference_update(last[:start])
                once.difference_update(last[start + length :])
                fresh = set(new)
                if len(fresh) == len(new) and once.isdisjoint(fresh):
                    once |= fresh
                    self.ids = ids
                    return ids, once
        once = set(ids)
        if len(once) < len(ids):
            ids = tuple(dict.fromkeys(ids))
        self.ids, self.once = ids, once
        return ids, once


def _identical_run(after: Sequence[Message], at: int, before: Sequence[Message], where: int, end: int) -> int:
    """How many messages from `after[at]` on are the very objects from `before[where]` on, up to `before[end]`:
    compared by identity in C, up to the first that differs, without copying either side."""
    return identical_run(iter_from(after, at), iter_from(before, where), min(end - where, len(after) - at))


def summary_profile(summarizer: LLMClient, session: ModelProfile, agent_model: str | None = None) -> ModelProfile | None:
    """The profile of the model summary requests go to when it is not the session's, None when it is.

    The offline summarizers stand in for the model the agent summarizes with: the session's, or `agent_model`
    where the strategy names another (`Strategy.summary_model`: Aider's weak model), whose profile is litellm's.
    A litellm model is the session's when its
    map entry names the same model of the same provider (`gpt-5` served by OpenAI is the session `64k`'s
    model, by Azure another deployment with another cache); otherwise it is another model, with its own
    tokenizer, cache rules and window from litellm's map, or, for a model the map lacks (a local server's),
    the session's profile standing in for them (its cache is still its own)."""
    if is_offline(summarizer.model):
        if agent_model is None:
            return None
        own: ModelProfile | None = get_profile(agent_model)
    else:
        own = summarizer.limits
    if own is not None and (own.provider, own.model) == (session.provider, session.model):
        return None
    return own if own is not None else session


class _Engine:
    """The `StrategyContext` of one cell, and the loop that drives it."""

    def __init__(
        self,
        transcript: Transcript,
        strategy_cls: type[Strategy],
        profile: ModelProfile,
        summarizer: LLMClient,
        options: Any,
        usage_mode: str,
        prompts: PromptSet,
        strict: bool = False,
    ) -> None:
        self.transcript = transcript
        self.profile = profile
        self.session: Mapping[str, Any] = {**transcript.source, "id": transcript.id}
        self._keeps_thinking = strategy_cls.keeps_thinking
        # where the agent marks Anthropic cache breakpoints, in its turn requests and its summary requests alike
        self._cache_marks = strategy_cls.cache_marks(options)
        self.provider = SimulatedProvider(
            profile, hidden=HiddenTokens.of(transcript), strip_thinking=self._strips_thinking(profile), placement=self._cache_marks
        )
        self.summarizer = summarizer
        # The provider summary requests go to: the session's, or, for a summarizer of another model, that model's
        # own (made at the first summary; hidden reasoning is the session model's and is not sent to another model).
        self._summary_model = summary_profile(summarizer, profile, strategy_cls.summary_model(options, profile))
        self._summary_provider: SimulatedProvider | None = None if self._summary_model is not None else self.provider
        self.usage_mode = usage_mode
        self.prompts = prompts
        self.strict = strict
        self.step = 0
        self.turn: int | None = None
        self.timestamp: str | None = None
        # Summarizer calls not yet claimed by a compaction: (summary request index, call).
        self._pending_calls: list[tuple[int, LLMResult]] = []
        self._awaiting_point: list[CompactionRecord] = []
        # The previous turn request, and how many compactions were recorded before it.
        self._previous_context: RequestRecord | None = None
        self._compactions_seen = 0
        # Per reported compaction not yet checked against a turn request: the item ids it removed.
        self._removed: dict[int, KeysView[str]] = {}
        # The last reported compaction's context after it, for the next one's `removed_ids`.
        self._carried: _Carried | None = None
        # The last reported compaction's summarized ids, for the next one's.
        self._summarized = _SummarizedIds()
        # The message carrying an emulated server's instructions to the summarizer, per text (`_instructions_message`).
        self._instruction_messages: dict[str, Message] = {}
        # Whether the strategy's `request()` runs, and the failure of the request it returns: a summary it sent as an
        # iteration of it that did not fit (`summarize(in_request=True)`), or its own refusal (`refuse_request`):
        # (error, prefix tokens, where it failed), which that request fails with.
        self._in_request = False
        self._request_failure: tuple[ProviderError, int, str] | None = None
        # With recorded usage: the recording's context per step, and whether the replay still matches it.
        self._recorded = recorded_contexts(transcript) if usage_mode == "recorded" else {}
        self._model_input = {i.id for i in transcript.items if i.kind != "marker"}
        self._matches_recording = usage_mode in ("recorded", "recorded-always")
        self._outputs: dict[int, int] = {}  # each step's output tokens, counted when the replay starts (`_count_first`)
        self.result = ReplayResult(transcript, strategy_cls.name, profile, options, usage_mode)
        self.result.drops_thinking = self._strips_thinking(profile)
        self.result.summary_profile = self._summary_model
        self.strategy = strategy_cls(self, options)

    def _strips_thinking(self, profile: ModelProfile) -> bool:
        """Whether requests to `profile`'s model lose earlier turns' thinking: the model drops it by default and the
        strategy does not ask to keep it (`Strategy.keeps_thinking`)."""
        return strips_earlier_thinking(profile) and not self._keeps_thinking(profile)

    # ------------------------------------------------------------ StrategyContext
    def count_tokens(self, messages: Sequence[Message]) -> int:
        return self.provider.count(messages)

    def render_prompt(self, template: str, **variables: Any) -> str:
        return self.prompts.render(template, **variables)

    def refuse_request(self, message: str) -> None:
        if not self._in_request:
            raise ReplayError(f"strategy {self.result.strategy!r} refused a request outside request() at step {self.step}")
        if self._request_failure is None:
            self._request_failure = (ProviderError(AGENT_REFUSAL, 0, "refused_by_agent", message), 0, AGENT_REFUSAL)

    def summarize(
        self, request: Request, *, purpose: str = "summary", instructions: str | None = None, in_request: bool = False
    ) -> LLMResult:
        if in_request and not self._in_request:
            raise ReplayError(f"strategy {self.result.strategy!r} sent a summary in_request outside request() at step {self.step}")
        request = request if request.kind == "summary" else replace(request, kind="summary")
        provider = self._summary_provider
        if provider is None:  # a summarizer of another model: its own cache (`summary_profile`)
            assert self._summary_model is not None
            model = self._summary_model
            provider = self._summary_provider = SimulatedProvider(model, strip_thinking=self._strips_thinking(model), placement=self._cache_marks)
        # `instructions`: what an emulated server applies on its side (not part of the counted request).
        extra = provider.counter.count(instructions) if instructions else 0
        own = self.summarizer.limits
        if own is not None:  # a summarizer model of its own: a request beyond its window reaches no model, cached nothing
            tokens = provider.count(request.messages) + extra
            reserved = request.max_output_tokens or own.max_output
            if own.overflows(tokens, reserved):
                error = overflow_error(own, tokens, reserved)
                if in_request:
                    self._fail_request(error, tokens, 0, purpose)
                self._record_request(request, Outcome(tokens - extra, True, error, CacheOutcome(0, 0, 0), Usage()), attempt=0)
                raise SummaryOverflow(error, tokens)
        outcome = provider.send(request, timestamp=self.timestamp)
        if outcome.overflow and in_request:
            assert outcome.error is not None
            self._fail_request(outcome.error, outcome.true_tokens, outcome.cache.prefix_tokens, purpose)
        record = self._record_request(request, outcome, attempt=0)
        if outcome.overflow:
            assert outcome.error is not None
            raise SummaryOverflow(outcome.error, outcome.true_tokens)
        sent: Sequence[Message] = request.messages
        if instructions:
            instruction = self._instructions_message(instructions)
            sent = sent.followed_by(instruction) if isinstance(sent, LogView) else (*sent, instruction)
        tokens = outcome.true_tokens + extra
        try:
            result = self.summarizer.complete(sent, max_tokens=request.max_output_tokens, purpose=purpose)
        except ContextOverflow as exc:  # refused by the model's own count (its tokenizer, its window): an overflow all the same
            # The model never processed the prompt: it cached nothing (its entry is taken back) and bills nothing.
            provider.withdraw()
            if in_request:
                self.result.requests.pop()  # not a request of its own: the one it is an iteration of fails
                self._fail_request(exc.error, tokens, outcome.cache.prefix_tokens, purpose)
            record.overflow, record.error = True, exc.error.to_dict()
            record.cached_tokens = record.cache_write_tokens = record.rebilled_tokens = 0
            record.usage = None
            raise SummaryOverflow(exc.error, tokens) from None
        record.llm_call = result
        record.usage_source = "simulated"
        self._pending_calls.append((record.index, result))
        return result

    def _instructions_message(self, instructions: str) -> Message:
        """The user message that carries an emulated server's `instructions` to the summarizer: one object
        per text, so that the offline models read it once (`llm._WireRuns` knows runs by their messages)."""
        message = self._instruction_messages.get(instructions)
        if message is None:
            message = self._instruction_messages[instructions] = Message(role="user", content=instructions)
        return message

    def _fail_request(self, error: ProviderError, tokens: int, prefix_tokens: int, purpose: str) -> NoReturn:
        """A summary sent `in_request` did not fit. It is an iteration of the request the running `request()`
        returns (server-side compaction: one call), so it is recorded as no request of its own; that request
        fails with its error instead (the first such error, should several iterations fail), and
        `SummaryOverflow` tells the strategy as for any summary."""
        if self._request_failure is None:
            self._request_failure = (error, prefix_tokens, purpose)
        raise SummaryOverflow(error, tokens)

    def record_compaction(
        self,
        *,
        trigger: str,
        before: Sequence[Message],
        after: Sequence[Message],
        summary: str | None,
        summarized_ids: Sequence[str] = (),
        estimate_tokens: int | None = None,
        threshold: int | None = None,
        details: Mapping[str, Any] | None = None,
        probe: bool = True,
    ) -> None:
        before, after = as_messages(before), as_messages(after)
        summarized, summarized_once = self._summarized.distinct(summarized_ids)
        # a new context, not a view of the old one's log (Codex's remote compaction keeps runs of the old one's
        # messages in a new history): read from the last such compaction's context after it (`_Carried`) when this
        # one starts from it, else from both contexts (a view of the same log costs what it changed there)
        fresh = not (isinstance(before, LogView) and isinstance(after, LogView) and before.log is after.log)
        fresh = fresh and len(after) >= CARRIED_FROM
        carried = self._carried.removed(before, after) if fresh and self._carried is not None else None
        if carried is None:
            removed = removed_ids(before, after)
            self._carried = _Carried.of(after) if fresh else None
        else:
            removed, describes_after = carried
            self._carried = self._carried if describes_after else _Carried.of(after)
        self._removed[len(self.result.compactions)] = removed.keys()
        dropped = tuple(i for i in removed if i not in summarized_once)
        kept = KeptIds(before, removed.keys())
        self._add_compaction(
            trigger=trigger,
            before=before,
            after=after,
            summary=summary,
            summarized=summarized,
            kept=kept,
            dropped=dropped,
            estimate_tokens=estimate_tokens,
            threshold=threshold,
            details=dict(details or {}),
            probe=probe,
        )

    # ------------------------------------------------------------ recording
    def _add_compaction(
        self,
        *,
        trigger: str,
        before: Sequence[Message],
        after: Sequence[Message],
        summary: str | None,
        summarized: tuple[str, ...],
        kept: Sequence[str],
        dropped: tuple[str, ...],
        estimate_tokens: int | None,
        threshold: int | None,
        details: dict[str, Any],
        probe: bool,
    ) -> CompactionRecord:
        record = CompactionRecord(
            index=len(self.result.compactions),
            step=self.step,
            turn=self.turn,
            trigger=trigger,
            tokens_before=self.provider.count(before),
            tokens_after=self.provider.count(after),
            estimate_tokens=estimate_tokens,
            threshold=threshold,
            summary=summary,
            summarized_ids=summarized,
            kept_ids=kept,
            dropped_ids=dropped,
            llm_calls=tuple(call for _, call in self._pending_calls),
            details=details,
            before=before,
            after=after,
            probed=probe,
            summary_request_indices=tuple(index for index, _ in self._pending_calls),
        )
        self._pending_calls = []
        self.result.compactions.append(record)
        self._awaiting_point.append(record)
        return record

    def _check_unreported(self, request: Request) -> None:
        """Item ids that left the context since the previous turn request without a recorded compaction removing them."""
        previous = self._previous_context
        if previous is None:
            return
        for compaction in self.result.compactions[self._compactions_seen :]:
            extends = first_difference(previous.messages, compaction.before) == len(previous.messages)
            if extends and _surely_carries(request.messages, compaction.after):
                # a compaction since then rewrote a context that extends the previous request into one whose ids
                # this one holds: all the previous request held and this one does not, that compaction removed (and explains)
                return
        if first_difference(previous.messages, request.messages) == len(previous.messages):
            return  # the request extends the previous one: nothing left
        removed = removed_ids(previous.messages, request.messages)
        if not removed:
            return
        explained: set[str] = set()
        for compaction in self.result.compactions[self._compactions_seen :]:
            explained.update(self._removed.get(compaction.index, ()))
        lost = tuple(i for i in removed if i not in explained)
        if not lost:
            return
        if self.strict:
            shown = ", ".join(lost[:5]) + (f" and {len(lost) - 5} more" if len(lost) > 5 else "")
            raise ReplayError(
                f"strategy {self.result.strategy!r} removed {len(lost)} item(s) from the context before step {self.step} "
                f"without recording a compaction: {shown}"
            )
        kept = KeptIds(previous.messages, removed.keys())
        self._add_compaction(
            trigger=UNREPORTED,
            before=previous.messages,
            after=request.messages,
            summary=None,
            summarized=(),
            kept=kept,
            dropped=lost,
            estimate_tokens=None,
            threshold=None,
            details={"found_by": "engine", "previous_request": previous.index},
            probe=True,
        )

    def _record_request(self, request: Request, outcome: Outcome, attempt: int, output_tokens: int = 0) -> RequestRecord:
        if request.kind in ("turn", "final"):
            self._check_unreported(request)
        record = RequestRecord(
            index=len(self.result.requests),
            step=self.step,
            turn=self.turn,
            kind=request.kind,
            messages=request.messages,
            true_tokens=outcome.true_tokens,
            estimate_tokens=request.estimate_tokens,
            threshold=request.threshold,
            overflow=outcome.overflow,
            error=outcome.error.to_dict() if outcome.error else None,
            prefix_tokens=outcome.cache.prefix_tokens,
            cached_tokens=outcome.cache.cached_tokens,
            cache_write_tokens=outcome.cache.cache_write_tokens,
            output_tokens=0 if outcome.overflow else output_tokens,
            attempt=attempt,
            timestamp=self.timestamp,
            usage=None if outcome.overflow or request.kind == "final" else outcome.usage,
            meta=dict(request.meta),
            rebilled_tokens=outcome.cache.rebilled_tokens,
        )
        self.result.requests.append(record)
        if request.kind in ("turn", "final"):
            self._previous_context = record
            self._compactions_seen = len(self.result.compactions)
            self._removed.clear()  # only compactions after this request can explain what the next one lost
        return record

    def _mark_points(self, record: RequestRecord) -> None:
        """The first request after compactions is one probe point (for the newest probed compaction)."""
        for compaction in self._awaiting_point:
            compaction.next_request = record.index
        probed = [c for c in self._awaiting_point if c.probed]
        if probed:
            self.result.points.append(ProbePoint(self.step, record.index, "compaction", probed[-1].index))
        self._awaiting_point = []

    def _strategy_request(self, kind: str = "turn") -> Request:
        self._in_request, self._request_failure = True, None
        try:
            request = self.strategy.request()
        finally:
            self._in_request = False
        if not isinstance(request, Request):
            raise ReplayError(f"strategy {self.result.strategy!r} returned {type(request).__name__} from request() at step {self.step}")
        if kind != request.kind:
            request = replace(request, kind=kind)
        return request

    # ------------------------------------------------------------ the loop
    def _count_first(self, steps: Iterable[Step]) -> dict[int, int]:
        """Every step's output tokens (its reply's messages, as the provider counts them), by step index,
        counted before the replay starts, and, when the strategy sends them whole
        (`Strategy.sends_inputs_verbatim`), the text of every input item: every step is run and its output
        counted whatever the strategy does, and tiktoken counts these texts (the recording's replies, tool
        call arguments, user messages and tool results) faster in one run of calls than between the replay's
        other work (the caches hold its tables). The counter memoizes each text, so no count changes."""
        if self.strategy.sends_inputs_verbatim:
            count = self.provider.counter.count
            for item in self.transcript.items:
                if item.kind in INPUT_KINDS and item.text:
                    count(item.text)
        count_new = self.provider.count_new
        return {step.index: count_new([message_from_item(i) for i in step.items]) for step in steps}

    def _recorded_usage(self, step: Step, request: Request) -> Usage | None:
        """The step's recorded usage while the replayed context is the recording's, else None (simulate)."""
        if not self._matches_recording:
            return None
        if self.usage_mode == "recorded-always":
            return step.usage
        recorded = self._recorded.get(step.index)
        replayed = {i for m in request.messages for i in m.item_ids if i in self._model_input}
        if recorded is None or replayed != recorded:
            self._matches_recording = False
            return None
        return step.usage

    def _run_step(self, step: Step) -> None:
        self.step = step.index
        output_tokens = self._outputs.pop(step.index)
        usage: Usage | None = None
        attempt = 0
        while True:
            request = self._strategy_request()
            recorded = self._recorded_usage(step, request)
            failure = self._request_failure
            if failure is None:
                outcome = self.provider.send(
                    request, output_tokens=output_tokens, timestamp=self.timestamp, recorded_usage=recorded
                )
            else:
                outcome = self._failed_outcome(request, failure)
            record = self._record_request(request, outcome, attempt, output_tokens)
            if failure is not None:
                record.meta["failed_in"] = failure[2]
            if not outcome.overflow:
                record.usage_source = "recorded" if recorded is not None else "simulated"
            self._mark_points(record)
            if not outcome.overflow:
                usage = outcome.usage
                break
            attempt += 1
            assert outcome.error is not None
            if attempt > MAX_OVERFLOW_RETRIES or not self.strategy.on_overflow(outcome.error):
                break
        self.strategy.on_response(step.items, usage, step.needs_follow_up)

    def _history_step(self, step: Step) -> None:
        """A response recorded before anything it answers: the strategy holds it as history, no request is made."""
        self.step = step.index
        self._outputs.pop(step.index)
        self.result.unrequested_steps.append(step.index)
        self.strategy.on_response(step.items, None, step.needs_follow_up)

    def _failed_outcome(self, request: Request, failure: tuple[ProviderError, int, str]) -> Outcome:
        """The outcome of a request a summary iteration of which did not fit (`_fail_request`): the call fails
        with that iteration's error whether or not its messages alone would fit, reaching no model and no cache
        (nothing read, written or billed). Its true tokens are its messages' count; its prefix tokens what the
        failed iteration shared with the cache, up to that count."""
        error, prefix_tokens, _ = failure
        tokens = self.provider.count(request.messages)
        return Outcome(tokens, True, error, CacheOutcome(min(prefix_tokens, tokens), 0, 0), Usage())

    def run(self) -> ReplayResult:
        steps = {s.items[0].response: s for s in self.transcript.steps()}
        self._outputs = self._count_first(steps.values())
        done: set[int] = set()
        answerable = False  # a message the model could answer has come (the module docstring)
        for item in self.transcript.items:
            self.timestamp = item.timestamp or self.timestamp
            if item.turn is not None:
                self.turn = item.turn
            answerable = answerable or item.kind in ANSWERABLE_KINDS
            if item.is_model_output and item.response is not None:
                if item.response not in done:
                    done.add(item.response)
                    if answerable:
                        self._run_step(steps[item.response])
                    else:
                        self._history_step(steps[item.response])
            elif item.kind == "marker":
                self.strategy.on_marker(item)
            elif item.is_real_user:
                self.strategy.on_user_turn(item)
            else:
                self.strategy.on_input(item)
        self.step = len(steps)
        final = self._strategy_request(kind="final")
        # The final context is probed, not sent: no error (but the agent's refusal, which marks it `refused`), no cache
        # read, no usage.
        tokens = self.provider.count(final.messages)
        # Overflowed by the provider's own rule (the profile's; the strategy's reserved output counts where it does),
        # or not servable because a summary iteration of it did not fit (`_fail_request`) or the agent would not send it.
        failure = self._request_failure
        reserved = final.max_output_tokens or 0
        if self.profile.overflows(tokens, reserved):  # served all the same if the agent's call would retry it with less output
            lowered = self.strategy.retry_max_tokens(overflow_error(self.profile, tokens, reserved))
            reserved = lowered if lowered is not None else reserved
        overflow = self.profile.overflows(tokens, reserved) or failure is not None
        refusal = failure[0] if failure is not None and failure[2] == AGENT_REFUSAL else None
        unsent = Outcome(tokens, overflow, refusal, CacheOutcome(0, 0, 0), Usage())
        record = self._record_request(final, unsent, attempt=0)
        self._mark_points(record)
        self.result.points.append(ProbePoint(self.step, record.index, "final"))
        self.result.template_hashes = dict(self.prompts.hashes)
        return self.result


@cache
def _package_prompts() -> PromptSet:
    return PromptSet()


def _prompt_set(overrides: Mapping[str, str | Path] | None) -> PromptSet:
    """The templates of one replay, with its own record of the ones it renders (`PromptSet.hashes`).

    The package's templates without overrides are read and parsed once per process (parsing them
    was most of a short session's replay); each replay gets a copy with an empty record."""
    if overrides:
        return PromptSet(overrides)
    own = copy.copy(_package_prompts())
    own.hashes = {}
    return own


def replay(
    transcript: Transcript | str | Path,
    strategy: str | type[Strategy],
    *,
    profile: str | ModelProfile = DEFAULT_PROFILE,
    summarizer: str | LLMClient = DEFAULT_SUMMARIZER,
    options: Mapping[str, Any] | None = None,
    usage: str = "simulated",
    prompts: Mapping[str, str | Path] | PromptSet | None = None,
    strict: bool = False,
) -> ReplayResult:
    """Replay one transcript through one strategy.

    `strategy` is a registered id (`bench list strategies`), `path/file.py:Class`, or a class;
    `options` are the strategy's options (strings are converted to the declared types);
    `usage="recorded"` reports the transcript's own usage to the strategy while the replayed
    context is the recording's (see the module docstring), `usage="recorded-always"` at every step;
    `strict=True` raises `ReplayError` when
    the strategy removes items without recording a compaction, instead of recording an
    `unreported` compaction.
    """
    from compaction_bench.importing import load_transcript

    if not isinstance(transcript, Transcript):
        transcript = load_transcript(transcript)
    if usage not in USAGE_MODES:
        raise ValueError(f"unknown usage mode {usage!r}; expected one of {', '.join(USAGE_MODES)}")
    strategy_cls = strategy_class(strategy) if isinstance(strategy, str) else strategy
    parsed = strategy_cls.parse_options(options)
    client = summarizer if isinstance(summarizer, LLMClient) else LLMClient(summarizer)
    prompt_set = prompts if isinstance(prompts, PromptSet) else _prompt_set(prompts)
    engine = _Engine(transcript, strategy_cls, get_profile(profile), client, parsed, usage, prompt_set, strict=strict)
    with spaced_collections():  # the collector's pace while it runs (compaction_bench.collector)
        return engine.run()


__all__ = ["MAX_OVERFLOW_RETRIES", "USAGE_MODES", "CompactionRecord", "ProbePoint", "ReplayError", "ReplayResult", "RequestRecord", "replay"]
