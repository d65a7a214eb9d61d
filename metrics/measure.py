"""Per-cell measurement: one replay's records become three tables (requests, compactions, probes).

`measure_cell` is what the runner calls for every (scenario, strategy, profile, repeat) cell; it
adds those columns itself. Rows:
- requests: every request the strategy produced (turn, summary and final), with true and estimated
  tokens, overflow, which usage the strategy was fed (`usage_source`), the provider's cached,
  written and re-billed tokens, integrity violation counts per
  wire format (`integrity_<format>`: caused by the strategy; `integrity_recorded_<format>`: orphans
  the recorded session already had; details of both as JSON) and dollars;
- compactions: trigger, tokens before/after, the strategy's estimate at the decision and its
  error against the true count before, the summary, the ids summarized / kept verbatim /
  dropped (silent loss: neither kept nor given to the summarizer), summarizer calls and cost,
  and whether it was premature;
- probes: one row per probe per paired checkpoint and per compaction point after the probe's
  source (`compaction_bench.metrics.retention`, which owns them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from compaction_bench.llm import LLMClient
from compaction_bench.metrics import accuracy, cost, integrity, retention
from compaction_bench.probes import Probe
from compaction_bench.provider import MessageCounter
from compaction_bench.records import ReplayResult
from compaction_bench.tokens import HiddenTokens


@dataclass
class CellTables:
    requests: list[dict[str, Any]] = field(default_factory=list)
    compactions: list[dict[str, Any]] = field(default_factory=list)
    probes: list[dict[str, Any]] = field(default_factory=list)


def _summary_calls(result: ReplayResult) -> dict[int, int]:
    """Summary request index -> the compaction its summarizer call belongs to (the engine's links)."""
    return {index: c.index for c in result.compactions for index in c.summary_request_indices}


def _request_rows(result: ReplayResult) -> tuple[list[dict[str, Any]], dict[int, float]]:
    rows: list[dict[str, Any]] = []
    compaction_cost: dict[int, float] = {}
    owners = _summary_calls(result)
    inherited = integrity.recorded_orphans(result.transcript)
    for request in result.requests:
        violations = integrity.check(request.messages)
        error = accuracy.estimate_error(request)
        call = request.llm_call
        output = call.output_tokens if call is not None else request.output_tokens
        dollars = 0.0
        if request.sent:
            dollars = call.cost if call is not None and call.cost > 0 else cost.request_cost(
                result.profile,
                input_tokens=request.true_tokens,
                cached_tokens=request.cached_tokens,
                cache_write_tokens=request.cache_write_tokens,
                output_tokens=output,
            )
        owner = owners.get(request.index)
        if owner is not None:
            compaction_cost[owner] = compaction_cost.get(owner, 0.0) + dollars
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
            "usage_source": request.usage_source,
            "prefix_tokens": request.prefix_tokens,
            "cached_tokens": request.cached_tokens,
            "cache_write_tokens": request.cache_write_tokens,
            "rebilled_tokens": request.rebilled_tokens if request.sent else 0,
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
            "summary_requests": list(c.summary_request_indices),
            "premature": accuracy.premature(c),
            "next_request": c.next_request,
        }
        for c in result.compactions
    ]


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
    requests, compaction_cost = _request_rows(result)
    return CellTables(
        requests=requests,
        compactions=_compaction_rows(result, compaction_cost),
        probes=retention.probe_rows(result, probes, provider, answerer, judge, repeat),
    )
