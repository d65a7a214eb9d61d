"""Probe audit 3: a read set is asked only once its reads have happened; `probes check` names a probe whose
evidence can never be graded present.

- a read set's source is the read that completes it, within its own turn: not an earlier `write` of a member
  (hand-built; and Pi `large-session.jsonl`, where the read of the turn 'yeah, do it all' is item 1181 while
  the file was written at item 487, in turn 18);
- `bench probes check` reports a short or number probe whose `evidence` regex matches nowhere at its source as
  the grader normalizes text (a `\\n` in the regex: normalization makes every newline a space)."""

from __future__ import annotations

import json

import pytest

from compaction_bench.importing import load_transcripts
from compaction_bench.scenarios.mining import MINERS, mine_probes
from tests.conftest import CORPORA, bench_cli
from tests.test_mining import Session


def _read_sets(transcript):
    return [c for c in MINERS["artifact"](transcript) if c.rule == "artifact.read-set"]


def test_a_read_set_is_sourced_at_its_completing_read_not_at_an_earlier_write():
    t = (
        Session()
        .user("Add a test of the theme colours.")
        .call("Write", {"file_path": "test/theme-colors.ts", "content": "import { theme } from '../src/theme';"}, "File written")
        .say("Written.")
        .user("yeah, do it all")
        .call("Read", {"file_path": "src/theme.ts"}, "export const theme = {};")  # c6
        .call("Read", {"file_path": "test/theme-colors.ts"}, "import { theme } from '../src/theme';")  # c8
        .transcript()
    )
    (read_set,) = _read_sets(t)
    assert read_set.answer == ("src/theme.ts", "test/theme-colors.ts")
    # the set is whole at the read of test/theme-colors.ts (c8); before, it was sourced at c6, the write of c2
    # having "stated" that file already, so a checkpoint between c6 and c8 asked for a file not yet read
    assert read_set.source == "c8"
    # both paths occur before c8 (the write, the first read): the set would count present from there, so none is mined
    assert [p for p in mine_probes(t) if p.meta["rule"] == "artifact.read-set"] == []


def test_a_read_set_is_sourced_at_the_last_read_in_its_turn_when_named_by_the_user_first():
    t = (
        Session()
        .user("Check app/cfg.py and app/db.py for the pool size.")
        .call("Read", {"file_path": "app/db.py"}, "POOL = 5")  # c2
        .call("Read", {"file_path": "app/cfg.py"}, "SIZE = 10")  # c4
        .transcript()
    )
    (read_set,) = _read_sets(t)
    assert read_set.source == "c4"  # before: u1, the user message naming both files before either was read


PI = CORPORA / "pi-session-jsonl" / "badlogic__pi-mono" / "large-session.jsonl"


@pytest.mark.skipif(not PI.exists(), reason="corpus not present")
def test_pi_read_set_of_yeah_do_it_all_is_never_asked_before_its_read():
    (t,) = load_transcripts(PI)
    (read_set,) = [c for c in _read_sets(t) if "'yeah, do it all'" in c.question]
    assert read_set.answer == ("packages/coding-agent/test/test-theme-colors.ts",)
    assert t.position(read_set.source) == 1181  # the Read call of turn 87 (before: 487, a `write` of turn 18)
    assert t.items[1181].kind == "tool_call" and t.items[1181].tool_name == "read"
    asked = [p for p in mine_probes(t) if "'yeah, do it all'" in p.question and p.meta["rule"] == "artifact.read-set"]
    assert all(t.position(p.source) >= 1181 for p in asked)  # it was artifact-09, sourced at 487


ITEMS = [
    {"id": "s0", "kind": "system", "text": "You are a coding agent."},
    {"id": "u1", "kind": "user", "text": "Run the tests please.", "turn": 0},
    {"id": "c1", "kind": "tool_call", "call_id": "t1", "tool_name": "bash", "arguments": '{"command": "pytest -x"}', "turn": 0, "response": 0},
    {"id": "o1", "kind": "tool_result", "call_id": "t1", "tool_name": "bash", "text": "3 failed, 41 passed in 2.1s\nExit code: 1", "turn": 0},
    {"id": "a1", "kind": "assistant", "text": "Three tests fail.", "turn": 0, "response": 1},
    {"id": "u2", "kind": "user", "text": "OK, thanks.", "turn": 1},
    {"id": "a2", "kind": "assistant", "text": "You're welcome.", "turn": 1, "response": 2},
]


def _check(tmp_path, evidence: str):
    session = tmp_path / "ev.jsonl"
    header = {"format": "compaction-bench/transcript", "version": 1, "id": "hand", "model": "claude-sonnet-4-5"}
    session.write_text("\n".join(json.dumps(x) for x in [header, *ITEMS]) + "\n")
    probe = {"id": "n1", "kind": "recall", "question": "How many tests failed?", "answer": "3", "match": "number",
             "source": "o1", "evidence": evidence}
    probes = tmp_path / "probes.jsonl"
    probes.write_text(json.dumps(probe) + "\n")
    return bench_cli("probes", "check", str(session), "--probes", str(probes))


def test_probes_check_names_a_number_probe_whose_evidence_normalization_removes(tmp_path):
    # the grader collapses the newline between "2.1s" and "Exit" to a space: a regex asking for `\n` matches nowhere
    proc = _check(tmp_path, r"3 failed,\s+41 passed in 2\.1s\nExit")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = next(line for line in proc.stdout.splitlines() if line.startswith("n1\t"))
    assert "never graded present" in line and "evidence regex" in line and "'o1'" in line
    assert "1 probes checked: 1 problem(s)" in proc.stdout


def test_probes_check_passes_the_same_probe_with_evidence_the_normalized_text_holds(tmp_path):
    proc = _check(tmp_path, r"3 failed,\s+41 passed in 2\.1s\s+exit")  # normalized: "... in 2.1s exit code: 1"
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 probes checked: 0 problem(s)" in proc.stdout
