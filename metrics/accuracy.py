"""Token accuracy: each strategy's own estimate at decision time against the true count.

Per request the strategy sent or tried to send (a turn or a summary request, overflowed or not) and
decided on: signed error (estimate − true), absolute percentage error, and, for a turn, a missed
trigger (the true count reached the strategy's threshold while its estimate said it had not, so it
sent the request instead of compacting). A request is decided on when it reports a threshold
(`Request.threshold`): its rule compared this very estimate with it. One without a threshold has no
error: its estimate is one no rule read, sent unchecked right after the strategy compacted inside
`request()` (the check already spent: Claude Code 2.0.57's structural 0 after an auto-compaction,
Gemini CLI's estimate of the history it just replaced, which the next check replaces with the next
response's usage) or with automatic compaction off, and averaging it in would rank beliefs nothing
acted on. The estimate stays in the requests table beside the true count. Codex in its
`body_after_prefix` scope reads its estimate on every request but reports no threshold (its rule
also reads the count less the window's prefill, so no verdict on the whole count is exact): it has
no error either. The final context is left out: it is probed, never sent, and what
a strategy fed by usage holds of it is the last response's usage with nothing after it, the true
count itself, so it would add one exact row per cell (a fifth of a five-request session's rows).

Per compaction: premature (the strategy compacted on its threshold although the true count was
still under it). Only a threshold decision can be premature:
a compaction whose own estimate was under its threshold was decided on something else (a step or
event count, an agent's request, a model switch) although the strategy reports the threshold it
also has. Overflows are the provider's verdict and come straight from the request records.

What a threshold means here (`Request.threshold`, and the `threshold` of `record_compaction`): the
smallest own count at which the strategy's token rule fires. A strategy whose rule is `count >= T`
reports `T`; one whose rule is strict, `count > T`, reports `T + 1`. Both verdicts then compare the
true count with it the same way for every strategy: `true >= threshold` is "the rule would have
fired on the true count", `true < threshold` "it would not". A true count exactly at a strict
strategy's `T` is therefore neither a missed trigger nor a justified compaction. A strategy reports
no threshold (None, hence no verdict) where its rule compares something other than the whole context
whose true count the record holds (a part of it, or a count corrected by an estimated prefix): a
verdict on another quantity can be wrong in both directions.

With `--usage recorded` an estimate built on a recorded usage counts the recording's system prompt and
tool schemas, which the replayed messages, and so the true count, do not hold (on the Claude Code session
703e4528, +38,756 tokens at the median): such a row would measure that gap, not the estimator. The
measurement (`metrics.measure`) leaves those requests and compactions out with `NO_ERROR` and no premature
verdict, flagged `estimate_on_recorded_usage`.
"""

from __future__ import annotations

from dataclasses import dataclass

from compaction_bench.records import SENT_KINDS, CompactionRecord, RequestRecord

#: Triggers that are not a threshold decision (recovering from a provider error, a user's command)
#: cannot be premature; any other compaction that reports a threshold is judged against it.
NOT_THRESHOLD = ("overflow", "manual")


@dataclass(frozen=True)
class EstimateError:
    signed: int | None
    ape: float | None
    missed_trigger: bool


#: No error measured: no estimate, a request that is not sent or not decided on, or an estimate on another quantity.
NO_ERROR = EstimateError(None, None, False)


def estimate_error(request: RequestRecord) -> EstimateError:
    """The error of the estimate a sent or tried request was decided on (module docstring); `NO_ERROR`
    for one without an estimate or a threshold."""
    estimate, true, threshold = request.estimate_tokens, request.true_tokens, request.threshold
    if estimate is None or threshold is None or request.kind not in SENT_KINDS:
        return NO_ERROR
    signed = estimate - true
    ape = abs(signed) / true if true else None
    # `threshold` is the smallest count that fires the rule (module docstring): reaching it is firing it,
    # for strict and non-strict strategies alike
    missed = request.kind == "turn" and true >= threshold > estimate
    return EstimateError(signed, ape, missed)


def premature(compaction: CompactionRecord) -> bool:
    """Compacted on its threshold although the true count of the context was under it (under the
    smallest count that fires the rule: for a strict `count > T` strategy, which reports `T + 1`, a true
    count of exactly `T` is premature).

    A trigger named `threshold` says it was a threshold decision; any other (but `NOT_THRESHOLD`)
    is one only when the strategy's own estimate at the decision had reached the threshold: hybrid's
    `steps` trigger and OpenHands' condensation on its event count report the token threshold they
    also have, with an estimate under it, and were not decided on it."""
    threshold = compaction.threshold
    if threshold is None or any(word in compaction.trigger for word in NOT_THRESHOLD):
        return False
    estimate = compaction.estimate_tokens
    if compaction.trigger != "threshold" and estimate is not None and estimate < threshold:
        return False
    return compaction.tokens_before < threshold
