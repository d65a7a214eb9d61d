"""Lenient readers shared by the importers: JSON and JSONL with problems reported, never dropped.

`read_jsonl` yields every parsed line with its number; a line that is not usable JSON (cut in half,
corrupted, nested too deeply, a number too long to convert) becomes a problem string naming file
and line, which importers put in the transcript's `meta["problems"]`. Invalid UTF-8 is replaced and
reported the same way, and so are lone UTF-16 surrogate escapes (`"\\udc80"`: valid JSON, but not
text that can be written as UTF-8), which become U+FFFD. A `.zst` cut off inside its last frame
keeps what decompresses before the cut, with a problem saying so (`importing.read_input`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compaction_bench.errors import json_problem
from compaction_bench.importing import ImportFailure, decode_utf8, read_input
from compaction_bench.transcript import may_hold_surrogates, scrub_surrogates

SURROGATE_PROBLEM = "lone UTF-16 surrogate escape(s) replaced with U+FFFD"


@dataclass
class JsonlLines:
    """Parsed lines of a JSONL file and the problems met while reading it."""

    path: Path
    lines: list[tuple[int, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    #: the lines kept out, each with its number and why (also among `problems`)
    unreadable: list[tuple[int, str]] = field(default_factory=list)


def read_text(path: Path) -> tuple[str, list[str]]:
    """The file's text (zstd decompressed) and the problems met: a truncated `.zst`, invalid UTF-8."""
    raw, problems = read_input(path)
    text, utf8_problems = decode_utf8(path, raw)
    return text, [*problems, *utf8_problems] if problems else utf8_problems


def parse_json(text: str) -> Any:
    """`json.loads` whose failures on hostile content are one `ValueError` with a short reason."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"malformed JSON ({json_problem(exc)})") from None
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    except ValueError as exc:  # e.g. an integer beyond Python's digit limit
        raise ValueError(f"unusable JSON ({exc})") from None


def scrubbed(text: str, value: Any) -> tuple[Any, bool]:
    """`value` (parsed from `text`) with lone surrogates replaced, and whether there were any."""
    if not may_hold_surrogates(text):
        return value, False
    try:
        fixed, changed = scrub_surrogates(value)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    return fixed, bool(changed)


def read_jsonl(path: Path) -> JsonlLines:
    text, problems = read_text(path)
    out = JsonlLines(path, problems=list(problems))
    # Split on \n only: U+2028 and other separators may legally appear inside JSON strings.
    for number, line in enumerate(text.split("\n"), start=1):
        stripped = line.strip()
        if not stripped:
            continue
        try:
            value, fixed = scrubbed(stripped, parse_json(stripped))
        except ValueError as exc:
            out.problems.append(f"{path}:{number}: {exc}; line kept out")
            out.unreadable.append((number, str(exc)))
            continue
        if fixed:
            out.problems.append(f"{path}:{number}: {SURROGATE_PROBLEM}")
        out.lines.append((number, value))
    if not out.lines:
        raise ImportFailure(f"{path}: no readable JSON line" + (f" ({out.problems[0]})" if out.problems else ""))
    return out


def read_json_reported(path: Path) -> tuple[Any, list[str]]:
    """The parsed JSON document and the problems met while decoding it (for meta["problems"])."""
    text, problems = read_text(path)
    if not text.strip():
        raise ImportFailure(f"{path}: empty file")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        truncated = next((p for p in problems if ": truncated zstd file: " in p), None)
        if truncated is not None:  # the cut, not the JSON, is what the user must know about
            raise ImportFailure(f"{truncated.split('; ')[0]}; what decompresses before the cut is not a whole JSON document") from None
        raise ImportFailure(f"{path}:{exc.lineno}: malformed JSON ({json_problem(exc)})") from None
    except RecursionError:
        raise ImportFailure(f"{path}: JSON nested too deeply") from None
    except ValueError as exc:
        raise ImportFailure(f"{path}: unusable JSON ({exc})") from None
    try:
        value, fixed = scrubbed(text, value)
    except ValueError as exc:
        raise ImportFailure(f"{path}: {exc}") from None
    if fixed:
        line = next((n for n, row in enumerate(text.split("\n"), start=1) if may_hold_surrogates(row)), 1)
        problems = [*problems, f"{path}:{line}: {SURROGATE_PROBLEM}"]
    return value, problems
