"""Importer for plain OpenAI-style message lists: a JSON list or JSONL of `{role, content, tool_calls,
tool_call_id}`, an object holding `messages`, and tau-bench's container (a JSON list of runs
`{task_id, trial, reward, info, traj}`: one transcript per run). The message conversion is
`compaction_bench.scenarios.openai_style`.
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


class OpenAIMessagesImporter(Importer):
    format = FORMAT
    description = "OpenAI-style chat messages (JSON list, JSONL, {messages: [...]}) and tau-bench trajectories"
    suffixes = (".json", ".jsonl")
    priority = 10

    @classmethod
    def sniff(cls, path: Path, head: str) -> bool:
        stripped = head.lstrip()
        if stripped.startswith("[") and '"traj"' in head and '"task_id"' in head:
            return True
        return sniff_messages(head)

    def load(self, path: Path, **options: Any) -> list[Transcript]:
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
        if data and all(is_tau_run(entry) for entry in data):
            return [self._tau_run(path, n, entry, problems) for n, entry in enumerate(data)]
        builder = TranscriptBuilder(path, FORMAT)
        builder.problems.extend(problems)
        if lines is None:
            add_messages(builder, data)
        else:
            numbers = lines
            add_messages(builder, data, where=lambda n: f"line {numbers[n]}", line_of=lambda n: numbers[n])
        return [builder.finish(path.stem)]

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
