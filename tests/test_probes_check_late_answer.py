"""`bench probes check` names a probe whose answer first occurs after its source: at a checkpoint between the
two every strategy reads it absent, `none` too (an outside audit's finding: a long answer was checked only for
occurring somewhere at or after its source, and such a probe cost every strategy while the check passed it)."""

from __future__ import annotations

import json

from tests.conftest import bench_cli
from tests.test_probes_audit3 import ITEMS


def _check(tmp_path, probe: dict) -> tuple[int, str]:
    session = tmp_path / "late.jsonl"
    header = {"format": "compaction-bench/transcript", "version": 1, "id": "hand", "model": "claude-sonnet-4-5"}
    session.write_text("\n".join(json.dumps(x) for x in [header, *ITEMS]) + "\n")
    probes = tmp_path / "probes.jsonl"
    probes.write_text(json.dumps({"id": "p1", "kind": "recall", "question": "What did the test run print?", **probe}) + "\n")
    proc = bench_cli("probes", "check", str(session), "--probes", str(probes))
    return proc.returncode, proc.stdout + proc.stderr


def test_a_long_answer_first_stated_after_its_source_is_named(tmp_path):
    # the answer is the output o1; the source u1 is the user's request before it
    code, out = _check(tmp_path, {"answer": "3 failed, 41 passed in 2.1s", "match": "contains", "source": "u1"})
    assert code == 1, out
    line = next(line for line in out.splitlines() if line.startswith("p1\t"))
    assert "absent for every strategy" in line and "'u1'" in line and "its answer does not occur" in line
    assert "1 probes checked: 1 problem(s)" in out


def test_the_same_answer_sourced_where_it_is_stated_passes(tmp_path):
    code, out = _check(tmp_path, {"answer": "3 failed, 41 passed in 2.1s", "match": "contains", "source": "o1"})
    assert code == 0, out
    assert "1 probes checked: 0 problem(s)" in out


def test_a_regex_first_matching_after_its_source_is_named(tmp_path):
    code, out = _check(tmp_path, {"answer": r"\d+ failed", "match": "regex", "source": "u1"})
    assert code == 1, out
    assert "its regex does not occur" in out
    code, out = _check(tmp_path, {"answer": r"\d+ failed", "match": "regex", "source": "o1"})
    assert code == 0, out


def test_a_judge_probe_is_not_held_to_a_verbatim_answer(tmp_path):
    # a judge probe's answer is a reference for the judge, which a transcript need not state word for word
    code, out = _check(tmp_path, {"answer": "Three of the tests failed.", "match": "judge", "source": "a1"})
    assert code == 0, out
