"""Importer for Aider chat histories (`.aider.chat.history.md`, MANIFEST "aider-chat-history-md").

Owns the Markdown log rules: `# aider chat started at ...` starts a session (one transcript per
session; text before the first header is a session of its own, flagged `meta["headerless"]`);
consecutive `#### ` lines are one user message; consecutive `> ` lines (and bare `>`) are tool/UI output (launch
banner, command and lint output, commits), kept as `aider-output` markers. Aider writes a multi-line
output with `> ` before its first line only and two spaces after its last (`append_chat_history` with
`blockquote` and `linebreak`), and what it writes next starts with a blank line or `>`: so a `> ` line
that does not end that way continues, through blank and unprefixed lines, up to the first line with
text that does (repo maps, `--verbose` settings, pytest output, diffs, commit bodies, a confirmation's
answer); when no such line comes before the next `####` line, the `> ` line stands alone. A CRLF line end is read as LF. Everything else is
assistant reply text, one model response per reply; a `> Tokens: N sent, M received.` line (also with
`cached` / `cache write` / `cache hit` parts) is the usage of the reply before it (a token line
with no unreported reply before it is a request whose reply was not recorded: an empty response) (`1.2k`-style
counts are expanded; the raw line is kept in the marker). The model comes from the banner's `Model:` / `Models:` / `Main model:` line.

Command output the model saw. From 2023-06-23 (`f9599f87a`) to 2024-08-27 Aider's `cmd_run` (`/run X`,
`!X`) logs the command's output as one tool message and asks "Add the output to the chat?", logged with
the answer: until 2024-07-28 through `confirm_ask` (an answer starting with `y` adds), then through
`prompt_ask` with one of the prompts `(y/n/instructions):`, `\n(y/n/instructions)`, `\n(Y/n/instructions)`,
`\n[Y/n/instructions]` (`y`/`yes` adds, `n`/`no` does not, case-insensitive; any other answer, empty
included, adds with the answer as instructions). `/test X` (from 2024-01-22) runs the same code without
asking and adds the output when the command fails. An added output is logged again line by line (each
line stripped) and the message
`prompts.run_output` (`I ran this command:\n\n{command}\n\nAnd got this output:\n\n{output}\n`, with
the instructions and a blank line before it) is sent to the model as a user message, answered by the
model (no `Ok.`): it is imported as a synthetic user item (`meta["event"] = "aider-run-output"`) after
the logged copy, its output the first logging (which keeps indentation; Aider strips the output's ends
when logging it, so they cannot be restored). `{command}` is the text after `/run` or `/test` with its
leading space (`Commands.matching_commands` keeps it), the text after `!`. A declined output stays a
marker only. A `/test` whose output is not logged again was not added. Later Aider versions log the
output only line by line (2024-08-31) or not at all (`run_cmd` prints it), and reply `Ok.` themselves
(late 2024): their prompts are not recognised, and such outputs stay markers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compaction_bench.importing import Importer, ImportFailure
from compaction_bench.scenarios.builder import TranscriptBuilder
from compaction_bench.scenarios.readers import read_text
from compaction_bench.transcript import Transcript, Usage

FORMAT = "aider"
SESSION_RE = re.compile(r"^# aider chat started at (.*)$")
TOKENS_RE = re.compile(r"^> Tokens: (.*?\breceived)")
TOKEN_PART_RE = re.compile(r"([\d.,]+k?) (sent|cached|cache write|cache hit|received)")
MODEL_RE = re.compile(r"^> (?:Main model|Models?): (\S+)")
#: `cmd_run`'s question as logged with its answer: `confirm_ask`'s (no options), then the four `prompt_ask` prompts.
RUN_PROMPT_RE = re.compile(
    r"^Add the output to the chat\?(?P<options> \(y/n/instructions\):|\n[(\[]y/n/instructions[)\]])?(?: (?P<answer>.*))?$", re.I
)
#: `aider/prompts.py` `run_output`: the user message that carries a command's output to the model.
RUN_OUTPUT = "I ran this command:\n\n{command}\n\nAnd got this output:\n\n{output}\n"


def token_count(text: str) -> int:
    """`5,244` → 5244, `12k` → 12000, `1.2k` → 1200."""
    text = text.replace(",", "")
    if text.endswith("k"):
        return round(float(text[:-1]) * 1000)
    return int(float(text))


def tokens_usage(report: str) -> Usage:
    """Usage from `N sent[, C cached | cache write | cache hit], M received`: Aider's "sent" leaves
    the cached prompt out, so `input` adds it back (input includes cached_input and cache_write)."""
    parts = {name: token_count(number) for number, name in TOKEN_PART_RE.findall(report)}
    cached = parts.get("cached", 0) + parts.get("cache hit", 0)
    write = parts.get("cache write", 0)
    return Usage(input=parts.get("sent", 0) + cached + write, cached_input=cached, cache_write=write, output=parts.get("received", 0))


def _kind(line: str) -> str:
    if line.startswith("####"):
        return "user"
    if line.startswith("> ") or line.rstrip() == ">":
        return "output"
    return "assistant"


class AiderImporter(Importer):
    format = FORMAT
    description = "Aider chat history Markdown (.aider.chat.history.md), one transcript per session"
    suffixes = (".md",)
    priority = 20

    @classmethod
    def sniff(cls, path: Path, head: str) -> bool:
        return bool(re.search(r"^# aider chat started at ", head, re.M))

    def load(self, path: Path, **options: Any) -> list[Transcript]:
        text, problems = read_text(path)
        sessions: list[tuple[int, str | None, list[str]]] = []
        lines = [line.removesuffix("\r") for line in text.split("\n")]
        for number, line in enumerate(lines, start=1):
            match = SESSION_RE.match(line.rstrip())
            if match:
                sessions.append((number, match.group(1), []))
            else:
                if not sessions:
                    sessions.append((1, None, []))
                sessions[-1][2].append(line)
        if all(started is None for _, started, _ in sessions) and not any(line.startswith("#### ") for line in lines):
            # Forced onto a file that is not a chat history: nothing here is Aider's, so nothing is imported.
            raise ImportFailure(f"{path}: no Aider chat content (no '# aider chat started at' line and no '#### ' user line)")
        out = []
        # A command's output can follow a session header: the command ran an Aider that logged to the same file.
        command: _Command | None = None
        for index, (start, started, body) in enumerate(sessions):
            if started is None and not any(line.strip() for line in body):
                continue
            transcript, command = self._session(path, index, start, started, body, problems, command)
            out.append(transcript)
        return out

    def _session(
        self, path: Path, index: int, start: int, started: str | None, body: list[str], problems: list[str],
        command: _Command | None,
    ) -> tuple[Transcript, _Command | None]:
        """One session's transcript, and the `/run`, `!` or `/test` command still waiting for its output."""
        builder = TranscriptBuilder(path, FORMAT)
        builder.problems.extend(p for p in problems if start <= _line_of(p, path) <= start + len(body))
        first = start + 1 if started is not None else start
        response: int | None = None
        blocks: list[tuple[str, int, list[str]]] = []
        closed = True
        continued = _continuations(body)
        verbatim: set[tuple[int, int]] = set()  # (block, line) positions of continued output lines, kept as written
        for offset, line in enumerate(body):
            if offset in continued:
                verbatim.add((len(blocks) - 1, len(blocks[-1][2])))
                # the line that closes the output loses the two spaces of its line break, no more
                blocks[-1][2].append(line if offset + 1 in continued else line.removesuffix("  "))
                continue
            if not line.strip():
                # A user message is consecutive `####` lines; blank lines belong to replies and output.
                if blocks and blocks[-1][0] != "user":
                    blocks[-1][2].append(line)
                closed = True
                continue
            kind = _kind(line)
            if not blocks or blocks[-1][0] != kind or (kind == "user" and closed):
                blocks.append((kind, first + offset, []))
            blocks[-1][2].append(line)
            closed = False
        for position, (kind, number, block) in enumerate(blocks):
            if kind == "user":
                # Aider ends every logged line with two spaces (a Markdown line break): not user text.
                text = "\n".join((line[5:] if line.startswith("#### ") else line[4:]).removesuffix("  ") for line in block)
                builder.add("user", text, meta={"line": number})
                command = _command_of(text, number)
                response = None
            elif kind == "assistant":
                response = builder.new_response()
                builder.add("assistant", "\n".join(block).strip("\n"), response=response, meta={"line": number})
            else:
                kept = {n for b, n in verbatim if b == position}
                lines = [line if n in kept else _unquote(line) for n, line in enumerate(block)]
                added = _command_output(command, lines, _messages(block, kept)) if command else None
                if added is None or added.message is None:
                    self._output(builder, number, lines, response)
                else:
                    self._output(builder, number, lines[: added.end], response)
                    meta = {"event": "aider-run-output", "line": number + added.output_offset, "command_line": added.command_line, "answer": added.answer}
                    builder.add("user", added.message, synthetic=True, meta=meta)
                    if command and not command.args.strip():
                        builder.problem(f"/{command.name} without a command: the command that ran is not in the log", added.command_line)
                    if any(line.strip() for line in lines[added.end :]):
                        self._output(builder, number + added.end, lines[added.end :], None)
                if added is not None:
                    command = None  # its output is met: a command's output is asked about once
                response = None
        transcript = builder.finish(
            f"{path.stem}:{index}",
            source={"session": index, "line": start, "started": started},
            meta={"headerless": True} if started is None else {},
        )
        return transcript, command

    @staticmethod
    def _output(builder: TranscriptBuilder, number: int, block: list[str], response: int | None) -> None:
        text = "\n".join(block)
        meta: dict[str, Any] = {"event": "aider-output", "line": number}
        for offset, line in enumerate(block):
            model = MODEL_RE.match(f"> {line}")
            if model and builder.model is None:
                builder.model = model.group(1)
            tokens = TOKENS_RE.match(f"> {line}")
            if not tokens:
                continue
            if response is None:
                # A request whose reply was not recorded (API error, interrupt, a retry): an empty response.
                response = builder.new_response()
                builder.add("assistant", "", response=response, meta={"no_reply": True, "line": number + offset})
            builder.set_usage(response, tokens_usage(tokens.group(1)))
            meta.setdefault("tokens_lines", []).append(line.strip())
            response = None
        builder.add("marker", text.strip("\n"), meta=meta)


@dataclass(frozen=True)
class _Command:
    """A logged `/run X`, `!X` or `/test X` user message (`name` "run" or "test"; `args` as `cmd_run` got them)."""

    name: str
    args: str
    line: int


@dataclass(frozen=True)
class _AddedOutput:
    """A command's output event in an output block: it ends before line `end` of the block; `message` is what
    the model got (None: the output was not added); `output_offset` is the block line the output starts on;
    `command_line` the file line of the command."""

    end: int
    message: str | None
    output_offset: int
    answer: str | None
    command_line: int


def _command_of(text: str, line: int) -> _Command | None:
    """The command a user message runs: `!X` runs X; `/run X` and `/test X` get X with its leading space
    (`Commands.matching_commands` cuts the first word off and strips nothing)."""
    if text.startswith("!"):
        return _Command("run", text[1:], line)
    first = text.split(maxsplit=1)[0] if text.strip() else ""
    if first in ("/run", "/test"):
        return _Command(first[1:], text[len(first) :], line)
    return None


def _messages(block: list[str], kept: set[int]) -> list[tuple[int, int]]:
    """The (start, end) line ranges of the tool messages of an output block: a quoted line and the
    continuation lines kept with it; blank separator lines belong to none."""
    out: list[tuple[int, int]] = []
    for n, line in enumerate(block):
        if n in kept and out:
            out[-1] = (out[-1][0], n + 1)
        elif line.strip():
            out.append((n, n + 1))
    return out


def _copy_end(texts: list[str], start: int, output: str) -> int | None:
    """The message index after Aider's line-by-line copy of `output` (`tool_output(line, log_only=True)`
    per line, each stripped) when it starts at `start` (blank lines around it allowed), else None."""
    lines = [line.strip() for line in output.split("\n")] if output else []
    n = start
    while n < len(texts) and not texts[n]:
        n += 1
    if not lines or texts[n : n + len(lines)] != lines:
        return None
    n += len(lines)
    while n < len(texts) and not texts[n]:
        n += 1
    return n


def _command_output(command: _Command, lines: list[str], messages: list[tuple[int, int]]) -> _AddedOutput | None:
    """The output event of `command` in an output block (`lines` unquoted), or None when the block holds
    none (a `/run` whose question is not in it)."""
    texts = ["\n".join(lines[start:end]) for start, end in messages]
    if command.name == "test":
        if not texts:
            return None
        copied = _copy_end(texts, 1, texts[0])
        if copied is None:  # passed: `cmd_run(args, add_on_nonzero_exit=True)` adds a failure only
            return _AddedOutput(messages[0][1], None, messages[0][0], None, command.line)
        message = RUN_OUTPUT.format(command=command.args, output=texts[0])
        return _AddedOutput(messages[copied - 1][1], message, messages[0][0], None, command.line)
    asked = next(((n, match) for n, text in enumerate(texts) if (match := RUN_PROMPT_RE.match(text))), None)
    if asked is None:
        return None
    n, match = asked
    answer = (match["answer"] or "").strip()
    if match["options"] is None:  # confirm_ask: an answer starting with "y" adds, nothing else
        added, instructions = answer.lower().startswith("y"), ""
    else:
        added, instructions = answer.lower() not in ("n", "no"), "" if answer.lower() in ("y", "yes") else answer
    output, output_offset = (texts[n - 1], messages[n - 1][0]) if n else ("", messages[n][0])
    if not added:
        return _AddedOutput(messages[n][1], None, output_offset, answer, command.line)
    message = RUN_OUTPUT.format(command=command.args, output=output)
    if instructions:
        message = f"{instructions}\n\n{message}"
    copied = _copy_end(texts, n + 1, output)
    return _AddedOutput(messages[(copied or n + 1) - 1][1], message, output_offset, answer, command.line)


def _unquote(line: str) -> str:
    """An output line without its `> ` (a bare `>` is an empty line)."""
    return line[2:].rstrip() if line.startswith("> ") else line.lstrip(">").rstrip()


def _closes_output(body: list[str], offset: int) -> bool:
    """Whether the line at `offset` can be the last line of an output Aider wrote: text, then the two
    spaces of its Markdown line break, then what Aider writes next (a blank line, a `>` line, the end)."""
    line = body[offset]
    after = body[offset + 1] if offset + 1 < len(body) else ""
    return line.endswith("  ") and bool(line.strip()) and (not after.strip() or after.startswith(">"))


def _continuations(body: list[str]) -> set[int]:
    """Offsets of the lines that continue a multi-line output: after a `> ` line that cannot close
    it, up to and including the first line that can (`_closes_output`); none when a `####` line
    comes first."""
    out: set[int] = set()
    offset = 0
    while offset < len(body):
        start = offset
        offset += 1
        if not body[start].startswith("> ") or _closes_output(body, start):
            continue
        for end in range(offset, len(body)):
            if body[end].startswith("####"):
                break
            if _closes_output(body, end):
                out.update(range(offset, end + 1))
                offset = end + 1
                break
    return out


def _line_of(problem: str, path: Path) -> int:
    """The line number of a `path:N: ...` problem (0 when it names no line)."""
    head = problem.removeprefix(f"{path}:").split(":", 1)[0]
    return int(head) if head.isdigit() else 0
