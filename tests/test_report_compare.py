"""`bench compare A B --html OUT` and `bench gate --markdown FILE` on two real small runs.

The candidate compacts at 40% of the window instead of Codex's 90% (`auto_compact_percent`), so it
compacts earlier and more often and facts go missing sooner: probes flip and the compactions change.
A run compared with itself changes nothing.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pandas as pd
import pytest

import compaction_bench as bench
from compaction_bench.reports.compare import changed_compactions, flipped_probes, render_compare
from compaction_bench.runner import Case
from compaction_bench.scenarios.synthetic import generate

BENCH = [sys.executable, "-m", "compaction_bench.cli"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    scenario = generate("short-turns", seed=0, target_tokens=45_000)
    cases = [Case(scenario.name, scenario.transcript, tuple(scenario.probes))]
    out = tmp_path_factory.mktemp("runs")
    common = {"strategies": ["codex-local"], "profiles": ["32k"], "cases": cases, "out": out, "jobs": 1, "progress": False, "report": False}
    base = bench.run(run_id="base", **common)
    cand = bench.run(run_id="cand", options={"codex-local": {"auto_compact_percent": 40}}, **common)
    return base, cand


def test_a_run_against_itself_changes_nothing(runs):
    base, _ = runs
    tables = bench.load_run(base)
    assert flipped_probes(tables["probes"], tables["probes"], {}) == []
    assert changed_compactions(tables["compactions"], tables["compactions"]) == []
    page = render_compare(base, base)
    assert "no detectable change" in page and "Probes that flipped (0)" in page and "Compactions that changed (0)" in page


def test_the_comparison_shows_flips_with_questions_and_changed_compactions(runs, tmp_path):
    base, cand = runs
    out = tmp_path / "compare.html"
    done = subprocess.run([*BENCH, "compare", str(base), str(cand), "--allow-different-inputs", "--html", str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    # both runs' summaries and answers came from the offline heuristics: the terminal says so, once
    assert done.stdout.count("note: summaries were written by offline/extractive") == 1
    assert "offline/reader, a deterministic heuristic" in " ".join(done.stdout.split())
    page = out.read_text(encoding="utf-8")
    a, b = bench.load_run(base)["probes"], bench.load_run(cand)["probes"]
    keys = ["probe_id", "point_kind", "step"]
    both = a.merge(b, on=keys, suffixes=("_a", "_b"))
    lost = both[both["present_a"] & ~both["present_b"]]
    gained = both[~both["present_a"] & both["present_b"]]
    assert len(lost) + len(gained) > 0  # the candidate's context really differs
    flips = int(re.search(r"Probes that flipped \((\d+)\)", page).group(1))
    assert flips >= len(lost) + len(gained)
    questions = pd.read_parquet(cand / "questions.parquet").set_index("probe_id")["question"]
    for probe in pd.concat([lost, gained])["probe_id"].unique()[:5]:
        assert str(questions[probe]).replace("'", "&#39;").replace('"', "&#34;") in page
    assert int(re.search(r"Compactions that changed \((\d+)\)", page).group(1)) > 0
    assert "kept items" in page or "summary" in page
    row = re.search(r"<td class=\"l\">codex-local</td><td class=\"l\">32k</td>\s*<td data-v=\"(-?[\d.e-]+)\">", page)
    assert row and (float(row.group(1)) > 0) == (len(gained) > len(lost))  # retention moved the way the flips go


def test_gate_writes_its_markdown_comment(runs, tmp_path):
    base, cand = runs
    comment = tmp_path / "comment.md"
    done = subprocess.run(
        [*BENCH, "gate", "--baseline", str(base), "--candidate", str(cand), "--fail-on", "integrity:0", "--allow-different-inputs", "--markdown", str(comment)],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    text = comment.read_text(encoding="utf-8")
    assert text.startswith("**compaction-bench gate: passed**") and "| codex-local | 32k | integrity |" in text


def test_values_are_plain_and_changes_signed(runs):
    base, cand = runs
    page = render_compare(base, cand)
    cells = re.findall(r"<td>([^<>]*) → ([^<>]*) \(([^<>]*)\)</td>", page)
    assert cells, "the page has a baseline → candidate (change) cell per metric"
    for baseline, candidate, change in cells:
        assert not baseline.startswith("+") and not candidate.startswith("+"), (baseline, candidate)
        assert change == "–" or change[0] in "+-", change
    assert any(float(b.replace(",", "")) > 0 for b, _, _ in cells if b != "–")  # a positive value is shown without a sign


def test_token_counts_show_whole_with_separators_in_the_page_and_the_terminal(runs):
    """12,695 rebilled tokens read "12,695", not "1.27e+04", in both places a comparison is shown; the
    right answer is each run's summary summed over its cells."""
    base, cand = runs
    totals = [int(bench.load_run(run)["summary"]["rebilled_tokens"].sum()) for run in runs]
    assert min(totals) >= 10_000  # past where four significant digits turn to exponents
    expected = (f"{totals[0]:,}", f"{totals[1]:,}", f"{totals[1] - totals[0]:+,}")
    page = render_compare(base, cand)
    assert f"<td>{expected[0]} → {expected[1]} ({expected[2]})</td>" in page
    done = subprocess.run([*BENCH, "compare", str(base), str(cand), "--allow-different-inputs"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if "rebilled_tokens" in line)
    assert [cell.strip() for cell in row.split("│")[4:7]] == list(expected)


def test_the_terminal_shows_the_retention_change_with_the_page_s_interval_and_tag(runs):
    """The terminal's retention row is the page's: the paired change, its 95% interval and its tag, computed once for
    both (`compare.compared_retention`); the interval excludes the change's opposite sign only where it is a claim."""
    base, cand = runs
    page = render_compare(base, cand)
    row = re.search(r'<td class="l">codex-local</td><td class="l">32k</td>\s*<td data-v="[^"]*">([^<]*)</td><td>\[([^<]*), ([^<]*)\]</td>'
                    r'<td>(\d+)</td>\s*<td class="l">(?:<span[^>]*>)?([^<]*)<', page)
    assert row, "the page shows codex-local's retention change"
    change, lo, hi, points, tag = row.groups()
    done = subprocess.run([*BENCH, "compare", str(base), str(cand), "--allow-different-inputs"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if line.startswith("│ codex-local") and "[" in line)
    assert [cell.strip() for cell in line.split("│")[1:7]] == ["codex-local", "32k", change, f"[{lo}, {hi}]", f"{int(points):,}", tag]
    assert "is below 0.05 (the intervals shown are each row's own)" in " ".join(done.stdout.split())
