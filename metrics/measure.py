"""Per-cell measurement: one replay's records become three tables (requests, compactions, probes).

`measure_cell` is what the runner calls for every (scenario, strategy, profile, repeat) cell; it
adds those columns itself. Rows:
- requests: every request the strategy produced (turn, summary and final), with true and estimated
  tokens, overflow, the cache model's numbers, re-billed tokens, integrity violation counts per
  wire format (`integrity_<format>`: caused by the strategy; `integrity_recorded_<format>`: orphans
  the recorded session already had; details of both as JSON) and dollars;
- compactions: trigger, tokens before/after, the strategy's estimate at the decision and its
  error against the true count before, the summary, the ids summarized / kept verbatim /
  dropped (silent loss: neither kept nor given to the summarizer), summarizer calls and cost,
  and whether it was premature;
- probes: one row per probe per probe point whose context comes after the probe's source (a
  point at step s saw every transcript item before recorded response s; the final point saw all),
  with presence, the answered grade (None when unscored, also when the answerer failed: its error
  is in `answer_error`) and the fact's age in tokens.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from compaction_bench.llm import LLMClient, LLMError
from compaction_bench.metrics import accuracy, cache, cost, grading, integrity
from compaction_bench.probes import Probe, ProbeError
from compaction_bench.provider import SimulatedProvider
from compaction_bench.replay import ReplayResult
from compaction_bench.request import message_from_item
from compaction_bench.strategy import LLMResult
from compaction_bench.transcript import Transcript


@dataclass
class CellTables:
    requests: list[dict[str, Any]] = field(default_factory=list)
    compactions: list[dict[str, Any]] = field(default_factory=list)
    probes: list[dict[str, Any]] = field(default_factory=list)


def source_position(transcript: Transcript, probe: Probe) -> int:
    """Transcript position where the probe's fact first appears."""
    if probe.source:
        try:
            return transcript.position(probe.source)
        except KeyError:
            raise ProbeError(f"probe {probe.id!r}: source item {probe.source!r} is not in transcript {transcript.id!r}") from None
    assert probe.source_text is not None
    for position, item in enumerate(transcript.items):
        if probe.source_text in item.text or (item.arguments and probe.source_text in item.arguments):
            return position
    raise ProbeError(f"probe {probe.id!r}: source_text {probe.source_text!r} occurs nowhere in transcript {transcript.id!r}")


def _cumulative_tokens(transcript: Transcript, provider: SimulatedProvider) -> list[int]:
    """cum[p]: true tokens of the model-visible items before position p."""
    out = [0]
    for item in transcript.items:
        tokens = 0 if item.kind == "marker" else provider.message_tokens(message_from_item(item))
        out.append(out[-1] + tokens)
    return out


def _step_positions(transcript: Transcript) -> dict[int, int]:
    return {step.index: transcript.position(step.items[0].id) for step in transcript.steps()}


def _summary_calls(result: ReplayResult) -> dict[int, tuple[int, LLMResult]]:
    """Accepted summary request index -> (compaction index, its summarizer call), in order."""
    calls = [(c.index, call) for c in result.compactions for call in c.llm_calls]
    summaries = [r.index for r in result.requests if r.kind == "summary" and not r.overflow]
    return dict(zip(summaries, calls))


def _request_rows(result: ReplayResult, provider: SimulatedProvider) -> tuple[list[dict[str, Any]], dict[int, float]]:
    rows: list[dict[str, Any]] = []
    compaction_cost: dict[int, float] = {}
    calls = _summary_calls(result)
    rebilled = cache.rebilled_tokens(result.requests, provider)
    inherited = integrity.recorded_orphans(result.transcript)
    for request, rebill in zip(result.requests, rebilled):
        violations = integrity.check(request.messages)
        error = accuracy.estimate_error(request)
        paired = calls.get(request.index)
        output = paired[1].output_tokens if paired else request.output_tokens
        dollars = 0.0
        if cache.sent(request):
            dollars = paired[1].cost if paired and paired[1].cost > 0 else cost.request_cost(
                result.profile,
                input_tokens=request.true_tokens,
                cached_tokens=request.cached_tokens,
                cache_write_tokens=request.cache_write_tokens,
                output_tokens=output,
            )
        if paired:
            compaction_cost[paired[0]] = compaction_cost.get(paired[0], 0.0) + dollars
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
            "overflow": request.overflow,
            "prefix_tokens": request.prefix_tokens,
            "cached_tokens": request.cached_tokens,
            "cache_write_tokens": request.cache_write_tokens,
            "rebilled_tokens": rebill,
            "output_tokens": output,
            "n_messages": request.n_messages,
            "cost_usd": dollars,
        }
        for fmt in integrity.FORMATS:
            recorded = sum(
                1 for v in violations[fmt] if (v.kind, v.call_id) in inherited or (integrity.ANY_KIND, v.call_id) in inherited
            )
            row[f"integrity_{fmt}"] = len(violations[fmt]) - recorded
            row[f"integrity_recorded_{fmt}"] = recorded
        row["integrity_detail"] = json.dumps([v.to_dict() for fmt in integrity.FORMATS for v in violations[fmt]])
        rows.append(row)
    return rows, compaction_cost


def _compaction_rows(result: ReplayResult, compaction_cost: dict[int, float]) -> list[dict[str, Any]]:
    return [
        {
            "compaction": c.index,
            "step": c.step,
            "turn": c.turn,
            "trigger": c.trigger,
            "tokens_before": c.tokens_before,
            "tokens_after": c.tokens_after,
            "estimate_tokens": c.estimate_tokens,
            "estimate_error": None if c.estimate_tokens is None else c.estimate_tokens - c.tokens_before,
            "threshold": c.threshold,
            "summary": c.summary,
            "summarized_ids": list(c.summarized_ids),
            "kept_ids": list(c.kept_ids),
            "dropped_ids": list(c.dropped_ids),
            "silent_loss": len(c.dropped_ids),
            "llm_calls": len(c.llm_calls),
            "llm_input_tokens": c.llm_input_tokens,
            "llm_output_tokens": c.llm_output_tokens,
            "llm_cost_usd": compaction_cost.get(c.index, 0.0),
            "premature": accuracy.premature(c),
            "next_request": c.next_request,
        }
        for c in result.compactions
    ]


def _probe_rows(
    result: ReplayResult,
    probes: Sequence[Probe],
    provider: SimulatedProvider,
    answerer: LLMClient | None,
    judge: LLMClient | None,
    repeat: int,
) -> list[dict[str, Any]]:
    if not probes:
        return []
    transcript = result.transcript
    sources = {p.id: source_position(transcript, p) for p in probes}
    cumulative = _cumulative_tokens(transcript, provider)
    starts = _step_positions(transcript)
    summaries = {c.index: c.summary or "" for c in result.compactions}
    rows: list[dict[str, Any]] = []
    for point in result.points:
        position = len(transcript.items) if point.reason == "final" else starts.get(point.step, len(transcript.items))
        asked = [p for p in probes if sources[p.id] < position]
        if not asked:
            continue
        messages = result.requests[point.request].messages
        text = grading.context_text(messages)
        normalized = grading.normalize(text)
        summary = summaries.get(point.compaction, "") if point.compaction is not None else ""
        context = grading.context_messages(messages) if answerer is not None else []
        for probe in asked:
            found = grading.presence(probe, text, normalized)
            row: dict[str, Any] = {
                "probe_id": probe.id,
                "kind": probe.kind,
                "match": probe.match,
                "step": point.step,
                "request": point.request,
                "point": point.reason,
                "compaction": point.compaction,
                "present": found.present,
                "present_share": found.share,
                "in_summary": bool(summary) and grading.presence(probe, summary).present,
                "correct": None,
                "score": None,
                "judge_strict": None,
                "judge_lenient": None,
                "answer": None,
                "answer_cached": None,
                "answer_error": None,
                "sample": repeat,
                "fact_age_tokens": cumulative[position] - cumulative[sources[probe.id]],
            }
            if answerer is not None:
                try:
                    answer = grading.ask(probe, context, answerer, judge, sample=repeat)
                except LLMError as exc:  # e.g. a context beyond the answerer's window: unscored, never passed
                    row["answer_error"] = str(exc)
                else:
                    row.update(
                        correct=answer.grade.correct,
                        score=answer.grade.score,
                        judge_strict=answer.grade.judge_strict,
                        judge_lenient=answer.grade.judge_lenient,
                        answer=answer.reply,
                        answer_cached=answer.cache_hit,
                    )
            rows.append(row)
    return rows


def measure_cell(
    result: ReplayResult,
    probes: list[Probe],
    *,
    answerer: LLMClient | None,
    judge: LLMClient | None = None,
    repeat: int = 0,
) -> CellTables:
    """The three tables of one replayed cell. `repeat` is the answer sample index (for voting)."""
    provider = SimulatedProvider(result.profile)
    requests, compaction_cost = _request_rows(result, provider)
    return CellTables(
        requests=requests,
        compactions=_compaction_rows(result, compaction_cost),
        probes=_probe_rows(result, probes, provider, answerer, judge, repeat),
    )
