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
"""

from __future__ import annotations

import re
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
        for index, (start, started, body) in enumerate(sessions):
            if started is None and not any(line.strip() for line in body):
                continue
            out.append(self._session(path, index, start, started, body, problems))
        return out

    def _session(
        self, path: Path, index: int, start: int, started: str | None, body: list[str], problems: list[str]
    ) -> Transcript:
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
                response = None
            elif kind == "assistant":
                response = builder.new_response()
                builder.add("assistant", "\n".join(block).strip("\n"), response=response, meta={"line": number})
            else:
                kept = {n for b, n in verbatim if b == position}
                self._output(builder, number, [line if n in kept else _unquote(line) for n, line in enumerate(block)], response)
                response = None
        return builder.finish(
            f"{path.stem}:{index}",
            source={"session": index, "line": start, "started": started},
            meta={"headerless": True} if started is None else {},
        )

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
