"""Aider import audit: an edit-format error is the user message Aider sent the model after a reply.

Upstream (`Aider-AI/aider`, the same from `8612ac0e6`, 2024-08-04, to `8ec67d339`, 2024-08-22 08:58, the
corpus history being from 2024-08-05 to 2024-08-22 08:47): `Coder.apply_updates` catches the `ValueError` an
edit-block coder raises for a reply whose blocks do not parse or match, logs `tool_error("The LLM did not
conform to the edit format.")`, `tool_error(urls.edit_errors)`, `tool_error()` (nothing logged) and
`tool_error(str(err), strip=False)`, and sets `reflected_message = str(err)`. `tool_error` logs a text with a
line break one `splitlines()` line at a time, quoted as written (`strip=False`); a one-line text is logged
stripped. `send_message` returns, and `run_one` (`run` before 2024-08-08) sends the text as the next user
message unless `num_reflections` reached 3 ("Only 3 reflections allowed, stopping."). The texts:
`EditBlockCoder.apply_edits` "# N SEARCH/REPLACE block(s) failed to match!\\n..." ending with a line break;
`find_original_update_blocks` "{processed}\\n^^^ {error}"; `WholeFileCoder` "No filename provided before ```
in file listing". `main` with `--apply FILE` calls `apply_updates` on the file and returns: nothing is sent.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from compaction_bench.importing import load_transcripts
from compaction_bench.transcript import Item, Transcript
from tests.test_import_audit_aider import AiderLog, corpus_history, reply_after

EVENT = "aider-edit-format-error"
URL = "https://aider.chat/docs/troubleshooting/edit-errors.html"


class ErrorLog(AiderLog):
    """`InputOutput.tool_error` and `append_chat_history` with their `strip` argument (aider/io.py)."""

    def append_unstripped(self, text: str) -> None:
        self.text += "> " + text + "  \n"

    def tool_error(self, message: str = "", strip: bool = True) -> None:
        if not message.strip():
            return
        if "\n" not in message:
            self.append(message, linebreak=True, blockquote=True)
        elif strip:
            for line in message.splitlines():
                self.append(line, linebreak=True, blockquote=True)
        else:
            for line in message.splitlines():
                self.append_unstripped(line)

    def edit_error(self, error: str) -> None:
        """`apply_updates` after the coder raised `ValueError(error)`."""
        self.tool_error("The LLM did not conform to the edit format.")
        self.tool_error(URL)
        self.tool_error()
        self.tool_error(error, strip=False)


def no_match(passed: int = 0) -> str:
    """`EditBlockCoder.apply_edits`'s text for one failed block whose lines keep indentation and trailing spaces."""
    text = (
        "# 1 SEARCH/REPLACE block failed to match!\n\n## SearchReplaceNoExactMatch: This SEARCH block failed to exactly"
        " match lines in app.py\n<<<<<<< SEARCH\n    return x  \n=======\n    return y\n>>>>>>> REPLACE\n\n"
        "The SEARCH section must exactly match an existing block of lines including all white space, comments,"
        " indentation, docstrings, etc\n"
    )
    if passed:
        text += (
            f"\n# The other {passed} SEARCH/REPLACE block were applied successfully.\nDon't re-send them.\n"
            "Just reply with fixed versions of the block above that failed to match.\n"
        )
    return text


PARSE_ERROR = "app.py\n```\n<<<<<<< SEARCH\n    x = 1\n=======\n    x = 2\n=======\n\n^^^ Expected `>>>>>>> REPLACE` not `======="
NO_FILENAME = "No filename provided before ``` in file listing"
OTHER = "UnifiedDiffNoMatch: hunk failed to apply!\n\napp.py does not contain lines that match the diff you provided!\n"


def history() -> tuple[str, list[str]]:
    """Two Aider processes on one file, and the texts the model was sent, in order."""
    log = ErrorLog()
    log.start("2024-08-05 20:40:10")
    log.tool_output("/Users/me/.venv/bin/aider app.py")
    log.user_input("use y")
    log.ai_output("app.py\n```\n<<<<<<< SEARCH\n    return x\n=======\n    return y\n>>>>>>> REPLACE\n```")
    log.tool_output("Tokens: 1,000 sent, 20 received.")
    log.edit_error(no_match())
    log.ai_output("Sorry, the line has trailing spaces.")
    log.tool_output("Tokens: 1,100 sent, 30 received.")
    log.edit_error(no_match(passed=1))
    log.tool_error("\n\n^C again to exit")  # the user interrupts the request that carries the error
    log.ai_output("Here is the fixed bl")  # the partial reply is logged after the interrupt
    log.edit_error(PARSE_ERROR)
    log.tool_output("Tokens: 1,300 sent, 0 received.")  # interrupted before any text: an empty response
    log.tool_error("\n\n^C again to exit")
    log.user_input("whole file instead")
    log.ai_output("Run `pip install x`:\n```\npip install x\n```")
    log.tool_output("Tokens: 600 sent, 40 received.")
    log.edit_error(NO_FILENAME)
    log.ai_output("install.txt\n```\npip install x\n```")
    log.tool_output("Tokens: 700 sent, 20 received.")
    log.edit_error(OTHER)
    log.ai_output("Another try.")
    log.edit_error(no_match())
    log.tool_error("Only 3 reflections allowed, stopping.")  # the fourth reflection is not sent
    log.user_input("thanks")
    log.start("2024-08-21 09:02:25")
    log.tool_output("/Users/me/.venv/bin/aider --apply tmp.bad-edit.md --dry-run")
    log.tool_output("Aider v0.51.2-dev")
    log.edit_error(no_match())  # --apply: main applies the file and exits, nothing is sent
    return log.text, [no_match(), no_match(passed=1), PARSE_ERROR, NO_FILENAME, OTHER.removesuffix("\n")]



def _sent(transcripts: list[Transcript]) -> list[tuple[Transcript, int, Item]]:
    return [(t, n, i) for t in transcripts for n, i in enumerate(t.items) if i.meta.get("event") == EVENT]


def test_edit_format_errors_are_the_messages_the_model_got(tmp_path: Path):
    text, expected = history()
    path = tmp_path / ".aider.chat.history.md"
    path.write_text(text, encoding="utf-8")
    transcripts = load_transcripts(path)
    sent = _sent(transcripts)
    assert [i.text for _, _, i in sent] == expected
    assert all(t.id == transcripts[0].id and i.synthetic and i.kind == "user" and i.meta["from_agent"] for t, _, i in sent)
    # The rebuilt texts keep indentation and trailing spaces (logged unstripped); only the unknown format's
    # final line break cannot be told from the log.
    assert "\n    return x  \n" in sent[0][2].text
    assert [i.meta.get("approximate") for _, _, i in sent] == [None, None, None, None, "final line break unknown"]
    notices = [n + 1 for n, line in enumerate(text.split("\n")) if line == "> The LLM did not conform to the edit format.  "]
    assert len(notices) == 7 and [i.meta["line"] for _, _, i in sent] == notices[:5]
    replies = [reply_after(list(t.items), n) for t, n, _ in sent]
    assert [(r.kind, r.text) for r in replies if r is not None] == [
        ("assistant", "Sorry, the line has trailing spaces."),
        ("assistant", "Here is the fixed bl"),
        ("assistant", ""),  # the interrupted request's empty response
        ("assistant", "install.txt\n```\npip install x\n```"),
        ("assistant", "Another try."),
    ]
    assert replies[2] is not None and replies[2].meta.get("no_reply")
    # Each error stays in the output markers as logged; the real user messages are unchanged.
    markers = "\n".join(i.text for t in transcripts for i in t.items if i.kind == "marker")
    assert markers.count("The LLM did not conform to the edit format.") == 7
    assert [i.text for t in transcripts for i in t.items if i.is_real_user] == ["use y", "whole file instead", "thanks"]
    assert all(t.meta.get("problems", ()) == () for t in transcripts)


def test_test_cmd_first_in_the_launch_line_is_read(tmp_path: Path):
    # `sys.argv` joined by spaces: `--test-cmd` can be the first argument.
    log = ErrorLog()
    log.start("2024-08-10 08:58:35")
    log.tool_output("/Users/me/.venv/bin/aider --test-cmd pytest --auto-test")
    log.user_input("fix f")
    log.ai_output("Done.")
    log.tool_output("Applied edit to app.py")
    log.tool_output("1 failed")
    log.tool_output("1 failed")
    log.tool_output("Attempt to fix test errors? y")
    log.ai_output("Fixing the test.")
    path = tmp_path / ".aider.chat.history.md"
    path.write_text(log.text, encoding="utf-8")
    (transcript,) = load_transcripts(path)
    (sent,) = [i for i in transcript.items if i.meta.get("event") == "aider-test-errors"]
    assert sent.text == "I ran this command:\n\npytest\n\nAnd got this output:\n\n1 failed\n"


# ------------------------------------------------------------------ the corpus history, read raw
NOTICE = "> The LLM did not conform to the edit format.  "


def raw_edit_errors(lines: list[str]) -> list[dict]:
    """Every edit-format error with what it sent, from raw lines by the logging rules above: the error is the
    `> ` lines after the URL line, each without its `> ` and its two spaces, up to a stripped blank (`>  `),
    the limit line, a `Tokens:` line or an unquoted line; not sent under the limit or in an `--apply` session."""
    out = []
    for n, line in enumerate(lines):
        if line != NOTICE:
            continue
        assert lines[n + 1] == f"> {URL}  "
        end = n + 2
        while lines[end].startswith("> ") and lines[end] != ">  " and not lines[end].startswith(("> Only 3 reflections", "> Tokens: ")):
            end += 1
        error = [raw[2:-2] for raw in lines[n + 2 : end]]
        session = max(h for h in range(n) if lines[h].startswith("# aider chat started at "))
        launch = next(raw for raw in lines[session + 1 :] if raw.startswith("> "))
        case = {"line": n + 1, "sent": not lines[end].startswith("> Only 3 reflections") and " --apply " not in launch}
        case["text"] = "\n".join(error) + ("\n" if error[0].endswith("failed to match!") else "")
        following = next((k for k in range(end, len(lines)) if lines[k].strip() and not lines[k].startswith(">")), None)
        case["next"] = lines[following] if following is not None else None
        out.append(case)
    return out


@pytest.mark.corpora
def test_corpus_edit_format_errors_item_by_item():
    path, lines = corpus_history()
    raw = raw_edit_errors(lines)
    # 57 errors: 3 cut by the reflection limit, 2 in `--apply` runs, 52 sent.
    assert (len(raw), sum(c["sent"] for c in raw)) == (57, 52)
    assert [c["line"] for c in raw if not c["sent"]] == [10169, 26811, 64855, 93183, 93210]
    expected = {c["line"]: c["text"] for c in raw if c["sent"]}
    got: dict[int, str] = {}
    replies: dict[int, Item | None] = {}
    for transcript in load_transcripts(path):
        items = list(transcript.items)
        for index, item in enumerate(items):
            if item.meta.get("event") == EVENT:
                assert item.synthetic and item.meta["from_agent"] and "approximate" not in item.meta
                got[item.meta["line"]] = item.text
                replies[item.meta["line"]] = reply_after(items, index)
    assert got == expected
    # The model's answer follows: the next unquoted text of the file, except where the request was cut.
    without_text = []
    for case in raw:
        if not case["sent"]:
            continue
        reply = replies[case["line"]]
        if reply is not None and reply.kind == "assistant" and reply.text:
            assert case["next"] is not None and reply.text.startswith(case["next"].rstrip()), case["line"]
        else:
            without_text.append((case["line"], None if reply is None else (reply.kind, reply.text)))
    # 3654, 49231: ^C, then the user's next message; 76628, 77871: the request's `Tokens: ... 0 received`, an
    # empty response; 5230: its reply is written after the header of an Aider started meanwhile (--show-prompt).
    assert without_text == [(3654, ("user", "/clear")), (5230, None), (49231, ("user", "remove the properties arg from event")),
                            (76628, ("assistant", "")), (77871, ("assistant", ""))]
    assert lines[5247].startswith("> /Users/gauthier/Projects/aider/.venv/bin/aider --show-prompt")
    assert lines[5245].startswith("# aider chat started at ") and lines[5253].startswith("I apologize for the formatting error.")
