"""Fifth audit of the reports, against answers worked out apart from the code: the judge's verdicts aggregated as
`answered` is (an overflowed judge probe rejected by both rubrics, each probe weighing one, on the paired points,
voted over repeats); P(best) among the strategies the verdict ranks as serving the window; P(best) never rounded
onto 0% or 100%; the sweep notebook's unknown dollars kept unknown; an unpriced run's re-billed tokens panel kept."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

import compaction_bench as bench
from compaction_bench.llm import LLMClient, LLMResult
from compaction_bench.metrics.aggregate import overall, paired_differences, summarize
from compaction_bench.metrics.measure import measure_cell
from compaction_bench.probes import Probe
from compaction_bench.profiles import get_profile
from compaction_bench.reports.figures import retention_vs_cost
from compaction_bench.reports.html import render_pages
from compaction_bench.reports.leaderboard import format_chance, leaderboard
from compaction_bench.reports.verdict import servable, verdicts
from compaction_bench.runner import Case
from compaction_bench.scenarios.synthetic import generate
from tests.test_metrics_measure import session
from tests.test_notebooks import SWEEP, execute, printed, shown_rows, table_of, tagged

INTEGRITY = ("integrity_openai_chat", "integrity_openai_responses", "integrity_anthropic", "integrity_gemini")
#: The verdict table's P(best) cells of a report page: the cell after the interval bar (`report.html.j2`).
P_BEST_CELL = re.compile(r'</i></span></td>\s*<td[^>]*>([^<]*)</td>')


def _request(strategy: str, request: int, *, scenario: str = "s", repeat: int = 0, broken: bool = False, cost: float = 0.001) -> dict:
    row = {"scenario": scenario, "strategy": strategy, "profile": "32k", "repeat": repeat, "request": request, "step": request, "kind": "turn",
           "overflow": False, "refused": False, "missed_trigger": False, "estimate_error": None, "estimate_ape": None, "cached_tokens": 0,
           "true_tokens": 100, "rebilled_tokens": 0, "cache_write_tokens": 0, "output_tokens": 10, "cost_usd": cost}
    return row | {c: int(broken) for c in INTEGRITY} | {c.replace("integrity_", "integrity_recorded_"): 0 for c in INTEGRITY}


# ---------------------------------------------------------------------------- 1: the judge's verdicts
class Accepting:
    """A judge that accepts every reply under both rubrics."""

    def complete(self, messages, **kwargs) -> LLMResult:
        return LLMResult(text="VERDICT: CORRECT", model="test/accepting")


def test_an_overflowed_judge_probe_is_rejected_by_both_rubrics_as_it_is_unanswered():
    """README, "Failure is a result": a request that overflowed reached no model, so its probes are absent and
    unanswered. The strict verdict decides a judge probe's `correct` (`grading.judge_reply`), so where `correct` is
    False for want of a reply, no rubric accepted one either. Before: both verdicts None there, so their means left
    out exactly the contexts a strategy could not serve (the audit's `none` read 0.988 strict beside 0.386 answered)."""
    result = bench.replay(session(), "none", profile=replace(get_profile("gpt-5"), context_window=4_000))
    decision = Probe("why", "decision", "Why read the modules?", "the deploy token must be ZX-4471", match="judge", source="u0")
    rows = measure_cell(result, [decision], answerer=LLMClient("offline/reader"), judge=Accepting()).probes
    rows = [r for r in rows if r["point_kind"] != "compaction"]
    seen, unseen = [r for r in rows if r["status"] == "seen"], [r for r in rows if r["status"] == "not_seen"]
    assert seen and unseen
    assert {(r["correct"], r["judge_strict"], r["judge_lenient"]) for r in seen} == {(True, True, True)}
    assert {(r["correct"], r["judge_strict"], r["judge_lenient"]) for r in unseen} == {(False, False, False)}


def _judged(strategy: str, probe: str, step: int, strict: bool | None, lenient: bool | None, *, sample: int = 0, status: str = "seen",
            match: str = "judge") -> dict:
    """A probe row as `retention.probe_rows` writes it: on a judge probe `correct` is the strict verdict."""
    return {"scenario": "s", "strategy": strategy, "profile": "32k", "repeat": sample, "sample": sample, "probe_id": probe, "kind": "decision",
            "match": match, "point_kind": "final" if step == 9 else "checkpoint", "step": step, "request": step + 10 * sample,
            "present": status == "seen", "found": "kept" if status == "seen" else "absent", "in_summary": False, "source_summarized": False,
            "status": status, "correct": strict, "ceiling_correct": None, "judge_strict": strict, "judge_lenient": lenient,
            "fact_age_tokens": 100}


def test_the_judge_columns_weigh_each_probe_once_on_the_paired_points():
    """Two judge probes: j1 asked at steps 1, 2, 3 and at the end (9), j2 at the end only; x is a `contains` probe (no
    verdicts). b's request at step 2 overflowed (rejected by both rubrics); at step 3 the judge wrote b no lenient
    verdict, so that point is unscored under the lenient rubric for a too (README, Statistics: a point at which some
    strategy has no grade is unscored for all of them). By hand, each probe's mean first, then the mean over probes:
      strict:  a = (4/4 + 0) / 2 = 0.5,      b = (1/4 + 1) / 2 = 0.625
      lenient: a = (1/3 + 0) / 2 = 1/6,      b = (1/3 + 1) / 2 = 2/3   (j1 at steps 1, 2 and 9)
    Before: a mean over rows, unpaired: strict a 4/5 = 0.8 over b 2/5 = 0.4 (the order reversed), lenient 0.4 and 0.5."""
    T, F = True, False
    rows = [_judged("a", "j1", step, T, lenient) for step, lenient in zip((1, 2, 3, 9), (T, F, T, F), strict=True)]
    rows += [_judged("a", "j2", 9, F, F)]
    rows += [_judged("b", "j1", 1, T, T), _judged("b", "j1", 2, F, F, status="not_seen"), _judged("b", "j1", 3, F, None), _judged("b", "j1", 9, F, F)]
    rows += [_judged("b", "j2", 9, T, T)]
    rows += [_judged(s, "x", 9, None, None, match="contains") | {"correct": True} for s in "ab"]
    requests = pd.DataFrame([_request(s, k) for s in "ab" for k in range(10)])
    summary = summarize(requests, pd.DataFrame(), pd.DataFrame(rows)).set_index("strategy")
    assert summary.loc["a", "judge_strict"] == pytest.approx(0.5) and summary.loc["b", "judge_strict"] == pytest.approx(0.625)
    assert summary.loc["a", "judge_lenient"] == pytest.approx(1 / 6) and summary.loc["b", "judge_lenient"] == pytest.approx(2 / 3)
    # `answered` on the same points adds x (answered by both): (1 + 0 + 1) / 3 and (1/4 + 1 + 1) / 3
    assert summary.loc["a", "answered"] == pytest.approx(2 / 3) and summary.loc["b", "answered"] == pytest.approx(0.75)


def test_the_judge_columns_are_voted_over_repeats_as_answered_is():
    """Three repeats (samples) of j1 at the end. a: strict F, T, T (2 of 3 pass), lenient T, F and none (1 of the 2
    scored: a tie, which does not pass); b: strict F, F, T, lenient T, T, F. So strict a 1, b 0 and lenient a 0, b 1.
    Before: the first repeat's verdicts (strict a 0, lenient a 1)."""
    T, F = True, False
    verdicts_of = {"a": ((F, T), (T, F), (T, None)), "b": ((F, T), (F, T), (T, F))}
    rows = [_judged(s, "j1", 9, strict, lenient, sample=n) for s, samples in verdicts_of.items() for n, (strict, lenient) in enumerate(samples)]
    requests = pd.DataFrame([_request(s, k, repeat=n) for s in "ab" for n in range(3) for k in range(10)])
    summary = summarize(requests, pd.DataFrame(), pd.DataFrame(rows)).set_index("strategy")
    assert (summary.loc["a", "judge_strict"], summary.loc["a", "judge_lenient"]) == (1.0, 0.0)
    assert (summary.loc["b", "judge_strict"], summary.loc["b", "judge_lenient"]) == (0.0, 1.0)
    assert list(summary["answered"]) == list(summary["judge_strict"])  # one judge probe: its strict verdict is `correct`


@pytest.mark.slow
def test_the_audits_judge_run_no_longer_ranks_the_strategy_that_cannot_serve_first(openai_server, monkeypatch, tmp_path):
    """The audit's judge_repro: the short-turns session of 60k tokens at 32k, its string probes made `judge` probes, a
    judge that accepts a reply stating a reference. `none` overflows at 114 of its 198 paired points; it read judge_strict
    0.988, first, above codex-local's 0.879. A judge probe's strict verdict is its `correct`, so every strategy's
    judge_strict is its `answered`."""

    def judge(call) -> str:
        references = re.findall(r"^- (.*)$", call.last_user.split("Answer to grade:")[0], re.M)
        reply = call.last_user.split("Answer to grade:")[1].split("Grading rules:")[0].lower()
        return "VERDICT: CORRECT" if any(r.strip().lower() in reply for r in references) else "VERDICT: INCORRECT"

    openai_server.reply = judge
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    scenario = generate("short-turns", seed=0, target_tokens=60_000)
    probes = tuple(replace(p, match="judge", reject=()) for p in scenario.probes if isinstance(p.answer, str))
    root = bench.run(cases=[Case(scenario.name, scenario.transcript, probes)], strategies=["none", "codex-local"], profiles=["32k"],
                     judge="openai/judge", api_base=openai_server.base_url, out=tmp_path / "runs", run_id="judge", jobs=1, progress=False,
                     report=False)
    summary = bench.load_run(root)["summary"].set_index("strategy")
    assert summary.loc["none", "cannot_serve"]
    for strategy in ("none", "codex-local"):
        assert summary.loc[strategy, "judge_strict"] == pytest.approx(summary.loc[strategy, "answered"])
    assert summary.loc["none", "judge_strict"] < summary.loc["codex-local", "judge_strict"]
    assert summary.loc["none", "judge_lenient"] < summary.loc["codex-local", "judge_lenient"]


# ---------------------------------------------------------------------------- 3: P(best) among the strategies that serve
#: The hand-built tables' scenarios (probe n is in scenario `s{n % 8}`) and repeats: the fewest units that differ, all
#: one way, that let the two-sided sign-flip test reach p < 0.05, 6, with some to spare for the scenarios (2 × 0.5^8 =
#: 0.0078) and just enough for the repeats of one scenario (2 × 0.5^6 = 0.031), its summary draws.
SCENARIOS, REPEATS = 8, 6


def _final(strategy: str, probe: int, present: bool, repeat: int = 0) -> dict:
    return {"scenario": f"s{probe % SCENARIOS}", "strategy": strategy, "profile": "32k", "repeat": repeat, "probe_id": f"p{probe}",
            "kind": "recall", "point_kind": "final", "step": 9, "request": 9, "present": present, "correct": None, "sample": repeat,
            "fact_age_tokens": 1000, "found": "kept" if present else "absent", "source_summarized": False, "status": "seen",
            "ceiling_correct": None}


def _b_keeps(probe: int, repeat: int) -> bool:
    """b keeps 40 of a's 60 facts in every repeat, a different 40 by turns: it drops facts 40–59 in repeats 0 and 3,
    0–19 in 1 and 4, 20–39 in 2 and 5. So each of a's facts 2 repeats in 6 (b's retention 60 × 4/6 / 80 = 0.5), and in
    every scenario every repeat b drops 2 or 3 of a's facts, a different 2 or 3 in each third of the repeats."""
    dropped = (40 + 20 * repeat) % 60
    return probe < 60 and not dropped <= probe < dropped + 20


def _flagged_leader(orphan_keeps: int) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The audit's case by hand, over 80 probes in eight scenarios (probe n in `s{n % 8}`, ten each) and six repeats:
    `orphan` sends every request with a stray tool result (pair errors in every wire format: no API accepts it) and
    keeps the first `orphan_keeps` facts, `a` the first 60, in every repeat; `b` keeps 40 of a's 60, a different 40 by
    turns (`_b_keeps`), as a sampling summarizer would. Summary, probes and requests."""
    keeps = {"orphan": lambda n, r: n < orphan_keeps, "a": lambda n, r: n < 60, "b": _b_keeps}
    probes = pd.DataFrame([_final(s, n, kept(n, r), r) for s, kept in keeps.items() for r in range(REPEATS) for n in range(80)])
    requests = pd.DataFrame([_request(s, k, scenario=f"s{n}", repeat=r, broken=s == "orphan")
                             for s in keeps for n in range(SCENARIOS) for r in range(REPEATS) for k in range(10)])
    return summarize(requests, pd.DataFrame(), probes), probes, requests


def test_p_best_ranks_the_strategies_that_serve_and_a_flagged_leader_shows_a_dash():
    """orphan keeps all 80, twenty more than a, and is flagged: ranked after a and b, neither in the sentence nor on the
    Pareto front. Before: P(best) ranked it too, so a, ranked first, read 0.0% beside orphan's 100.0%. Among a and b, a
    keeps every fact b keeps in every repeat, and b keeps each of a's 60 only in 4 of the 6 repeats: a's mean is above
    b's on 60 probes and equal on 20, a lead in all eight scenarios (p = 2 / 2^8: claimed; retention 0.75 against 0.5),
    so a is first in every resample that draws one of the 60. Per scenario, a's lead is one in each of the six repeats,
    never the same in all (p = 2 / 2^6: claimed), and a is first in every resample of the scenario's ten probes but one
    that draws only its 2 or 3 ties: (3/10)^10 ≈ 6e-6 at the most. So orphan "–", a above 0.99 and b below 0.01, the
    two adding up to 1, in the pooled table, the verdict, the leaderboard, and per scenario."""
    summary, probes, requests = _flagged_leader(80)
    (verdict,) = verdicts(summary, probes, requests)
    assert [(r.strategy, r.rank, r.flagged) for r in verdict.rows] == [("a", 1, False), ("b", 2, False), ("orphan", 3, True)]
    by = {r.strategy: r for r in verdict.rows}
    assert (by["a"].retention, by["b"].retention) == (pytest.approx(0.75), pytest.approx(0.5))
    lead = paired_differences(probes, "b", "a")  # b − a: every scenario one way
    assert (lead.scenarios, lead.changed, lead.p_value, lead.detectable) == (SCENARIOS, SCENARIOS, pytest.approx(2 * 0.5**SCENARIOS), True)
    assert math.isnan(by["orphan"].p_best) and by["a"].p_best > 0.99 and by["a"].p_best + by["b"].p_best == pytest.approx(1.0)
    assert verdict.sentence.startswith("At 32k, a keeps 25 points more facts than b")
    assert verdict.notes == ["P(best) ranks only the strategies that serve the window, as the sentence does: orphan is flagged, so its P(best) "
                             "is –."]
    header, rows = leaderboard(summary, probes, requests)
    shown = {row[0]: row[header.index("P(best)")] for row in rows}
    assert shown["orphan"] == "–" and shown["a"] in (">99.9%", "100%") and shown["b"] in ("<0.1%", "0%")
    per_scenario = summary.set_index(["scenario", "strategy"])["p_best"]
    assert len(per_scenario.xs("a", level="strategy")) == SCENARIOS
    assert per_scenario.xs("orphan", level="strategy").isna().all()
    assert (per_scenario.xs("a", level="strategy") > 0.99).all()
    assert (per_scenario.xs("a", level="strategy") + per_scenario.xs("b", level="strategy")).to_numpy() == pytest.approx(1.0)
    assert servable(summary, requests) == {"32k": {"a", "b"}}  # what the report's pooled table ranks (`html`)
    pooled = overall(probes, requests, contenders=servable(summary, requests)).set_index("strategy")
    assert math.isnan(pooled.loc["orphan", "p_best"]) and pooled.loc["a", "p_best"] == by["a"].p_best
    assert overall(probes, requests).set_index("strategy").loc["orphan", "p_best"] > 0.99  # without contenders: every strategy


def test_a_flagged_leader_the_tests_cannot_tell_apart_no_longer_withholds_p_best_from_the_others():
    """orphan keeps a's 60 facts and two more (p60 and p61): two scenarios differ (s4 and s5), too few for any claim.
    Before: the leading pair was (orphan, a), so P(best) was withheld for every strategy, although a's lead over b, the
    pair the sentence compares, is claimed. Now orphan shows "–" and a and b their P(best)."""
    summary, probes, requests = _flagged_leader(62)
    assert overall(probes, requests)["p_best"].isna().all()  # what every table showed
    (verdict,) = verdicts(summary, probes, requests)
    by = {r.strategy: r for r in verdict.rows}
    assert math.isnan(by["orphan"].p_best) and by["a"].p_best > 0.99
    assert not any("not shown" in note for note in verdict.notes)


@pytest.fixture(scope="module")
def flagged_run(tmp_path_factory) -> Path:
    """The audit's flagtop run: `none` with one stray tool result in every request (pair errors in every wire format),
    against truncate at 64k, on two synthetic sessions of 45k tokens."""
    folder = tmp_path_factory.mktemp("flagged")
    plugin = folder / "orphan.py"
    plugin.write_text('''
from compaction_bench.request import Message, Request
from compaction_bench.strategies.baselines import NoCompaction


class KeepAllOrphan(NoCompaction):
    """`none`, but every request carries a tool result whose call is not in it: every wire format rejects it."""

    name = "keep-all-orphan"

    def request(self):
        messages = list(super().request().messages)
        messages.insert(1, Message(role="tool", content="stray result", tool_call_id="call_orphan_x"))
        return Request(tuple(messages))
''')
    sessions = [generate("short-turns", seed=0, target_tokens=45_000), generate("long-loop", seed=1, target_tokens=45_000)]
    return bench.run(cases=[Case(s.name, s.transcript, tuple(s.probes)) for s in sessions],
                     strategies=[f"{plugin}:KeepAllOrphan", "truncate@trigger_ratio=0.6,target_ratio=0.45"], profiles=["64k"],
                     out=folder / "runs", run_id="flagged", jobs=1, progress=False, report=False)


@pytest.mark.slow
def test_the_reports_verdict_shows_no_p_best_for_the_flagged_leader(flagged_run):
    """Before: truncate, rank 1, read P(best) 0.0% and the flagged strategy below it 100.0%. truncate is the one strategy
    that serves the window: as a strategy alone, its P(best) is 1 ("100%"), and the flagged one's "–"."""
    page = render_pages(flagged_run)["report.html"]
    verdict = page[page.index('<table class="verdict'):]
    assert P_BEST_CELL.findall(verdict[: verdict.index("</table>")]) == ["100%", "–"]


# ---------------------------------------------------------------------------- 4: P(best) never rounded onto a bound
@pytest.mark.parametrize("value, text", [
    (0.9996, ">99.9%"), (0.99951, ">99.9%"), (0.999, "99.9%"), (0.5, "50.0%"), (0.001, "0.1%"), (0.0004, "<0.1%"), (1e-9, "<0.1%"),
    (1.0, "100%"), (0.0, "0%"), (float("nan"), "–"),
])
def test_a_p_best_reads_no_certainty_it_does_not_have(value, text):
    """A share of resamples of 0.9996 is not 1: "1.00" and "100.0%" said so. Exactly 0 and 1 can happen (no resample, or
    every one; a strategy alone), and read so."""
    assert format_chance(value) == text


def test_the_leaderboard_and_the_report_show_p_best_by_that_rule():
    from compaction_bench.reports.html import _environment, scenario_table

    summary = pd.DataFrame([{"scenario": "s", "strategy": s, "profile": "32k", "retention": r, "paired_probes": 40, "p_best": p}
                            for s, r, p in (("a", 0.9, 0.9996), ("b", 0.5, 0.0004))])
    pooled = summary.drop(columns="scenario").assign(retention_lo=0.4, retention_hi=0.95)
    header, rows = leaderboard(summary, pooled=pooled)
    assert [row[header.index("P(best)")] for row in rows] == [">99.9%", "<0.1%"]  # before: "1.00", "0.00"
    table = scenario_table(summary)
    assert [row[table.header.index("p_best")] for row in table.rows] == [">99.9%", "<0.1%"]  # before: "1.000", "0.000"
    assert _environment().filters["chance"](0.9996) == ">99.9%"  # the verdict table's; before: "100.0%"


# ---------------------------------------------------------------------------- 2: the sweep notebook's unknown dollars
@pytest.mark.slow
def test_the_sweep_notebook_keeps_unknown_dollars_unknown_and_plots_tokens(tmp_path, monkeypatch):
    """A model without a price (snowflake/mistral-large) costs NaN dollars, not $0 (README; `aggregate.combine`). Before:
    the notebook summed them with pandas' default, which skips NaN, and showed and plotted every variant at $0.00."""
    scenario = generate("short-turns", seed=0, target_tokens=30_000)
    values = [2_000, 20_000]
    variants = [f"pi@keep_recent_tokens={v}" for v in values]
    root = bench.run(strategies=variants, profiles=["snowflake/mistral-large@32k"], cases=[Case(scenario.name, scenario.transcript, tuple(scenario.probes))],
                     out=tmp_path / "runs", run_id="unpriced", jobs=1, report=False, progress=False)
    tables = bench.load_run(root)
    assert tables["summary"]["cost_usd"].isna().all()
    notebook = execute(SWEEP, tmp_path, monkeypatch, f"run_dir = {str(root)!r}\nvalues = {values!r}\nvariants = {variants!r}\n"
                       'profiles = ["snowflake/mistral-large@32k"]')
    out = "".join(printed(c) for c in notebook.cells if c.cell_type == "code")
    assert "snowflake/mistral-large@32k: unpriced" in out
    shown = {row["keep_recent_tokens"]: row for row in shown_rows(table_of(tagged(notebook, "sweep")), named=False).values()}
    by = tables["summary"].set_index("strategy")
    for value, variant in zip(values, variants, strict=True):
        assert shown[str(value)]["cost_usd"] == "unpriced"
        assert float(shown[str(value)]["input_tokens"]) == by.loc[variant, "input_tokens"]
    assert len([o for o in tagged(notebook, "plot").outputs if "image/png" in o.get("data", {})]) == 1


# ---------------------------------------------------------------------------- 5: an unpriced run keeps its re-billed tokens panel
def test_unknown_dollars_leave_the_re_billed_tokens_panel_and_say_unpriced():
    """The re-billed tokens are known where the dollars are not: the figure draws them and names the dollars unknown,
    with no dot at $0 (and no Pareto front of the priced strategies alone). Before: the report left the figure out."""
    points = pd.DataFrame({"retention": [0.9, 0.6], "lo": [0.8, 0.5], "hi": [0.95, 0.7], "cost_usd": [float("nan"), 0.5],
                           "rebilled_tokens": [1_000.0, 3_000.0], "flagged": [False, False]}, index=pd.Index(["good", "cheap"], name="strategy"))
    svg = retention_vs_cost(points, "t", ["good", "cheap"])
    assert "unpriced" in svg and svg.count(">good</text>") == 1 and svg.count(">cheap</text>") == 1  # drawn once: in the tokens panel


@pytest.mark.slow
def test_an_unpriced_runs_report_keeps_retention_against_re_billed_tokens(tmp_path):
    scenario = generate("short-turns", seed=0, target_tokens=30_000)
    root = bench.run(strategies=["truncate", "codex-local"], profiles=["snowflake/mistral-large@32k"],
                     cases=[Case(scenario.name, scenario.transcript, tuple(scenario.probes))], out=tmp_path / "runs", run_id="unpriced",
                     jobs=1, report=False, progress=False)
    page = render_pages(root)["report.html"]
    assert '<figure aria-label="Retention against cost">' in page
    figure = page[page.index('<figure aria-label="Retention against cost">'):]
    figure = figure[: figure.index("</figure>")]
    assert "unpriced" in figure and "re-billed tokens" in figure


@pytest.mark.slow
def test_the_terminal_leaderboard_shows_no_p_best_for_the_flagged_leader(flagged_run, capsys, monkeypatch):
    """The summary `bench run` and `bench score` print: the same P(best) as the report's verdict, truncate 100% (the one
    strategy that serves the window) and the flagged strategy "–" (before: 0% and 100%)."""
    from compaction_bench import cli

    monkeypatch.setenv("COLUMNS", "300")
    cli._print_summary(flagged_run, report=False)
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split("│")[1].strip(): [cell.strip() for cell in line.split("│")] for line in lines if line.startswith("│ ")}
    header = next([cell.strip() for cell in line.split("┃")] for line in lines if line.startswith("┃ strategy"))
    column = header.index("P(best)")
    truncate = next(cells for name, cells in rows.items() if name.startswith("truncate"))
    orphan = next(cells for name, cells in rows.items() if "KeepAllOrphan" in name or "keep-all-orphan" in name)
    assert (truncate[column], orphan[column]) == ("100%", "–")
