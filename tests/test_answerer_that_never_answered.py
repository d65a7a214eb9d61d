"""An answerer (or a judge) that answered nothing grades nothing (`metrics.aggregate.silenced`, `missing_metrics`).

A context that reached no model is graded wrong without a call ("failure is a result"). Before this, when every
question put to the answerer failed (a wrong key, a dead endpoint), those rows were a cell's only grades: a session
that overflowed its window read `answered` 0.0 with an interval, `bench run` exited 0, and the gate compared a
run's real grades with the other run's overflows alone; a judge that judged nothing did the same to its rubrics. The
right answers are the hand-built sessions' and tables' own: an answerer that never answered has no `answered`."""

from __future__ import annotations

import http.server
import re
import threading
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import compaction_bench as bench
from compaction_bench.metrics.aggregate import silenced, summarize
from compaction_bench.missing_metrics import FAILED_ANSWERS_WEIGHED, health_of
from compaction_bench.reports.compare import flipped_probes
from compaction_bench.reports.gate import Run, probe_test
from compaction_bench.transcript import Item, Transcript
from tests.conftest import bench_cli
from tests.model_servers import RefusingHandler
from tests.test_metrics_aggregate import probe_row, request_row

ANSWERER = "openai/gpt-4o-mini"
REFUSED = f"{ANSWERER} (answer) refused the request: AuthenticationError: invalid api key"


def asked(strategy: str, probe: str, correct: bool | None, *, step: int = 9, repeat: int = 0) -> dict:
    """A row whose context was served: the answerer replied (graded `correct`) or, with `correct` None, was refused."""
    failed = correct is None
    return probe_row(strategy, probe, correct, repeat, step=step, point="checkpoint", answer=None if failed else "ZEBRA-42",
                     answer_error=REFUSED if failed else None)


def overflowed(strategy: str, probe: str, *, step: int = 20, repeat: int = 0) -> dict:
    """A row whose context reached no model: graded wrong without a call."""
    return probe_row(strategy, probe, False, repeat, step=step, point="checkpoint", present=False, status="not_seen", answer=None,
                     answer_error=None)


def answered_of(rows: list[dict]) -> dict[str, float]:
    strategies = sorted({r["strategy"] for r in rows})
    summary = summarize(pd.DataFrame([request_row(s, 0, 100, 0) for s in strategies]), pd.DataFrame(), pd.DataFrame(rows))
    return dict(zip(summary["strategy"], summary["answered"], strict=True))


def test_a_cell_whose_answerer_answered_nothing_has_no_answered():
    # x's two served contexts were refused, its final context overflowed (graded wrong without a call): 0.0 before.
    rows = [asked("x", "a", None), asked("x", "b", None), overflowed("x", "a"), overflowed("x", "b")]
    assert np.isnan(answered_of(rows)["x"])
    assert silenced(pd.DataFrame(rows))["correct"].isna().all()


def test_a_cell_whose_answerer_answered_some_questions_keeps_its_grades():
    # one reply (right), one refusal: the refused point is unscored, the overflowed ones stay wrong. The reply stands
    # for both served points (`answer_weights`: half the served points failed, none of the overflowed), so half of
    # x's points read right and half wrong: 0.5 (unweighted, probe a (1 + 0) / 2 and probe b's overflow alone 0: 0.25)
    rows = [asked("x", "a", True), asked("x", "b", None), overflowed("x", "a"), overflowed("x", "b")]
    assert list(silenced(pd.DataFrame(rows))["correct"]) == [True, None, False, False]
    assert answered_of(rows)["x"] == pytest.approx(0.5)


def test_the_other_strategies_are_not_ranked_on_its_overflows_alone():
    # y answered everywhere; x's answerer nothing. x's only grades were its overflows at step 20, where y was right:
    # y 1.0 against x 0.0 on those points alone. Paired, no point has both grades: neither has an answered.
    rows = [asked("x", "a", None), overflowed("x", "a"), asked("y", "a", True), asked("y", "a", True, step=20)]
    answered = answered_of(rows)
    assert np.isnan(answered["x"]) and np.isnan(answered["y"])


def test_a_repeat_that_answered_nothing_loses_only_its_own_grades():
    rows = [asked("x", "a", None, repeat=0), overflowed("x", "a", repeat=0), asked("x", "a", True, repeat=1), overflowed("x", "a", repeat=1)]
    assert list(silenced(pd.DataFrame(rows))["correct"]) == [None, None, True, False]


def test_the_run_health_counts_the_questions_asked_not_the_rows():
    config = {"answerer": ANSWERER}
    nothing = health_of(pd.DataFrame([asked("x", "a", None), asked("x", "b", None), overflowed("x", "a")]), config)
    assert nothing.missing == (f"answered (the answerer {ANSWERER} failed on all 2 calls; first error: {REFUSED})",)
    some = health_of(pd.DataFrame([asked("x", "a", True), asked("x", "b", None), overflowed("x", "a")]), config)
    assert not some.missing and (some.failed_answers, some.asked) == (1, 2) and not some.silent_cells
    assert some.lines() == [f"1 of 2 probe answers failed (unscored: {FAILED_ANSWERS_WEIGHED}); first error: {REFUSED}"]
    # the Python API (`run`, `score`, `load_run`) warns the same line (before, only `bench run` printed it)
    with pytest.warns(RuntimeWarning, match=r"^run: 1 of 2 probe answers failed \(unscored: their points are left out"):
        bench._warn_missing_metrics("run", some)
    # one cell's answerer answered nothing, another's did: the run computes answered, but not there
    one = health_of(pd.DataFrame([asked("x", "a", None), overflowed("x", "a"), asked("y", "a", True)]), config)
    assert not one.missing and one.silent_cells == ("s · x · 32k",)
    assert one.lines()[1] == one.silent_note()
    assert one.silent_note().endswith("nor at its points for any strategy of its scenario and profile: s · x · 32k")
    # the Python API (`run`, `score`, `load_run`) warns what `bench run` prints
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bench._warn_missing_metrics("run", one)
    assert [str(w.message) for w in caught] == [f"run: {line}" for line in one.lines()]  # the failed answers, the silent cell
    assert re.search("answered not computed where every question of a cell put to the answerer failed.*s · x · 32k", one.lines()[1])


def test_a_judge_that_judged_nothing_grades_nothing():
    # x's answerer answered the recall probe a (right); the judge failed at the judge probe j's served context, whose
    # final context overflowed (graded wrong by both rubrics without a call). Before: judge_strict 0.0, and answered
    # (1.0 + 0.0) / 2 = 0.5 with j's overflow counted.
    judged = {"match": "judge", "kind": "decision"}
    rows = [asked("x", "a", True) | {"match": "contains"}, asked("x", "j", None) | judged,
            overflowed("x", "j") | judged | {"judge_strict": False, "judge_lenient": False}]
    summary = summarize(pd.DataFrame([request_row("x", 0, 100, 0)]), pd.DataFrame(), pd.DataFrame(rows)).iloc[0]
    assert summary["answered"] == 1.0 and np.isnan(summary["judge_strict"]) and np.isnan(summary["judge_lenient"])
    # the answerer answered: nothing is missing; the cell's judge probes are named as what got no grade
    health = health_of(pd.DataFrame(rows), {"answerer": ANSWERER})
    assert not health.missing and health.silent_cells == ("s · x · 32k (its judge probes)",)


def test_a_judge_probe_run_without_a_judge_names_no_silent_cell():
    # without --judge a `judge` probe's reply is asked and never graded; that is no failure of the answerer
    rows = [asked("x", "a", True) | {"match": "contains"}, asked("x", "j", True) | {"match": "judge", "correct": None}]
    health = health_of(pd.DataFrame(rows), {"answerer": ANSWERER})
    assert not health.missing and not health.silent_cells and health.lines() == []


def test_bench_compare_lists_no_answer_lost_by_a_run_whose_answerer_answered_nothing():
    # the baseline answered right at the end; the candidate's final context overflowed (its presence lost: a real flip) and
    # its answerer was refused everywhere else, so the final point's "correct: True → False" is no grade of it
    baseline = pd.DataFrame([asked("x", "p", True), asked("x", "p", True, step=20)])
    candidate = pd.DataFrame([asked("x", "p", None), overflowed("x", "p")])
    (flip,) = flipped_probes(baseline, candidate, {})
    assert (flip["step"], flip["changes"]) == (20, "present: True → False")
    # a candidate whose answerer answered at the checkpoint (wrongly) is graded at both points
    answered = pd.DataFrame([asked("x", "p", False), overflowed("x", "p")])
    assert [f["changes"] for f in flipped_probes(baseline, answered, {})] == ["correct: True → False", "present: True → False, correct: True → False"]


def overflowing_session(folder: Path) -> Path:
    """The tiny session's fact, then a 6,000-line build log that takes the final context past a 32k window."""
    log = "\n".join(f"line {i}: worker {i % 7} finished batch {i * 13} in {i % 97} ms" for i in range(6000))
    items = (
        Item("u0", "user", "Remember: the deploy key is ZEBRA-42. Now list the files.", turn=0),
        Item("c0", "tool_call", call_id="c0", tool_name="bash", arguments='{"command": "ls"}', response=0, turn=0),
        Item("r0", "tool_result", "setup.py\nREADME.md\nbuild.log", call_id="c0", turn=0),
        Item("a0", "assistant", "Three files: setup.py, README.md and build.log.", response=1, turn=0),
        Item("u1", "user", "Show me build.log.", turn=1),
        Item("c1", "tool_call", call_id="c1", tool_name="bash", arguments='{"command": "cat build.log"}', response=2, turn=1),
        Item("r1", "tool_result", log, call_id="c1", turn=1),
        Item("a1", "assistant", "Every batch finished.", response=3, turn=1),
    )
    (folder / "probes.yaml").write_text(
        "- id: key\n  kind: recall\n  question: What is the deploy key?\n  answer: ZEBRA-42\n  match: contains\n  source_text: ZEBRA-42\n"
    )
    return Transcript("overflowing", items).write(folder / "overflowing.jsonl")


def test_bench_run_says_answered_is_missing_when_only_overflows_were_graded(tmp_path):
    session = overflowing_session(tmp_path)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), RefusingHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        proc = bench_cli("run", str(session), "-s", "none", "-p", "32k", "-o", str(tmp_path), "--run-id", "r", "--probes",
                         str(tmp_path / "probes.yaml"), "--answerer", ANSWERER, "--api-base", f"http://127.0.0.1:{server.server_address[1]}",
                         "--max-retries", "0", "--no-report", env={"OPENAI_API_KEY": "sk-test-not-a-key"})
    finally:
        server.shutdown()
    probes = pd.read_parquet(tmp_path / "r" / "probes.parquet")
    # the session is what it was built to be: the served checkpoints asked and refused, the final context overflowed
    served = probes[probes["status"] == "seen"]
    assert len(served) >= 1 and served["answer_error"].notna().all()
    assert (probes[probes["status"] == "not_seen"]["correct"] == False).all()  # noqa: E712 - graded wrong without a call
    assert proc.returncode == 3, proc.stderr
    assert f"metric not computed: answered (the answerer {ANSWERER} failed on all {len(served)} calls" in proc.stderr
    assert pd.read_parquet(tmp_path / "r" / "summary.parquet")["answered"].isna().all()


def test_the_gate_does_not_compare_a_run_whose_answerer_answered_nothing():
    # Ten sessions, one probe each, asked at a checkpoint and at the end. The baseline's answerer got both right; the
    # candidate's was refused at the checkpoint and its final context overflowed. Before, the gate compared the two at
    # the end alone (1 against 0 in every session) and reported a drop of 1.0 in `answered`; there is nothing to compare.
    def run(rows: list[dict]) -> Run:
        return Run(Path("."), {}, {"probes": pd.DataFrame(rows)})

    baseline = [row | {"scenario": f"s{i}"} for i in range(10) for row in (asked("x", "p", True), asked("x", "p", True, step=20))]
    candidate = [row | {"scenario": f"s{i}"} for i in range(10) for row in (asked("x", "p", None), overflowed("x", "p"))]
    assert probe_test((run(baseline), run(candidate)), "x", "32k", "answered", 0.05) is None
    # the same candidate with an answerer that answered at the checkpoint (wrongly) is compared at both points
    answered = [row | {"scenario": f"s{i}"} for i in range(10) for row in (asked("x", "p", False), overflowed("x", "p"))]
    test = probe_test((run(baseline), run(answered)), "x", "32k", "answered", 0.05)
    assert test is not None and test.change == pytest.approx(-1.0) and test.probes == 10
