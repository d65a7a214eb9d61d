"""The estimate error is the error of the estimate a strategy decided on (`metrics/accuracy.py`): a request
counts when it reports a threshold, the count its rule compared this estimate with; a request sent unchecked
right after the strategy compacted inside `request()` carries an estimate no rule read and has no error.

The rows that go unchecked are known from the spec, not from the strategy: Claude Code 2.0.57 checks once per
request and sends the compacted messages unchecked (docs/specs/claude-code.md §2.3 step 5), and its count of
them finds no response with usage after the boundary, 0 (§2.2 `AK`), a 100% error that nothing acted on (the
next check reads that request's own usage).
"""

from __future__ import annotations

import pandas as pd
import pytest

from compaction_bench.metrics.accuracy import NO_ERROR, estimate_error
from compaction_bench.metrics.aggregate import summarize
from compaction_bench.metrics.measure import measure_cell
from compaction_bench.records import RequestRecord
from compaction_bench.replay import replay
from tests.pi_builders import Session


def _request(estimate: int | None, threshold: int | None, kind: str = "turn", true: int = 1_000) -> RequestRecord:
    return RequestRecord(
        index=0, step=0, turn=0, kind=kind, messages=(), true_tokens=true, estimate_tokens=estimate, threshold=threshold,
        overflow=False, error=None, prefix_tokens=0, cached_tokens=0, cache_write_tokens=0, output_tokens=0,
    )


def test_an_estimate_without_a_threshold_has_no_error():
    # the same estimate and true count: an error where a rule compared the estimate with its threshold, none where
    # no rule did (the check already spent on this request, or automatic compaction off)
    decided = estimate_error(_request(estimate=0, threshold=19_000))
    assert (decided.signed, decided.ape) == (-1_000, 1.0)
    assert estimate_error(_request(estimate=0, threshold=None)) == NO_ERROR
    assert estimate_error(_request(estimate=900, threshold=None, kind="summary")) == NO_ERROR


def _compacting_session() -> Session:
    """One prompt and twelve steps of ~14,000-token outputs: Claude Code at `64k` (threshold 19,000) auto-compacts
    every few steps (simulated usage)."""
    s = Session()
    s.user("Please fix the parser in src/parse.py; never touch the tests.")
    for n in range(12):
        s.assistant(f"step {n}", calls=[(f"c{n}", "Bash", {"command": f"cat part{n}.txt"})])
        s.result(f"c{n}", " ".join(f"line{n}-{k}" for k in range(3_000)), name="Bash")
    s.assistant("done")
    return s


def test_claude_code_requests_after_its_auto_compactions_are_left_out_of_the_estimate_error():
    result = replay(_compacting_session().transcript(), "claude-code", profile="64k")
    assert len(result.compactions) >= 2 and all(c.trigger == "auto" for c in result.compactions)
    unchecked = {c.next_request for c in result.compactions}  # §2.3 step 5: sent without a check
    turns = [r for r in result.requests if r.kind == "turn"]
    for r in turns:
        if r.index in unchecked:
            assert r.estimate_tokens == 0 and r.threshold is None  # §2.2: no usage after the boundary
    decided = [r for r in turns if r.index not in unchecked]
    rows = measure_cell(result, [], answerer=None).requests
    by_index = {row["request"]: row for row in rows}
    assert all(by_index[i]["estimate_ape"] is None and by_index[i]["estimate_error"] is None for i in unchecked)
    assert by_index[min(unchecked)]["estimate_tokens"] == 0  # the estimate itself stays in the table
    frame = pd.DataFrame(rows).assign(scenario="s", strategy="claude-code", profile="64k")
    (summary,) = summarize(frame, pd.DataFrame(), pd.DataFrame()).to_dict("records")
    assert summary["estimate_ape_n"] == len(decided) == len(turns) - len(unchecked)
    expected = sum(abs(r.estimate_tokens - r.true_tokens) / r.true_tokens for r in decided) / len(decided)
    assert summary["estimate_ape"] == pytest.approx(expected)
    assert summary["estimate_error"] == pytest.approx(sum(r.estimate_tokens - r.true_tokens for r in decided) / len(decided))
