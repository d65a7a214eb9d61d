"""The replay engine: walks a transcript through one strategy and records what happened.

For each real user message the strategy's `on_user_turn` runs, for every other input item
`on_input`, and for each recorded model response the strategy's `request()` goes to the simulated
provider; overflows go to `on_overflow` with bounded retries; then `on_response` gets the
recorded output (open loop: recorded outputs are replayed as recorded). Probe points are the
first request after one or more compactions (those recorded with `probe=True`) and the final
context.

Records: every request (turn, summary and final) with its messages, true tokens, the strategy's
estimate, overflow and cache numbers; every compaction with the context before and after, the
summary, the ids summarized, kept verbatim and dropped without either, and its LLM calls.

Cost is linear in transcript size: token counts are memoized per message and prefix comparison
goes by message equality before tokens.
"""

from __future__ import annotations

import gc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compaction_bench.caching import CacheOutcome
from compaction_bench.llm import DEFAULT_SUMMARIZER, LLMClient
from compaction_bench.profiles import DEFAULT_PROFILE, ModelProfile, get_profile
from compaction_bench.provider import Outcome, SimulatedProvider
from compaction_bench.registry import strategy_class
from compaction_bench.request import Message, Request, message_from_item
from compaction_bench.strategy import LLMResult, Strategy, SummaryOverflow
from compaction_bench.templates import PromptSet
from compaction_bench.transcript import Step, Transcript, Usage

#: How often one step may be re-sent after a strategy recovered from an overflow.
MAX_OVERFLOW_RETRIES = 3
USAGE_MODES = ("simulated", "recorded")


class ReplayError(RuntimeError):
    """A strategy that broke the protocol (the message names strategy and step)."""


@dataclass
class RequestRecord:
    index: int
    step: int
    turn: int | None
    kind: str
    messages: tuple[Message, ...]
    true_tokens: int
    estimate_tokens: int | None
    threshold: int | None
    overflow: bool
    error: dict[str, Any] | None
    prefix_tokens: int
    cached_tokens: int
    cache_write_tokens: int
    output_tokens: int
    attempt: int = 0
    timestamp: str | None = None
    usage: Usage | None = None
    #: the strategy's own notes on this request (`Request.meta`)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def n_messages(self) -> int:
        return len(self.messages)

    def item_ids(self) -> list[str]:
        return [i for m in self.messages for i in m.item_ids]


@dataclass
class CompactionRecord:
    index: int
    step: int
    turn: int | None
    trigger: str
    tokens_before: int
    tokens_after: int
    estimate_tokens: int | None
    threshold: int | None
    summary: str | None
    summarized_ids: tuple[str, ...]
    kept_ids: tuple[str, ...]
    dropped_ids: tuple[str, ...]
    llm_calls: tuple[LLMResult, ...]
    details: dict[str, Any] = field(default_factory=dict)
    before: tuple[Message, ...] = ()
    after: tuple[Message, ...] = ()
    next_request: int | None = None
    probed: bool = True

    @property
    def llm_input_tokens(self) -> int:
        return sum(c.input_tokens for c in self.llm_calls)

    @property
    def llm_output_tokens(self) -> int:
        return sum(c.output_tokens for c in self.llm_calls)


@dataclass
class ProbePoint:
    """A context at which probes are asked: after a compaction, or the final context."""

    step: int
    request: int
    reason: str  # "compaction" | "final"
    compaction: int | None = None


@dataclass
class ReplayResult:
    transcript: Transcript
    strategy: str
    profile: ModelProfile
    options: Any
    usage_mode: str
    requests: list[RequestRecord] = field(default_factory=list)
    compactions: list[CompactionRecord] = field(default_factory=list)
    points: list[ProbePoint] = field(default_factory=list)
    template_hashes: dict[str, str] = field(default_factory=dict)

    @property
    def turn_requests(self) -> list[RequestRecord]:
        return [r for r in self.requests if r.kind == "turn"]

    @property
    def final(self) -> RequestRecord:
        return next(r for r in reversed(self.requests) if r.kind == "final")

    @property
    def overflows(self) -> int:
        return sum(1 for r in self.requests if r.overflow and r.kind == "turn")


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
    ) -> None:
        self.transcript = transcript
        self.profile = profile
        self.provider = SimulatedProvider(profile)
        self.summarizer = summarizer
        self.usage_mode = usage_mode
        self.prompts = prompts
        self.step = 0
        self.turn: int | None = None
        self.timestamp: str | None = None
        self._pending_calls: list[LLMResult] = []
        self._awaiting_point: list[CompactionRecord] = []
        self.result = ReplayResult(transcript, strategy_cls.name, profile, options, usage_mode)
        self.strategy = strategy_cls(self, options)

    # ------------------------------------------------------------ StrategyContext
    def count_tokens(self, messages: Sequence[Message]) -> int:
        return self.provider.count(tuple(messages))

    def render_prompt(self, template: str, **variables: Any) -> str:
        return self.prompts.render(template, **variables)

    def summarize(self, request: Request, *, purpose: str = "summary") -> LLMResult:
        request = request if request.kind == "summary" else Request(
            request.messages, request.estimate_tokens, request.threshold, "summary", request.max_output_tokens, request.meta
        )
        outcome = self.provider.send(request, timestamp=self.timestamp)
        self._record_request(request, outcome, attempt=0)
        if outcome.overflow:
            assert outcome.error is not None
            raise SummaryOverflow(outcome.error, outcome.true_tokens)
        result = self.summarizer.complete(
            [m.to_dict() | {"content": m.content} for m in request.messages],
            max_tokens=request.max_output_tokens,
            purpose=purpose,
        )
        self._pending_calls.append(result)
        return result

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
        before_ids = [i for m in before for i in m.item_ids]
        after_ids = {i for m in after for i in m.item_ids}
        summarized = tuple(dict.fromkeys(summarized_ids))
        summarized_set = set(summarized)
        kept = tuple(dict.fromkeys(i for i in before_ids if i in after_ids))
        dropped = tuple(dict.fromkeys(i for i in before_ids if i not in after_ids and i not in summarized_set))
        record = CompactionRecord(
            index=len(self.result.compactions),
            step=self.step,
            turn=self.turn,
            trigger=trigger,
            tokens_before=self.provider.count(tuple(before)),
            tokens_after=self.provider.count(tuple(after)),
            estimate_tokens=estimate_tokens,
            threshold=threshold,
            summary=summary,
            summarized_ids=summarized,
            kept_ids=kept,
            dropped_ids=dropped,
            llm_calls=tuple(self._pending_calls),
            details=dict(details or {}),
            before=tuple(before),
            after=tuple(after),
            probed=probe,
        )
        self._pending_calls = []
        self.result.compactions.append(record)
        self._awaiting_point.append(record)

    # ------------------------------------------------------------ recording
    def _record_request(self, request: Request, outcome: Outcome, attempt: int, output_tokens: int = 0) -> RequestRecord:
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
        )
        self.result.requests.append(record)
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
        request = self.strategy.request()
        if not isinstance(request, Request):
            raise ReplayError(f"strategy {self.result.strategy!r} returned {type(request).__name__} from request() at step {self.step}")
        if kind != request.kind:
            request = Request(request.messages, request.estimate_tokens, request.threshold, kind, request.max_output_tokens, request.meta)
        return request

    # ------------------------------------------------------------ the loop
    def _output_tokens(self, step: Step) -> int:
        messages = [message_from_item(i) for i in step.items]
        return self.provider.count(messages)

    def _run_step(self, step: Step) -> None:
        self.step = step.index
        output_tokens = self._output_tokens(step)
        recorded = step.usage if self.usage_mode == "recorded" else None
        usage: Usage | None = None
        attempt = 0
        while True:
            request = self._strategy_request()
            outcome = self.provider.send(
                request, output_tokens=output_tokens, timestamp=self.timestamp, recorded_usage=recorded
            )
            record = self._record_request(request, outcome, attempt, output_tokens)
            self._mark_points(record)
            if not outcome.overflow:
                usage = outcome.usage
                break
            attempt += 1
            assert outcome.error is not None
            if attempt > MAX_OVERFLOW_RETRIES or not self.strategy.on_overflow(outcome.error):
                break
        self.strategy.on_response(step.items, usage, step.needs_follow_up)

    def run(self) -> ReplayResult:
        steps = {s.items[0].response: s for s in self.transcript.steps()}
        done: set[int] = set()
        for item in self.transcript.items:
            self.timestamp = item.timestamp or self.timestamp
            if item.turn is not None:
                self.turn = item.turn
            if item.is_model_output and item.response is not None:
                if item.response not in done:
                    done.add(item.response)
                    self._run_step(steps[item.response])
            elif item.kind == "marker":
                self.strategy.on_marker(item)
            elif item.is_real_user:
                self.strategy.on_user_turn(item)
            else:
                self.strategy.on_input(item)
        self.step = len(steps)
        final = self._strategy_request(kind="final")
        # The final context is probed, not sent: no error, no cache read, no usage.
        tokens = self.provider.count(final.messages)
        unsent = Outcome(tokens, tokens > self.profile.context_window, None, CacheOutcome(0, 0, 0), Usage())
        record = self._record_request(final, unsent, attempt=0)
        self._mark_points(record)
        self.result.points.append(ProbePoint(self.step, record.index, "final"))
        self.result.template_hashes = dict(self.prompts.hashes)
        return self.result


def replay(
    transcript: Transcript | str | Path,
    strategy: str | type[Strategy],
    *,
    profile: str | ModelProfile = DEFAULT_PROFILE,
    summarizer: str | LLMClient = DEFAULT_SUMMARIZER,
    options: Mapping[str, Any] | None = None,
    usage: str = "simulated",
    prompts: Mapping[str, str | Path] | PromptSet | None = None,
) -> ReplayResult:
    """Replay one transcript through one strategy.

    `strategy` is a registered id (`bench list strategies`), `path/file.py:Class`, or a class;
    `options` are the strategy's options (strings are converted to the declared types);
    `usage="recorded"` reports the transcript's own usage to the strategy where a step has some.
    """
    from compaction_bench.importing import load_transcript

    if not isinstance(transcript, Transcript):
        transcript = load_transcript(transcript)
    if usage not in USAGE_MODES:
        raise ValueError(f"unknown usage mode {usage!r}; expected one of {', '.join(USAGE_MODES)}")
    strategy_cls = strategy_class(strategy) if isinstance(strategy, str) else strategy
    parsed = strategy_cls.parse_options(options)
    client = summarizer if isinstance(summarizer, LLMClient) else LLMClient(summarizer)
    prompt_set = prompts if isinstance(prompts, PromptSet) else PromptSet(prompts)
    engine = _Engine(transcript, strategy_cls, get_profile(profile), client, parsed, usage, prompt_set)
    # The transcript and everything loaded so far live for the whole replay: moving them out of the
    # cyclic collector's generations keeps each collection's cost from growing with the transcript.
    gc.collect()
    gc.freeze()
    try:
        return engine.run()
    finally:
        gc.unfreeze()
