"""`bench compare` and `bench gate` on two real runs that differ by a known regression."""

from __future__ import annotations

import subprocess
import sys

import pytest

import compaction_bench as bench
from compaction_bench.reports.gate import GateError, Rule, compare_runs, gate
from compaction_bench.runner import Case
from compaction_bench.scenarios.synthetic import generate


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    scenario = generate("short-turns", seed=1, target_tokens=60_000)
    cases = [Case(scenario.name, scenario.transcript, tuple(scenario.probes))]
    # The "candidate" keeps a tenth of the window after truncating instead of 60%: it forgets more.
    baseline = bench.run(strategies=["truncate"], profiles=["32k"], cases=cases, out=out, run_id="base", jobs=1)
    candidate = bench.run(
        strategies=["truncate"], profiles=["32k"], cases=cases, out=out, run_id="cand", jobs=1,
        options={"truncate": {"target_ratio": "0.1"}},
    )
    return baseline, candidate


def test_compare_reports_the_change(runs):
    baseline, candidate = runs
    compared = compare_runs(baseline, candidate).loc[("truncate", "32k")]
    assert compared["presence_candidate"] < compared["presence_baseline"]
    assert compared["presence_change"] == pytest.approx(compared["presence_candidate"] - compared["presence_baseline"])
    assert compared["integrity_change"] == 0


def test_gate_passes_a_run_against_itself(runs):
    baseline, _ = runs
    result = gate(baseline, baseline, [Rule.parse("presence:0"), Rule.parse("integrity:0")])
    assert result.passed and "gate: passed" in result.markdown()


def test_gate_fails_on_the_regression_and_tolerates_it_when_asked(runs):
    baseline, candidate = runs
    drop = compare_runs(baseline, candidate).loc[("truncate", "32k"), "presence_change"]
    strict = gate(baseline, candidate, [Rule.parse("presence:0.01"), Rule.parse("integrity:0")], alpha=1.0)
    assert not strict.passed and strict.failures[0].startswith("truncate 32k presence")
    loose = gate(baseline, candidate, [Rule.parse(f"presence:{abs(drop) + 0.01}")])
    assert loose.passed


def test_gate_cli_exit_codes(runs):
    baseline, candidate = runs
    cmd = [sys.executable, "-m", "compaction_bench.cli", "gate", "--baseline", str(baseline), "--candidate", str(candidate)]
    ok = subprocess.run([*cmd, "--fail-on", "integrity:0"], capture_output=True, text=True)
    assert ok.returncode == 0 and "| truncate | 32k | integrity |" in ok.stdout
    bad = subprocess.run([*cmd, "--fail-on", "nonsense:1"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("error: --fail-on 'nonsense:1': unknown metric")


def test_rules_are_validated():
    with pytest.raises(GateError, match="expected METRIC:TOLERANCE"):
        Rule.parse("presence:lots")
