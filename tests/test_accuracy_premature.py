"""`premature` judges only threshold decisions, read against each strategy's documented trigger.

A compaction is premature when the strategy compacted on its token threshold although the true
count was still under it. Strategies with a second trigger report the token threshold on every
compaction, so a compaction decided on the other trigger (its own estimate under the threshold)
must not be called premature.
"""

from __future__ import annotations

import compaction_bench as bench
from compaction_bench.metrics.accuracy import premature
from compaction_bench.metrics.measure import measure_cell
from compaction_bench.records import CompactionRecord
from compaction_bench.scenarios.synthetic import generate


def compaction(trigger: str, *, estimate: int | None, threshold: int | None, before: int, **details: object) -> CompactionRecord:
    return CompactionRecord(
        index=0, step=0, turn=0, trigger=trigger, tokens_before=before, tokens_after=100, estimate_tokens=estimate,
        threshold=threshold, summary="s", summarized_ids=(), kept_ids=(), dropped_ids=(), llm_calls=(), details=dict(details),
    )


def test_a_step_count_summary_is_not_a_premature_threshold_compaction():
    """hybrid (strategies/hybrid.py, the paper's deferred summary): "once `summarize_steps + keep_last`
    (N + M = 43 + 10) agent steps have accumulated" it summarizes with trigger `steps` whatever the size,
    reporting its 0.9 × window token threshold; this one was at 6,841 tokens of a 57,600 threshold."""
    assert not premature(compaction("steps", estimate=6_841, threshold=57_600, before=6_841))


def test_an_event_count_condensation_is_not_premature():
    """OpenHands SDK `get_condensation_reasons` (docs/specs/openhands.md §4.1): `EVENTS` is
    `len(view) > max_size`, `TOKENS` is `get_total_token_count(...) > effective_max_tokens`. A
    condensation on EVENTS alone at 22,299 of 64,000 tokens was not decided on the token threshold."""
    assert not premature(compaction("condensation", estimate=22_299, threshold=64_000, before=22_299, reasons=["EVENTS"]))


def test_a_codex_compaction_the_model_asked_for_is_not_premature():
    """Codex §1.4 item 2: the mid-turn check compacts on `NewContextRequested` as well as on
    `ContextLimit`; the first is not a token decision (estimate 9,000 of an auto limit of 57,600)."""
    assert not premature(compaction("mid-turn", estimate=9_000, threshold=57_600, before=9_100, reason="NewContextRequested"))


def test_threshold_decisions_are_still_judged():
    # Claude Code (docs/specs/claude-code.md §2.1): `enabled && tokens ≥ T`; its count said 20,119 ≥ 19,000
    # while the context held 18,500 tokens: premature. At or over the threshold by the true count it is not.
    assert premature(compaction("auto", estimate=20_119, threshold=19_000, before=18_500))
    assert not premature(compaction("auto", estimate=20_119, threshold=19_000, before=19_000))
    # a trigger named "threshold" says so itself; no estimate reported: judged on the true count alone
    assert premature(compaction("threshold", estimate=950, threshold=1_000, before=900))
    assert premature(compaction("microcompact", estimate=None, threshold=1_000, before=900))
    # recoveries and the user's command are never threshold decisions
    assert not premature(compaction("overflow", estimate=2_000, threshold=1_000, before=900))
    assert not premature(compaction("manual", estimate=2_000, threshold=1_000, before=900))


def test_replayed_step_and_event_triggers_are_not_reported_premature():
    transcript = generate("short-turns", seed=0, target_tokens=80_000).transcript
    for strategy in ("hybrid", "openhands"):
        result = bench.replay(transcript, strategy, profile="64k")
        decided_elsewhere = [c.index for c in result.compactions if c.threshold is not None and c.trigger in ("steps", "condensation")
                             and (c.estimate_tokens or 0) < c.threshold]
        assert decided_elsewhere, f"{strategy} must compact on its step or event trigger here"
        rows = {row["compaction"]: row for row in measure_cell(result, [], answerer=None).compactions}
        assert not any(rows[i]["premature"] for i in decided_elsewhere), strategy
