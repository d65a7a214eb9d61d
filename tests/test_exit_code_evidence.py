"""Exit-code probes in summaries: a mined `recall.exit-code` probe counts as present where a summary names the
command and states its code in words (`exit code 1`, `exited with 1`, `returned 1`, `status 1`), as it does where the
tool output is kept verbatim; a number not tied to that command (another command's code, `line 1`, a count) does not."""

from __future__ import annotations

import json

import pytest

from compaction_bench.importing import load_transcripts
from compaction_bench.metrics.grading import context_text, presence
from compaction_bench.probes import Probe
from compaction_bench.replay import replay
from compaction_bench.request import message_from_item
from compaction_bench.scenarios.mining import mine_probes
from compaction_bench.transcript import Item, Transcript
from tests.conftest import CORPORA


def codex_style_session() -> Transcript:
    """A user request, then two shell calls whose outputs open with Codex's `Exit code: N` header."""
    items = [Item("u0", "user", "Make the suite pass.", turn=0)]
    runs = (
        ("pytest -x", "Exit code: 1\nWall time: 2.1 seconds\nOutput:\nFAILED tests/test_fees.py::test_round - AssertionError\n1 failed, 11 passed"),
        ("make lint", "Exit code: 2\nWall time: 0.4 seconds\nOutput:\nsrc/fees.py:1:1: E265 block comment should start with '# '"),
    )
    for n, (command, output) in enumerate(runs):
        arguments = json.dumps({"command": ["bash", "-lc", command]})
        items.append(Item(f"c{n}", "tool_call", call_id=f"k{n}", tool_name="shell", arguments=arguments, response=n, turn=0))
        items.append(Item(f"r{n}", "tool_result", output, call_id=f"k{n}", turn=0))
    items.append(Item("a9", "assistant", "One test fails on rounding and lint flags a comment.", response=2, turn=0))
    return Transcript("codex-style", tuple(items))


def exit_code_probe(probes: list[Probe], command: str) -> Probe:
    (probe,) = [p for p in probes if p.meta["rule"] == "recall.exit-code" and f"`{command}`" in p.question]
    return probe


SUMMARY_PHRASINGS = (
    "Ran `pytest -x`; it failed with exit code 1 (1 failed, 11 passed).",
    "`pytest -x` exited with 1 after the rounding test failed.",
    "`pytest -x` exited with code 1.",
    "`pytest -x` returned 1, so the fix is not done.",
    "`pytest -x` failed (status 1): tests/test_fees.py::test_round.",
    "- pytest -x → exit code: 1, test_round fails",
    "`pytest -x` (exit 1)",
    "`pytest -x` returned non-zero exit status 1.",
    "`pytest -x`: rc=1",
)


@pytest.mark.parametrize("summary", SUMMARY_PHRASINGS)
def test_a_summary_that_names_the_command_and_states_its_code_keeps_the_fact(summary):
    probe = exit_code_probe(mine_probes(codex_style_session()), "pytest -x")
    assert probe.answer == "1" and probe.match == "number"
    assert presence(probe, f"## Progress\n{summary}\n## Next\nFix the rounding in src/fees.py.").present


NOT_TIED = (
    "`pytest -x` failed at line 1 of tests/test_fees.py.",  # `line 1` is no exit code
    "`pytest -x` failed; `make lint` exited with 1.",  # the code of another quoted command
    "`pytest -x` failed. Later the linter exited with 1.",  # the next sentence
    "- `pytest -x`: rounding test fails\n- make lint: exit code 1",  # the next list item
    "`pytest -x` returned 1 failure.",  # a count, not a code
    "`pytest -x` exited with code 12.",  # not the whole number
    "`pytest -x` failed in src 1",  # `rc` inside a word
    "The suite failed with exit code 1.",  # no command
    "`make lint` exited with 1.",  # another command
    "`pytest -x` failed on the rounding test, the fee schedule and the currency table, again; exit code 1",  # too far
)


@pytest.mark.parametrize("summary", NOT_TIED)
def test_a_code_not_tied_to_the_command_does_not_count(summary):
    probe = exit_code_probe(mine_probes(codex_style_session()), "pytest -x")
    assert not presence(probe, summary).present


def test_the_verbatim_output_still_counts_and_the_codes_stay_apart():
    session = codex_style_session()
    probes = mine_probes(session)
    tests, lint = exit_code_probe(probes, "pytest -x"), exit_code_probe(probes, "make lint")
    whole = context_text([message_from_item(i) for i in session.items])
    assert tests.answer == "1" and lint.answer == "2"
    assert presence(tests, whole).present and presence(lint, whole).present
    summary = "`pytest -x` exited with 1; `make lint` exited with 2."
    assert presence(tests, summary).present and presence(lint, summary).present
    assert not presence(lint, "`make lint` exited with 1; `pytest -x` exited with 2.").present


SQLFLUFF = "mini-swe-agent-traj/SWE-agent__mini-swe-agent/deepseek_chat_dev__sqlfluff__sqlfluff-2419.traj.json"
LINT = "sqlfluff lint test_l060.sql --rules L060"


@pytest.mark.corpora
def test_a_recorded_session_s_exit_codes_count_in_a_summary_that_states_them():
    """The mini-swe-agent run ran `sqlfluff lint …` twice: `<returncode>127</returncode>` (not installed), then 65
    (the lint finding); the mined probes ask for each run's code."""
    path = CORPORA / SQLFLUFF
    if not path.exists():
        pytest.skip("corpora not present")
    (session,) = load_transcripts(path)
    probes = {p.question: p for p in mine_probes(session) if p.meta["rule"] == "recall.exit-code"}
    first = probes[f"What exit code did the `bash` call `{LINT}` return the 1st time it ran?"]
    second = probes[f"What exit code did the `bash` call `{LINT}` return the 2nd time it ran?"]
    assert (first.answer, second.answer) == ("127", "65")
    whole = context_text([message_from_item(i) for i in session.items if i.kind != "marker"])
    assert presence(first, whole).present and presence(second, whole).present
    summary = (
        f"1. `{LINT}` first exited with code 127 (sqlfluff was not installed), so I ran `pip install -e .`.\n"
        f"2. Re-running `{LINT}` returned 65: L060 flags IFNULL on line 1."
    )
    assert presence(first, summary).present and presence(second, summary).present
    # the code after another command is not this command's, nor is the code of a different run
    assert not presence(second, f"`{LINT}` first failed; `pip install -e .` then exited with 65.").present
    assert not presence(first, f"`{LINT}` exited with 65.").present


def quoted_command_session() -> Transcript:
    """A mini-swe-agent-like run: a `bash` call whose command holds quotes (JSON-escaped in its arguments) and whose
    output reports `<returncode>1</returncode>`, then a closing reply."""
    command = 'grep -rn "def id_for_label" ./django --include="*.py"'
    items = [
        Item("u0", "user", "Find where id_for_label is defined.", turn=0),
        Item("c0", "tool_call", call_id="k0", tool_name="bash", arguments=json.dumps({"command": command}), response=0, turn=0),
        Item("r0", "tool_result", "<returncode>1</returncode>\n<output>\n</output>", call_id="k0", turn=0),
        Item("a1", "assistant", "No definition matches that pattern.", response=1, turn=0),
    ]
    return Transcript("quoted-command", tuple(items))


def test_an_output_kept_verbatim_counts_in_aiders_rendering_of_the_call():
    """Aider writes a call into its assistant text as `name(arguments)`, not as the transcript's `name {arguments}`;
    the evidence of the output's exit code anchors on the command as the arguments hold it (quotes escaped), which
    both renderings keep, so the code Aider keeps verbatim beside its call is present."""
    session = quoted_command_session()
    (probe,) = [p for p in mine_probes(session) if p.meta["rule"] == "recall.exit-code"]
    assert probe.answer == "1"
    own = context_text([message_from_item(i) for i in session.items])
    final = replay(session, "aider", profile="1m").requests[-1]
    aiders = context_text(final.messages)
    assert 'bash({"command"' in aiders and "<returncode>1</returncode>" in aiders  # kept verbatim, in Aider's form
    assert presence(probe, own).present and presence(probe, aiders).present
    # still tied to its command: the code beside another call is not this one's
    other = aiders.replace("def id_for_label", "def label_tag")
    assert not presence(probe, other).present
