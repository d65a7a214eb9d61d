"""Aider import audit: a command output added to the chat is imported as the user message the model got.

Upstream (`Aider-AI/aider`, `aider/commands.py` `cmd_run` from `f9599f87a`, 2023-06-23, to 2024-08-27; the
corpus history is from 2024-08-05 to 2024-08-22): `/run X` and `!X` log the output as one tool message
(`tool_output(combined_output)`), ask "Add the output to the chat?" and log `f"{question.strip()} {res.strip()}"`
quoted. Through `io.confirm_ask` (to 2024-07-28) an answer starting with `y` adds; through `io.prompt_ask`
(from `f9ba8e82a`, 2024-07-28) `y`/`yes` adds, `n`/`no` does not, anything else (empty too) adds with the
answer as instructions. `/test X` calls `cmd_run(X, add_on_nonzero_exit=True)`: no question,
a failure is added. An added output is logged again line by line and `prompts.run_output` is returned to
`run_one`, which sends it as the next user message: `[instructions + "\\n\\n"] + "I ran this command:\\n\\n"
+ X + "\\n\\nAnd got this output:\\n\\n" + output + "\\n"`, X keeping the space after `/run` (`matching_commands`
cuts the first word off and strips nothing). The model answers it; no `Ok.` is added. The writer below
follows those rules, so the items of its history are known before it is imported; the corpus test reads
the maintainer's history line by line with the same rules and checks every case.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from compaction_bench.importing import load_transcripts
from tests.test_import_audit_aider import AiderLog, corpus_history, reply_after

WRAPPER = "I ran this command:\n\n{command}\n\nAnd got this output:\n\n{output}\n"
ASK_CONFIRM = "Add the output to the chat?"  # confirm_ask, to 2024-07-28
ASK_A = "Add the output to the chat? (y/n/instructions): "  # f9ba8e82a, 2024-07-28
ASK_B = "Add the output to the chat?\n(y/n/instructions)"  # 03a357eb9, 2024-08-08
ASK_C = "Add the output to the chat?\n(Y/n/instructions)"  # fb7bbb982, 2024-08-14
ASK_D = "Add the output to the chat?\n[Y/n/instructions]"  # 454d0206b, 2024-08-21


class RunLog(AiderLog):
    """`cmd_run` as logged in August 2024."""

    def command(self, typed: str, output: str, ask: str | None = None, answer: str = "", failed: bool = False) -> None:
        self.user_input(typed)
        self.tool_output(output)
        if ask is None:  # /test: add_on_nonzero_exit
            added = failed
        else:
            self.append(f"{ask.strip()} {answer.strip()}", linebreak=True, blockquote=True)
            reply = answer.strip().lower()
            added = reply.startswith("y") if ask == ASK_CONFIRM else reply not in ("n", "no")
        if added:
            for line in output.splitlines():
                self.tool_output(line)


PYTEST_FAIL = "===== test session starts =====\n\n    def test_x(self):\n>       assert 1 == 2\nE       assert 1 == 2\n\n===== 1 failed in 0.1s ====="
LS = "README.md\n  docs/\naider"
GIT = "On branch main\nnothing to commit"


def history() -> str:
    log = RunLog()
    log.start("2024-08-10 11:14:11")
    log.tool_output("Aider v0.48.2-dev")
    log.command("/run pytest tests/x.py", PYTEST_FAIL, ASK_B, "y")
    log.ai_output("The assertion compares 1 with 2.")
    log.tool_output("Tokens: 1,000 sent, 10 received.")
    log.command("!ls", LS, ASK_D, "Fix It please ")
    log.ai_output("Here is the fix.")
    log.tool_output("Tokens: 1,100 sent, 11 received.")
    log.command("/run git status", GIT, ASK_A, "n")
    log.command("/test pytest tests/x.py", PYTEST_FAIL, failed=True)
    log.tool_output("litellm.APIError: overloaded\nRetrying in 0.2 seconds...")
    log.tool_output("Tokens: 1,200 sent, 0 received.")
    log.command("/test pytest tests/y.py", "===== 3 passed in 0.1s =====")
    log.command("/run  make", "done", ASK_C, "")
    log.ai_output("Good.")
    log.tool_output("Tokens: 1,300 sent, 3 received.")
    log.command("/run make lint", "lint ok", ASK_CONFIRM, "yes")
    log.ai_output("Lint is clean.")
    log.tool_output("Tokens: 1,400 sent, 4 received.")
    log.command("/run make docs", "docs built", ASK_CONFIRM, "")
    return log.text



def test_added_outputs_are_the_user_messages_the_model_got(tmp_path: Path):
    path = tmp_path / ".aider.chat.history.md"
    path.write_text(history(), encoding="utf-8")
    (transcript,) = load_transcripts(path)
    items = list(transcript.items)
    added = [i for i in items if i.meta.get("event") == "aider-run-output"]
    assert [i.text for i in added] == [
        WRAPPER.format(command=" pytest tests/x.py", output=PYTEST_FAIL),
        "Fix It please\n\n" + WRAPPER.format(command="ls", output=LS),
        WRAPPER.format(command=" pytest tests/x.py", output=PYTEST_FAIL),
        WRAPPER.format(command="  make", output="done"),
        WRAPPER.format(command=" make lint", output="lint ok"),
    ]
    assert [i.meta["answer"] for i in added] == ["y", "Fix It please", None, "", "yes"]
    assert all(i.synthetic and i.kind == "user" for i in added)
    # The typed commands stay the real user messages (and the turns); the declined and the passed outputs add nothing.
    real = [i for i in items if i.is_real_user]
    assert [i.text for i in real] == [
        "/run pytest tests/x.py", "!ls", "/run git status", "/test pytest tests/x.py", "/test pytest tests/y.py", "/run  make",
        "/run make lint", "/run make docs",
    ]
    # Each added output is the last model input before the model's reply (or the request whose reply was lost).
    replies = []
    for item in added:
        typed = next(i for i in reversed(items[: items.index(item)]) if i.kind == "user")
        reply = reply_after(items, items.index(item))
        assert item.turn == typed.turn and typed.text in ("/run pytest tests/x.py", "!ls", "/test pytest tests/x.py", "/run  make", "/run make lint")
        assert reply is not None and reply.kind == "assistant"
        replies.append((reply.text, reply.meta.get("no_reply", False)))
    assert replies == [("The assertion compares 1 with 2.", False), ("Here is the fix.", False), ("", True), ("Good.", False), ("Lint is clean.", False)]
    assert [(s.items[0].text, s.usage.output) for s in transcript.steps() if s.usage] == [
        ("The assertion compares 1 with 2.", 10), ("Here is the fix.", 11), ("", 0), ("Good.", 3), ("Lint is clean.", 4)
    ]
    # Nothing the log holds is lost: the outputs, the questions with their answers, the API error stay in markers.
    markers = "\n".join(i.text for i in items if i.kind == "marker")
    for text in ("(y/n/instructions): n", "nothing to commit", "3 passed", "[Y/n/instructions] Fix It please", "litellm.APIError: overloaded", "docs built"):
        assert text in markers


# ------------------------------------------------------------------ the corpus history, read raw
COMMAND = re.compile(r"^#### (/run(?= |$)|/test(?= |$)|!)(.*?)(?:  )?$")
ONE_LINE_ASK = re.compile(r"^> Add the output to the chat\? \(y/n/instructions\):(.*?)(?:  )?$")
SECOND_LINE_ASK = re.compile(r"^[(\[][yY]/n/instructions[)\]](.*?)(?:  )?$")


def raw_command_outputs(lines: list[str]) -> list[dict]:
    """Every logged `/run`, `!` and `/test` with what became of its output, by the rules of the module
    docstring applied to raw lines: the question and its answer; for `/test` whether the output is logged
    again (its first line repeated); the output from its first logging (`> ` and the line break's two
    spaces taken off), which starts at the line its copy's first line repeats; the line of the model's
    reply (the first line of text after the copy)."""
    out = []
    for number, line in enumerate(lines):
        command = COMMAND.match(line)
        if not command or lines[number + 1].startswith("####"):
            continue
        end = next(n for n in range(number + 1, len(lines)) if lines[n].startswith("####"))
        name = command.group(1)
        case: dict = {"line": number + 1, "name": name, "args": line[5 + len(name) :].removesuffix("  ")}
        if name == "/test":
            first = next(n for n in range(number + 1, end) if lines[n].startswith("> "))
            copy = next((n for n in range(first + 1, end) if lines[n].rstrip() == lines[first].rstrip()), None)
            case.update(answer=None, added=copy is not None)
            last = copy
        else:
            asked = next((n for n in range(number + 1, end) if ONE_LINE_ASK.match(lines[n]) or (lines[n] == "> Add the output to the chat?" and SECOND_LINE_ASK.match(lines[n + 1]))), None)
            if asked is None:
                out.append(case | {"answer": None, "added": False})
                continue
            match = ONE_LINE_ASK.match(lines[asked]) or SECOND_LINE_ASK.match(lines[asked + 1])
            assert match
            case.update(answer=match.group(1).strip(), added=match.group(1).strip().lower() not in ("n", "no"))
            copy = asked + (1 if ONE_LINE_ASK.match(lines[asked]) else 2)
            last = asked
        if case["added"]:
            if name != "/test":
                first = next(n for n in range(asked - 1, number, -1) if lines[n].rstrip() == lines[copy].rstrip())
            body = lines[first:last]
            body[0] = body[0][2:]
            case["output"] = "\n".join(body).removesuffix("  ")
            case["reply_line"] = next(n + 1 for n in range(copy, end) if lines[n].strip() and not lines[n].startswith(">"))
        out.append(case)
    return out


@pytest.mark.corpora
def test_corpus_command_outputs_item_by_item():
    path, lines = corpus_history()
    raw = raw_command_outputs(lines)
    asked = [c for c in raw if c["answer"] is not None]
    tests = [c for c in raw if c["name"] == "/test"]
    # 26 questions (9 declined, 4 "y", 1 empty answer, 12 instructions) and 12 /test runs (11 failed, so added).
    assert len(asked) == 26 and sum(not c["added"] for c in asked) == 9
    assert sorted(c["answer"] for c in asked if c["added"] and c["answer"].lower() in ("y", "yes", "")) == ["", "y", "y", "y", "y"]
    assert len(tests) == 12 and sum(c["added"] for c in tests) == 11
    expected = {}
    for case in raw:
        if case["added"]:
            text = WRAPPER.format(command=case["args"], output=case["output"])
            if case["answer"] and case["answer"].lower() not in ("y", "yes"):
                text = f"{case['answer']}\n\n{text}"
            expected[case["line"]] = (text, case["reply_line"])
    assert len(expected) == 28

    transcripts = load_transcripts(path)
    got = {}
    for transcript in transcripts:
        items = list(transcript.items)
        for index, item in enumerate(items):
            if item.meta.get("event") == "aider-run-output":
                reply = reply_after(items, index)
                assert item.synthetic and reply is not None and reply.kind == "assistant"
                got[item.meta["command_line"]] = (item.text, reply.meta["line"])
    assert got == expected
    # One command's output comes after a session header: the command ran an Aider that logged to the same file.
    headers = [n + 1 for n, line in enumerate(lines) if line.startswith("# aider chat started at ")]
    crossing = [line for line, (_, reply) in got.items() if any(line < h < reply for h in headers)]
    assert crossing == [10218]


def test_a_test_run_without_a_command_is_flagged(tmp_path: Path):
    # `/test` alone runs the configured `test_cmd` (cmd_test: `if not args and self.coder.test_cmd`), which
    # the log never names: the output is still what the model got, and the missing command is a problem.
    log = RunLog()
    log.start("2024-08-10 11:14:11")
    log.command("/test", PYTEST_FAIL, failed=True)
    log.ai_output("Fixing.")
    path = tmp_path / ".aider.chat.history.md"
    path.write_text(log.text, encoding="utf-8")
    (transcript,) = load_transcripts(path)
    (added,) = [i for i in transcript.items if i.meta.get("event") == "aider-run-output"]
    assert added.text == WRAPPER.format(command="", output=PYTEST_FAIL)
    typed = log.text.split("\n").index("#### /test  ") + 1
    assert transcript.meta["problems"] == (f"{path}:{typed}: /test without a command: the command that ran is not in the log",)
