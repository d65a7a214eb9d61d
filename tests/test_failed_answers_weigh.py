"""Failed answers do not tilt `answered` toward the strategies that overflowed (`metrics.aggregate.answer_weights`).

A failed answer leaves its point ungraded for every strategy, but a context that reached no model is graded wrong
without a call and cannot fail, so the points where fewer strategies were asked survive failures more often. The
hand-built session below is the README's worked example: strategy A answers every served context right and
overflows at the end of every probe's life; B is right at 60% of the early points and 30% of the final ones. Every
answer given, A's `answered` is 0.50 and B's 0.45. Half of all calls failing, with the survivors of each kind as
right as the kind is, the unweighted means were 0.33 and 0.40 (measured on the code before this change): B ahead of
A, the wrong way round. Weighed, they are the full table's own figures again."""

from __future__ import annotations

import warnings
from pathlib import Path

import pandas as pd
import pytest

import compaction_bench as bench
from compaction_bench.metrics.aggregate import ANSWER_WEIGHT, beyond_window, compared_rows, overall, paired_differences, summarize
from compaction_bench.metrics.stats import cluster_bootstrap_ci
from compaction_bench.missing_metrics import BEYOND_LEFT_OUT, FAILED_ANSWERS_WEIGHED, health_of
from compaction_bench.reports.gate import Run, probe_test
from tests.model_servers import ModelServer
from tests.test_answerer_that_never_answered import ANSWERER, REFUSED, overflowing_session
from tests.test_metrics_aggregate import probe_row, request_row

PROBES = [f"p{i:02d}" for i in range(20)]
#: B right at the early point (12 of 20) and at the final one (6 of 20)
B_EARLY = {*PROBES[:3], *PROBES[5:14]}
B_FINAL = {*PROBES[:3], *PROBES[10:13]}
#: the points whose answers all came back: 5 of the 20 early ones (B right at 3 of them, 60%), 10 of the 20 final
#: ones (B right at 3, 30%); each call fails at about half the points, and an early point holds two calls
EARLY_SURVIVED, FINAL_SURVIVED = set(PROBES[:5]), set(PROBES[10:])


def served(strategy: str, probe: str, correct: bool, point: str, step: int, failed: bool, scenario: str = "s") -> dict:
    return probe_row(strategy, probe, None if failed else correct, step=step, point=point, scenario=scenario,
                     answer=None if failed else "ZEBRA-42", answer_error=REFUSED if failed else None)


def overflowed(strategy: str, probe: str, scenario: str = "s") -> dict:
    return probe_row(strategy, probe, False, step=30, point="final", present=False, status="not_seen", answer=None,
                     answer_error=None, scenario=scenario)


def session(failures: bool, scenario: str = "s", early_survived: set[str] = EARLY_SURVIVED) -> list[dict]:
    rows = []
    for n, probe in enumerate(PROBES):
        early_failed = failures and probe not in early_survived
        # at a failed early point one of the two calls failed, A's or B's in turn
        rows.append(served("A", probe, True, "checkpoint", 5, early_failed and n % 2 == 0, scenario))
        rows.append(served("B", probe, probe in B_EARLY, "checkpoint", 5, early_failed and n % 2 == 1, scenario))
        rows.append(overflowed("A", probe, scenario))
        rows.append(served("B", probe, probe in B_FINAL, "final", 30, failures and probe not in FINAL_SURVIVED, scenario))
    return rows


def answered(rows: list[dict]) -> dict[str, float]:
    summary = summarize(pd.DataFrame([request_row(s, 0, 100, 0) for s in ("A", "B")]), pd.DataFrame(), pd.DataFrame(rows))
    return dict(zip(summary["strategy"], summary["answered"], strict=True))


def test_every_answer_given_the_figures_are_the_tables_own():
    assert answered(session(failures=False)) == pytest.approx({"A": 0.50, "B": 0.45})


def test_half_the_answers_failing_the_weighed_figures_rank_the_right_way():
    rows = session(failures=True)
    frame = pd.DataFrame(rows)
    assert frame["answer_error"].notna().sum() == 25  # 15 early points (one call each) and 10 final ones
    assert answered(rows) == pytest.approx({"A": 0.50, "B": 0.45})
    # the pooled table (`overall`) over two such sessions, and its interval holding the estimate
    pooled = overall(pd.DataFrame(rows + session(failures=True, scenario="t"))).set_index("strategy")
    assert pooled["answered"].to_dict() == pytest.approx({"A": 0.50, "B": 0.45})
    assert (pooled["answered_lo"] <= pooled["answered"]).all() and (pooled["answered"] <= pooled["answered_hi"]).all()


def test_the_paired_difference_is_the_full_tables():
    # B − A over the probes: 0.45 − 0.50; every answer given, and half failing
    for failures in (False, True):
        change = paired_differences(pd.DataFrame(session(failures)), "A", "B", column="correct")
        assert change.mean == pytest.approx(-0.05)
        assert change.lo <= change.mean <= change.hi


def test_the_gate_sees_no_drop_where_the_candidate_answers_better():
    # the baseline run answers as B did, the candidate as A (better: 0.50 against 0.45), over ten sessions; unweighted,
    # half the answers failing showed a drop (0.40 → 0.33)
    def run(strategy: str, failures: bool) -> Run:
        rows = [row | {"strategy": "x"} for i in range(10) for row in session(failures, scenario=f"s{i}") if row["strategy"] == strategy]
        return Run(Path("."), {}, {"probes": pd.DataFrame(rows)})

    for failures in (False, True):
        test = probe_test((run("B", failures), run("A", failures)), "x", "32k", "answered", 0.05)
        assert test is not None
        assert (test.baseline, test.candidate, test.change) == pytest.approx((0.45, 0.50, 0.05))


def test_a_point_lost_without_a_failure_weighs_nothing():
    # a `judge` probe run without a judge is asked and never graded: no failure, so no weight is added
    # (the rows every pooled figure compares: where answers failed they hold the weights)
    rows = [probe_row("A", "p", True, answer="x", answer_error=None), probe_row("B", "p", None, answer="y", answer_error=None)]
    assert ANSWER_WEIGHT not in compared_rows(pd.DataFrame(rows)).columns
    assert ANSWER_WEIGHT in compared_rows(pd.DataFrame(session(failures=True))).columns


def test_a_point_answered_in_another_repeat_did_not_fail():
    # two repeats of the failing session: repeat 1 answered everything, so every point has a vote and no weight is
    # needed; the figures are the full table's
    rows = session(failures=True) + [row | {"repeat": 1, "sample": 1} for row in session(failures=False)]
    assert answered(rows) == pytest.approx({"A": 0.50, "B": 0.45})
    # both repeats failing alike, the points lost in both are weighed for
    rows = session(failures=True) + [row | {"repeat": 1, "sample": 1} for row in session(failures=True)]
    assert answered(rows) == pytest.approx({"A": 0.50, "B": 0.45})


def test_the_weighted_interval_draws_each_value_with_its_weight():
    clusters = [[0.0, 1.0, 0.5], [1.0, 1.0], [0.0, 0.25, 1.0, 0.0]]
    # equal weights: the same resamples, so the same interval as unweighted
    assert cluster_bootstrap_ci(clusters, weights=[[3.0] * len(c) for c in clusters]) == cluster_bootstrap_ci(clusters)
    # the ones weighing 9 against the zeros' 1: the interval moves up with the weighted mean (0.90 against 0.53)
    weights = [[9.0 if v == 1.0 else 1.0 for v in c] for c in clusters]
    low, high = cluster_bootstrap_ci(clusters, weights=weights)
    plain_low, plain_high = cluster_bootstrap_ci(clusters)
    assert plain_low < 0.53 < plain_high and low < 0.90 < high and low > plain_low


def test_bench_score_asks_the_failed_answers_again_and_the_tables_are_a_clean_runs(tmp_path, monkeypatch):
    # `none` at 32k on a session whose final context overflows, answered by a served model that knows the fact when
    # its context holds it; the endpoint refuses the first two calls (400, as a content filter would): the ceiling and
    # the answer at the first checkpoint. The CLI line and the Python API's warning say what that does to `answered`
    # and that `bench score` on the run asks only those again.
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    monkeypatch.setenv("COMPACTION_BENCH_CACHE", str(tmp_path / "cache"))
    server = ModelServer("openai", reply=lambda call: "ZEBRA-42" if "ZEBRA-42" in call.text else "I do not know.")
    session = overflowing_session(tmp_path)
    common = {"strategies": "none", "profiles": "32k", "out": tmp_path / "runs", "answerer": ANSWERER, "api_base": server.base_url,
              "max_retries": 0, "probes": str(tmp_path / "probes.yaml"), "report": False, "progress": False, "jobs": 1}
    try:
        server.fail(400, times=2)
        with pytest.warns(RuntimeWarning, match=r"1 of 2 probe answers failed"):
            flaky = bench.run(session, run_id="flaky", **common)
        received = server.received
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no failed answer is left to warn of
            scored = bench.score(flaky, report=False)
        # one request: the failed ceiling and answer read the same context (nothing is compacted at the first
        # checkpoint), and the others come from the run's stored replies
        assert server.received == received + 1
        clean = bench.run(session, run_id="clean", **common)  # every answer from the cache: the clean run's grades
        assert server.received == received + 1
    finally:
        server.close()
    columns = ["point_kind", "step", "status", "correct", "ceiling_correct"]
    tables = {root.name: pd.read_parquet(root / "probes.parquet") for root in (flaky, scored, clean)}
    assert tables["flaky"]["answer_error"].notna().sum() == 1
    assert tables[scored.name][columns].astype(str).equals(tables["clean"][columns].astype(str))
    assert list(tables["clean"]["status"]) == ["seen", "seen", "not_seen"] and tables["clean"]["correct"].tolist() == [True, True, False]
    # the flaky run's answered: its second checkpoint stands for both (2/3, the clean run's; unweighed, (1 + 0) / 2)
    answered = {root.name: pd.read_parquet(root / "summary.parquet")["answered"].item() for root in (flaky, scored, clean)}
    assert answered == pytest.approx({"flaky": 2 / 3, scored.name: 2 / 3, "clean": 2 / 3})


def beyond(strategy: str, probe: str, scenario: str = "s") -> dict:
    """A final context too long for the answerer's own window: no call, so no failure that could have gone either way."""
    return probe_row(strategy, probe, None, step=30, point="final", scenario=scenario, answer=None,
                     answer_error=beyond_window(200_000, ANSWERER))


def test_a_context_beyond_the_answerers_window_is_left_out_not_weighed_for():
    # B's final contexts are beyond the answerer's window at ten probes: those points are left out for both strategies,
    # and no other point stands for them: `answered` covers the points whose every context fits the answerer. With no
    # failure besides, no weight; with early failures besides, the early survivors weigh for the early points alone.
    # Half the early points survive, as right as the rest: 5 of the probes whose final point is left out (B right at 4
    # of them, as at 8 of those 10) and 5 of the others (B right at 2, as at 4 of 10).
    survived = {"p00", "p01", "p02", "p03", "p05", "p10", "p11", "p14", "p15", "p16"}

    def rows(failures: bool) -> list[dict]:
        out = []
        for row in session(failures, early_survived=survived):
            if row["point_kind"] == "final" and row["strategy"] == "B":
                # the first ten beyond the window; the other ten answered, failures or not
                row = beyond("B", row["probe_id"]) if row["probe_id"] in PROBES[:10] else served("B", row["probe_id"], row["probe_id"] in B_FINAL, "final", 30, False)
            out.append(row)
        return out

    # by hand, over the probes, each the mean of its points that count: the first ten their early point alone
    expected = {}
    for strategy, early, final in (("A", lambda p: 1.0, lambda p: 0.0), ("B", lambda p: float(p in B_EARLY), lambda p: float(p in B_FINAL))):
        expected[strategy] = sum(early(p) if p in PROBES[:10] else (early(p) + final(p)) / 2 for p in PROBES) / len(PROBES)
    assert expected == pytest.approx({"A": 0.75, "B": 0.575})
    full = rows(failures=False)
    assert answered(full) == pytest.approx(expected)
    assert answered(rows(failures=True)) == pytest.approx(expected)
    health = health_of(pd.DataFrame(rows(failures=True)), {"answerer": ANSWERER})
    assert (health.failed_answers, health.beyond_window, health.first_error) == (20, 10, REFUSED)
    assert health.failed_note() == (
        f"10 of 60 probe answers failed (unscored: {FAILED_ANSWERS_WEIGHED}); first error: {REFUSED}. "
        f"10 of 60 probe questions were put to no model, their context beyond the answerer's window: {BEYOND_LEFT_OUT}")
    # the beyond-window questions alone: no weight, their points left out
    assert health_of(pd.DataFrame(full), {"answerer": ANSWERER}).failed_note() == (
        f"10 of 60 probe questions were put to no model, their context beyond the answerer's window: {BEYOND_LEFT_OUT}")
    # every question beyond the window: `answered` is missing, and the line says why (no call failed)
    nothing = health_of(pd.DataFrame([beyond("B", "p00"), overflowed("A", "p00")]), {"answerer": ANSWERER})
    assert nothing.missing == (f"answered (every one of the 1 questions had a context beyond the answerer {ANSWERER}'s window; "
                               f"first: {beyond_window(200_000, ANSWERER)})",)
