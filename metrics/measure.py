"""Per-cell measurement: one replay's records become three tables (requests, compactions, probes).

`measure_cell` is what the runner calls for every (scenario, strategy, profile, repeat) cell; it
adds those columns itself. Rows:
- requests: every request the strategy produced (turn, summary and final), with true and estimated
  tokens, the estimate's error where the strategy's rule checked it (a threshold reported:
  `metrics.accuracy`), overflow, which usage the strategy was fed (`usage_source`; an estimate made while it held a
  recorded usage is flagged `estimate_on_recorded_usage` and gets no error or verdict, as the
  recording's usage counts a system prompt the replayed messages lack), the provider's cached,
  written and re-billed tokens, integrity violation counts per
  wire format (`integrity_<format>`: caused by the strategy; `integrity_recorded_<format>`: orphans
  the recorded session already had; details of both as JSON) and dollars;
- compactions: trigger, tokens before/after, the strategy's estimate at the decision and its
  error against the true count before, the summary, the ids summarized / kept (still in the context after it,
  verbatim or rewritten in place: a masked output or a cleared result keeps its id; the row holds the record's own
  `records.KeptIds`, read when the table is built, so a cell's rows never hold every context's ids at once) /
  dropped (silent loss: neither kept nor given to the summarizer), summarizer calls, the tokens
  and dollars of their summary requests, whether it was premature, and whether it has a probe point
  (`probed`, `_probe_points`: what it lost is measured only there);
- probes: one row per probe per paired checkpoint and per compaction point after the probe's
  source (`compaction_bench.metrics.retention`, which owns them).

Each violation in `integrity_detail` says whether the recorded session already had it
(`recorded`), so a report lists the strategy's own apart from the recording's.

A sent request's tokens and dollars are one set (`_billed`): a summarizer call whose own price is
known (a real model with a price in litellm's map, free ones at $0) is priced on the input and
output tokens that model reported, with the cache reads and writes the simulated provider gives the
request (`_call_dollars`: the model's own cache never saw the session's turns); one whose map entry
states no price (litellm's $0 for it is no price), or whose reply reported no usage
(`LLMResult.usage_known`: its tokens counted as the offline summarizer's are), costs NaN, unknown,
as an unpriced profile's requests do (`metrics/cost.py`);
every other request, the offline summarizer's included, on the simulated provider's count of it
(the profile's tokenizer, the stand-in for a model's own usage) at the profile's prices: the session's,
or for a summary request the profile of the model it went to where that is another
(`ReplayResult.summary_profile`: the offline summarizer standing in for Aider's weak model). So a
compaction's `llm_input_tokens` + `llm_output_tokens` are the tokens its `llm_cost_usd` is priced
on, and the summary's `summarizer_tokens` their sum; the offline summarizer's own counts
(o200k_base over what it read and wrote, `compaction_bench.llm`) are not a model's usage and are not
used: its reply is counted with the profile's tokenizer too.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from compaction_bench.llm import LLMClient, LLMResult, is_offline
from compaction_bench.metrics import accuracy, cost, integrity, retention
from compaction_bench.probes import Probe
from compaction_bench.profiles import ProfileError, get_profile, stated_prices
from compaction_bench.provider import MessageCounter
from compaction_bench.records import CompactionRecord, ReplayResult, RequestRecord
from compaction_bench.tokens import HiddenTokens, shared_counter
from compaction_bench.transcript import parse_timestamp


@dataclass
class CellTables:
    requests: list[dict[str, Any]] = field(default_factory=list)
    compactions: list[dict[str, Any]] = field(default_factory=list)
    probes: list[dict[str, Any]] = field(default_factory=list)


def _summary_calls(result: ReplayResult) -> dict[int, int]:
    """Summary request index -> the compaction its summarizer call belongs to (the engine's links)."""
    return {index: c.index for c in result.compactions for index in c.summary_request_indices}


@dataclass
class _Billed:
    """What requests were priced on: input and output tokens, and dollars."""

    input_tokens: int = 0
    output_tokens: int = 0
    dollars: float = 0.0

    def add(self, other: _Billed) -> None:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.dollars += other.dollars


def _billed(result: ReplayResult, request: RequestRecord) -> _Billed:
    """The tokens and dollars of one request: a summarizer call with its own price on the usage it
    reported, any other sent request on the provider's true count at the profile's prices; a request
    the provider refused costs nothing and bills no input."""
    call = request.llm_call
    # the model an offline summarizer's request stands for: the model the agent summarizes with when that is not the
    # session's (`ReplayResult.summary_profile`; a real summarizer's calls are priced by their own usage below)
    stand_in = request.kind == "summary" and result.summary_profile is not None and (call is None or is_offline(call.model))
    profile = result.summary_profile if stand_in and result.summary_profile is not None else result.profile
    if call is None:
        output = request.output_tokens
    elif is_offline(call.model) or not call.usage_known:
        # no count of the model's own: the reply counted as the provider counts (the offline model's own counts are
        # o200k_base's; a real reply without usage reported none)
        output = shared_counter(profile.tokenizer).count(call.text)
    else:
        output = call.output_tokens  # the usage the model reported
    if not request.sent:
        return _Billed(0, output, 0.0)
    if call is not None and not is_offline(call.model) and not call.usage_known:
        # a real model that reported no usage (`LLMResult.usage_known`): its input counted by the provider, its
        # dollars unknown, never $0
        return _Billed(request.true_tokens, output, math.nan)
    if call is not None and call.cost is not None:
        # litellm bills a model whose map entry states no price at $0, which is no price (`Prices.unpriced`)
        dollars = _call_dollars(call, request, output) if stated_prices(call.model) is not False else math.nan
        return _Billed(call.input_tokens, output, dollars)
    dollars = cost.request_cost(
        profile,
        input_tokens=request.true_tokens,
        cached_tokens=request.cached_tokens,
        cache_write_tokens=request.cache_write_tokens,
        output_tokens=output,
        when=parse_timestamp(request.timestamp),  # off-peak prices (`compaction_bench.off_peak`) by the recorded time
    )
    return _Billed(request.true_tokens, output, dollars)


def _call_dollars(call: LLMResult, request: RequestRecord, output: int) -> float:
    """A priced summarizer call's dollars: the input and output tokens the model reported, of which the request's
    simulated cache reads and writes (`RequestRecord.cached_tokens`, `cache_write_tokens`, at most its input), at
    the call model's prices in litellm's map. The replay sends the turns to no model, so the model's own cache
    never holds the session's prefix, and the reads it reports are not those of the agent's session, whose turns
    wrote that prefix (a summary fork such as Claude Code 2.1's exists to read it). A model the map cannot name as
    a profile keeps litellm's price of the call."""
    try:
        profile = get_profile(call.model)
    except ProfileError:
        return call.cost if call.cost is not None else math.nan
    cached = min(request.cached_tokens, call.input_tokens)
    written = min(request.cache_write_tokens, call.input_tokens - cached)
    return cost.request_cost(
        profile, input_tokens=call.input_tokens, cached_tokens=cached, cache_write_tokens=written, output_tokens=output,
        when=parse_timestamp(request.timestamp),
    )


def _held_usage(result: ReplayResult) -> list[str | None]:
    """Per request index, the source of the usage the strategy was last given before it ("recorded",
    "simulated" or None): the usage an estimate made for that request is built on."""
    held: list[str | None] = []
    last: str | None = None
    for request in result.requests:
        held.append(last)
        last = request.usage_source or last
    return held


def _decided_on_recorded(result: ReplayResult, compaction: CompactionRecord, held: list[str | None]) -> bool:
    """Whether the strategy held a recorded usage when it decided `compaction` (before its first summary
    request, or before the request that followed it)."""
    first = min(compaction.summary_request_indices, default=compaction.next_request)
    source = held[first] if first is not None else (result.requests[-1].usage_source if result.requests else None)
    return source == "recorded" and compaction.estimate_tokens is not None


def _request_rows(result: ReplayResult, held: list[str | None]) -> tuple[list[dict[str, Any]], dict[int, _Billed]]:
    rows: list[dict[str, Any]] = []
    compaction_billed: dict[int, _Billed] = {}
    owners = _summary_calls(result)
    inherited = integrity.recorded_orphans(result.transcript)
    checks = integrity.RequestChecks()
    for request in result.requests:
        violations = checks.check(request.messages)
        on_recorded = held[request.index] == "recorded" and request.estimate_tokens is not None
        error = accuracy.NO_ERROR if on_recorded else accuracy.estimate_error(request)
        billed = _billed(result, request)
        owner = owners.get(request.index)
        if owner is not None:
            compaction_billed.setdefault(owner, _Billed()).add(billed)
        row: dict[str, Any] = {
            "request": request.index,
            "step": request.step,
            "turn": request.turn,
            "kind": request.kind,
            "attempt": request.attempt,
            "timestamp": request.timestamp,
            "true_tokens": request.true_tokens,
            "estimate_tokens": request.estimate_tokens,
            "threshold": request.threshold,
            "estimate_error": error.signed,
            "estimate_ape": error.ape,
            "missed_trigger": error.missed_trigger,
            "estimate_on_recorded_usage": on_recorded,
            "overflow": request.overflow,
            "refused": request.refused,
            "usage_source": request.usage_source,
            "prefix_tokens": request.prefix_tokens,
            "cached_tokens": request.cached_tokens,
            "cache_write_tokens": request.cache_write_tokens,
            "rebilled_tokens": request.rebilled_tokens if request.sent else 0,
            "output_tokens": billed.output_tokens,
            "n_messages": request.n_messages,
            "cost_usd": billed.dollars,
        }
        detail = []
        for fmt in integrity.FORMATS:
            flags = [(v.kind, v.call_id) in inherited or (integrity.ANY_KIND, v.call_id) in inherited for v in violations[fmt]]
            marked = [{**v.to_dict(), "recorded": flag} for v, flag in zip(violations[fmt], flags, strict=True)]
            recorded = sum(flags)
            row[f"integrity_{fmt}"] = len(marked) - recorded
            row[f"integrity_recorded_{fmt}"] = recorded
            detail += marked
        row["integrity_detail"] = json.dumps(detail)
        rows.append(row)
    return rows, compaction_billed


#: The columns of a compactions row (`_compaction_rows`), in order: a table without rows (a run in which no cell
#: compacted) still has every column, in this order, typed as `store.SCHEMA` types a table with rows.
COMPACTION_COLUMNS = (
    "compaction", "step", "turn", "trigger", "tokens_before", "tokens_after", "estimate_tokens", "estimate_error", "threshold", "summary",
    "summarized_ids", "kept_ids", "dropped_ids", "silent_loss", "llm_calls", "llm_input_tokens", "llm_output_tokens", "llm_cost_usd",
    "summary_requests", "premature", "estimate_on_recorded_usage", "next_request", "probed", "summary_cut",
)


def _probe_points(result: ReplayResult) -> set[int]:
    """The compactions the replay gave a probe point: of the compactions before a request, only the newest the
    strategy recorded as probed (bench/replay.py `_mark_points`: `probed = [c for c in self._awaiting_point if
    c.probed]`, the point goes to `probed[-1]`). A rewrite recorded with `probe=False` (observation masking, Aider's
    discarded summary, Anthropic's tool-use clearing) or a compaction a later one followed before the next request
    has none: no probe was asked right after it, so what it lost is not measured (not 0)."""
    return {p.compaction for p in result.points if p.reason == "compaction" and p.compaction is not None}


def _compaction_rows(result: ReplayResult, compaction_billed: dict[int, _Billed], held: list[str | None]) -> list[dict[str, Any]]:
    nothing = _Billed()
    probed = _probe_points(result)
    rows = []
    for c in result.compactions:
        on_recorded = _decided_on_recorded(result, c, held)
        rows.append({
            "compaction": c.index,
            "step": c.step,
            "turn": c.turn,
            "trigger": c.trigger,
            "tokens_before": c.tokens_before,
            "tokens_after": c.tokens_after,
            "estimate_tokens": c.estimate_tokens,
            "estimate_error": None if c.estimate_tokens is None or on_recorded else c.estimate_tokens - c.tokens_before,
            "threshold": c.threshold,
            "summary": c.summary,
            "summarized_ids": list(c.summarized_ids),
            "kept_ids": c.kept_ids,  # read when the row is stored (a `records.KeptIds` builds its ids when read)
            "dropped_ids": list(c.dropped_ids),
            "silent_loss": len(c.dropped_ids),
            "llm_calls": len(c.llm_calls),
            "llm_input_tokens": compaction_billed.get(c.index, nothing).input_tokens,
            "llm_output_tokens": compaction_billed.get(c.index, nothing).output_tokens,
            "llm_cost_usd": compaction_billed.get(c.index, nothing).dollars,
            "summary_requests": list(c.summary_request_indices),
            "premature": not on_recorded and accuracy.premature(c),
            "estimate_on_recorded_usage": on_recorded,
            "next_request": c.next_request,
            "probed": c.index in probed,
            # a summarizer reply cut off at its max_tokens ("length"): kept as the agent would keep it, but no whole summary
            "summary_cut": any(call.finish_reason == "length" for call in c.llm_calls),
        })
    return rows


def measure_cell(
    result: ReplayResult,
    probes: list[Probe],
    *,
    answerer: LLMClient | None,
    judge: LLMClient | None = None,
    repeat: int = 0,
) -> CellTables:
    """The three tables of one replayed cell. `repeat` is the answer sample index (for voting).

    Cache numbers, re-billed tokens and the summary request of each summarizer call come from the
    records (the engine's provider computed them); only the facts' ages need a token count here,
    made as the provider counts (`MessageCounter`)."""
    provider = MessageCounter(result.profile, hidden=HiddenTokens.of(result.transcript))
    held = _held_usage(result)  # the usage the strategy held at each request, for both tables
    requests, compaction_billed = _request_rows(result, held)
    return CellTables(
        requests=requests,
        compactions=_compaction_rows(result, compaction_billed, held),
        probes=retention.probe_rows(result, probes, provider, answerer, judge, repeat, drops_thinking=result.drops_thinking),
    )
