"""A command with nothing to measure says so (exit 2) instead of printing a table that reads as a result, and the
terminal names what its table leaves out.

Found by an audit, each on recorded corpus files: `probes eval` with the labels of another transcript printed
a recall of 0% for every kind, and `fidelity pi` / `fidelity claude-code` on a session without a recorded
compaction printed an empty table, all with exit 0."""

from __future__ import annotations

import pytest

from tests.conftest import CORPORA, REPO, assert_user_error, bench_cli

CLAUDE_CODE = CORPORA / "claude-code-jsonl" / "d-kimuson__claude-code-viewer" / "1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl"
PI_WITHOUT_COMPACTION = CORPORA / "pi-session-jsonl" / "badlogic__pi-mono" / "large-session.jsonl"
LABELS = REPO / "tests" / "data" / "probes" / "cc-351b5d6c.yaml"  # labelled for the Claude Code session 351b5d6c


def test_labels_of_another_transcript_are_refused_not_scored_zero(tmp_path):
    assert "351b5d6c" not in CLAUDE_CODE.name
    assert_user_error(bench_cli("probes", "eval", str(CLAUDE_CODE), "--labelled", str(LABELS)),
                      f"{LABELS}: none of its 19 labelled probes has its source in {CLAUDE_CODE}")
    empty = tmp_path / "empty.yaml"
    empty.write_text("[]\n")
    assert_user_error(bench_cli("probes", "eval", str(CLAUDE_CODE), "--labelled", str(empty)), f"{empty}: holds no labelled probe")


@pytest.mark.parametrize(("command", "path", "message"), [
    ("pi", PI_WITHOUT_COMPACTION, f"{PI_WITHOUT_COMPACTION}: no recorded compaction (a Pi `compaction` entry)"),
    ("claude-code", CLAUDE_CODE, f"no recorded compaction (a compact_boundary) in {CLAUDE_CODE}"),
])
def test_fidelity_of_a_session_without_a_recorded_compaction_is_refused(command, path, message):
    proc = bench_cli("fidelity", command, str(path))
    assert_user_error(proc, message)
    assert proc.stdout == ""


def test_the_terminal_names_a_strategy_that_finished_no_cell(tmp_path):
    """A strategy that failed every cell has no leaderboard row; the terminal said nothing of it (the report's
    verdict and the error line did), so the table read as if it had not been asked for."""
    raiser = tmp_path / "raiser.py"
    raiser.write_text("from compaction_bench.strategies.baselines import NoCompaction\n\n\nclass Raiser(NoCompaction):\n"
                      "    def request(self):\n        raise ZeroDivisionError('boom')\n")
    proc = bench_cli("run", str(CLAUDE_CODE), "-s", "none", "-s", f"{raiser}:Raiser", "-p", "32k", "-o", str(tmp_path / "runs"),
                     "--no-report", "--answerer", "")
    assert proc.returncode == 1, proc.stderr  # a failed cell
    assert f"note: not in the comparison: {raiser}:Raiser, which finished no cell (see errors.log)" in proc.stdout, proc.stdout
    assert "not in the comparison: none" not in proc.stdout
