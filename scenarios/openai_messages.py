"""Importer for plain OpenAI-style message lists: a JSON list or JSONL of `{role, content, tool_calls,
tool_call_id}`, an object holding `messages`, and tau-bench's container (a JSON list of runs
`{task_id, trial, reward, info, traj}`: one transcript per run). The message conversion is
`compaction_bench.scenarios.openai_style`.

A JSONL (or JSON list) of session records, `{"id": …, "messages": [...]}` one per line (OpenAI's
chat fine-tuning files, Hugging Face chat datasets), holds one session per record, read as `hf-dataset`
reads its rows: transcript `<file stem>:<id>` (`line<N>` / `entry<N>` without an id). The first record or
message decides what the file holds; a message among records, or a record among messages, is an error
naming its line: read as a message, a record is no message (no role), and its whole session was lost.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from compaction_bench.importing import Importer, ImportFailure
from compaction_bench.scenarios.builder import TranscriptBuilder, mapping_of
from compaction_bench.scenarios.openai_style import add_messages, sniff_messages
from compaction_bench.scenarios.readers import SURROGATE_PROBLEM, parse_json, read_json_reported, read_jsonl, read_text, scrubbed
from compaction_bench.transcript import Transcript

FORMAT = "openai-messages"


def is_tau_run(entry: Any) -> bool:
    return isinstance(entry, Mapping) and isinstance(entry.get("traj"), list) and "task_id" in entry


def is_session_record(entry: Any) -> bool:
    """A `{"messages": [...]}` object without a role: one whole session, not a chat message."""
    return isinstance(entry, Mapping) and isinstance(entry.get("messages"), list) and "role" not in entry


def record_name(entry: Mapping[str, Any], origin: Mapping[str, int]) -> str:
    """A session record's `id` (a string or number), else where it is (`line3`, `entry0`)."""
    name = entry.get("id")
    if isinstance(name, (str, int)) and not isinstance(name, bool) and str(name).strip():
        return str(name)
    return "".join(f"{key}{value}" for key, value in origin.items())


def place(path: Path, n: int, lines: list[int] | None) -> str:
    """Entry `n` of the file as an error names it: `file:line` in JSONL, `file: entry n` in a JSON list."""
    return f"{path}:{lines[n]}" if lines else f"{path}: entry {n}"


def describe(entry: Any) -> str:
    if isinstance(entry, Mapping):
        return f"a message with role {entry['role']!r}" if "role" in entry else "an object without 'messages'"
    return f"a JSON {type(entry).__name__}"


def read_chat(path: Path) -> tuple[list[Any], list[int] | None, list[str]]:
    """The file's entries (messages, records or runs), their line numbers (JSONL only) and the problems met."""
    text, utf8_problems = read_text(path)
    lines: list[int] | None = None
    if text.lstrip().startswith("["):
        data, problems = read_json_reported(path)
    else:
        try:
            data, fixed = scrubbed(text, parse_json(text))
        except ValueError:
            data, fixed = None, False
        problems = [*utf8_problems, *([f"{path}: {SURROGATE_PROBLEM}"] if fixed else [])]
        if not (isinstance(data, Mapping) and isinstance(data.get("messages"), list)):
            jsonl = read_jsonl(path)
            data, problems = [value for _, value in jsonl.lines], jsonl.problems
            lines = [number for number, _ in jsonl.lines]
    if isinstance(data, Mapping):
        data = data["messages"]
    if not isinstance(data, list):
        raise ImportFailure(f"{path}:1: expected a list of chat messages, got a JSON {type(data).__name__}")
    return data, lines, problems


class OpenAIMessagesImporter(Importer):
    format = FORMAT
    description = (
        "OpenAI-style chat messages (JSON list, JSONL, {messages: [...]}), one session per {messages: [...]} line "
        "(fine-tuning / Hugging Face layout), and tau-bench trajectories"
    )
    suffixes = (".json", ".jsonl")
    priority = 10

    @classmethod
    def sniff(cls, path: Path, head: str) -> bool:
        stripped = head.lstrip()
        if stripped.startswith("[") and '"traj"' in head and '"task_id"' in head:
            return True
        return sniff_messages(head)

    def load(self, path: Path, **options: Any) -> list[Transcript]:
        data, lines, problems = read_chat(path)
        if data and all(is_tau_run(entry) for entry in data):
            return [self._tau_run(path, n, entry, problems) for n, entry in enumerate(data)]
        if data and is_session_record(data[0]):
            return [self._session_record(path, n, entry, lines, problems) for n, entry in enumerate(data)]
        for n, entry in enumerate(data):
            if is_session_record(entry):
                raise ImportFailure(
                    f"{place(path, n, lines)}: a session record {{\"messages\": [...]}} among chat messages; a file holds "
                    "either chat messages or session records, one per line"
                )
        builder = TranscriptBuilder(path, FORMAT)
        builder.problems.extend(problems)
        if lines is None:
            add_messages(builder, data)
        else:
            numbers = lines
            add_messages(builder, data, where=lambda n: f"line {numbers[n]}", line_of=lambda n: numbers[n])
        return [builder.finish(path.stem)]

    @staticmethod
    def _session_record(path: Path, n: int, entry: Any, lines: list[int] | None, problems: list[str]) -> Transcript:
        """One `{"id": …, "messages": [...]}` record as its own transcript."""
        if not is_session_record(entry):
            raise ImportFailure(
                f"{place(path, n, lines)}: expected a session record {{\"messages\": [...]}} as on the file's first "
                f"{'line' if lines else 'entry'}, got {describe(entry)}; a file holds either chat messages or session records"
            )
        builder = TranscriptBuilder(path, FORMAT)
        builder.problems.extend(problems)
        if lines is None:
            add_messages(builder, entry["messages"], where=lambda m: f"entry {n} message {m}")
        else:
            line = lines[n]
            add_messages(builder, entry["messages"], line_of=lambda m: line)
        origin = {"line": lines[n]} if lines else {"entry": n}
        return builder.finish(f"{path.stem}:{record_name(entry, origin)}", source=origin)

    @staticmethod
    def _tau_run(path: Path, n: int, entry: Mapping[str, Any], problems: list[str]) -> Transcript:
        builder = TranscriptBuilder(path, FORMAT)
        builder.problems.extend(problems)
        add_messages(builder, entry["traj"], where=lambda m: f"run {n} message {m}")
        info = mapping_of(entry.get("info"))
        meta = {"container": "tau-bench", "task_id": entry.get("task_id"), "trial": entry.get("trial"), "reward": entry.get("reward")}
        if "user_cost" in info:
            meta["user_cost"] = info["user_cost"]
        return builder.finish(
            f"{path.stem}:task{entry.get('task_id')}:trial{entry.get('trial')}", source={"entry": n}, meta=meta
        )
