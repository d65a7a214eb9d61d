"""The gate after the s45 audit (/tmp/audit_gate/REPORT.md): the unit of its probe test is the summary draw, not the
probe (G1), and a plug-in strategy (`file.py:Class`) is compared by its content, not its path (G2).

G1's right answers come from the process that makes the runs, simulated as the audit did: a summarizer that writes a
session's summary afresh in every run and repeat draws its quality once per (run, session, repeat), so the probes of
that session move together. Two runs of one process are no change: a gate that fails them more often than alpha
breaks the claim its docstring and the README make. G2's come from the manifest's record of each plug-in file's sha256
(`input_sha256`, written by `bench run`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from compaction_bench.reports.gate import GateError, Rule, Run, comparability, gate, probe_test
from tests.test_verdict_audit_gate import PROFILE, probe_rows, write_run

ALPHA, TOLERANCE = 0.05, 0.02
#: The share of probes whose fact sits in the kept tail (present whatever the summary), the same in both runs.
TAIL = 0.3
CHECKPOINTS = 2


def _frame(present: np.ndarray) -> pd.DataFrame:
    """Probe rows of one strategy from `present` (sessions × repeats × probes), each probe asked at `CHECKPOINTS`
    checkpoints and carrying its state to all of them (as the audit's `sim_gate.py`)."""
    sessions, repeats, probes = present.shape
    s, r, p, k = np.meshgrid(np.arange(sessions), np.arange(repeats), np.arange(probes), np.arange(CHECKPOINTS), indexing="ij")
    s, r, p, k = s.ravel(), r.ravel(), p.ravel(), k.ravel()
    step = 10 * (k + 1)
    return pd.DataFrame({
        "scenario": [f"s{v}" for v in s], "strategy": "x", "profile": PROFILE, "repeat": r, "sample": r,
        "probe_id": [f"p{v}" for v in p], "point_kind": "checkpoint", "step": step, "request": step,
        "present": present[s, r, p],
    })


def _drawn_run(rng: np.random.Generator, tail: np.ndarray, repeats: int, keep: float = 1.0) -> Run:
    """One run: per (session, repeat) a summary quality q ~ Beta(4, 2) drawn once; a probe outside the tail is present
    with probability q × `keep` (`keep` < 1: a candidate that really keeps less)."""
    sessions, probes = tail.shape
    quality = rng.beta(4, 2, size=(sessions, repeats, 1))
    present = tail[:, None, :] | (rng.random((sessions, repeats, probes)) < quality * keep)
    return Run(Path("."), {}, {"probes": _frame(present)})


def _fails(runs: tuple[Run, Run]) -> bool:
    """The gate's decision on the row alone (a family of one): beyond the tolerance, significant, and able to fail."""
    test = probe_test(runs, "x", PROFILE, "retention", ALPHA, TOLERANCE)
    assert test is not None
    return -test.change > TOLERANCE and test.p_value < ALPHA and test.draws >= test.min_draws


def _fail_rate(sessions: int, probes: int, repeats: int, trials: int, *, keep: float = 1.0, seed: int = 0) -> float:
    failed = 0
    for trial in range(trials):
        rng = np.random.default_rng([seed, sessions, probes, repeats, trial])
        tail = rng.random((sessions, probes)) < TAIL
        failed += _fails((_drawn_run(rng, tail, repeats), _drawn_run(rng, tail, repeats, keep)))
    return failed / trials


TRIALS = 200
#: At a true rate of alpha, 200 trials exceed this many failures with chance 0.5% (the one-sided binomial margin).
ALLOWED = int(scipy_stats.binom.ppf(0.995, TRIALS, ALPHA))


@pytest.mark.parametrize(
    ("sessions", "probes", "repeats"),
    [
        (1, 40, 6),  # one session with --repeat 6: can fail
        (8, 12, 1),  # 8 sessions: can fail
    ],
)
@pytest.mark.slow  # 200 trials of `probe_test`, about 10 s
def test_two_runs_of_one_process_fail_a_row_at_most_alpha_of_the_time(sessions, probes, repeats):
    """No change between the runs: every failure is a false one, at most alpha of the trials (beyond the binomial
    margin with chance 0.5%)."""
    assert ALLOWED == 19  # 200 × 0.05 = 10 expected; P(X > 19) < 0.005
    rate = _fail_rate(sessions, probes, repeats, TRIALS)
    assert rate * TRIALS <= ALLOWED, rate


@pytest.mark.parametrize(("sessions", "probes"), [(1, 40), (3, 20)])
@pytest.mark.slow
def test_fewer_summary_draws_than_the_test_needs_never_fail(sessions, probes):
    """One or three recorded sessions in one repeat are one or three summary draws, fewer than the 5 a one-sided
    sign-flip test at 0.05 needs: no trial fails. The probe-level test failed 1 session × 40 probes about one time in
    five (21.7% over 300 trials through `probe_test` in the audit), 3 × 20 about 7%; 40 trials of each suffice to see
    that (at 21.7%, 40 trials see no failure with chance 0.783^40 ≈ 6e-5)."""
    assert _fail_rate(sessions, probes, 1, 40) == 0


@pytest.mark.slow
def test_a_real_drop_of_thirty_points_on_eight_sessions_is_caught():
    """The candidate keeps each summarized fact with 0.36 of the baseline's chance: retention 0.767 → 0.467, 30 points,
    15 times the tolerance. Eight sessions are eight summary draws per run: the sign-flip test reaches 1/256."""
    expected = TAIL + (1 - TAIL) * 4 / 6  # E[q] of Beta(4, 2) is 2/3
    keep = (expected - 0.30 - TAIL) / ((1 - TAIL) * 4 / 6)
    assert expected == pytest.approx(0.7667, abs=1e-4) and 0.35 < keep < 0.36
    assert _fail_rate(8, 12, 1, 100, keep=keep, seed=1) >= 0.9


def _repeated(present: list[list[bool]], repeats: int) -> pd.DataFrame:
    """One session whose probes are `present[r]` in repeat r (the same in every repeat when one list is given)."""
    rows = [np.asarray(present[min(r, len(present) - 1)], dtype=bool) for r in range(repeats)]
    return _frame(np.stack(rows)[None, :, :])


def test_one_session_in_one_repeat_cannot_fail_and_the_note_says_why(tmp_path):
    """40 probes of one session, 20 of them lost: one summary draw per run, whose sign-flip p is at least 0.5. The row
    is "cannot fail", and the note counts draws as sessions × repeats and says what would let the rule fail."""
    base, cand = probe_rows("x", 1, 40), probe_rows("x", 1, 40, lost={(0, n) for n in range(20)})
    result = gate(write_run(tmp_path / "a", base), write_run(tmp_path / "b", cand), [Rule.parse("retention:0.02")])
    (row,) = result.table.to_dict("records")
    assert row["status"] == "cannot fail" and row["draws"] == 1 and row["min_draws"] == 5 and row["change"] == -0.5
    assert not result.tested and "cannot fail (too few summary draws)" in result.markdown()
    (note,) = [n for n in result.notes if n.startswith("x 32k retention:")]
    assert "1 summary draw (1 session × 1 repeat), fewer than the 5" in note and "40 here" in note
    assert "record more sessions or use --repeat" in note


def test_one_session_in_six_repeats_can_fail(tmp_path):
    """The same session recorded in six repeats per run: six draws, each losing 20 of 40 probes (−0.5): the exact
    sign-flip p is 0.5^6 = 1/64 < 0.05, and so is the same test's of the changes shifted by the tolerance (six of
    −0.48)."""
    base, cand = _repeated([[True] * 40], 6), _repeated([[True] * 20 + [False] * 20], 6)
    runs = (Run(Path("."), {}, {"probes": base}), Run(Path("."), {}, {"probes": cand}))
    test = probe_test(runs, "x", PROFILE, "retention", ALPHA, TOLERANCE)
    assert test is not None and test.draws == 6 and test.changed == 6 and (test.sessions, test.repeats) == (1, 6)
    assert test.p_value == pytest.approx(1 / 64) and test.change == -0.5 and test.probes == 40
    # the same losses in five repeats of six, one unchanged: shifted by the tolerance it is +0.02 (six draws in the
    # tolerance's sample), and with five draws of −0.48 either of its signs keeps the sum at or below the observed, so
    # the sign-flip test's p is 2/64 = 1/32, as the five alone give
    mixed = _repeated([[True] * 20 + [False] * 20] * 5 + [[True] * 40], 6)
    test = probe_test((runs[0], Run(Path("."), {}, {"probes": mixed})), "x", PROFILE, "retention", ALPHA, TOLERANCE)
    assert test is not None and test.draws == 6 and test.changed == 6 and test.p_value == pytest.approx(1 / 32)


def test_a_repeat_is_paired_with_the_same_repeat_not_voted_across_repeats(tmp_path):
    """Baseline repeat 0 keeps all 10 probes and repeat 1 none; the candidate the other way round. Voted over the
    repeats, both runs keep every probe half the time (no change); by draw, repeat 0 lost 10 of 10 and repeat 1 gained
    them: changes −1 and +1, which a sign-flip test cannot call a drop (p = 0.75)."""
    base = _repeated([[True] * 10, [False] * 10], 2)
    cand = _repeated([[False] * 10, [True] * 10], 2)
    test = probe_test((Run(Path("."), {}, {"probes": base}), Run(Path("."), {}, {"probes": cand})), "x", PROFILE, "retention", ALPHA)
    assert test is not None and test.change == 0 and test.draws == 2 and test.changed == 2 and test.p_value == pytest.approx(0.75, abs=0.01)


def test_a_large_family_can_still_fail_on_a_clear_drop(tmp_path):
    """`test_verdict_audit_gate`'s claim with draws as the unit: 126 tests, and a strategy that loses 7 of its 10 probes
    in each of 12 sessions: twelve draws of −0.7, whose exact sign-flip p is 0.5^12 = 1/4096, so even Holm's 126 × p =
    0.031 < 0.05 (three sessions, as that test has them, are three draws: p ≥ 1/8)."""
    base = probe_rows("x", 12, 10)
    cand = probe_rows("x", 12, 10, lost={(s, n) for s in range(12) for n in range(7)})
    runs = (Run.load(write_run(tmp_path / "a", base)), Run.load(write_run(tmp_path / "b", cand)))
    test = probe_test(runs, "x", PROFILE, "retention", 0.05, 0.0, 126)
    assert test is not None and test.p_value == pytest.approx(1 / 4096) and 126 * test.p_value < 0.05


# ---------------------------------------------------------------------------- G2: plug-in strategies by content
PLUGIN = "from compaction_bench.strategies.none import NoCompaction\n\n\nclass Mine(NoCompaction):\n    pass\n"
OTHER = "from compaction_bench.strategies.truncate import Truncate\n\n\nclass Mine(Truncate):\n    pass\n"


def _plugin_run(root: Path, spec: str, sha256: str, *, lost: frozenset = frozenset()) -> Path:
    """A run folder of the plug-in strategy `spec` whose file had this sha256 (as `bench run` records it)."""
    rows = [{**row, "strategy": spec} for row in probe_rows("x", 5, 10, lost=set(lost))]
    write_run(root, rows)
    path = root / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    manifest["input_sha256"] = {f"--strategy {spec}": sha256}
    path.write_text(json.dumps(manifest), encoding="utf-8")
    return root


def _sha256(path: Path) -> str:
    from compaction_bench.runner import input_sha256

    digest = input_sha256(path)
    assert digest is not None
    return digest


def test_the_same_plugin_file_at_another_path_is_the_same_strategy(tmp_path):
    """A second checkout holds the same file at another path: the gate refused the runs ("strategies differs", exit 2)."""
    first, second = tmp_path / "one" / "mine.py", tmp_path / "two" / "mine.py"
    for path in (first, second):
        path.parent.mkdir()
        path.write_text(PLUGIN, encoding="utf-8")
    a = _plugin_run(tmp_path / "a", f"{first}:Mine", _sha256(first))
    b = _plugin_run(tmp_path / "b", f"{second}:Mine", _sha256(second), lost=frozenset((k, 0) for k in range(5)))
    result = gate(a, b, [Rule.parse("retention:0")])
    (row,) = result.table.to_dict("records")
    assert row["strategy"] == f"{first}:Mine" and row["change"] == pytest.approx(-0.1)
    assert row["failed"] and row["p_value"] == pytest.approx(1 / 32)  # five draws, each lost one probe of ten
    assert not any("differ" in note for note in result.notes)


def test_another_plugin_file_under_one_name_is_a_difference_named_like_a_template_change(tmp_path):
    """The file `mine.py:Mine` names was edited between the runs (NoCompaction → Truncate): the gate compared the two
    strategies as one, silently, and failed or passed the candidate on a change nobody was told about."""
    plugin = tmp_path / "mine.py"
    plugin.write_text(PLUGIN, encoding="utf-8")
    before = _sha256(plugin)
    plugin.write_text(OTHER, encoding="utf-8")
    after = _sha256(plugin)
    a = _plugin_run(tmp_path / "a", "mine.py:Mine", before)
    b = _plugin_run(tmp_path / "b", "mine.py:Mine", after)
    differences, _ = comparability(Run.load(a), Run.load(b))
    assert differences == [f"strategy mine.py:Mine: the file differs (sha256 {before[:12]} vs {after[:12]})"]
    with pytest.raises(GateError, match=r"strategy mine\.py:Mine: the file differs .*--allow-different-inputs"):
        gate(a, b, [Rule.parse("retention:0")])
    allowed = gate(a, b, [Rule.parse("retention:0")], allow_different_inputs=True)
    assert f"allowed difference: strategy mine.py:Mine: the file differs (sha256 {before[:12]} vs {after[:12]})" in allowed.notes
    same = _plugin_run(tmp_path / "c", "mine.py:Mine", before)
    assert comparability(Run.load(a), Run.load(same)) == ([], [])
