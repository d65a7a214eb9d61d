"""The gate and compare after the s43 audit (/tmp/audit_gate/REPORT.md): two runs made by different code are not
comparable (F1), a `--prompt` copy of the stock template is no template change (F4), a drop beyond the tolerance that
the tests cannot confirm is no pass (F3), and the usage text says when the gate exits 2 (F5). Hand-built run folders
(`tests.test_verdict_audit_gate.write_run`) whose answers follow from the rules."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from compaction_bench.cli import app
from compaction_bench.reports.gate import GateError, Rule, Run, check_comparable, comparability, gate
from tests.test_verdict_audit_gate import probe_rows, write_run

BENCH = str(Path(sys.executable).with_name("bench"))
CODE_A, CODE_B = "a" * 64, "b" * 64
STOCK = "c" * 64


def _stamped(root: Path, **entries) -> Path:
    """`root`'s manifest with these top-level entries set (what `bench run` records of its code and templates)."""
    path = root / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps({**manifest, **entries}), encoding="utf-8")
    return root


def _code(code_sha256: str, pi_py: str, litellm: str = "1.80.0") -> dict:
    return {"code_sha256": code_sha256, "code_files": {"strategies/pi.py": pi_py, "cli.py": "0" * 64},
            "versions": {"compaction-bench": "0.1.0", "litellm": litellm, "tiktoken": "0.9.0"}}


# ---------------------------------------------------------------------------- F1: the code that made the runs
def test_runs_made_by_different_code_are_refused_naming_the_file(tmp_path):
    """The same inputs measured by another version of the package (here pi.py changed): `bench run --resume` refuses to
    merge such cells, and the gate compared them silently (a cost 'regression' no prompt caused, audit F1)."""
    rows = probe_rows("x", 2, 10)
    a = _stamped(write_run(tmp_path / "a", rows), **_code(CODE_A, "1" * 64))
    b = _stamped(write_run(tmp_path / "b", rows), **_code(CODE_B, "2" * 64))
    with pytest.raises(GateError, match=r"the code differs.*strategies/pi\.py changed.*--allow-different-inputs"):
        gate(a, b, [Rule.parse("retention:0")])
    with pytest.raises(GateError, match="the code differs"):  # `bench compare` reads the same check
        check_comparable(Run.load(a), Run.load(b), allow_offline_summarizer=True, by="comparison")
    allowed = gate(a, b, [Rule.parse("retention:0")], allow_different_inputs=True)
    assert allowed.passed
    assert any(note.startswith("allowed difference: the code differs") and "strategies/pi.py changed" in note for note in allowed.notes)
    same = _stamped(write_run(tmp_path / "c", rows), **_code(CODE_A, "1" * 64))
    assert comparability(Run.load(a), Run.load(same)) == ([], [])


def test_another_litellm_version_is_another_measurement(tmp_path):
    """litellm supplies the profiles' prices and limits: its version is part of what a run measured."""
    rows = probe_rows("x", 2, 10)
    a = _stamped(write_run(tmp_path / "a", rows), **_code(CODE_A, "1" * 64, litellm="1.80.0"))
    b = _stamped(write_run(tmp_path / "b", rows), **_code(CODE_A, "1" * 64, litellm="1.81.2"))
    differences, _ = comparability(Run.load(a), Run.load(b))
    assert differences == ["the code differs (baseline then, candidate now): litellm: 1.80.0 then, 1.81.2 now"]


def test_a_code_change_is_not_explained_as_a_template_change(tmp_path):
    """With the offline summarizer, runs whose templates and code both differ were refused as differing 'only in
    summary templates'; the code is named instead."""
    rows = probe_rows("x", 2, 10)
    offline = {"summarizer": "offline/extractive"}
    a = _stamped(write_run(tmp_path / "a", rows, config=offline), template_hashes={"pi_summary.j2": STOCK}, **_code(CODE_A, "1" * 64))
    b = _stamped(write_run(tmp_path / "b", rows, config=offline), template_hashes={"pi_summary.j2": "d" * 64}, **_code(CODE_B, "2" * 64))
    with pytest.raises(GateError) as refused:
        gate(a, b, [Rule.parse("retention:0")])
    assert "the code differs" in str(refused.value) and "only in summary templates" not in str(refused.value)


# ---------------------------------------------------------------------------- F4: an override compared by its text
def test_a_prompt_override_identical_to_the_stock_template_is_no_change(tmp_path):
    """The candidate passed `--prompt` with a byte-identical copy of the stock template (both runs rendered the same
    sha256): the gate refused it as a template change under the offline summarizer (exit 2, audit F4)."""
    rows = probe_rows("x", 2, 10)
    offline = {"summarizer": "offline/extractive"}
    a = _stamped(write_run(tmp_path / "a", rows, config=offline), template_hashes={"codex_summary.j2": STOCK})
    copy = {**offline, "prompts": {"codex_summary.j2": "f3/codex_summary.j2"}}
    b = _stamped(write_run(tmp_path / "b", rows, config=copy), template_hashes={"codex_summary.j2": STOCK})
    assert comparability(Run.load(a), Run.load(b)) == ([], [])
    assert gate(a, b, [Rule.parse("retention:0")]).passed
    edited = _stamped(write_run(tmp_path / "c", rows, config=copy), template_hashes={"codex_summary.j2": "d" * 64})
    assert comparability(Run.load(a), Run.load(edited)) == ([], ["templates whose text differs: codex_summary.j2"])


def test_an_override_whose_text_is_not_recorded_is_still_named(tmp_path):
    """Runs made before the template texts were recorded: the override's path is all there is to compare."""
    rows = probe_rows("x", 2, 10)
    a = write_run(tmp_path / "a", rows)
    b = write_run(tmp_path / "b", rows, config={"prompts": {"codex_summary.j2": "mine.j2"}})
    (note,) = comparability(Run.load(a), Run.load(b))[1]
    assert note.startswith("--prompt overrides:") and "mine.j2" in note


# ---------------------------------------------------------------------------- F5: when the gate exits 2
def test_the_usage_text_says_exit_2_when_some_rule_could_not_be_tested(tmp_path):
    """retention is tested on every row, answered on none (no answerer): the gate exits 2 (`GateResult.tested`), which
    the usage text described as 'no rule could be tested'."""
    rows = probe_rows("x", 5, 10)
    a, b = write_run(tmp_path / "a", rows), write_run(tmp_path / "b", rows)
    out = subprocess.run([BENCH, "gate", "--baseline", str(a), "--candidate", str(b), "--fail-on", "retention:0.02", "--fail-on", "answered:0"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "answered:0 could not be tested" in out.stderr, out.stdout + out.stderr
    usage = " ".join(CliRunner().invoke(app, ["gate", "--help"], terminal_width=400).output.split())
    assert "some rule could be tested on no row (and none failed)" in usage
    assert "no rule could be tested" not in usage


# ---------------------------------------------------------------------------- F3: beyond the tolerance, not significant
def test_a_drop_in_one_scenario_of_three_is_undecided_not_ok(tmp_path):
    """`x` loses all 10 probes of one scenario of three: an estimated drop of 10/30 = 0.333, 16 times the tolerance. In
    two repeats that scenario's two draws drop by 1 (shifted by the tolerance, −0.98) and the other four are unchanged
    (+0.02): only the patterns that keep both −0.98 reach the observed sum, 1/4, so the row cannot be significant (the
    audit's pi on three sessions, 0.80 → 0.62: "ok", exit 0).
    It is no pass: the row is undecided and the headline says so; `y` (unchanged) stays ok, and no rule failed (exit 0).
    Two repeats of each run: the tests' unit is the summary draw (s45 G1), and one repeat of three scenarios is three
    draws, a row that cannot fail at all; six can."""
    def twice(rows: list[dict]) -> list[dict]:
        return rows + [{**row, "repeat": 1, "sample": 1} for row in rows]

    base = twice(probe_rows("x", 3, 10) + probe_rows("y", 3, 10))
    cand = twice(probe_rows("x", 3, 10, lost={(1, n) for n in range(10)}) + probe_rows("y", 3, 10))
    a, b = write_run(tmp_path / "a", base), write_run(tmp_path / "b", cand)
    result = gate(a, b, [Rule.parse("retention:0.02")])
    rows = {row["strategy"]: row for row in result.table.to_dict("records")}
    assert rows["x"]["change"] == pytest.approx(-1 / 3)
    assert rows["x"]["p_test"] == pytest.approx(1 / 4) and rows["x"]["p_value"] >= 1 / 4
    assert rows["x"]["status"] == "undecided" and not rows["x"]["failed"] and rows["y"]["status"] == "ok"
    assert result.passed and result.tested and result.undecided == ["x 32k retention: -0.3333"]
    text = result.markdown()
    assert text.startswith("**compaction-bench gate: passed with 1 undecided row (")
    assert "| **undecided**: beyond tolerance, not significant |" in text
    assert any(note.startswith("undecided: x 32k retention:") for note in result.notes)
    out = subprocess.run([BENCH, "gate", "--baseline", str(a), "--candidate", str(b), "--fail-on", "retention:0.02"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "passed with 1 undecided row" in out.stdout, out.stdout + out.stderr
