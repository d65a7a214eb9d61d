"""The report's overview figures show the tables' numbers: the same rows (the scenarios every strategy
finished, the paired headline points) weighed the same way (each probe one), on hand-built tables whose
right answers are worked out below."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from compaction_bench.metrics.aggregate import overall, summarize
from compaction_bench.metrics.integrity import FORMATS
from compaction_bench.reports.drawings import Drawings, _overview
from compaction_bench.reports.figures import (
    cache_by_session_position,
    pareto_front,
    presence_by_family_and_age,
    presence_over_session,
    retention_vs_cost,
)

#: Tokens between a fact's source and the probed context, by step: 2 and 3 under 8k, 5 in 8k–32k, 9 in 32k–128k.
AGE = {2: 1_000, 3: 5_000, 5: 10_000, 7: 20_000, 9: 40_000}
ORDER = ["a", "b"]


def _probe(scenario: str, strategy: str, probe: str, kind: str, step: int, present: bool, point: str = "checkpoint") -> dict:
    return {"scenario": scenario, "strategy": strategy, "profile": "64k", "repeat": 0, "sample": 0, "probe_id": probe, "kind": kind,
            "point_kind": "final" if step == 9 and point == "checkpoint" else point, "step": step, "request": step,
            "present": present, "found": "kept" if present else "absent", "fact_age_tokens": AGE[step]}


def tables() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Strategies a and b at 64k over three scenarios; b's cell of s3 failed (no requests), so s3 is left out.

    s1: recall p1 asked at steps 2, 5 and 9 (a: T T F, b: F F F), decision p2 at 5 and 9 (a: T T, b: T F); a also has
    p1 at a checkpoint of step 7 that b lacks (unpaired: F) and p2 at a compaction point (a diagnostic: F).
    s2: recall p3 at 3 and 9 (a: T F, b: T T). s3: recall p4 at 9 for a only (F).
    So, each probe weighing one: a recall = mean(2/3, 1/2) = 7/12, a decision = 1, b recall = mean(0, 1) = 1/2,
    b decision = 1/2. Averaging the rows instead would give a recall 3/5 (paired rows) or 3/7 (all of a's recall rows)."""
    marks = {("s1", "a", "p1"): "TTF", ("s1", "b", "p1"): "FFF", ("s1", "a", "p2"): "TT", ("s1", "b", "p2"): "TF",
             ("s2", "a", "p3"): "TF", ("s2", "b", "p3"): "TT", ("s3", "a", "p4"): "F"}
    steps = {"p1": (2, 5, 9), "p2": (5, 9), "p3": (3, 9), "p4": (9,)}
    rows = [
        _probe(scenario, strategy, probe, "decision" if probe == "p2" else "recall", step, mark == "T")
        for (scenario, strategy, probe), marks_ in marks.items() for step, mark in zip(steps[probe], marks_, strict=True)
    ]
    rows += [_probe("s1", "a", "p1", "recall", 7, False), _probe("s1", "a", "p2", "decision", 7, False, point="compaction")]
    requests = pd.DataFrame([{"scenario": s, "strategy": t, "profile": "64k"} for s in ("s1", "s2", "s3") for t in ORDER if (s, t) != ("s3", "b")])
    return pd.DataFrame(rows), requests


def _chosen(probes: pd.DataFrame | None, requests: pd.DataFrame) -> pd.DataFrame:
    """The rows the report's drawing process gives a figure of the probes (None: of the requests)."""
    seen: list[pd.DataFrame] = []

    def figure(rows: pd.DataFrame, title: str, order: list[str]) -> str:
        seen.append(rows)
        return ""

    _overview(figure, probes, requests, "t", ORDER)
    return seen[0]


def test_the_family_and_age_heatmap_is_each_probe_weighing_one_on_the_paired_rows_of_the_shared_scenarios():
    probes, requests = tables()
    family, age = presence_by_family_and_age(_chosen(probes, requests), ORDER)
    assert family.loc["a", "recall"] == pytest.approx(7 / 12) and family.loc["a", "decision"] == 1.0
    assert family.loc["b", "recall"] == pytest.approx(0.5) and family.loc["b", "decision"] == 0.5
    # a family's cell is `overall()` of that family's probe rows: the tables' pooled retention
    for kind in ("recall", "decision"):
        pooled = overall(probes[probes["kind"] == kind], requests).set_index("strategy")["retention"]
        assert family[kind].to_dict() == pytest.approx(pooled.to_dict())
    # by age, one value per (probe, bucket): a under 8k p1@2 T, p3@3 T; 8k–32k p1@5 T, p2@5 T; 32k–128k p1 F, p2 T, p3 F
    assert list(age.columns) == ["lt8k", "8k_32k", "32k_128k"]
    assert age.loc["a"].tolist() == pytest.approx([1.0, 1.0, 1 / 3]) and age.loc["b"].tolist() == pytest.approx([0.5, 0.5, 1 / 3])


def test_the_heatmap_drawn_for_the_report_states_those_numbers():
    probes, requests = tables()
    with Drawings(requests.assign(kind="turn", request=0, step=0, true_tokens=0, overflow=False, repeat=0, cached_tokens=0, rebilled_tokens=0),
                  pd.DataFrame(), probes, {"config": {"strategies": ORDER}}, jobs=1) as drawn:
        svg = drawn.overview("64k")["Retention by probe family and fact age"]
    numbers = [t for t in re.findall(r">([^<>]*)</text>", svg) if re.fullmatch(r"\d\.\d\d|–", t)]
    # row by row: family (decision, recall), then age (under 8k, 8k–32k, 32k–128k)
    assert numbers == ["1.00", "0.58", "0.50", "0.50", "1.00", "1.00", "0.33", "0.50", "0.50", "0.33"]


def test_retention_over_the_session_reads_the_same_rows():
    probes, requests = tables()
    table = presence_over_session(_chosen(probes, requests))
    # tenths by step over the cell's last step (9): 2 → 2, 3 → 3, 5 → 5, 9 → 9; a's unpaired step 7 is not a point,
    # and s3 (b failed there) is left out: a's last tenth is p1 F, p2 T, p3 F, not also s3's p4 F
    assert table["a"].dropna().to_dict() == pytest.approx({2: 1.0, 3: 1.0, 5: 1.0, 9: 1 / 3})
    assert table["b"].dropna().to_dict() == pytest.approx({2: 0.0, 3: 1.0, 5: 0.5, 9: 1 / 3})


def _requests() -> pd.DataFrame:
    """One cell, two repeats of five requests (the last overflows; a final context is not sent), and the same cell of a
    second scenario with one repeat. Every column the summary reads."""
    rows = []
    for scenario, repeats in (("s1", 2), ("s2", 1)):
        for repeat in range(repeats):
            for index in range(6):
                sent = index < 4
                rows.append({
                    "scenario": scenario, "strategy": "a", "profile": "64k", "repeat": repeat, "request": index, "step": index,
                    "kind": "final" if index == 5 else "turn", "overflow": index == 4, "true_tokens": 1_000 * (index + 1),
                    "cached_tokens": 500 * index if sent else 0, "rebilled_tokens": (100 + repeat) * index if sent else 0,
                    "output_tokens": 10, "cache_write_tokens": 0, "cost_usd": 0.0, "estimate_error": 0.0, "estimate_ape": 0.0,
                    "missed_trigger": False, **{f"integrity{part}_{fmt}": 0 for fmt in FORMATS for part in ("", "_recorded")},
                })
    return pd.DataFrame(rows)


def test_the_cache_figure_adds_up_to_the_tables_numbers():
    requests = _requests()
    grouped = cache_by_session_position(requests)
    summary = summarize(requests, pd.DataFrame(), pd.DataFrame())
    # re-billed per repeat: s1 (0+100+200+300 + 0+101+202+303) / 2 = 603, s2 600: the leaderboard's sum over scenarios
    assert grouped["rebilled_tokens"].sum() == pytest.approx(1_203) == summary["rebilled_tokens"].sum()
    # the hit rate leaves out each repeat's first request: (500+1000+1500) / (2000+3000+4000) in every repeat
    assert grouped["cached_tokens"].sum() / grouped["true_tokens"].sum() == pytest.approx(3_000 / 9_000)
    assert summary["cache_hit_rate"].tolist() == pytest.approx([1 / 3, 1 / 3])
    # a request's tenth: its index over its cell's last sent request (3): 0, 3, 6 and 9
    assert grouped.loc["a"].index.tolist() == [0, 3, 6, 9]
    assert pd.isna(grouped.loc[("a", 0), "hit"])  # the first tenth holds only first requests: no hit rate


def test_the_cache_figure_leaves_out_the_scenario_of_a_failed_cell():
    requests = pd.concat([_requests(), _requests().assign(strategy="b")])
    failed = requests[~((requests["scenario"] == "s2") & (requests["strategy"] == "b"))]  # b's cell of s2 failed
    chosen = _chosen(None, failed)
    assert set(chosen["scenario"]) == {"s1"}
    assert cache_by_session_position(chosen).loc["a", "rebilled_tokens"].sum() == pytest.approx(603)


def test_a_flagged_strategy_is_off_the_pareto_front_and_drawn_as_flagged():
    # `broken` is cheapest and best but cannot serve the window: no choice. Without it, `cheap` and
    # `good` each win on one axis and `worse` loses to `good` on both.
    points = pd.DataFrame(
        {"retention": [0.99, 0.60, 0.90, 0.80], "lo": [0.9, 0.5, 0.8, 0.7], "hi": [1.0, 0.7, 0.95, 0.9],
         "cost_usd": [0.01, 0.10, 0.50, 0.60], "rebilled_tokens": [10, 100, 500, 600], "flagged": [True, False, False, False]},
        index=pd.Index(["broken", "cheap", "good", "worse"], name="strategy"),
    )
    assert sorted(pareto_front(points, "cost_usd")) == ["cheap", "good"]
    assert sorted(pareto_front(points.drop(columns="flagged"), "cost_usd")) == ["broken"]  # what it hid before
    svg = retention_vs_cost(points, "t", list(points.index))
    assert "broken (flagged)" in svg and "cheap (flagged)" not in svg
