"""What the report's smaller numbers say, on hand-built tables whose right answers are worked out below: the
facts a compaction lost, the marks of a repeated run's timeline, the estimate error's unit, and what the
leaderboard's note says its columns pool."""

from __future__ import annotations

import html
import re

import pandas as pd

import compaction_bench as bench
from compaction_bench.metrics.aggregate import summarize
from compaction_bench.metrics.integrity import FORMATS
from compaction_bench.reports.figures import context_timeline
from compaction_bench.reports.html import _flips, scenario_table
from tests.conftest import write_tiny_session


def _probe(probe: str, request: int, present: bool, compaction: int | None = None) -> dict:
    return {"scenario": "s", "strategy": "a", "profile": "64k", "repeat": 0, "probe_id": probe, "kind": "recall",
            "point_kind": "checkpoint" if compaction is None else "compaction", "step": request, "request": request,
            "compaction": compaction, "present": present}


def test_a_fact_lost_at_a_compaction_whose_point_is_also_a_checkpoint_is_counted():
    """Compaction 0 happens before request 5, which is also the first response of a user turn (a checkpoint), so
    every probe has a checkpoint row and a compaction row there, both reading that request's context.
    p1: present at request 1, absent at 5 → lost at compaction 0. p2: absent at 1 and at 5 → not lost there.
    p3: asked for the first time at 5, absent → lost there. p4: present at 1 and at 5 → not lost.
    So compaction 0 lost p1 and p3. (Keeping the checkpoint row of request 5 in place of the compaction row
    read as if nothing was lost.)"""
    rows = []
    for probe, before, after in (("p1", True, False), ("p2", False, False), ("p3", None, False), ("p4", True, True)):
        if before is not None:
            rows.append(_probe(probe, 1, before))
        rows += [_probe(probe, 5, after), _probe(probe, 5, after, compaction=0)]
    lost = _flips(pd.DataFrame(rows), {})
    assert {key: sorted(p[0] for p in probes) for key, probes in lost.items()} == {("s", "a", "64k", 0, 0): ["p1", "p3"]}


def _turns(repeats: int) -> pd.DataFrame:
    return pd.DataFrame([
        {"scenario": "s", "strategy": "a", "profile": "64k", "repeat": r, "kind": "turn", "request": n, "step": n,
         "true_tokens": 1_000 * (n + 1), "overflow": False}
        for r in range(repeats) for n in range(6)
    ])


def _markers(svg: str) -> int:
    """Markers drawn (tick marks and scatter points are `<use>` of a defined path)."""
    return svg.count("<use ")


def test_a_timeline_marks_only_the_compactions_of_the_repeat_it_draws():
    """Two repeats: the line is repeat 0's, which compacted nowhere; repeat 1 compacted at steps 2 and 4. The
    panel must carry no ▼ (its marker count is the one with no compactions at all) and say which repeat it shows."""
    compactions = pd.DataFrame([
        {"scenario": "s", "strategy": "a", "profile": "64k", "repeat": 1, "trigger": "threshold", "step": s, "tokens_before": 3_000}
        for s in (2, 4)
    ])
    none = context_timeline(_turns(2), compactions.iloc[:0], 8_000, "s · 64k")
    drawn = context_timeline(_turns(2), compactions, 8_000, "s · 64k")
    assert _markers(drawn) == _markers(none)
    assert "repeat 0, the first of 2" in html.unescape(drawn)
    # the same marks on a one-repeat run's line of that repeat are drawn (the count above can see them)
    one = context_timeline(_turns(1), compactions.assign(repeat=0), 8_000, "s · 64k")
    assert _markers(one) > _markers(context_timeline(_turns(1), compactions.iloc[:0], 8_000, "s · 64k"))
    assert "first of" not in html.unescape(one)


def test_the_estimate_error_reads_as_the_percentage_its_name_says():
    """Estimates 10% and 30% off the true count: a mean absolute percentage error of 20%, not "0.200"."""
    requests = pd.DataFrame([
        {"scenario": "s", "strategy": "a", "profile": "64k", "repeat": 0, "request": n, "step": n, "kind": "turn", "overflow": False,
         "true_tokens": 1_000, "estimate_error": -ape * 1_000, "estimate_ape": ape, "cached_tokens": 0, "rebilled_tokens": 0,
         "output_tokens": 0, "cache_write_tokens": 0, "cost_usd": 0.0, "missed_trigger": False,
         **{f"integrity{part}_{fmt}": 0 for fmt in FORMATS for part in ("", "_recorded")}}
        for n, ape in enumerate((0.1, 0.3))
    ])
    table = scenario_table(summarize(requests, pd.DataFrame(), pd.DataFrame()))
    assert table.rows[0][table.header.index("estimate_ape")] == "20.0%"
    assert table.rows[0][table.header.index("estimate_error")] == "-200"


def test_the_leaderboard_note_says_how_its_columns_pool_and_that_counts_are_per_repeat(tmp_path):
    """Two repeats of a deterministic replay: every count is one repeat's, and the note says so; the probe figures
    pool probes (each one weighing one), which the note says instead of "averaged over scenarios"."""
    session = write_tiny_session(tmp_path)
    root = bench.run([session], strategies=["none", "truncate"], profiles=["64k"], probes=str(tmp_path / "probes.yaml"),
                     out=tmp_path / "runs", run_id="twice", jobs=1, repeats=2, progress=False)
    page = (root / "report.html").read_text(encoding="utf-8")
    notes = [html.unescape(re.sub(r"<[^>]+>", "", n)) for n in re.findall(r'<p class="(?:note|meta)">(.*?)</p>', page, re.S)]
    board = next(n for n in notes if n.startswith("One row per strategy and profile"))
    assert "averaged over scenarios" not in board
    assert "each probe weighs one" in board and "mean over the 2 repeats" in board
    assert any("per repeat (the mean over the 2 repeats)" in n for n in notes if n.startswith("Retention:"))
    assert len(re.findall(r'<td data-v="0\.0">0 / 0 / 0 / 0</td>', page)) == 2  # each row's pair errors, sorted by their sum
    # and that is what the column holds: one repeat's requests sent, not both repeats'
    requests = pd.read_parquet(root / "requests.parquet")
    sent = requests[requests["kind"].isin(["turn", "summary"]) & ~requests["overflow"]]
    one_repeat = sent[(sent["repeat"] == 0) & (sent["strategy"] == "none")]["true_tokens"].sum()
    summary = pd.read_parquet(root / "summary.parquet").set_index("strategy")
    assert one_repeat > 0 and summary.loc["none", "input_tokens"] == one_repeat


def test_the_verdicts_pair_errors_sort_by_their_sum():
    """The cell reads "chat / responses / anthropic / gemini"; sorted as text it went by the first number
    only (3 / 0 / 0 / 0 above 0 / 0 / 9 / 9). A format a run did not measure (NaN) adds nothing."""
    from compaction_bench.reports.verdict import StrategyRow

    def row(errors: tuple[float, ...]) -> StrategyRow:
        return StrategyRow("s", 0.5, 0.4, 0.6, 0.5, 10, 1, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, errors, 0)

    assert row((3, 0, 0, 0)).pair_error_total == 3 < row((0, 0, 9, 9)).pair_error_total == 18
    assert row((1, 2, float("nan"), 0)).pair_error_total == 3


def test_a_point_whose_request_overflowed_loses_no_fact_to_its_compaction():
    """p1 present at request 1 and absent at compaction 0's point, request 5, which overflowed: its context reached
    no model, so retention counts p1 absent there, but the compaction dropped nothing that anyone measured (an audit
    found 125 of a run's 185 "facts lost" were such points, all 102 of claude-code's). A seen point still counts."""
    rows = [_probe("p1", 1, True), {**_probe("p1", 5, False, compaction=0), "status": "not_seen"},
            _probe("p2", 1, True), {**_probe("p2", 5, False, compaction=1), "status": "seen"}]
    rows[0]["status"] = rows[2]["status"] = "seen"
    lost = _flips(pd.DataFrame(rows), {})
    assert {key: [p[0] for p in probes] for key, probes in lost.items()} == {("s", "a", "64k", 0, 1): ["p2"]}
