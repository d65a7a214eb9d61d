"""Probe mining: each rule on a small hand-built session whose probes are worked out by hand; on every
real corpus transcript every mined answer is verbatim at or after its source; subagent work is mined."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from compaction_bench.importing import load_transcripts
from compaction_bench.metrics.grading import anchor, context_text, is_short, normalize, presence
from compaction_bench.probes import answer_after_source, regex_search
from compaction_bench.request import message_from_item
from compaction_bench.scenarios.mining import MINERS, PER_BUCKET, mine_probes, mine_transcripts
from compaction_bench.transcript import Item, Transcript
from tests.conftest import CORPORA, corpus_files


class Session:
    """A hand-built transcript: items get ids in order, tool results pair with the previous call."""

    def __init__(self) -> None:
        self.items: list[Item] = [Item("sys", "system", "You are a coding agent.")]
        self.turn = -1
        self.response = 0

    def user(self, text: str, synthetic: bool = False) -> Session:
        self.turn += not synthetic
        self.items.append(Item(f"u{len(self.items)}", "user", text, turn=max(self.turn, 0), synthetic=synthetic))
        return self

    def say(self, text: str, kind: str = "assistant") -> Session:
        self.items.append(Item(f"a{len(self.items)}", kind, text, response=self.response, turn=self.turn))
        return self

    def call(self, name: str, args: dict, output: str, error: bool = False) -> Session:
        n = len(self.items)
        self.items.append(Item(f"c{n}", "tool_call", call_id=f"k{n}", tool_name=name, arguments=json.dumps(args), response=self.response, turn=self.turn))
        self.items.append(Item(f"r{n}", "tool_result", output, call_id=f"k{n}", turn=self.turn, is_error=error))
        self.response += 1
        return self

    def bash(self, command: str, output: str, error: bool = False, **extra: str) -> Session:
        return self.call("Bash", {"command": command, **extra}, output, error)

    def transcript(self) -> Transcript:
        return Transcript("hand", tuple(self.items))


def answers(transcript: Transcript, kind: str) -> dict[str, str]:
    """answer → rule of every candidate one family's rules find (before deduplication and caps)."""
    out: dict[str, str] = {}
    for c in MINERS[kind](transcript):
        out.setdefault(" | ".join(c.answer) if isinstance(c.answer, tuple) else c.answer, c.rule)
    return out


def test_error_rules():
    s = Session().user("The export crashes with `ValueError: bad header` when I run it.")
    s.bash("grep -rn TODO srcs", "grep: srcs: No such file or directory", error=True)
    s.bash("pytest -x", "/usr/bin/python: No module named pytest\nExit code: 1")
    s.bash("make build", "building...\nerror: linker `cc` not found\nmake: *** [build] Error 1")
    s.call("apply_patch", {"input": "*** Begin Patch\n*** Update File: a.py\n*** End Patch"}, "apply_patch verification failed: context not found")
    s.bash("sleep 900", "command timed out after 120 seconds")
    s.call("Read", {"file_path": "src/export.py"}, "    raise ValueError(f'bad header {h}')\n")  # a file's code, not a failure
    s.bash("pytest -x", "/usr/bin/python: No module named pytest\nExit code: 1")  # the same error again
    assert answers(s.transcript(), "error") == {
        "The export crashes with `ValueError: bad header` when I run it.": "error.user-quoted",
        "grep: srcs: No such file or directory": "error.flagged-result",
        "/usr/bin/python: No module named pytest": "error.last-line",
        # every error line, not only the last: the last (the failure) and the first (the cause)
        "make: *** [build] Error 1": "error.last-line",
        "error: linker `cc` not found": "error.first-line",
        "apply_patch verification failed: context not found": "error.last-line",
        "command timed out after 120 seconds": "error.last-line",
    }
    probes = mine_probes(s.transcript())
    first = next(p for p in probes if p.answer == "error: linker `cc` not found")
    assert first.source == "r6" and "`make build`" in first.question


def test_artifact_rules():
    s = Session().user("Add an export schema and clean up the old exporter.")
    s.bash("cat > schema/export.json <<'EOF'\n{\"type\": \"object\"}\nEOF", "")
    s.bash("rm legacy/exporter.py && mv tmp/out.csv data/out.csv", "")
    s.bash("touch notes.txt; sed -i 's/old/new/' config.toml", "")
    s.call("apply_patch", {"path": "src/app.py", "patch": "@@\n-old\n+new"}, "Done")
    s.call("apply_patch", {"input": "*** Begin Patch\n*** Add File: src/new_mod.py\n+x = 1\n*** Delete File: src/dead.py\n*** End Patch"}, "")
    s.call("Write", {"file_path": "docs/export.md", "content": "# Export format\n"}, "File created successfully at: docs/export.md")
    s.call("create", {"command": "create reproduce.py\n"}, "[File: /repo/reproduce.py (1 lines total)]")
    s.bash("mkdir -p out/reports", "")
    assert answers(s.transcript(), "artifact") == {
        "schema/export.json": "artifact.shell-wrote",
        "legacy/exporter.py": "artifact.shell-deleted",
        "data/out.csv": "artifact.shell-moved",
        "notes.txt": "artifact.shell-created",
        "config.toml": "artifact.shell-edited",
        "src/app.py": "artifact.call-edited",
        "src/new_mod.py": "artifact.call-created",
        "src/dead.py": "artifact.call-deleted",
        "docs/export.md": "artifact.call-wrote",
        "reproduce.py": "artifact.shell-created",
        "out/reports": "artifact.shell-created",
    }
    probes = mine_probes(s.transcript())
    written = next(p for p in probes if p.answer == "docs/export.md")
    assert written.question == "Which file did the assistant write with content beginning '# Export format'?"
    assert all(p.answer not in p.question for p in probes if p.kind == "artifact")
    # a read-only session gets the set of files read per request, asked from the read of its last member (c4) on
    r = Session().user("Explain the app.")
    r.call("Read", {"file_path": "src/app.py"}, "x = 1").call("Read", {"file_path": "src/util.py"}, "y = 2")
    (read,) = [p for p in mine_probes(r.transcript()) if p.kind == "artifact"]
    assert (read.answer, read.match, read.meta["rule"], read.source) == (("src/app.py", "src/util.py"), "set", "artifact.read-set", "c4")


def test_constraint_rules():
    s = Session().user("# AGENTS.md\n- NEVER commit generated files.\n- Run `make lint` before pushing.", synthetic=True)
    s.user("Fix the parser. Keep the public API unchanged. Use pnpm, not npm. Pin requests==2.31.0 in the lock file. Thanks for the help!")
    assert answers(s.transcript(), "constraint") == {
        "NEVER commit generated files.": "constraint.modal",
        "Run `make lint` before pushing.": "constraint.imperative",
        "Fix the parser.": "constraint.imperative",
        "Keep the public API unchanged.": "constraint.imperative",
        "Use pnpm, not npm.": "constraint.imperative",
        "Pin requests==2.31.0 in the lock file.": "constraint.pin",
    }
    questions = {p.answer: p.question for p in mine_probes(s.transcript())}
    assert questions["NEVER commit generated files."].startswith("What did the injected instructions say about")
    assert questions["Keep the public API unchanged."] == "What did the user say about Keep, public, unchanged?"


def test_a_lead_in_asks_for_the_command_it_introduces_and_a_capitals_title_is_no_instruction():
    # the lead-in of mini-swe-agent's instructions: the rule is the command in the block after it (the hand
    # label ms1-constraint-submit of tests/data/probes/mini-django-14411.yaml); a capitals title states nothing
    s = Session().user(
        "GENERAL IMPORTANT TIPS:\n\nYou MUST use this EXACT command to submit:\n\n```bash\necho SUBMIT && cat patch.txt\n```\n\n"
        "Each response should include:\n\n```\nTHOUGHT\ncommand\n```\n\nNEVER COMMIT SECRETS\n\n"
        "Follow these steps to resolve the issue:\n1. Read the code.",
        synthetic=True,
    )
    found = answers(s.transcript(), "constraint")
    assert found == {
        "echo SUBMIT && cat patch.txt": "constraint.modal",  # asked with the lead-in's words
        "Each response should include:": "constraint.modal",  # a two-line block: the lead-in as it is
        "NEVER COMMIT SECRETS": "constraint.modal",  # capitals with a modal: an instruction
        "Follow these steps to resolve the issue:": "constraint.imperative",  # a list follows: asked as it is
        "Read the code.": "constraint.imperative",
    }
    question = next(c.question for c in MINERS["constraint"](s.transcript()) if c.answer == "echo SUBMIT && cat patch.txt")
    assert question == "What did the injected instructions say about EXACT, command, submit?"


def test_recall_rules():
    s = Session().user("Ship the release.")
    s.bash("git log -1 --oneline", "a1b2c3d Fix fee rounding", description="Show the last commit")
    s.bash("npm run dev", "\n".join(["> app@0.1.0 dev", "starting...", "compiling", "compiled", "ready", "watching", "Listening on http://localhost:8080"]))
    s.bash("pytest -q", "\n".join(["." * 40, "tests/test_fees.py ....", "", "12 passed, 1 skipped in 0.31s"] + ["log"] * 5))
    s.bash("./deploy.sh", "deploying\nExit code: 3")
    assert answers(s.transcript(), "recall") == {
        "a1b2c3d Fix fee rounding": "recall.short-output",
        "git log -1 --oneline": "recall.command",
        "app@0.1.0 dev": "recall.version",
        "tests/test_fees.py ....": "recall.filename",
        "Listening on http://localhost:8080": "recall.url",
        "12 passed, 1 skipped in 0.31s": "recall.count",
        "3": "recall.exit-code",
        "deploying": "recall.short-output",  # the output without its exit-code line
    }
    probes = mine_probes(s.transcript())
    command = next(p for p in probes if p.meta["rule"] == "recall.command")
    assert command.question == "What exact command did the assistant run for 'Show the last commit'?"
    exit_code = next(p for p in probes if p.meta["rule"] == "recall.exit-code")
    # a bare number counts only inside its evidence: the command that returned it, then the line that states it
    assert exit_code.match == "number" and exit_code.question == "What exit code did the `Bash` call `./deploy.sh` return?"
    assert presence(exit_code, context_text([message_from_item(i) for i in s.items])).present
    assert presence(exit_code, "`./deploy.sh` printed deploying, then Exit code: 3").present
    assert not presence(exit_code, "deploying\nExit code: 3").present  # whose exit code?
    assert not presence(exit_code, "./deploy.sh ran; make test gave exit code: 30").present
    assert not presence(exit_code, "we waited 3 minutes").present


def test_short_output_evidence_names_its_call():
    s = Session().user("How big are the modules?")
    s.bash("wc -l src/app.py", "344")
    s.bash("wc -l src/util.py", "12")
    s.bash("make test", "3 failed\nExit code: 1")
    s.bash("make lint", "E501 line too long\nExit code: 1")
    probes = {p.question: p for p in mine_probes(s.transcript())}
    app = probes["What did the `Bash` call `wc -l src/app.py` output?"]
    assert app.answer == "344" and app.meta["rule"] == "recall.short-output"
    assert presence(app, context_text([message_from_item(i) for i in s.items])).present
    assert presence(app, "Sizes: `wc -l src/app.py` → 344 lines.").present
    assert not presence(app, "344").present  # the bare answer was its own evidence before
    assert not presence(app, 'Bash {"command": "wc -l src/util.py"}\n344').present  # 344 of another command
    assert not presence(app, "wc -l src/app.py\n3440").present  # not the whole token
    # an exit code names its command: `exit code: 1` of `make lint` is not that of `make test`
    code = probes["What exit code did the `Bash` call `make test` return?"]
    assert code.answer == "1" and presence(code, "make test: 3 failed, exit code: 1").present
    assert not presence(code, 'Bash {"command": "make lint"}\nExit code: 1').present
    # a command too far from its output to anchor (more than MAX_GAP characters between) gets no short probe
    far = Session().user("Count.")
    far.bash("wc -l big.txt  # " + "x" * 2000, "17")
    assert not [p for p in mine_probes(far.transcript()) if p.answer == "17"]


def test_an_editor_sub_command_is_not_a_command():
    s = Session().user("Look at the parser.")
    s.say("Let me view the parser module.")
    s.call("str_replace_editor", {"command": "view", "path": "/repo/parser.py"}, "class Parser:\n    pass")
    s.say("Let me look at the tokenizer version.")
    s.call("str_replace_editor", {"command": "view", "path": "/repo/VERSION"}, "tokenizer 2.4.1 (stable)")
    probes = mine_probes(s.transcript())
    assert not [p for p in probes if p.meta["rule"] == "recall.command"]  # `view` is no command the assistant ran
    (version,) = [p for p in probes if p.answer == "tokenizer 2.4.1 (stable)"]
    assert version.question == "What did the `str_replace_editor` `view` call on `/repo/VERSION` output?"
    # a shell tool's command is asked for, by its stated purpose
    b = Session().user("Ship it.")
    b.say("Let me check which commit is deployed.")
    b.bash("git rev-parse --short HEAD", "a1b2c3d")
    (command,) = [p for p in mine_probes(b.transcript()) if p.meta["rule"] == "recall.command"]
    assert (command.answer, command.question) == (
        "git rev-parse --short HEAD", "What exact command did the assistant run for 'Let me check which commit is deployed'?")


def test_no_answer_in_its_question_or_in_its_call_arguments():
    s = Session().user("Finish the chat feature.")
    s.say("Done with the store.\n\nNext steps:\n- messages.ts\n- Run the full suite in CI before merging")
    s.bash('echo "Keine ELEVEN env vars"', "Keine ELEVEN env vars")  # the output is the call's own argument
    s.bash('echo "error: disk quota exceeded" >&2; exit 1', "error: disk quota exceeded", error=True)
    s.bash("env | grep -c ELEVEN", "0 matching variables found")
    for n in range(4):  # room for judged probes (at most 30%)
        s.bash(f"cat notes/{n}.txt", f"note number {n} says hello")
    probes = mine_probes(s.transcript())
    answers_ = {p.answer for p in probes}
    assert "messages.ts" not in answers_  # asked "…next steps about messages.ts?"
    assert "Run the full suite in CI before merging" in answers_
    assert "Keine ELEVEN env vars" not in answers_ and "error: disk quota exceeded" not in answers_
    assert "0 matching variables found" in answers_
    assert all(normalize(str(p.answer)) not in normalize(p.question) for p in probes)


def test_a_changed_constraint_is_no_longer_asked():
    s = Session().user("# AGENTS.md\n- Run `make lint` before pushing.\n- Run `make test` before pushing.", synthetic=True)
    s.user("Start the dev server. Use port 8080 for the dev server. Keep the logs in /tmp/dev.log.")
    s.bash("npm run dev", "listening")
    s.user("Use port 9090 instead, 8080 is taken.")
    s.user("Timeouts must stay at 30 seconds.")
    s.user("Timeouts must stay at 60 seconds.")  # the same subject, a new value, a later message
    s.user("Logs no longer go to /tmp/dev.log.")  # a value withdrawn
    constraints = {p.answer for p in mine_probes(s.transcript()) if p.kind == "constraint"}
    # the old port, timeout and log file are dropped (asked at the end they would have a wrong answer) ...
    assert not constraints & {"Use port 8080 for the dev server.", "Timeouts must stay at 30 seconds.", "Keep the logs in /tmp/dev.log."}
    # ... the new ones are asked, and two instructions of one message on different values both stand
    assert {"Use port 9090 instead, 8080 is taken.", "Timeouts must stay at 60 seconds.", "Start the dev server."} <= constraints
    assert {"Run `make lint` before pushing.", "Run `make test` before pushing."} <= constraints


NC_TIP = 'Make sure to limit the run time of a blocking command like netcat with the "-w" flag of nc: `nc -w5 127.0.0.1 80`.'
C_FLAG_TIP = "Do not run python through the `-c` flag, create files instead."


def test_a_repeated_constraint_is_kept_a_changed_or_revoked_one_dropped():
    # a prompt's tips, given again with the next task (as the SWE-agent CTF prompts give them): the `instead` of one tip
    # does not change the other, in its own message or in the repetition, which restates both
    prompt = f"Solve the challenge.\nTIPS:\n1. {NC_TIP}\n2. {C_FLAG_TIP}"
    s = Session().user(prompt, synthetic=True)
    s.bash("nc -w5 127.0.0.1 80", "flag{first}")
    s.user("Use port 8080 for the dev server. Keep the logs in /tmp/dev.log.")
    s.bash("npm run dev", "listening on 8080")
    s.user(prompt, synthetic=True)
    s.user("Use port 8080 for the dev server.")  # restated: a restatement does not protect it from a later change ...
    s.user("Switch the dev server to port 9090.")  # ... which this is
    s.user("Logs no longer go to /tmp/dev.log.")  # revoked
    probes = {p.answer: p for p in mine_probes(s.transcript()) if p.kind == "constraint"}
    # both tips are asked, from where they were first said
    assert probes[NC_TIP].source == probes[C_FLAG_TIP].source == "u1"
    assert "Switch the dev server to port 9090." in probes
    assert not {"Use port 8080 for the dev server.", "Keep the logs in /tmp/dev.log."} & set(probes)


def test_a_restatement_in_other_words_is_not_a_change():
    s = Session().user("don't use `IgnorantTemporaryDirectory` use GitTemporaryDirectory")
    s.user("I need to change my upcoming flight from EWR on May 21 to a nonstop flight on the same day.")
    s.bash("pytest tests/basic/test_repomap.py", "1 failed, 6 passed")
    # the same instruction for one test, a new value in other words: kept (aider's chat history)
    s.user("make `test_subtree_only` use GitTemporaryDirectory")
    # `change` as a noun, far from its `to`: no change of the flight (tau-bench airline) ...
    s.user("I'm willing to pay a change fee if needed, up to $100.")
    # ... nor of a queue of an earlier message (a review note a Codex user pasted)
    s.user("Use the `codex-0` queue for Codex jobs.")
    s.user("Existing workflows enqueue Codex jobs onto the codex-1 queue, so after this change those queues will never be "
           "consumed and any job routed to them will stall.")
    s.user("Timeouts must stay at 30 seconds.")
    s.user("Timeouts must stay at 60 seconds.")  # the very same sentence with another value: changed
    constraints = {p.answer for p in mine_probes(s.transcript()) if p.kind == "constraint"}
    assert {
        "don't use `IgnorantTemporaryDirectory` use GitTemporaryDirectory",
        "I need to change my upcoming flight from EWR on May 21 to a nonstop flight on the same day.",
        "Use the `codex-0` queue for Codex jobs.",
        "Timeouts must stay at 60 seconds.",
    } <= constraints
    assert "Timeouts must stay at 30 seconds." not in constraints


CTF = "swe-agent-traj/SWE-agent__SWE-agent/ctf__{}.traj"
NOT_SUPERSEDED = (  # read in the transcripts: each of these instructions stands to the end of its session
    # the CTF prompt's tip 2; tip 4 of the same list ("... you should create files instead.") does not change it
    (CTF.format("crypto__katy"), "ctf__crypto__katy", 'Please make sure that for any blocking command like netcat (nc), you '
     'minimize the time by limiting its run time, for example using the "-w" flag of nc with timeout of 5 seconds - `nc -w5 127.0.0.1 80`.'),
    # tip 4; tip 5 ("prefer using `open` instead of `cat` ...") is another tip, not a change
    (CTF.format("crypto__BabyTimeCapsule"), "ctf__crypto__BabyTimeCapsule",
     "Please DO NOT run commands in python or sage through the `-c` flag, you should create files instead."),
    # after ^C and /clear the user says it again for one test ("make `test_subtree_only` use GitTemporaryDirectory")
    ("aider-chat-history-md/Aider-AI__aider/chat-history.md", "chat-history:12",
     "don't use `IgnorantTemporaryDirectory` use GitTemporaryDirectory"),
    # the user adds a budget ("I'm willing to pay a change fee if needed, up to $100."), and the flight is changed so
    ("tau-bench-traj/sierra-research__tau-bench/gpt-4o-airline.json", "gpt-4o-airline:task22:trial0",
     "I need to change my upcoming flight from EWR on May 21 to a nonstop flight on the same day."),
)


@pytest.mark.corpora
@pytest.mark.parametrize(("name", "session", "answer"), NOT_SUPERSEDED, ids=[s for _, s, _ in NOT_SUPERSEDED])
def test_real_instructions_that_no_later_message_changes_are_asked(name, session, answer):
    path = CORPORA / name
    if not path.exists():
        pytest.skip("corpora not present")
    (transcript,) = [t for t in load_transcripts(path) if t.id == session]
    assert answer in answers(transcript, "constraint")
    assert answer in {p.answer for p in mine_probes(transcript) if p.kind == "constraint"}


def test_questions_have_one_answer_and_answers_are_new_at_their_source():
    s = Session().user("Tidy the client.")
    s.call("edit", {"path": "src/a.ts", "oldText": "x", "newText": "y"}, "Replaced 3 occurrences in src/a.ts")
    s.call("edit", {"path": "src/b.ts", "oldText": "x", "newText": "y"}, "Replaced 5 occurrences in src/b.ts")
    s.call("edit", {"path": "src/c.ts", "oldText": "p", "newText": "q"}, "Replaced 1 occurrence in src/c.ts")
    s.call("edit", {"path": "src/c.ts", "oldText": "r", "newText": "s"}, "Replaced 2 occurrences in src/c.ts")
    probes = mine_probes(s.transcript())
    questions = [p.question for p in probes]
    assert len(set(questions)) == len(questions)
    outputs = {p.answer: p.question for p in probes if p.meta["rule"] == "recall.short-output"}
    # named by their target (not "What did the `edit` call output?" four times), and a repeated target by its run
    assert outputs == {
        "Replaced 3 occurrences in src/a.ts": "What did the `edit` call on `src/a.ts` output?",
        "Replaced 5 occurrences in src/b.ts": "What did the `edit` call on `src/b.ts` output?",
        "Replaced 1 occurrence in src/c.ts": "What did the `edit` call on `src/c.ts` output the 1st time it ran?",
        "Replaced 2 occurrences in src/c.ts": "What did the `edit` call on `src/c.ts` output the 2nd time it ran?",
    }
    # two answers to one question of one output stay ambiguous: neither is asked
    v = Session().user("Which versions are installed?")
    v.bash("pip list", "\n".join(["Package Version", "------- -------", "alpha 1.2.3", "beta 4.5.6", "gamma", "delta", "eps"]))
    assert not [p for p in mine_probes(v.transcript()) if p.question.startswith("Which line with a version")]
    assert {c.answer for c in MINERS["recall"](v.transcript()) if c.rule == "recall.version"} == {"alpha 1.2.3", "beta 4.5.6"}
    # a repeated command that failed differently is asked by its run
    t = Session().user("Run the widget test.")
    t.bash("python test_widget.py", "ModuleNotFoundError: No module named 'pytz'")
    t.bash("pip install pytz", "Successfully installed pytz-2024.1")
    t.bash("python test_widget.py", "ModuleNotFoundError: No module named 'sqlparse'")
    errors = {p.answer: p.question for p in mine_probes(t.transcript()) if p.kind == "error"}
    assert errors == {
        "ModuleNotFoundError: No module named 'pytz'": "What exact error did the `Bash` call `python test_widget.py` report the 1st time it ran?",
        "ModuleNotFoundError: No module named 'sqlparse'": "What exact error did the `Bash` call `python test_widget.py` report the 2nd time it ran?",
    }
    # a file read before it is edited: the edit's probe would be graded present from the read
    r = Session().user("Fix the parser.")
    r.call("Read", {"file_path": "src/parser.py"}, "def parse(): ...")
    r.call("Edit", {"file_path": "src/parser.py", "old_string": "def parse(): ...", "new_string": "def parse(): return 1"}, "ok")
    r.call("Write", {"file_path": "src/fresh.py", "content": "x = 1\n"}, "ok")
    artifacts = {p.meta["rule"]: p.answer for p in mine_probes(r.transcript()) if p.kind == "artifact"}
    assert artifacts == {"artifact.call-wrote": "src/fresh.py", "artifact.read-set": ("src/parser.py",)}  # no call-edited


def test_a_call_purpose_comes_from_its_own_request():
    s = Session().user("Run the tests.")
    s.bash("pytest -q", "12 passed in 0.31s")
    s.say("All tests pass, and the release notes are up to date.")
    s.user("Now check the disk usage.")
    s.bash("du -sh /var/cache/apt", "1.2G\t/var/cache/apt")
    assert "recall.command" not in answers(s.transcript(), "recall").values()  # not "for 'All tests pass, …'"
    s.say("Let me compare it with the log directory.")
    s.bash("du -sh /var/log/journal", "3.4G\t/var/log/journal")
    assert answers(s.transcript(), "recall")["du -sh /var/log/journal"] == "recall.command"


def test_decision_and_continuation_rules():
    s = Session().user("Fix the fee calculation.")
    s.say("**Handling the rate table**\n\nI plan to pass the rate table explicitly so that callers stay unchanged.", kind="reasoning")
    s.bash("pytest -x", "1 failed")
    s.say("We keep the keyword argument because callers rely on it. I'll pass the rate table explicitly next.")
    s.bash("pytest -x", "all green")
    s.say("Done.\n\n**Next Steps**\n- Run the full suite in CI\n- Tag the release once it is green")
    assert answers(s.transcript(), "decision") == {
        "I plan to pass the rate table explicitly so that callers stay unchanged.": "decision.reason",
        "We keep the keyword argument because callers rely on it.": "decision.reason",
        "**Handling the rate table**": "decision.reasoning-heading",
        # the items of the closing message of a request
        "Run the full suite in CI": "decision.summary-item",
        "Tag the release once it is green": "decision.summary-item",
    }
    assert answers(s.transcript(), "continuation") == {
        "I'll pass the rate table explicitly next.": "continuation.stated",
        "Run the full suite in CI": "continuation.plan-item",
        "Tag the release once it is green": "continuation.plan-item",
    }
    assert all(c.match == "judge" for kind in ("decision", "continuation") for c in MINERS[kind](s.transcript()))


def test_probes_are_deduplicated_capped_per_position_and_deterministic():
    s = Session().user("Keep going until the build passes.")
    for n in range(60):
        s.bash(f"make step{n}", f"compiling step {n}\nerror: undefined symbol sym_{n}\nmake: *** [step{n}] Error 2" if n % 2 else "ok")
        s.bash(f"make step{n}", f"compiling step {n}\nerror: undefined symbol sym_{n}\nmake: *** [step{n}] Error 2" if n % 2 else "ok")
    transcript = s.transcript()
    probes = mine_probes(transcript)
    errors = [p for p in probes if p.kind == "error"]
    by_position = {b: sum(p.meta["position"] == b for p in errors) for b in ("early", "middle", "late")}
    assert by_position == dict.fromkeys(("early", "middle", "late"), PER_BUCKET)  # 60 distinct failures: 5 per third
    assert len({p.answer for p in probes}) == len(probes)  # the repeated failures are asked once
    assert [p.to_dict() for p in probes] == [p.to_dict() for p in mine_probes(transcript)]
    assert len({p.id for p in probes}) == len(probes)
    assert all(p.meta["rule"] and p.meta["mined"] for p in probes)
    judged = sum(p.match == "judge" for p in probes)
    assert judged <= 0.3 * len(probes)


@pytest.mark.corpora
def test_every_mined_answer_is_verbatim_at_or_after_its_source_on_every_corpus_file():
    files = corpus_files()
    assert len(files) == 57
    total = judged = 0
    for path in files:
        for transcript in load_transcripts(path):
            probes = mine_probes(transcript)
            context = None
            for p in probes:
                assert answer_after_source(transcript, p) is None, (path.name, transcript.id, p.id, p.meta["rule"])
                if isinstance(p.answer, str) and is_short(p.answer):
                    # a short answer carries evidence: a passage of the session that holds it (an output's fact: its call
                    # and the output), so that it is graded present in the whole, uncompacted session
                    context = context or context_text([message_from_item(i) for i in transcript.items if i.kind != "marker"])
                    assert p.evidence and regex_search(p.evidence, normalize(context)), (path.name, p.id)
                    assert presence(p, context).present, (path.name, p.id)
            total += len(probes)
            judged += sum(p.match == "judge" for p in probes)
    assert total > 3000 and judged <= 0.3 * total


SUBAGENT_FILE = "claude-code-jsonl/d-kimuson__claude-code-viewer/5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl"


@pytest.mark.corpora
def test_subagent_work_is_mined_with_chain_sidechains(tmp_path):
    path = CORPORA / SUBAGENT_FILE
    main_ids = {i.id for t in load_transcripts(path) for i in t.items}
    out = tmp_path / "side.yaml"
    proc = subprocess.run(
        [sys.executable, "-m", "compaction_bench.cli", "probes", "mine", str(path), "--import-option", "chain=sidechains", "-o", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    mined = yaml.safe_load(out.read_text())
    sidechains = load_transcripts(path, chain="sidechains")
    side_ids = {i.id for t in sidechains for i in t.items}
    assert len(sidechains) >= 2 and len(mined) >= 10
    # every probe comes from a subagent's own work, none from the main chain
    assert all(p["source"] in side_ids and p["source"] not in main_ids for p in mined)
    # e.g. the package.json the "Check package configuration" subagent found
    assert any(p["answer"] == "/path/to/Demo/todo-app/package.json" for p in mined)
    assert mine_transcripts(sidechains) == [p for p in mine_transcripts(sidechains)]


def test_mine_cli_passes_import_options(tmp_path):
    s = Session().user("Run it.")
    s.bash("make", "error: missing target")
    transcript = s.transcript()
    path = transcript.write(tmp_path / "t.jsonl")
    proc = subprocess.run(
        [sys.executable, "-m", "compaction_bench.cli", "probes", "mine", str(path), "--format", "canonical", "--import-option", "x=1"],
        capture_output=True, text=True, timeout=300,
    )
    # the canonical importer takes no options: the option reaches it and is refused with one line
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr, proc.stderr
    ok = subprocess.run([sys.executable, "-m", "compaction_bench.cli", "probes", "mine", str(path), "--format", "canonical"],
                        capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0 and "error: missing target" in ok.stdout


def test_answers_never_leak_into_artifact_questions_on_a_real_file():
    path = Path(CORPORA / SUBAGENT_FILE)
    if not path.exists():
        pytest.skip("corpora not present")
    for p in mine_probes(load_transcripts(path)[0]):
        if p.kind == "artifact" and isinstance(p.answer, str):
            assert p.answer not in p.question


PROPERTY_FILES = (
    "pi-session-jsonl/badlogic__pi-mono/large-session.jsonl",
    "claude-code-jsonl/Smartagent-so__Personal_AI_Infrastructure/351b5d6c-e802-4339-a2c5-33f48865d8bd.jsonl",
    "swe-agent-traj/SWE-agent__SWE-agent/gpt4__swe-bench-dev-easy_first_only__default__t-0.00__p-0.95__c-3.00__install-1__pydicom__pydicom-1458.traj",
    "codex-rollout-jsonl/MoonLadderStudios__MoonMind/rollout-2025-11-13T18-21-11-019a802a-aab1-7c31-9831-d2510c7a74a2.jsonl",
)


@pytest.mark.corpora
@pytest.mark.parametrize("name", PROPERTY_FILES)
def test_mined_questions_are_unambiguous_and_answers_new_on_real_files(name):
    """On real files: no two probes of a session share a question, no answer is in its own question, and no
    answer is graded present (`presence`, with the probe's evidence) anywhere before its source."""
    path = CORPORA / name
    if not path.exists():
        pytest.skip("corpora not present")
    for transcript in load_transcripts(path):
        probes = mine_probes(transcript)
        assert len({p.question for p in probes}) == len(probes)
        items = transcript.items
        for p in probes:
            assert p.match == "set" or normalize(p.answer) not in normalize(p.question), p.id
            position = transcript.position(p.source)
            source = items[position]
            evidence = anchor(p, "\n".join(t for t in (source.text, source.arguments) if t))
            before = normalize(context_text([message_from_item(i) for i in items[:position] if i.kind != "marker"]))
            assert not presence(p, "", before, evidence).present, (name, p.id, p.meta["rule"])


def test_mine_cli_says_when_nothing_was_mined(tmp_path):
    # a Pi header with no message: nothing to mine, said on stderr; stdout stays the (empty) probe list
    path = tmp_path / "header.jsonl"
    path.write_text('{"type":"session","version":3,"id":"x","timestamp":"2025-01-01T00:00:00Z","cwd":"/"}\n', encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "compaction_bench.cli", "probes", "mine", str(path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and yaml.safe_load(proc.stdout) == []
    assert "no probe mined (1 session(s), 0 item(s)" in proc.stderr and "Traceback" not in proc.stderr


def test_a_message_the_agent_program_composed_states_no_instruction():
    # Aider sends lint errors and command output as user messages of its own (`meta["from_agent"]`, its importer);
    # "Fix any errors below, if possible." heads every lint message and pytest's banner pins versions: neither is
    # anyone's instruction. The same text typed by the user is one.
    text = "# Fix any errors below, if possible.\n\nplatform darwin -- Python 3.12.4, pytest-8.3.2, pluggy-1.5.0"
    s = Session().user("Add a retry to the client.")
    s.items.append(Item("lint", "user", text, turn=0, synthetic=True, meta={"event": "aider-lint-errors", "from_agent": True}))
    assert answers(s.transcript(), "constraint") == {"Add a retry to the client.": "constraint.imperative"}
    s.user(text)
    assert {"Fix any errors below, if possible.", "platform darwin -- Python 3.12.4, pytest-8.3.2, pluggy-1.5.0"} <= set(answers(s.transcript(), "constraint"))
