"""Lenient readers shared by the importers: JSON and JSONL with problems reported, never dropped.

`read_jsonl` yields every parsed line with its number; a line that is not valid JSON (cut in half,
corrupted) becomes a problem string naming file and line, which importers put in the transcript's
`meta["problems"]`. Invalid UTF-8 is replaced and reported the same way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compaction_bench.importing import ImportFailure, decode_utf8, read_bytes


@dataclass
class JsonlLines:
    """Parsed lines of a JSONL file and the problems met while reading it."""

    path: Path
    lines: list[tuple[int, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def read_text(path: Path) -> tuple[str, list[str]]:
    """The file's text (zstd decompressed) and any UTF-8 problems."""
    return decode_utf8(path, read_bytes(path))


def read_jsonl(path: Path) -> JsonlLines:
    text, problems = read_text(path)
    out = JsonlLines(path, problems=list(problems))
    # Split on \n only: U+2028 and other separators may legally appear inside JSON strings.
    for number, line in enumerate(text.split("\n"), start=1):
        stripped = line.strip()
        if not stripped:
            continue
        try:
            out.lines.append((number, json.loads(stripped)))
        except json.JSONDecodeError as exc:
            out.problems.append(f"{path}:{number}: malformed JSON ({exc.msg} at column {exc.colno}); line kept out")
    if not out.lines:
        raise ImportFailure(f"{path}: no readable JSON line" + (f" ({out.problems[0]})" if out.problems else ""))
    return out


def read_json_reported(path: Path) -> tuple[Any, list[str]]:
    """The parsed JSON document and the UTF-8 problems met while decoding it (for meta["problems"])."""
    text, problems = read_text(path)
    if not text.strip():
        raise ImportFailure(f"{path}: empty file")
    try:
        return json.loads(text), problems
    except json.JSONDecodeError as exc:
        raise ImportFailure(f"{path}:{exc.lineno}: malformed JSON ({exc.msg} at column {exc.colno})") from None
