"""Aider import audit: multi-line tool output is output, never an invented assistant reply.

Aider logs a tool message with `> ` before its first line only and a Markdown line break (two
spaces) after its last (`InputOutput.append_chat_history(text, linebreak=True, blockquote=True)`),
and a reply as a blank line, the reply, a blank line (`ai_output`). The writer below is a copy of
those rules, so the right items of a history are known before it is imported; the corpus test
checks the reply rule on the maintainer's own history, read line by line.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from compaction_bench.importing import load_transcripts
from compaction_bench.transcript import Item
from tests.conftest import corpus_files


def corpus_history() -> tuple[Path, list[str]]:
    """The corpus's Aider chat history and its lines, as the raw readers of these audits read them."""
    (path,) = corpus_files("aider-chat-history-md")
    return path, path.read_text(encoding="utf-8").split("\n")


def reply_after(items: Sequence[Item], index: int) -> Item | None:
    """The first item after `items[index]` that is not a marker: what the model answered a message with."""
    return next((i for i in items[index + 1 :] if i.kind != "marker"), None)


class AiderLog:
    """Aider's chat-history writer (aider/io.py), text kept in memory."""

    def __init__(self) -> None:
        self.text = ""

    def append(self, text: str, linebreak: bool = False, blockquote: bool = False) -> None:
        if blockquote:
            text = "> " + text.strip()
        if linebreak:
            text = text.rstrip() + "  \n"
        if not text.endswith("\n"):
            text += "\n"
        self.text += text

    def start(self, when: str) -> None:
        self.append(f"\n# aider chat started at {when}\n\n")

    def user_input(self, text: str) -> None:
        self.append("\n#### " + "  \n#### ".join(text.splitlines()), linebreak=True)

    def tool_output(self, text: str) -> None:
        self.append(text, linebreak=True, blockquote=True)

    def ai_output(self, text: str) -> None:
        self.append("\n" + text.strip() + "\n\n")


REPO_MAP = "Here are summaries of some files present in my git repository.\nDo not propose changes.\n\naider/args.py:\n│def main():\n⋮...\n\naider/io.py"
PYTEST = (
    "============ test session starts ============\nplatform darwin -- Python 3.12.4\n\n"
    "    def test_x(self):\n>           repo = GitRepo(io, None)\nE           NameError: name 'GitRepo' is not defined\n"
    "    \n========= 1 failed in 3.28s ========="
)
REPLY_1 = "Here is the fix:\n\naider/repo.py\n```\n<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n```"
REPLY_2 = "The test passes now."


def history() -> str:
    log = AiderLog()
    log.start("2024-08-05 20:40:10")
    log.tool_output("Aider v0.47.2-dev")
    log.tool_output(REPO_MAP)
    log.user_input("/test pytest tests/basic/test_repomap.py")
    log.tool_output(PYTEST)
    log.tool_output("Add the output to the chat?\n(y/n/instructions) y")
    log.user_input("fix it\nplease")
    log.ai_output(REPLY_1)
    log.tool_output("Tokens: 1,200 sent, 34 received. Cost: $0.01 message, $0.01 session.")
    log.tool_output("Commit 7d56889 feat: Add GitRepo import\n\nThe body of the commit message.")
    log.user_input("thanks")
    log.ai_output(REPLY_2)
    log.tool_output("Tokens: 1,300 sent, 6 received.")
    return log.text


@pytest.mark.parametrize("newline", ["\n", "\r\n"], ids=["lf", "crlf"])
def test_multiline_tool_output_stays_output(tmp_path: Path, newline: str):
    path = tmp_path / ".aider.chat.history.md"
    path.write_bytes(history().replace("\n", newline).encode("utf-8"))
    (transcript,) = load_transcripts(path)
    assert [i.text for i in transcript.items if i.kind == "assistant"] == [REPLY_1, REPLY_2]
    assert [i.text for i in transcript.items if i.kind == "user"] == ["/test pytest tests/basic/test_repomap.py", "fix it\nplease", "thanks"]
    assert [s.usage.output for s in transcript.steps() if s.usage] == [34, 6]
    outputs = "\n".join(i.text for i in transcript.items if i.kind == "marker")
    for text in (REPO_MAP, PYTEST, "(y/n/instructions) y", "The body of the commit message."):
        assert text in outputs  # kept, as output, whole


@pytest.mark.corpora
def test_corpus_replies_sit_between_blank_lines():
    """Every imported reply of the corpus history is what `ai_output` writes: its first line comes
    after a blank line. (The old reading made 329 replies out of tool output's continuation lines.)"""
    path, raw = corpus_history()
    transcripts = load_transcripts(path)
    replies = [i for t in transcripts for i in t.items if i.kind == "assistant" and not i.meta.get("no_reply")]
    not_after_blank = [i.meta["line"] for i in replies if i.meta["line"] > 1 and raw[i.meta["line"] - 2].strip()]
    assert replies and not_after_blank == []
