"""The verdict: ranking, intervals, P(best) and the generated sentence, from hand-built tables with known answers."""

from __future__ import annotations

import math
from dataclasses import replace

import pandas as pd
import pytest

from compaction_bench.metrics.aggregate import compared_rows
from compaction_bench.reports.verdict import Difference, StrategyRow, few_scenarios_notes, finding, verdicts


def row(name: str, retention: float, rebilled: float, cannot_serve: int = 0, cost: float = float("nan")) -> StrategyRow:
    """A strategy's row; its cost unknown (a model without a price) unless given, so the sentence states re-billed tokens."""
    return StrategyRow(
        strategy=name, retention=retention, lo=retention - 0.05, hi=retention + 0.05, p_best=0.5, points=100, scenarios=1,
        cost_usd=cost, cache_hit_rate=0.9, rebilled_tokens=rebilled, failed_requests=0, overflows=0, compactions=3,
        pair_errors=(0, 0, 0), cannot_serve=cannot_serve,
    )


def test_sentence_states_a_difference_whose_interval_excludes_zero():
    rows = [row("pi", 0.80, 180_000), row("codex-local", 0.68, 100_000)]
    text = finding("64k", rows, Difference("pi", "codex-local", 0.12, 0.06, 0.18, 240, 0.001))
    assert text == "At 64k, pi keeps 12 points more facts than codex-local (95% CI 6–18) at 1.80× the re-billed tokens (a model without a price)."


@pytest.mark.parametrize("lo, hi", [(-0.02, 0.18), (0.0, 0.2), (-0.3, 0.0)])
def test_sentence_never_claims_a_difference_whose_interval_includes_zero(lo, hi):
    rows = [row("pi", 0.80, 180_000), row("codex-local", 0.72, 100_000)]
    text = finding("64k", rows, Difference("pi", "codex-local", 0.08, lo, hi, 240, 0.001))
    assert "no detectable difference" in text
    assert "more facts" not in text


def test_sentence_claims_nothing_the_sign_flip_test_does_not_support():
    # An interval clear of 0 from three scenarios of seven that differ: the two-sided sign-flip test cannot go below 0.25.
    rows = [row("pi", 0.80, 180_000), row("codex-local", 0.72, 100_000)]
    text = finding("64k", rows, Difference("pi", "codex-local", 0.83, 0.5, 1.0, 70, 0.25, probes=70, scenarios=7, changed=3))
    assert "no detectable difference" in text and "more facts" not in text
    assert "but only 3 scenarios differ, and the sign-flip test over the scenarios needs 6, 70 probes in 7 scenarios)" in text
    # three scenarios in all: the interval resamples little but their probes, and the sentence says what it covers
    text = finding("64k", rows, Difference("pi", "codex-local", 0.83, 0.5, 1.0, 30, 0.25, probes=30, scenarios=3, changed=3))
    assert ("no detectable difference in retention between pi and codex-local (+83 points, 95% CI 50–100 over the probes of these 3 "
            "scenarios, 30 probes in 3 scenarios: a test or an interval that holds for other sessions needs 6 scenarios).") in text
    # seven scenarios that differ, some each way: the test could reject, and says what it found
    text = finding("64k", rows, Difference("pi", "codex-local", 0.2, 0.05, 0.4, 70, 0.125, probes=70, scenarios=7, changed=7))
    assert "but the sign-flip test over the 7 scenarios gives p = 0.12, not below 0.05, 70 probes in 7 scenarios)" in text


def test_sentence_names_strategies_that_cannot_serve_the_window():
    rows = [row("truncate", 0.5, 10), row("codex-local", 0.4, 10), row("none", 1.0, 0, cannot_serve=2)]
    text = finding("32k", rows, Difference("truncate", "codex-local", 0.1, 0.05, 0.15, 50, 0.001))
    assert text.endswith("none cannot serve the 32k window (requests that never got through: overflowed, or not sent by the agent).")
    assert "truncate keeps 10 points more facts than codex-local (95% CI 5–15) at 1.00× the re-billed tokens (a model without a price)." in text


def _tables(sessions: int = 1):
    """Four strategies on 40 probes, probe n in scenario s{n % sessions} (one scenario named s by default): a and c keep
    all, b keeps the first 20; d overflows at the end of each scenario."""
    probes, summary, requests = [], [], []
    kept = {"a": lambda n: True, "b": lambda n: n < 20, "c": lambda n: True, "d": lambda n: n % 2 == 0}
    named = ["s"] if sessions == 1 else [f"s{k}" for k in range(sessions)]
    for strategy, keeps in kept.items():
        for n in range(40):
            probes.append({"scenario": named[n % sessions], "strategy": strategy, "profile": "64k", "repeat": 0, "probe_id": f"p{n}", "kind": "recall",
                           "point_kind": "final", "step": 9, "request": 10, "present": keeps(n), "correct": None, "sample": 0,
                           "fact_age_tokens": 1000})
        for scenario in named:
            summary.append({"scenario": scenario, "strategy": strategy, "profile": "64k", "cost_usd": 1.0, "cache_hit_rate": 0.5,
                            "rebilled_tokens": {"a": 200.0, "b": 100.0, "c": 50.0, "d": 10.0}[strategy], "overflows": 0.0, "compactions": 1.0})
            for index in range(3):
                requests.append({"scenario": scenario, "strategy": strategy, "profile": "64k", "repeat": 0, "request": index, "kind": "turn",
                                 "overflow": strategy == "d" and index == 2})
    return pd.DataFrame(summary), pd.DataFrame(probes), pd.DataFrame(requests)


def test_verdict_ranks_with_intervals_p_best_and_flags():
    summary, probes, requests = _tables()
    (verdict,) = verdicts(summary, probes, requests)
    ranked = [r.strategy for r in verdict.rows]
    assert ranked[-1] == "d" and verdict.rows[-1].flagged  # its last turn request overflowed: ranked last
    assert ranked[:2] == ["a", "c"] and ranked[2] == "b"
    assert [r.rank for r in verdict.rows] == [1, 1, 3, 4]  # a and c keep the same facts: one rank, not an order by name
    by = {r.strategy: r for r in verdict.rows}
    assert by["a"].retention == 1.0 and by["b"].retention == 0.5 and by["d"].retention == 0.5
    # a and c keep the same probes: no test can tell which is best, so P(best) is withheld for all, and a note says why
    assert all(math.isnan(r.p_best) for r in verdict.rows)
    assert verdict.notes == ["P(best) is not shown: no scenario differs between a and c, the two highest retentions, and the sign-flip test "
                             "needs 6 before it can tell two strategies apart (it counts scenarios, as a scenario's probes move together); a share "
                             "of bootstrap resamples would claim more than the tests can.",
                             "The intervals pool 1 scenario: with fewer than 6 they resample little but this session's probes, so they describe this "
                             "session (and, with a model summarizer, the summaries drawn for it), not sessions like them; in a simulation of a "
                             "sampling summarizer they held the mean over sessions 51% of the time on one scenario and 86% on three."]
    assert by["a"].lo == pytest.approx(0.025 ** (1 / 40)) and by["a"].hi == 1.0  # 40 probes all kept: not a certainty
    assert 0.3 < by["b"].lo < 0.5 < by["b"].hi < 0.7
    # The top two servable strategies (a, c) do not differ: the sentence says so.
    assert verdict.difference is not None and (verdict.difference.a, verdict.difference.b) == ("a", "c")
    assert verdict.difference.mean == 0.0 and verdict.difference.lo == pytest.approx(-(1 - 0.025 ** (1 / 40)))
    assert "no detectable difference in retention between a and c" in verdict.sentence
    assert "d cannot serve the 64k window" in verdict.sentence


def test_no_strategy_is_ranked_without_probe_points():
    summary, probes, requests = _tables()
    (verdict,) = verdicts(summary, probes.iloc[:0], requests)
    assert [r.rank for r in verdict.rows] == [None] * 4 and verdict.rows[-1].strategy == "d"
    assert verdict.sentence.startswith("At 64k, no probe points to compare.")


def _ab(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame["strategy"].isin(["a", "b"])]


def test_verdict_claims_a_clear_difference():
    """b loses 20 of 40 probes, spread over 8 scenarios (5 probes each): each scenario differs the same way, the
    sign-flip test over them reads 2 × 0.5^8, and the sentence claims the difference."""
    summary, probes, requests = (_ab(frame) for frame in _tables(sessions=8))
    (verdict,) = verdicts(summary, probes, requests)
    diff = verdict.difference
    assert diff is not None and diff.mean == pytest.approx(0.5) and diff.lo > 0.25 and diff.n == 40
    assert (diff.scenarios, diff.changed, diff.p_value) == (8, 8, pytest.approx(2 / 256))
    assert verdict.sentence.startswith("At 64k, a keeps 50 points more facts than b (95% CI ")
    assert verdict.sentence.endswith("40 probes in 8 scenarios) at 1.00× the cost.")  # both cost $8.00 (the tables' cost_usd)
    assert not math.isnan(verdict.rows[0].p_best)


@pytest.mark.parametrize(("sessions", "noted"), [(1, True), (5, True), (6, False), (8, False)])
def test_intervals_over_fewer_scenarios_than_the_test_needs_are_said_to_describe_these_sessions(sessions, noted):
    """The test needs six scenarios (0.5^6 × 2 < 0.05 ≤ 0.5^5 × 2); below that the clustered bootstrap resamples
    little but the sessions' probes (it held the mean over sessions 51% of the time on one scenario in the forty-sixth
    pass's simulation), and the verdict's notes and the terminal say what the intervals describe."""
    summary, probes, requests = (_ab(frame) for frame in _tables(sessions=sessions))
    (verdict,) = verdicts(summary, probes, requests)
    pooled = f"The intervals pool {sessions} scenario{'' if sessions == 1 else 's'}: with fewer than 6"
    assert any(note.startswith(pooled) for note in verdict.notes) is noted
    assert ("an interval that holds for other sessions needs 6 scenarios" in verdict.sentence) is noted
    assert set(few_scenarios_notes(compared_rows(probes, requests))) == ({"64k"} if noted else set())


def test_one_scenario_is_one_unit_however_many_probes_it_holds():
    """The same 20 of 40 probes lost in one scenario: one summary, one context, one unit, and no claim (before, the
    probes counted as 20 independent ones: p = 2 × 0.5^20 and a claim). The sentence and the note say why."""
    summary, probes, requests = (_ab(frame) for frame in _tables())
    (verdict,) = verdicts(summary, probes, requests)
    assert verdict.difference is not None and verdict.difference.lo > 0.25 and not verdict.difference.detectable
    assert verdict.sentence.startswith("At 64k, no detectable difference in retention between a and b (+50 points, 95% CI ")
    assert verdict.sentence.endswith(" over the probes of this scenario, 40 probes in 1 scenario: a test or an interval that holds for other sessions "
                                     "needs 6 scenarios).")
    assert verdict.notes[0].startswith("P(best) is not shown: only 1 scenario differs between a and b, the two highest retentions")
    assert math.isnan(verdict.rows[0].p_best)


def _final(strategy: str, probe: str, present: bool, scenario: str = "s") -> dict:
    return {"scenario": scenario, "strategy": strategy, "profile": "64k", "repeat": 0, "probe_id": probe, "kind": "recall", "point_kind": "final",
            "step": 9, "request": 10, "present": present, "correct": None, "sample": 0, "fact_age_tokens": 1000}


def _three(probes: list[dict]) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    scenarios = sorted({p["scenario"] for p in probes})
    summary = pd.DataFrame([{"scenario": sc, "strategy": s, "profile": "64k", "cost_usd": 1.0, "rebilled_tokens": 1.0} for sc in scenarios for s in "abc"])
    requests = pd.DataFrame([{"scenario": sc, "strategy": s, "profile": "64k", "repeat": 0, "request": 0, "kind": "turn", "overflow": False}
                             for sc in scenarios for s in "abc"])
    return summary, pd.DataFrame(probes), requests


def test_one_probe_is_no_evidence_of_a_difference():
    summary, probes, requests = _three([_final(s, "p0", s == "a") for s in "abc"])
    (verdict,) = verdicts(summary, probes, requests)
    assert verdict.difference is not None and verdict.difference.mean == 1.0 and verdict.difference.lo < 0
    assert verdict.sentence.startswith("At 64k, no detectable difference in retention between a and b (+100 points")


def test_the_sentence_compares_on_the_points_the_ranking_uses():
    """c has rows at p0–p9 only, so the ranking pairs those ten points: a keeps all, b none. On the
    thirty points a and b alone share, b would look better (20 against 10): the sentence must not use them. Probe n is
    in scenario s{n % 10}, so the ten paired points are ten scenarios, each a unit of the sign-flip test."""
    probes = [_final("a", f"p{n}", n < 10, f"s{n % 10}") for n in range(30)] + [_final("b", f"p{n}", n >= 10, f"s{n % 10}") for n in range(30)]
    probes += [_final("c", f"p{n}", False, f"s{n % 10}") for n in range(10)]
    (verdict,) = verdicts(*_three(probes))
    assert [r.strategy for r in verdict.rows[:2]] == ["a", "b"] and [r.retention for r in verdict.rows] == [1.0, 0.0, 0.0]
    assert verdict.difference is not None and verdict.difference.n == 10
    assert verdict.sentence.startswith("At 64k, a keeps 100 points more facts than b (95% CI ")


def test_the_leaderboard_pairs_probes_as_the_verdict_does():
    """b ran on scenario t but left no probe rows there: t's points are not paired, so a's retention
    comes from s alone, in the leaderboard (terminal and report) as in the verdict."""
    from compaction_bench.reports.leaderboard import leaderboard

    summary, probes, requests = _tables()
    summary, probes, requests = (frame[frame["strategy"].isin(["a", "b"])] for frame in (summary, probes, requests))
    lost = probes[probes["strategy"] == "a"].assign(scenario="t", present=False)  # a forgets all of t
    probes = pd.concat([probes, lost], ignore_index=True)
    requests = pd.concat([requests, requests.assign(scenario="t")], ignore_index=True)
    summary = pd.concat([summary, summary.assign(scenario="t")], ignore_index=True)
    (verdict,) = verdicts(summary, probes, requests)
    assert {r.strategy: r.retention for r in verdict.rows} == {"a": 1.0, "b": 0.5}
    header, rows = leaderboard(summary, probes, requests)
    shown = {row[header.index("strategy")]: row[header.index("retention [95% CI]")] for row in rows}
    assert shown["a"].startswith("1.000") and shown["b"].startswith("0.500")


def test_a_failed_cell_takes_its_scenario_out_of_every_strategy_s_pooled_figures():
    """b's cell failed in scenario t (no requests there): t is left out for a too, so the verdict and
    the leaderboard compare a and b on s alone instead of a's two scenarios against b's one."""
    from compaction_bench.metrics.aggregate import overall
    from compaction_bench.reports.leaderboard import leaderboard

    summary, probes, requests = _tables()
    summary, probes, requests = (frame[frame["strategy"].isin(["a", "b"])] for frame in (summary, probes, requests))
    a_in_t = lambda frame: frame[frame["strategy"] == "a"].assign(scenario="t")  # noqa: E731 - a's finished cell in t
    probes = pd.concat([probes, a_in_t(probes).assign(present=False)], ignore_index=True)  # a forgets everything in t
    requests = pd.concat([requests, a_in_t(requests)], ignore_index=True)
    summary = pd.concat([summary, a_in_t(summary).assign(cost_usd=100.0)], ignore_index=True)
    (verdict,) = verdicts(summary, probes, requests)
    by = {r.strategy: r for r in verdict.rows}
    assert by["a"].retention == 1.0 and by["b"].retention == 0.5  # on s alone: with t, a would have 0.5
    assert by["a"].cost_usd == by["b"].cost_usd == 1.0 and by["a"].scenarios == by["b"].scenarios == 1
    assert verdict.notes[0] == "Left out of this comparison: t, where b did not finish its cell (see errors.log)."
    assert verdict.notes[1].startswith("P(best) is not shown: only 1 scenario differs between a and b")  # s alone: one unit
    (named,) = verdicts(summary, probes, requests, strategies=["a", "b", "z"])  # z: a strategy of the run that finished no cell
    assert named.notes[1] == "Not in this comparison: z, which finished no cell at 64k (see errors.log)."
    pooled = overall(probes, requests).set_index("strategy")
    assert pooled.loc["a", "retention"] == 1.0 and pooled.loc["a", "paired_pairs"] == pooled.loc["b", "paired_pairs"] == 40
    header, rows = leaderboard(summary, probes, requests)
    shown = {row[header.index("strategy")]: row for row in rows}
    assert shown["a"][header.index("scenarios")] == shown["b"][header.index("scenarios")] == "1"
    assert shown["a"][header.index("cost $")] == "1.00"


def test_a_strategy_whose_requests_every_api_rejects_is_flagged_and_ranked_after():
    """b keeps more facts than a, but its requests break tool pairs in every wire format (every API
    answers 400): it cannot be the winner. Pair errors in one format only (c) are the wire's choice."""
    probes = [_final("a", f"p{n}", n < 5) for n in range(10)] + [_final("b", f"p{n}", True) for n in range(10)]
    probes += [_final("c", f"p{n}", n < 2) for n in range(10)]
    summary, frame, requests = _three(probes)
    errors = {"a": (0, 0, 0, 0), "b": (3, 1, 2, 1), "c": (0, 4, 0, 0)}
    for k, column in enumerate(("integrity_openai_chat", "integrity_openai_responses", "integrity_anthropic", "integrity_gemini")):
        summary[column] = [errors[s][k] for s in summary["strategy"]]
    # a run measured before the gemini column existed is judged on the formats it measured
    for table in (summary, summary.drop(columns="integrity_gemini")):
        (verdict,) = verdicts(table, frame, requests)
        assert [r.strategy for r in verdict.rows] == ["a", "c", "b"] and [r.rejected for r in verdict.rows] == [False, False, True]
        assert verdict.difference is not None and (verdict.difference.a, verdict.difference.b) == ("a", "c")
        assert verdict.sentence.endswith("b is ranked after the strategies that serve every scenario, as every API would reject some of its "
                                         "requests (HTTP 400): they break tool pairs in every wire format (its one scenario).")
    # b's requests pass Gemini's rules: some API takes them
    (verdict,) = verdicts(summary.assign(integrity_gemini=0), frame, requests)
    assert not any(r.rejected for r in verdict.rows)


def test_the_leaderboard_ranks_flagged_strategies_after_the_others_as_the_verdict_does():
    """b keeps the most facts but cannot serve the window (then: its requests break tool pairs in every wire format):
    the verdict ranks it after a and c, and so do the leaderboard's rows (the terminal's and the report's), where
    ordering by retention alone put it first, above strategies that serve the window."""
    from compaction_bench.reports.leaderboard import leaderboard

    probes = [_final("a", f"p{n}", n < 5) for n in range(10)] + [_final("b", f"p{n}", True) for n in range(10)]
    probes += [_final("c", f"p{n}", n < 2) for n in range(10)]
    summary, frame, requests = _three(probes)
    unserved = summary.assign(cannot_serve=summary["strategy"] == "b")
    rejected = summary.assign(integrity_openai_chat=0, integrity_openai_responses=0, integrity_anthropic=0, integrity_gemini=0)
    rejected.loc[rejected["strategy"] == "b", ["integrity_openai_chat", "integrity_openai_responses", "integrity_anthropic", "integrity_gemini"]] = 1
    for table in (unserved, rejected):
        (verdict,) = verdicts(table, frame, requests)
        header, rows = leaderboard(table, frame, requests)
        assert [row[header.index("strategy")] for row in rows] == [r.strategy for r in verdict.rows] == ["a", "c", "b"]
    header, rows = leaderboard(summary, frame, requests)  # nothing flagged: by retention alone
    assert [row[header.index("strategy")] for row in rows] == ["b", "a", "c"]
    header, rows = leaderboard(summary.assign(cannot_serve=True), frame, requests)  # everything flagged: by retention alone
    assert [row[header.index("strategy")] for row in rows] == ["b", "a", "c"]


def test_a_strategy_whose_threshold_no_admitted_request_reached_is_named():
    """x never compacted and its threshold (150,000) is above every request the 64k window let through (60,000 at
    most), while some overflowed: it ran as no compaction does, and the verdict says so. y compacted; z's threshold
    (50,000) was reached; w reports no threshold; v's requests all fit: none of them is named."""
    def cell(strategy, thresholds, counts, overflows):
        return [{"scenario": "s", "strategy": strategy, "profile": "64k", "repeat": 0, "request": n, "kind": "turn", "threshold": t,
                 "true_tokens": c, "overflow": o} for n, (t, c, o) in enumerate(zip(thresholds, counts, overflows, strict=True))]
    requests = pd.DataFrame(
        cell("x", [150_000] * 3, [30_000, 60_000, 70_000], [False, False, True])
        + cell("y", [150_000] * 3, [30_000, 60_000, 70_000], [False, False, True])
        + cell("z", [50_000] * 3, [30_000, 60_000, 70_000], [False, False, True])
        + cell("w", [None] * 3, [30_000, 60_000, 70_000], [False, False, True])
        + cell("v", [150_000] * 3, [30_000, 40_000, 50_000], [False, False, False])
    )
    compactions = {"x": 0, "y": 2, "z": 0, "w": 0, "v": 0}
    summary = pd.DataFrame([{"scenario": "s", "strategy": k, "profile": "64k", "compactions": n, "cost_usd": 1.0} for k, n in compactions.items()])
    probes = [_final(k, f"p{n}", n < 5) for k in compactions for n in range(10)]
    (verdict,) = verdicts(summary, pd.DataFrame(probes), requests)
    named = [note for note in verdict.notes if "never compacted" in note]
    assert named == ["x never compacted at 64k: its threshold (150,000 tokens) is above every request the window admitted (at most "
                     "60,000), so it ran as no compaction does and its figures measure that; give it a lower trigger where its options "
                     "allow one (`bench list strategies x`) to measure it at this window."]


def test_the_cache_hit_rate_over_scenarios_is_the_ratio_of_the_sums():
    """a hits 90% of 10,000 tokens in one scenario and 10% of 100 in another: 9,010 of 10,100 tokens,
    0.892, not the scenarios' mean 0.5, which would rank it under b's steady 0.6."""
    from compaction_bench.reports.leaderboard import leaderboard

    summary = pd.DataFrame([
        {"scenario": "s", "strategy": "a", "profile": "64k", "cache_hit_rate": 0.9, "cache_eligible_tokens": 10_000, "cost_usd": 1.0},
        {"scenario": "t", "strategy": "a", "profile": "64k", "cache_hit_rate": 0.1, "cache_eligible_tokens": 100, "cost_usd": 1.0},
        {"scenario": "s", "strategy": "b", "profile": "64k", "cache_hit_rate": 0.6, "cache_eligible_tokens": 10_000, "cost_usd": 1.0},
        {"scenario": "t", "strategy": "b", "profile": "64k", "cache_hit_rate": 0.6, "cache_eligible_tokens": 100, "cost_usd": 1.0},
    ])
    requests = pd.DataFrame([{"scenario": sc, "strategy": st, "profile": "64k", "repeat": 0, "request": 0, "kind": "turn", "overflow": False}
                             for sc in "st" for st in "ab"])
    header, rows = leaderboard(summary, None, requests)
    shown = {row[header.index("strategy")]: row[header.index("cache hit")] for row in rows}
    assert shown == {"a": "0.892", "b": "0.600"}
    (verdict,) = verdicts(summary, pd.DataFrame(), requests)
    assert {r.strategy: round(r.cache_hit_rate, 3) for r in verdict.rows} == {"a": 0.892, "b": 0.6}


def test_a_bound_just_below_zero_reads_as_a_number_not_minus_zero():
    rows = [row("pi", 0.80, 180_000), row("codex-local", 0.76, 100_000)]
    text = finding("64k", rows, Difference("pi", "codex-local", 0.04, -0.0004, 0.09, 1494, 0.2))
    assert "95% CI -0.04 to 9" in text and "-0.0 " not in text


def test_sentence_says_in_how_many_scenarios_a_strategy_cannot_serve_the_window():
    """`none` fails one scenario of three and serves the other two; "none cannot serve the 32k window" alone said
    it serves none (an audit found the sentence naming a strategy that failed 1 of 7)."""
    rows = [row("truncate", 0.5, 10), row("codex-local", 0.4, 10), row("none", 1.0, 0), row("pi", 0.9, 0)]
    rows[2] = replace(rows[2], scenarios=3, cannot_serve=1)
    rows[3] = replace(rows[3], scenarios=3, cannot_serve=3)
    diff = Difference("truncate", "codex-local", 0.1, 0.05, 0.15, 50, 0.001)
    assert finding("32k", rows, diff).endswith("pi cannot serve the 32k window, none in 1 of its 3 scenarios (requests that never got through: overflowed, or not sent by the agent).")
    only_partly = [r for r in rows if r.strategy != "pi"]
    assert finding("32k", only_partly, diff).endswith("none cannot serve the 32k window in 1 of its 3 scenarios (requests that never got through: overflowed, or not sent by the agent).")


def test_a_cost_ratio_below_one_keeps_two_significant_digits():
    rows = [row("truncate", 0.5, 201_793), row("codex-local", 0.4, 1_477_395)]
    text = finding("32k", rows, Difference("truncate", "codex-local", 0.1, 0.05, 0.15, 50, 0.001))
    assert "at 0.14× the re-billed tokens" in text  # 201,793 / 1,477,395 = 0.137 read "0.1×"


def test_the_sentence_states_the_cost_in_dollars_where_both_are_priced():
    """An audit's run: codex-local re-billed 0.13× opencode-v1's tokens but cost $18.52 against $17.89, and the
    sentence said "at 0.13× the re-billed tokens", as if it were the cheaper one. Re-billed tokens leave out history
    sent again inside a new text, cached reads and output; the dollars are what a user pays."""
    rows = [row("codex-local", 0.8, 196_000, cost=18.52), row("opencode-v1", 0.73, 1_550_000, cost=17.89)]
    text = finding("64k", rows, Difference("codex-local", "opencode-v1", 0.07, 0.02, 0.12, 300, 0.001))
    assert text == "At 64k, codex-local keeps 7 points more facts than opencode-v1 (95% CI 2–12) at 1.04× the cost."
    free = [replace(r, cost_usd=0.0) for r in rows]
    assert finding("64k", free, Difference("codex-local", "opencode-v1", 0.07, 0.02, 0.12, 300, 0.001)).endswith(", neither costing anything.")
    one_free = [replace(rows[0], cost_usd=0.0), replace(rows[1], cost_usd=0.0213)]  # dollars as the tables show them
    assert finding("64k", one_free, Difference("codex-local", "opencode-v1", 0.07, 0.02, 0.12, 300, 0.001)).endswith(
        ", costing $0.00 against $0.0213.")
