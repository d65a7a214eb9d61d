"""Importer for SWE-agent trajectories (`.traj`, MANIFEST "swe-agent-traj").

Owns the `.traj` container: the chat the model saw is `history`. Function-calling configs record
`tool_calls` on assistant messages and `role: tool` messages with `tool_call_ids`; older configs
put the command in the assistant text (parsed by SWE-agent into `action`) and its output in the
next user message, which become a tool call named after the command's first word and its result.
Demonstrations (`is_demo`) are synthetic user context, marked `meta["demonstration"]`. Only aggregate usage exists
(`info.model_stats`): it is kept in `meta["aggregate_usage"]`, never spread over responses.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from compaction_bench.importing import Importer, ImportFailure
from compaction_bench.scenarios.builder import TranscriptBuilder, mapping_of
from compaction_bench.scenarios.openai_style import actions_to_tool_calls, add_messages
from compaction_bench.scenarios.readers import read_json_reported
from compaction_bench.transcript import Transcript

FORMAT = "swe-agent"


def action_of(message: Mapping[str, Any]) -> tuple[str, str] | None:
    """(tool, command) of a text-protocol assistant message: its parsed `action`."""
    action = message.get("action")
    if not isinstance(action, str) or not action.strip():
        return None
    return action.split()[0], action


def split_tool_messages(history: list[Any]) -> list[Any]:
    """A `role: tool` message answering several calls (`tool_call_ids`) becomes one result per call."""
    out: list[Any] = []
    for message in history:
        ids = message.get("tool_call_ids") if isinstance(message, Mapping) and message.get("role") == "tool" else None
        if isinstance(ids, list) and ids and not message.get("tool_call_id"):
            out.extend({**message, "tool_call_id": call_id} for call_id in ids)
        else:
            out.append(message)
    return out


def model_name(data: Mapping[str, Any]) -> str | None:
    config = data.get("replay_config")
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except (ValueError, RecursionError):
            return None
    agent = config.get("agent") if isinstance(config, Mapping) else None
    model = agent.get("model") if isinstance(agent, Mapping) else None
    name = model.get("name") if isinstance(model, Mapping) else None
    return name if isinstance(name, str) else None


class SweAgentImporter(Importer):
    format = FORMAT
    description = "SWE-agent trajectory (.traj): history with or without function calling"
    suffixes = (".traj",)
    priority = 30

    @classmethod
    def sniff(cls, path: Path, head: str) -> bool:
        stripped = head.lstrip()
        return stripped.startswith("{") and (
            path.suffix == ".traj" or ('"history"' in head and '"trajectory"' in head and '"role"' in head)
        )

    def load(self, path: Path, **options: Any) -> list[Transcript]:
        data, problems = read_json_reported(path)
        if not isinstance(data, Mapping) or not isinstance(data.get("history"), list):
            raise ImportFailure(f"{path}:1: not a SWE-agent trajectory (no 'history' list)")
        builder = TranscriptBuilder(path, FORMAT)
        builder.problems.extend(problems)
        builder.model = model_name(data)
        history = split_tool_messages(actions_to_tool_calls(data["history"], action_of))
        add_messages(builder, history, where=lambda n: f"history message {n}", is_demonstration=lambda m: bool(m.get("is_demo")))
        info = mapping_of(data.get("info"))
        meta: dict[str, Any] = {"recorded_steps": len(data.get("trajectory") or [])}
        if isinstance(info.get("model_stats"), Mapping):
            meta["aggregate_usage"] = info["model_stats"]
        for key in ("exit_status", "submission"):
            if key in info:
                meta[key] = info[key]
        return [builder.finish(path.stem, source={"environment": data.get("environment")}, meta=meta)]
