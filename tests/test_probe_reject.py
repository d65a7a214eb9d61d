"""A probe's `reject`: a reply that hedges between the right answer and a listed wrong one is wrong.

Each verdict is known by hand: "5432 or 5433" names the rejected port, "5432" does not, and "not
5433 but 5432" names it too (the rule reads no negation, by design). The context is never judged:
presence is the same with or without rejects. Schema errors name file, probe and field."""

from __future__ import annotations

import pytest

from compaction_bench.metrics.grading import grade_reply, presence, set_f1
from compaction_bench.probes import Probe, ProbeError, load_probes, probes_text


def probe(answer, match="contains", reject=(), **kw) -> Probe:
    return Probe(id="p", kind=kw.pop("kind", "recall"), question="q?", answer=answer, match=match, reject=reject, source="x", **kw)


@pytest.mark.parametrize("match", ["contains", "number"])
@pytest.mark.parametrize(
    ("reply", "correct"),
    [
        ("5432 or 5433", False),
        ("It is 5432 or maybe 5433.", False),
        ("5432", True),
        ("The staging database listens on 5432.", True),
        ("not 5433 but 5432", False),  # strict: naming the wrong port at all is wrong
        ("5433", False),
    ],
)
def test_a_reply_naming_the_rejected_port_is_wrong(match, reply, correct):
    assert grade_reply(probe("5432", match, reject=("5433",)), reply).correct is correct
    # Without `reject` every reply that names 5432 passes: the hedge was credited.
    assert grade_reply(probe("5432", match), reply).correct is ("5432" in reply)


def test_a_rejected_answer_counts_by_the_probes_own_token_rule():
    # Whole tokens: 54330 is not 5433 (contains), and 5,433 is 5433 (number).
    assert grade_reply(probe("5432", "contains", reject=("5433",)), "5432, not port 54330").correct is True
    assert grade_reply(probe("5432", "number", reject=("5433",)), "5432 (or 5,433)").correct is False
    assert grade_reply(probe("5432", "number", reject=("5433",)), "5432 (row L5433)").correct is True
    # A number probe's tolerance widens the rejected number as it widens the answer.
    near = probe("100", "number", reject=("110",), meta={"tolerance": 2})
    assert grade_reply(near, "101").correct is True
    assert grade_reply(near, "101, or 108").correct is False
    assert grade_reply(near, "101, or 107").correct is True


def test_a_regex_probe_rejects_by_pattern():
    p = probe(r"keyset pagination", "regex", reject=(r"OFFSET/LIMIT",), kind="decision")
    assert grade_reply(p, "We could use keyset pagination or OFFSET/LIMIT pagination.").correct is False
    assert grade_reply(p, "Keyset pagination on (created_at, id).").correct is True
    assert grade_reply(p, "offset/limit").correct is False


def test_an_exact_reply_equal_to_the_answer_is_never_a_rejected_one():
    p = probe("feature/retry", "exact", reject=("feature/retries",))
    assert grade_reply(p, "`feature/retry`.").correct is True
    assert grade_reply(p, "feature/retries").correct is False
    assert grade_reply(p, "feature/retry or feature/retries").correct is False  # not the whole reply: wrong without reject too


def test_a_set_item_naming_a_rejected_member_is_a_wrong_item():
    members = ["a.py", "b.py", "c.py"]
    p = probe(members, "set", reject=("d.py",), kind="artifact")
    assert grade_reply(p, "a.py, b.py, c.py").score == pytest.approx(1.0)
    # Items "a.py or d.py" (wrong: names d.py), "b.py", "c.py": precision 2/3, recall 1, F1 0.8.
    hedged = grade_reply(p, "a.py or d.py, b.py, c.py")
    assert hedged.score == pytest.approx(0.8) and hedged.correct is True
    assert set_f1(members, "a.py or d.py, b.py, c.py") == pytest.approx(1.0)  # without the reject
    # Every item hedged: precision 0, F1 0.
    assert grade_reply(p, "a.py or d.py; b.py or d.py; c.py or d.py").correct is False
    # A separate rejected item was already a wrong item: precision 3/4, recall 1, F1 6/7 either way.
    assert grade_reply(p, "a.py, b.py, c.py, d.py").score == pytest.approx(6 / 7)


def test_presence_ignores_rejects():
    discussion = "Should we go with keyset pagination or OFFSET/LIMIT? ... Let's go with keyset pagination."
    with_reject = probe(r"keyset pagination", "regex", reject=(r"OFFSET/LIMIT",), kind="decision")
    assert presence(with_reject, discussion) == presence(probe(r"keyset pagination", "regex", kind="decision"), discussion)
    assert presence(with_reject, discussion).present is True
    port = probe("staging port 5432", reject=("port 5433",))
    assert presence(port, "staging port 5432, not port 5433").present is True


HEAD = "- id: p1\n  kind: recall\n  question: Which port?\n  source_text: port 5432\n"


def write(tmp_path, text: str, name: str = "probes.yaml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("body", "wanted"),
    [
        ("  answer: '5432'\n  reject: '5433'\n", "'reject' must be a list of strings"),
        ("  answer: '5432'\n  reject: [true]\n", "'reject[0]' must be a string, got bool True (quote it"),
        ("  answer: '5432'\n  reject: [{a: 1}]\n", "'reject[0]' must be a string"),
        ("  answer: '5432'\n  match: number\n  reject: [many]\n", "'reject': 'many' states no number"),
        ("  answer: 'keyset'\n  match: regex\n  reject: ['(?<=a)b']\n", "'reject': regex '(?<=a)b' is not supported by RE2"),
        ("  answer: 'keyset'\n  match: judge\n  reject: [offset]\n", "'reject' has no effect on a 'judge' probe"),
        ("  answer: Port 5432\n  reject: ['port  5432']\n", "'port  5432' is the answer 'Port 5432' itself"),
        ("  answer: '5432'\n  accept: [port 5432]\n  reject: [PORT 5432]\n", "'PORT 5432' is the answer 'port 5432' itself"),
        ("  answer: [a.py, b.py]\n  match: set\n  reject: [b.py]\n", "'b.py' is the answer 'b.py' itself"),
        ("  answer: '100'\n  match: number\n  meta: {tolerance: 5}\n  reject: ['103']\n", "'103' rejects the answer '100' itself"),
        ("  answer: '100'\n  match: number\n  meta: {tolerance: wide}\n  reject: ['200']\n", "meta 'tolerance' must be a number"),
        ("  answer: '5432'\n  reject: ['  ']\n", "'reject' holds an empty string"),
    ],
)
def test_reject_schema_errors_name_file_probe_and_field(tmp_path, body, wanted):
    path = write(tmp_path, HEAD + body)
    with pytest.raises(ProbeError) as error:
        load_probes(path)
    message = str(error.value)
    assert str(path) in message and "'p1'" in message and wanted in message, message


@pytest.mark.parametrize("suffix", [".yaml", ".jsonl"])
def test_reject_survives_a_probe_file_and_an_integer_reads_as_its_digits(tmp_path, suffix):
    (loaded,) = load_probes(write(tmp_path, HEAD + "  answer: 5432\n  match: number\n  reject: [5433, '5434']\n"))
    assert loaded.reject == ("5433", "5434")
    (again,) = load_probes(write(tmp_path, probes_text([loaded], suffix), f"again{suffix}"))
    assert again == loaded
    (plain,) = load_probes(write(tmp_path, HEAD + "  answer: '5432'\n", "plain.yaml"))
    assert plain.reject == () and "reject" not in plain.to_dict()
