"""A command with nothing to measure says so (exit 2) instead of printing a table that reads as a result.

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
