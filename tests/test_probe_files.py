"""Probe files cannot break a run: a schema checked before any replay (errors name file, probe and
field), bounded regex matching, no YAML alias bombs, free `note`/`x-` fields, and a probe whose source
is not in the imported view skipped (reported once) while the others are graded. Each case is the one
of issue 17 (#7–#9) or issue 13, and each fails on the code before these changes."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import threading
import time

import pytest
import yaml

import compaction_bench as bench
from compaction_bench.metrics.grading import grade_reply, presence
from compaction_bench.probes import MAX_ALIAS_EXPANSION, Probe, ProbeError, load_probes, write_probes
from compaction_bench.store import load_run
from compaction_bench.transcript import Item, Transcript
from tests.conftest import assert_user_error, bench_cli, write_tiny_session

HEAD = "- id: p1\n  kind: recall\n  question: Which port does the server use?\n  source_text: port 8080\n"


def write(tmp_path, text: str, name: str = "probes.yaml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_string_accept_is_an_error_not_one_letter_answers(tmp_path):
    path = write(tmp_path, HEAD + "  answer: '8080'\n  accept: \"the answer\"\n")
    with pytest.raises(ProbeError) as error:
        load_probes(path)
    message = str(error.value)
    assert str(path) in message and "'p1'" in message and "'accept'" in message and "list of strings" in message


def test_yes_stays_the_string_yes_and_true_is_an_error(tmp_path):
    (probe,) = load_probes(write(tmp_path, HEAD + "  answer: yes\n"))
    assert probe.answer == "yes"
    for value, kind in (("true", "bool"), ("3.10", "float")):
        with pytest.raises(ProbeError, match=rf"p1.*'answer'.*{kind}.*quote it"):
            load_probes(write(tmp_path, HEAD + f"  answer: {value}\n"))
    (number,) = load_probes(write(tmp_path, HEAD + "  answer: 8080\n"))
    assert number.answer == "8080"  # an integer reads as its digits, exactly


@pytest.mark.parametrize("written", ["007", "017", "12:30", "190:20:30", "0x1F", "0b101", "1_000", "+12"])
def test_an_unquoted_answer_is_kept_as_written_not_read_by_yaml_1_1_number_rules(tmp_path, written):
    """YAML 1.1 reads `007` as 7, `017` as 15 (octal), `12:30` as 750 (base 60), `0x1F` as 31: the probe then asked
    for "7", which a transcript saying "7 passed" but never "007" matched (retention 1.000 for a fact not there)."""
    (probe,) = load_probes(write(tmp_path, HEAD + f"  answer: {written}\n  accept: [{written}]\n"))
    assert probe.answer == written and probe.accept == (written,)


@pytest.mark.parametrize(
    ("field", "value", "wanted"),
    [("question", "[1, 2]", "a string"), ("meta", "[1]", "a mapping"), ("source_text", "{a: 1}", "a string"), ("kind", "recal", "one of")],
)
def test_wrong_field_types_name_file_probe_and_field(tmp_path, field, value, wanted):
    text = {"question": "Q?", "kind": "recall", "answer": "'8080'", "source_text": "port 8080", "meta": "{}"}
    text[field] = value
    body = "- id: p1\n" + "".join(f"  {k}: {v}\n" for k, v in text.items())
    path = write(tmp_path, body)
    with pytest.raises(ProbeError) as error:
        load_probes(path)
    assert str(path) in str(error.value) and "'p1'" in str(error.value) and wanted in str(error.value)


def test_note_and_x_fields_are_kept_in_meta(tmp_path):
    (probe,) = load_probes(write(tmp_path, HEAD + "  answer: '8080'\n  note: checked by hand\n  x-reviewer: ana\n"))
    assert probe.meta == {"note": "checked by hand", "x-reviewer": "ana"}
    with pytest.raises(ProbeError, match="unknown field.*reviewer"):
        load_probes(write(tmp_path, HEAD + "  answer: '8080'\n  reviewer: ana\n"))


def test_a_yaml_alias_bomb_is_rejected_before_it_expands(tmp_path):
    # The 405-byte "billion laughs" of the report: nine levels, each alias nine times the one before.
    levels = ["a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]"]
    for n, name in enumerate("bcdefghi"):
        prev = "abcdefghi"[n]
        levels.append(f"{name}: &{name} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]")
    bomb = HEAD + "  answer: '8080'\n  meta:\n" + "".join(f"    {line}\n" for line in levels)
    path = write(tmp_path, bomb)
    started = time.monotonic()
    with pytest.raises(ProbeError, match=f"aliases expand to .* aliases may add at most {MAX_ALIAS_EXPANSION:,} nodes plus"):
        load_probes(path)
    assert time.monotonic() - started < 5
    # a few ordinary aliases are fine
    (probe,) = load_probes(write(tmp_path, HEAD + "  answer: &p '8080'\n  accept: [*p]\n"))
    assert probe.accept == ("8080",)


def test_many_probes_sharing_a_meta_object_read_as_pyyaml_dumps_them(tmp_path):
    """PyYAML writes an object that several probes share once, with an anchor, and aliases elsewhere: 1,500
    probes of one script's shared `meta` add 10,493 nodes once expanded, which a bound of 10,000 refused."""
    shared = {"source": "script", "reviewed": "no", "batch": "7"}
    probes = [{"id": f"p{n}", "kind": "recall", "question": f"What is value {n}?", "answer": f"v{n}", "match": "contains",
               "source_text": f"value {n} is v{n}", "meta": shared} for n in range(1_500)]
    path = tmp_path / "many.yaml"
    path.write_text(yaml.safe_dump(probes, sort_keys=False))
    assert "&id001" in path.read_text() and path.read_text().count("*id001") == 1_499
    loaded = load_probes(path)
    assert len(loaded) == 1_500 and all(p.meta == shared for p in loaded)


@pytest.mark.parametrize("nesting", ["[" * 50_000 + "]" * 50_000, "- " * 5_000 + "x"], ids=["flow", "block"])
def test_a_probe_file_nested_too_deeply_is_one_clear_error(tmp_path, nesting):
    """The YAML composer recurses once per level: a hostile file ended in a RecursionError traceback (exit 1)."""
    path = tmp_path / "deep.yaml"
    path.write_text(nesting + "\n")
    with pytest.raises(ProbeError, match=f"{re.escape(str(path))}: YAML nested too deeply to read"):
        load_probes(path)
    assert_user_error(bench_cli("probes", "check", str(write_tiny_session(tmp_path)), "--probes", str(path)), f"{path}: YAML nested too deeply")


#: Characters some reader takes for a line break: YAML's NEL, line and paragraph separators; `str.splitlines`'s too,
#: with the vertical tab, form feed and the file, group and record separators; and a carriage return.
BREAKS = "\x85\u2028\u2029\x0b\x0c\x1c\x1d\x1e\r"


@pytest.mark.parametrize("suffix", [".yaml", ".jsonl"])
def test_probes_written_with_any_line_break_character_read_back_as_they_were(tmp_path, suffix):
    """A mined probe's texts come from a transcript. A NEL was written as it is into YAML, which reads it back as a
    space; a U+2028 or NEL in JSONL split its line (`splitlines`), a malformed-JSON error: `bench score` would have
    graded other answers than the run did."""
    probes = [Probe(id=f"p{n}", kind="recall", question=f"what follows{c}here?", answer=f"x{c}y", source_text=f"x{c}y and more{c}",
                    accept=(f"{c}x",)) for n, c in enumerate(BREAKS)]
    path = write_probes(probes, tmp_path / f"probes{suffix}")
    assert load_probes(path) == probes


def test_a_probe_file_that_is_not_utf8_is_one_clear_error(tmp_path):
    path = tmp_path / "probes.yaml"
    path.write_bytes(HEAD.encode() + b"  answer: '\xff\xfe'\n")
    with pytest.raises(ProbeError, match="not UTF-8"):
        load_probes(path)


def _finishes(function, seconds: float) -> bool:
    done = threading.Event()
    thread = threading.Thread(target=lambda: (function(), done.set()), daemon=True)
    thread.start()
    return done.wait(seconds)


def test_a_catastrophic_regex_cannot_hang_grading():
    probe = Probe("evil", "recall", "Q?", "(a+)+$", match="regex", source_text="x")
    hostile = "a" * 40 + "!"
    assert _finishes(lambda: presence(probe, hostile), 5), "presence hung on (a+)+$"
    assert _finishes(lambda: grade_reply(probe, hostile), 5), "grading hung on (a+)+$"
    assert presence(Probe("ok", "recall", "Q?", r"port \d+", match="regex", source_text="x"), "Port 8080").present


def test_a_regex_re2_cannot_run_is_an_error_naming_the_probe(tmp_path):
    path = write(tmp_path, HEAD + "  answer: '(a)\\1'\n  match: regex\n")
    with pytest.raises(ProbeError, match=r"'p1'.*'answer'.*RE2"):
        load_probes(path)


def test_a_run_with_an_unlocatable_probe_skips_it_and_grades_the_rest(tmp_path, caplog):
    items = [
        Item("s", "system", "You are a coding agent."),
        Item("u0", "user", "Start the server on port 8080, please.", turn=0),
        Item("a0", "assistant", "The server listens on port 8080 now.", response=0, turn=0),
    ]
    transcript = Transcript("srv", tuple(items)).write(tmp_path / "srv.jsonl")
    probes = write(
        tmp_path,
        HEAD + "  answer: '8080'\n"
        "- id: subagent-fact\n  kind: recall\n  question: What did the subagent find?\n  answer: 'hidden'\n"
        "  source_text: only a subagent saw this\n",
    )
    with caplog.at_level(logging.WARNING, logger="compaction_bench.probes"):
        root = bench.run([transcript], ["none"], ["64k"], out=tmp_path / "runs", run_id="r", jobs=1, probes=str(probes), report=False)
    skipped = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert len(skipped) == 1 and "'subagent-fact'" in skipped[0] and "srv" in skipped[0] and "occurs nowhere" in skipped[0]
    graded = load_run(root)["probes"]
    assert set(graded["probe_id"]) == {"p1"} and graded["present"].all()


def test_probes_check_names_each_unusable_probe(tmp_path):
    items = [Item("u0", "user", "Start the server on port 8080, please.", turn=0), Item("a0", "assistant", "Listening.", response=0, turn=0)]
    transcript = Transcript("srv", tuple(items)).write(tmp_path / "srv.jsonl")
    good = write(tmp_path, HEAD + "  answer: '8080'\n", "good.yaml")
    bad = write(
        tmp_path,
        HEAD + "  answer: '8080'\n"
        "- id: elsewhere\n  kind: recall\n  question: Q?\n  answer: 'x'\n  source: no-such-item\n"
        "- id: absent\n  kind: error\n  question: Q?\n  answer: 'Segmentation fault'\n  source: u0\n",
        "bad.yaml",
    )

    def check(probes):
        return subprocess.run([sys.executable, "-m", "compaction_bench.cli", "probes", "check", str(transcript), "--probes", str(probes)],
                              capture_output=True, text=True, timeout=300)

    ok = check(good)
    assert ok.returncode == 0 and "1 probes checked: 0 problem(s)" in ok.stdout, ok.stderr
    proc = check(bad)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert any(line.startswith("elsewhere\tskipped in a run: source item 'no-such-item'") for line in lines)
    assert any(line.startswith("absent\tskipped in a run: not where its source says: answer 'Segmentation fault'") for line in lines)
    assert "3 probes checked: 2 problem(s)" in proc.stdout
    broken = check(write(tmp_path, HEAD + "  answer: '8080'\n  accept: oops\n", "broken.yaml"))
    assert broken.returncode == 2 and broken.stderr.startswith("error: ") and "'accept'" in broken.stderr


def test_a_key_written_twice_in_one_probe_is_refused_not_overwritten(tmp_path):
    """YAML and JSON keep a repeated key's last value silently: a probe's second `answer:` replaced its first."""
    with pytest.raises(ProbeError, match=r"probes.yaml:6: malformed YAML \(the key 'answer' is given twice"):
        load_probes(write(tmp_path, HEAD + "  answer: '8080'\n  answer: '9090'\n"))
    line = '{"id": "p1", "kind": "recall", "question": "Which port?", "answer": "8080", "answer": "9090", "source_text": "port 8080"}'
    with pytest.raises(ProbeError, match=r"probes.jsonl:1: malformed JSON \(the key 'answer' is given twice"):
        load_probes(write(tmp_path, line + "\n", name="probes.jsonl"))
    merged = "- &base\n  id: p1\n  kind: recall\n  question: Which port?\n  answer: '8080'\n  source_text: port 8080\n- <<: *base\n  id: p2\n"
    assert [p.id for p in load_probes(write(tmp_path, merged))] == ["p1", "p2"]  # a merge's keys may be overridden
