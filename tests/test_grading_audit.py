"""An adversarial audit of retention grading: hand-built replies whose right verdict is known, and the
recorded case that showed a digit inside a word passing a `number` probe.

Each case says why its verdict is right; the corpus case quotes the reply the offline reader gave."""

from __future__ import annotations

from dataclasses import replace

import pytest

import compaction_bench as bench
from compaction_bench.importing import load_transcripts
from compaction_bench.llm import CallSettings, LLMClient, ModelUnavailable
from compaction_bench.metrics.grading import grade_reply, judge_reply, set_f1
from compaction_bench.metrics.measure import measure_cell
from compaction_bench.metrics.retention import checkpoints, source_position
from compaction_bench.probes import Probe, ProbeError, numbers_in
from compaction_bench.scenarios.mining import mine_probes
from tests.conftest import CORPORA
from tests.test_metrics_grading import ScriptedJudge
from tests.test_metrics_measure import LATE, TOKEN, SummarizeAtSecondTurn, session


def number(answer: str, **kw) -> Probe:
    return Probe("n", "recall", "What exit code did it return?", answer, match="number", source="x", **kw)


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        ('bash {"command": "cat ./src/sqlfluff/rules/L001.py | grep -B5 -A5 \\"description\\""}', "001 is part of the name L001"),
        ("grep -A1 pattern file", "the 1 of -A1 is an option's value glued to it"),
        ("The 1st time it ran it printed nothing.", "an ordinal is no count"),
        ("pip installed version 1.2.3", "a version is not the number 1 (nor 2 nor 3)"),
        ("see file_1.log", "a digit inside an identifier"),
    ],
)
def test_a_digit_inside_a_token_is_no_number(reply, why):
    assert grade_reply(number("1"), reply).correct is False, why


@pytest.mark.parametrize(
    ("answer", "reply"),
    [
        ("1", "<returncode>1</returncode>"),
        ("1", "It exited with code 1."),
        ("1024", "It used 1,024 tokens."),
        ("42 ms", "the p50 latency was 42ms"),
        ("-1", "returned -1"),
        ("3.12", "We run Python 3.12."),
        ("2", "ports: 1,2,3"),  # a list of small numbers is three numbers, not 123
    ],
)
def test_a_number_stated_as_a_token_still_counts(answer, reply):
    assert grade_reply(number(answer), reply).correct is True


def test_numbers_in_reads_whole_tokens_and_groups_of_three():
    assert numbers_in("1,024 and 1,2,3 but not L001, -B5, 1.2.3 or 2nd") == [1024.0, 1.0, 2.0, 3.0]
    assert numbers_in("exit -1 after 2-1") == [-1.0, 2.0, 1.0]


@pytest.mark.parametrize("answer", ["n/a", "v2", "version 1.2.3"])
def test_a_number_probe_whose_answer_states_no_number_is_refused(answer):
    # No reply could ever pass it: it would read as a fact never retained.
    with pytest.raises(ProbeError, match="states no number"):
        number(answer)


@pytest.mark.parametrize(
    ("strict_text", "verdict"),
    [
        ("VERDICT: CORRECT\nit names the port", True),
        ("**Verdict:** incorrect - wrong port", False),
        # the judge quoted the rubric's two options before (or instead of) deciding: no verdict
        ("I must answer `VERDICT: CORRECT` or `VERDICT: INCORRECT`. VERDICT: INCORRECT", None),
        ("VERDICT: INCORRECT. On reflection, VERDICT: CORRECT", None),
        ("", None),
    ],
)
def test_a_judge_verdict_is_one_verdict_or_none(strict_text, verdict):
    p = Probe("j", "decision", "Which port?", "5433", match="judge", source="x")
    grade = judge_reply(p, "5433", ScriptedJudge(strict_text, "VERDICT: CORRECT"))
    assert grade.judge_strict is verdict and grade.correct is verdict and grade.judge_lenient is True


def test_a_set_member_with_and_in_its_path_is_one_item():
    # `and` splits items only as a free-standing word: the path src/and/x.py is one item, found.
    assert set_f1(["src/and/x.py", "b.py"], "src/and/x.py, b.py") == 1.0
    assert set_f1(["a.py", "b.py"], "a.py and b.py") == 1.0


def test_case_whitespace_and_quotes_do_not_decide_a_verdict():
    exact = Probe("e", "recall", "Which branch?", "feature/Retry-Backoff", match="exact", source="x")
    assert grade_reply(exact, "  FEATURE/retry-backoff. ").correct is True
    phrase = Probe("c", "error", "What error?", "No module named 'yaml'", source="x")
    assert grade_reply(phrase, "ModuleNotFoundError:   No module named \u2018yaml\u2019").correct is True
    assert grade_reply(phrase, "No module named 'yaml2'").correct is False  # quotes normalized, not dropped


def test_a_probe_is_never_asked_before_its_source():
    transcript = session()
    result = bench.replay(transcript, "none", profile="gpt-5")
    late = replace(LATE, source="out9")  # stated in the second turn's tool output
    rows = measure_cell(result, [TOKEN, late], answerer=None).probes
    source = source_position(transcript, late)
    asked = {(r["point_kind"], r["step"]) for r in rows if r["probe_id"] == "late" and r["point_kind"] != "compaction"}
    # hand count: the checkpoints are the first response of turn 0 (step 0), of turn 1 (step 4) and the end;
    # out9 comes after step 4's first output (call9), so only the end asks about it; u0 precedes step 0's
    # first output (call0), so the token is asked at every point
    assert [(c.kind, c.step) for c in checkpoints(transcript)] == [("checkpoint", 0), ("checkpoint", 4), ("final", 6)]
    assert transcript.position("call9") < source
    assert asked == {("final", 6)}
    assert {(r["point_kind"], r["step"]) for r in rows if r["probe_id"] == "token"} == {("checkpoint", 0), ("checkpoint", 4), ("final", 6)}


def test_a_fact_only_the_summary_states_is_credited_to_the_summary_and_the_tail_to_the_tail():
    result = bench.replay(session(), SummarizeAtSecondTurn, profile="gpt-5")
    rows = {(r["probe_id"], r["point_kind"]): r for r in measure_cell(result, [TOKEN, replace(LATE, source="out9")], answerer=None).probes}
    token, late = rows[("token", "final")], rows[("late", "final")]
    # u0 (the token) went into the summary; out9 came after the compaction and is verbatim in the tail
    assert (token["source_summarized"], token["found"], token["in_summary"]) == (True, "summary", True)
    assert (late["source_summarized"], late["found"], late["in_summary"]) == (False, "kept", False)


def test_a_judge_that_refuses_leaves_the_point_unscored_and_one_that_is_down_fails_the_cell(openai_server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    judge = LLMClient("openai/judge", CallSettings(api_base=openai_server.base_url, max_retries=0, use_cache=False))
    judged = replace(TOKEN, id="token-judged", match="judge")
    result = bench.replay(session(), "none", profile="gpt-5")
    openai_server.fail(400, times=100)  # a refusal (not retryable): recorded on the row, never a wrong answer
    rows = [r for r in measure_cell(result, [judged], answerer=LLMClient("offline/reader"), judge=judge).probes if r["point_kind"] != "compaction"]
    assert rows and openai_server.received > 0
    assert all(r["correct"] is None and r["ceiling_correct"] is None and "refused" in r["answer_error"] for r in rows)
    openai_server.failures.clear()
    openai_server.fail(500, times=100)  # down after its retries: the cell fails (a later run redoes it), nothing is graded
    with pytest.raises(ModelUnavailable):
        measure_cell(result, [replace(judged, id="token-judged-2")], answerer=LLMClient("offline/reader"), judge=judge)


SQLFLUFF = CORPORA / "mini-swe-agent-traj/SWE-agent__mini-swe-agent/deepseek_chat_dev__sqlfluff__sqlfluff-2419.traj.json"


@pytest.mark.corpora
def test_the_recorded_exit_code_probe_is_not_passed_by_the_name_l001():
    # Mined from the recorded session: `cat ./src/sqlfluff/rules/L001.py | grep ...` exited 1. The offline
    # reader answers with the command line itself, which states no exit code; the `001` of L001 read as the
    # number 1 had passed it at every point where the output was still in context, and at the ceiling.
    transcript = load_transcripts(SQLFLUFF)[0]
    probe = next(p for p in mine_probes(transcript) if p.match == "number" and "L001.py" in p.question)
    assert probe.answer == "1"
    result = bench.replay(transcript, "none", profile="gpt-5")
    rows = [r for r in measure_cell(result, [probe], answerer=LLMClient("offline/reader")).probes if r["point_kind"] != "compaction"]
    assert rows and all(r["present"] for r in rows)
    assert all("L001.py" in r["answer"] and "<returncode>" not in r["answer"] for r in rows)
    assert all(r["correct"] is False and r["ceiling_correct"] is False for r in rows)


@pytest.mark.corpora
def test_none_is_graded_as_its_own_ceiling_on_a_recorded_session():
    # `none` sends the uncompacted transcript, so at every seen checkpoint its grade is the ceiling's.
    transcript = load_transcripts(SQLFLUFF)[0]
    result = bench.replay(transcript, "none", profile="gpt-5")
    rows = [
        r for r in measure_cell(result, mine_probes(transcript), answerer=LLMClient("offline/reader")).probes
        if r["point_kind"] != "compaction" and r["status"] == "seen" and r["correct"] is not None
    ]
    assert len(rows) > 50
    assert all(r["correct"] == r["ceiling_correct"] for r in rows)
