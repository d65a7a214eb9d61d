"""Aider import audit: the user messages Aider itself sends after a "yes" are imported as what the model got.

Upstream (`Aider-AI/aider`, `aider/coders/base_coder.py` `send_message` / `run_one`, `aider/linter.py`,
`aider/prompts.py`, `aider/io.py`, unchanged in what matters here from v0.47.0 to 2024-08-22 12:15, the
corpus history being from 2024-08-05 to 2024-08-22 08:47): after a reply whose edits were applied,
Aider lints the edited files; `lint_edited` logs their errors with `io.tool_error(res)`, one stripped
line at a time (`res` is `"\\n" + Linter.lint(file) + "\\n"` per file, each starting with `# Fix any errors
below, if possible.`), then asks `confirm_ask("Attempt to fix lint errors?")`; a yes makes `res` the
`reflected_message`. With `--auto-test`, `cmd_test(test_cmd)` runs `cmd_run(test_cmd, True)` (output logged
whole, then line by line when it failed) and "Attempt to fix test errors?" makes `prompts.run_output` of
it the `reflected_message`. Otherwise, files the reply names (whitespace-split words) are logged, one
`tool_output` each (from 2024-08-21 05:38, `ba746dd21`, one `tool_output` of all of them) and
"Add these files to the chat?" makes `prompts.added_files` (`"I added these files to the chat: {fnames}\\nLet
me know if there are others we should add."`, the names in the order they were logged) the
`reflected_message`; files named in the user's own message are asked about before the request and
nothing is sent for them. `run_one` sends the `reflected_message` as the next user message unless the
reflection budget is spent ("Only 3 reflections allowed, stopping."). `confirm_ask` logs
`f"{question} {answer}"` (the raw answer, a yes starting with `y`, until 2024-08-08; `y` or `n` after)
with ` [Y/n]` after the question from 2024-08-21 08:08 (`3e5554c24`).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from compaction_bench.importing import load_transcripts
from tests.test_import_audit_aider import AiderLog, corpus_history, reply_after

RUN_OUTPUT = "I ran this command:\n\n{command}\n\nAnd got this output:\n\n{output}\n"
ADDED_FILES = "I added these files to the chat: {fnames}\nLet me know if there are others we should add."
EVENTS = ("aider-lint-errors", "aider-test-errors", "aider-added-files")


class ReflectingLog(AiderLog):
    """The parts of Aider's writer (aider/io.py) that log a lint, a test run and mentioned files."""

    def tool_error(self, message: str) -> None:
        for line in message.splitlines():
            self.append(line, linebreak=True, blockquote=True)

    def confirm(self, question: str, answer: str) -> None:
        self.append(f"{question} {answer}", linebreak=True, blockquote=True)


def lint_errors(fname: str, source_line: str) -> str:
    """`lint_edited`'s text for one file: `Linter.lint` output between newlines, as tool_error gets it."""
    errors = (
        f"# Fix any errors below, if possible.\n\n## Running: flake8 {fname}\n\n{fname}:3:5: F821 undefined name 'x'\n"
        f"    {source_line}\n    ^\n\n## See relevant line below marked with █.\n\n{fname}:\n...⋮...\n  3█    {source_line}\n...⋮...\n"
    )
    return "\n" + errors + "\n"


TEST_OUTPUT = "===== test session starts =====\n\n    def test_x(self):\n>       assert f() == 2\nE       assert 1 == 2\n\n===== 1 failed in 0.1s =====\n"


def history() -> tuple[str, dict[str, str]]:
    """A history of two Aider processes writing one file, and the errors texts the model was sent."""
    log = ReflectingLog()
    log.start("2024-08-05 20:40:10")
    log.tool_output("/Users/me/.venv/bin/aider app.py --test-cmd pytest -q tests --auto-test")
    log.tool_output("Aider v0.47.2-dev")
    log.user_input("use x")
    log.ai_output("app.py\n```\n<<<<<<< SEARCH\n=======\nreturn x\n>>>>>>> REPLACE\n```")
    log.tool_output("Tokens: 1,000 sent, 20 received.")
    log.tool_output("Applied edit to app.py")
    first = lint_errors("app.py", "return x") + lint_errors("lib.py", "print(x)")[1:]
    log.tool_error(first)
    log.confirm("Attempt to fix lint errors?", "yes")  # before 2024-08-08 the raw answer is logged
    log.ai_output("Defining x.")
    log.tool_output("Tokens: 1,100 sent, 5 received.")
    log.tool_output("Applied edit to app.py")
    log.tool_output(TEST_OUTPUT)
    for line in TEST_OUTPUT.splitlines():
        log.tool_output(line)
    log.confirm("Attempt to fix test errors?", "y")
    log.ai_output("f must return 2; see app.py and lib/util.py for where it is called.")
    log.tool_output("Tokens: 1,200 sent, 15 received.")
    log.tool_output("app.py")
    log.tool_output("lib/util.py")
    log.confirm("Add these files to the chat?", "y")
    log.ai_output("Now I can see both files.")
    log.tool_output("Tokens: 1,300 sent, 7 received.")
    log.user_input("look at lib/util.py")
    log.tool_output("lib/util.py")
    log.confirm("Add these files to the chat?", "y")  # named by the user: the files are added, nothing is sent
    log.ai_output("It is short.")
    log.tool_output("Tokens: 1,400 sent, 4 received.")
    log.user_input("rename x")
    log.ai_output("Renamed.")
    log.tool_output("Tokens: 1,500 sent, 2 received.")
    log.tool_output("Applied edit to app.py")
    crossing = lint_errors("app.py", "return y")
    log.tool_error(crossing)
    # Another Aider is started on the same file while the first one waits for the answer.
    log.start("2024-08-21 09:00:00")
    log.tool_output("/Users/me/.venv/bin/aider --show-prompt")
    log.confirm("Attempt to fix lint errors? [Y/n]", "y")
    log.ai_output("Renaming y too.")
    log.tool_output("Tokens: 1,600 sent, 3 received.")
    log.tool_output("Applied edit to app.py")
    log.tool_error(lint_errors("app.py", "return z"))
    log.confirm("Attempt to fix lint errors? [Y/n]", "n")
    log.tool_output("\n".join(["app.py", "lib/util.py"]) + "\n")  # from ba746dd21 the names are one message
    log.confirm("Add these files to the chat? [Y/n]", "y")
    log.tool_error("Only 3 reflections allowed, stopping.")  # the budget is spent: nothing is sent
    log.user_input("thanks")
    return log.text, {"first": first, "crossing": crossing}


def _stripped(text: str) -> str:
    """What can be read back of a text `tool_error` logged: each line stripped."""
    return "\n".join(line.strip() for line in text.splitlines()) + "\n"



def test_messages_aider_sends_itself_are_imported(tmp_path: Path):
    text, errors = history()
    path = tmp_path / ".aider.chat.history.md"
    path.write_text(text, encoding="utf-8")
    first, second = load_transcripts(path)
    sent = [(t, i) for t in (first, second) for i in t.items if i.meta.get("event") in EVENTS]
    assert [(t.id, i.meta["event"], i.text) for t, i in sent] == [
        (first.id, "aider-lint-errors", _stripped(errors["first"])),
        (first.id, "aider-test-errors", RUN_OUTPUT.format(command="pytest -q tests", output=TEST_OUTPUT.strip())),
        (first.id, "aider-added-files", ADDED_FILES.format(fnames="app.py, lib/util.py")),
        (second.id, "aider-lint-errors", _stripped(errors["crossing"])),
    ]
    # The rebuilt lint text differs from what was sent by the spaces tool_error stripped from each line, no more.
    assert sent[0][1].text != errors["first"]
    assert sent[0][1].text.split("\n") == [line.strip() for line in errors["first"].split("\n")]
    assert [i.meta["approximate"] for _, i in sent if "approximate" in i.meta] == [
        "each line stripped", "output ends stripped; command from the space-joined launch line", "each line stripped"
    ]
    assert sent[2][1].meta["files"] == ("app.py", "lib/util.py")
    for transcript, item in sent:
        items = list(transcript.items)
        assert item.synthetic and item.kind == "user"
        reply = reply_after(items, items.index(item))
        assert reply is not None and reply.kind == "assistant"
    assert [reply_after(list(t.items), list(t.items).index(i)).text for t, i in sent] == [  # type: ignore[union-attr]
        "Defining x.", "f must return 2; see app.py and lib/util.py for where it is called.", "Now I can see both files.", "Renaming y too."
    ]
    # Every question stays in the output markers with its answer; no turn is added.
    markers = "\n".join(i.text for t in (first, second) for i in t.items if i.kind == "marker")
    assert markers.count("Add these files to the chat?") == 3 and markers.count("Attempt to fix lint errors?") == 3
    assert [i.text for t in (first, second) for i in t.items if i.is_real_user] == ["use x", "look at lib/util.py", "rename x", "thanks"]
    assert first.meta.get("problems", ()) == () and second.meta.get("problems", ()) == ()


def test_auto_test_without_the_command_in_the_launch_line_is_flagged(tmp_path: Path):
    # test_cmd can come from a config file: the message is sent, with a command the log does not name.
    log = ReflectingLog()
    log.start("2024-08-10 08:58:35")
    log.tool_output("/Users/me/.venv/bin/aider app.py")
    log.user_input("fix f")
    log.ai_output("Done.")
    log.tool_output("Applied edit to app.py")
    log.tool_output(TEST_OUTPUT)
    for line in TEST_OUTPUT.splitlines():
        log.tool_output(line)
    log.confirm("Attempt to fix test errors?", "y")
    log.ai_output("Fixing the test.")
    path = tmp_path / ".aider.chat.history.md"
    path.write_text(log.text, encoding="utf-8")
    (transcript,) = load_transcripts(path)
    (sent,) = [i for i in transcript.items if i.meta.get("event") == "aider-test-errors"]
    assert sent.text == RUN_OUTPUT.format(command="", output=TEST_OUTPUT.strip())
    question = log.text.split("\n").index("> Attempt to fix test errors? y  ") + 1
    assert transcript.meta["problems"] == (
        f"{path}:{question}: auto-test errors sent, but the test command is not in the session's launch line",
    )


def test_accepted_errors_missing_from_the_log_are_flagged(tmp_path: Path):
    # A hand-trimmed log: the questions are there, what was sent is not; nothing is invented.
    log = ReflectingLog()
    log.start("2024-08-10 08:58:35")
    log.user_input("fix f")
    log.ai_output("Done.")
    log.tool_output("Applied edit to app.py")
    log.confirm("Attempt to fix lint errors?", "y")
    log.ai_output("Again.")
    log.tool_output("Applied edit to app.py")
    log.confirm("Attempt to fix test errors?", "y")
    log.ai_output("And again.")
    path = tmp_path / ".aider.chat.history.md"
    path.write_text(log.text, encoding="utf-8")
    (transcript,) = load_transcripts(path)
    assert not [i for i in transcript.items if i.synthetic]
    text = log.text.split("\n")
    lint, test = (text.index(f"> Attempt to fix {what} errors? y  ") + 1 for what in ("lint", "test"))
    assert transcript.meta["problems"] == (
        f"{path}:{lint}: lint errors accepted but not in the log: the message the model got is unknown",
        f"{path}:{test}: test errors accepted but their output is not in the log",
    )


# ------------------------------------------------------------------ the corpus history, read raw
QUESTION = re.compile(r"^> (Attempt to fix lint errors\?|Attempt to fix test errors\?|Add these files to the chat\?)(?: \[Y/n\])? (.*?)  $")
LINT_HEADER = "> # Fix any errors below, if possible.  "


def _content(line: str) -> str:
    """A logged line without its `> ` and its line break's two spaces."""
    return line.removeprefix(">").strip()


def raw_reflections(lines: list[str]) -> list[dict]:
    """Every one of the three questions with what it sent, from raw lines by the rules of the module
    docstring: the answer; whether a message was sent (a yes, not cut by the reflection budget, and for
    files, a question that does not follow the user's `####` message); its text; the line of the reply."""
    out = []
    for q, line in enumerate(lines):
        asked = QUESTION.match(line)
        if not asked:
            continue
        question, answer = asked.groups()
        case: dict = {"line": q + 1, "question": question, "answer": answer, "sent": answer.lower().startswith("y")}
        out.append(case)
        if "reflections allowed, stopping." in lines[q + 1]:
            case["sent"] = False
        if question.startswith("Add these files"):
            first = q
            while first and len(_content(lines[first - 1]).split()) == 1 and not lines[first - 1].startswith("####"):
                first -= 1
            case["files"] = [_content(name) for name in lines[first:q]]
            case["sent"] = case["sent"] and not lines[first - 1].startswith("####")
        if not case["sent"]:
            continue
        if question.startswith("Attempt to fix lint"):
            header = next(n for n in range(q - 1, 0, -1) if lines[n] == LINT_HEADER)
            n = header
            while lines[n - 1].startswith(">") and not QUESTION.match(lines[n - 1]):
                n -= 1
                header = n if lines[n] == LINT_HEADER else header
            end = header
            while end < q and lines[end].startswith(">"):
                end += 1
            case["text"] = "\n".join(_content(line) for line in lines[header - 1 : end]) + "\n"
            case["errors_line"] = header
        elif question.startswith("Attempt to fix test"):
            copy = q
            while lines[copy - 1].startswith(">"):
                copy -= 1
            output = lines[2 * copy - q : copy]  # the first logging has as many lines as its copy
            assert output[0].rstrip() == lines[copy].rstrip()
            session = next(n for n in range(q, 0, -1) if lines[n].startswith("# aider chat started at "))
            launch = next(line for line in lines[session:] if line.startswith("> "))
            command = launch.split(" --test-cmd ")[1].split(" --")[0].removesuffix("  ")
            text = "\n".join([output[0][2:], *output[1:]]).removesuffix("  ")
            case["text"] = RUN_OUTPUT.format(command=command, output=text)
        else:
            case["text"] = ADDED_FILES.format(fnames=", ".join(case["files"]))
        case["reply_line"] = next(n + 1 for n in range(q + 1, len(lines)) if lines[n].strip() and not lines[n].startswith(">"))
        assert not lines[case["reply_line"] - 1].startswith("#")  # the model answered it
    return out


@pytest.mark.corpora
def test_corpus_reflected_messages_item_by_item():
    path, lines = corpus_history()
    raw = raw_reflections(lines)
    by_question = {q: [c for c in raw if c["question"] == q] for q in {c["question"] for c in raw}}
    lint, test, files = (by_question[q] for q in ("Attempt to fix lint errors?", "Attempt to fix test errors?", "Add these files to the chat?"))
    # 37 lint questions (28 yes), 1 test question (yes), 26 file questions (7 yes, 4 of them after the user's message).
    assert (len(lint), sum(c["answer"] == "y" for c in lint), sum(c["sent"] for c in lint)) == (37, 28, 28)
    assert (len(test), sum(c["sent"] for c in test)) == (1, 1)
    assert (len(files), sum(c["answer"] == "y" for c in files), sum(c["sent"] for c in files)) == (26, 7, 3)
    expected = {c["line"]: (c["text"], c["reply_line"]) for c in raw if c["sent"]}

    got = {}
    for transcript in load_transcripts(path):
        items = list(transcript.items)
        for index, item in enumerate(items):
            if item.meta.get("event") in EVENTS:
                reply = reply_after(items, index)
                assert item.synthetic and reply is not None and reply.kind == "assistant"
                got[item.meta["line"]] = (item.text, reply.meta["line"])
    assert got == expected
    # One lint text is logged before a session header and its question after it (an Aider started meanwhile).
    headers = [n + 1 for n, line in enumerate(lines) if line.startswith("# aider chat started at ")]
    crossing = [c["line"] for c in lint if c["sent"] and any(c["errors_line"] < h < c["line"] for h in headers)]
    assert crossing == [4959]
