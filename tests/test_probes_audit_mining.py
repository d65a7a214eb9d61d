"""Probe audit: mined probes on hand-built sessions whose right probes are worked out by hand.

- the output of `cd DIR && cat FILE` is the file's contents: its code lines are not errors, while the output of
  a script a heredoc wrote and then ran is a program's output;
- a read set is asked once every member is read: its source is the read that completes it in its turn;
- a question never names a member of its own set;
- the error of a failed edit is the error the linter names, not the tool's advice around it (the text of a
  recorded SWE-agent edit failure, marshmallow-1867 demonstration)."""

from __future__ import annotations

from compaction_bench.metrics.grading import anchor, context_text, normalize, presence
from compaction_bench.probes import Probe, answer_after_source
from compaction_bench.request import message_from_item
from compaction_bench.scenarios.mining import MINERS, mine_probes
from tests.test_mining import Session, answers

CODE = "def load(path):\n    try:\n        return parse(path)\n    except ValueError:\n        return None\n"


def test_a_file_read_after_cd_is_contents_not_errors():
    t = (
        Session()
        .user("Why does loading fail?")
        .bash("cd /repo && cat app/loader.py", CODE)
        .bash('cd /repo && grep -n "except" app/loader.py | head -5', "4:    except ValueError:")
        .bash(
            "cd /repo && cat > check.py << 'EOF'\nfrom app.loader import load\nload('x.cfg')\nEOF\npython check.py",
            "KeyError: 'section'",
        )
        .transcript()
    )
    errors = answers(t, "error")
    assert "except ValueError:" not in errors and "4:    except ValueError:" not in errors  # code of the file read
    assert errors.get("KeyError: 'section'") == "error.last-line"  # what the script printed


def test_a_read_set_is_asked_once_its_last_member_is_stated():
    t = (
        Session()
        .user("Find where the settings come from.")
        .call("Read", {"file_path": "src/settings.py"}, "1\tSETTINGS = load_settings()")
        .say("The loader must be elsewhere.")
        .call("Read", {"file_path": "src/loader.py"}, "1\tdef load_settings(): ...")
        .transcript()
    )
    (probe,) = [p for p in mine_probes(t) if p.meta["rule"] == "artifact.read-set"]
    assert probe.answer == ("src/settings.py", "src/loader.py")
    assert probe.source == "c5"  # the read of src/loader.py, not the first read (c2)
    items = list(t.items)
    upto = normalize(context_text([message_from_item(i) for i in items[:6]]))
    before = normalize(context_text([message_from_item(i) for i in items[:5]]))
    assert presence(probe, "", upto, anchor(probe)).present and not presence(probe, "", before, anchor(probe)).present


def test_a_read_set_named_before_its_reads_is_sourced_at_its_last_read():
    t = (
        Session()
        .user("Find where the settings come from.")
        .say("I expect src/loader.py to hold the loader; first the settings module.")
        .call("Read", {"file_path": "src/settings.py"}, "1\tSETTINGS = load_settings()")
        .call("Read", {"file_path": "src/loader.py"}, "1\tdef load_settings(): ...")
        .transcript()
    )
    (candidate,) = [c for c in MINERS["artifact"](t) if c.rule == "artifact.read-set"]
    assert candidate.source == "c5"  # the read of src/loader.py completes the set, though a2 named it before
    # both members occur before c5 (a2, c3): the set would count present from there, so no probe asks it
    assert [p for p in mine_probes(t) if p.meta["rule"] == "artifact.read-set"] == []


def test_a_set_is_located_where_its_last_member_is_stated():
    t = (
        Session()
        .user("Compare the two configs.")
        .call("Read", {"file_path": "a.toml"}, "x = 1")
        .call("Read", {"file_path": "b.toml"}, "x = 2")
        .transcript()
    )
    at_first = Probe("s", "artifact", "Which files were read?", ["a.toml", "b.toml"], match="set", source="c2")
    at_last = Probe("s", "artifact", "Which files were read?", ["a.toml", "b.toml"], match="set", source="c4")
    assert answer_after_source(t, at_first) is not None  # b.toml is read only later: asked too early
    assert answer_after_source(t, at_last) is None
    assert answer_after_source(t, Probe("s", "artifact", "Q?", ["a.toml"], match="set", source="c4")) is not None


def test_no_question_names_a_member_of_its_set():
    t = (
        Session()
        .user("read docs/theme.md and explain the colours")
        .call("Read", {"file_path": "docs/theme.md"}, "# Theme\nColours come from the palette.")
        .call("Read", {"file_path": "src/palette.ts"}, "export const palette = {}")
        .transcript()
    )
    assert not [p for p in mine_probes(t) if p.match == "set"]  # the question would say docs/theme.md


EDIT_FAILURE = """Your proposed edit has introduced new syntax error(s). Please understand the fixes and retry your edit commmand.

ERRORS:
- E999 IndentationError: unexpected indent

This is how your edit would have looked if applied
-------------------------------------------------
[File: /marshmallow-code__marshmallow/src/marshmallow/fields.py (1997 lines total)]
(1468 more lines above)
1474:        base_unit = dt.timedelta(**{self.precision: 1})
1475:return int(round(value.total_seconds() / base_unit.total_seconds()))  # round to nearest int
1476:
(518 more lines below)
-------------------------------------------------
Your changes have NOT been applied. Please fix your edit command and try again.
You either need to 1) Specify the correct start/end line arguments or 2) Correct your edit code.
DO NOT re-run the same failed edit command. Running it again will lead to the same error.
"""


def test_a_failed_edit_reports_the_error_its_linter_names():
    t = Session().user("Fix the rounding.").call("edit", {"command": "edit 1475:1475"}, EDIT_FAILURE).transcript()
    errors = answers(t, "error")
    assert errors.get("E999 IndentationError: unexpected indent") == "error.last-line"
    assert "DO NOT re-run the same failed edit command. Running it again will lead to the same error." not in errors


def test_a_demonstration_states_only_what_the_session_itself_says():
    """A SWE-agent demonstration is another task's trajectory: its sentences are no instruction of this
    session, but one the session's own instructions also say is asked from it (its first occurrence)."""
    from compaction_bench.transcript import Item, Transcript

    session = Session()
    session.items.append(Item("demo", "user", "Here is a demonstration of another task. You must run one command at a time. "
                                              "We should never edit the tests of the marshmallow package.",
                              synthetic=True, meta={"demonstration": True}))
    t = session.user("Fix the date parser. You must run one command at a time. Keep every public name as it is.").transcript()
    found = answers(t, "constraint")
    assert "We should never edit the tests of the marshmallow package." not in found  # the other task's sentence
    assert "You must run one command at a time." in found and "Keep every public name as it is." in found
    probes = {p.answer: p for p in mine_probes(t) if p.kind == "constraint"}
    assert probes["You must run one command at a time."].source == "demo"  # in the context from the demonstration on
    # Without the mark the demonstration's own sentence is mined as this session's instruction.
    plain = Transcript("hand", tuple(Item(i.id, i.kind, i.text, synthetic=i.synthetic, turn=i.turn) for i in t.items))
    assert "We should never edit the tests of the marshmallow package." in answers(plain, "constraint")


def test_the_swe_agent_importer_marks_its_demonstrations():
    import json

    from compaction_bench.importing import load_transcripts
    from tests.conftest import CORPORA

    files = sorted((CORPORA / "swe-agent-traj").glob("*/*.traj"))
    raw = marked = 0
    for path in files:
        history = json.loads(path.read_text(encoding="utf-8")).get("history") or []
        raw += sum(1 for m in history if isinstance(m, dict) and m.get("role") == "user" and m.get("is_demo"))
        marked += sum(1 for t in load_transcripts(path) for i in t.items if i.meta.get("demonstration"))
    assert raw > 0 and marked == raw
