"""Importer for SWE-agent trajectories (`.traj`, MANIFEST "swe-agent-traj").

Owns the `.traj` container: the chat the model saw is `history`. Function-calling configs record
`tool_calls` on assistant messages and `role: tool` messages with `tool_call_ids`; older configs
put the command in the assistant text (parsed by SWE-agent into `action`) and its output in the
next user message, which become a tool call named after the command's first word and its result.
Such a message's text is the `thought` SWE-agent's parser left beside the action (`thought_beside`), so
the command is counted once, as the call, whatever tags or fences the parse function reads.
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
from compaction_bench.scenarios.openai_style import actions_to_tool_calls, add_messages, text_beside_block
from compaction_bench.scenarios.readers import read_json_reported
from compaction_bench.transcript import Transcript

FORMAT = "swe-agent"


def action_of(message: Mapping[str, Any]) -> tuple[str, str] | None:
    """(tool, command) of a text-protocol assistant message: its parsed `action`."""
    action = message.get("action")
    if not isinstance(action, str) or not action.strip():
        return None
    return action.split()[0], action


def thought_beside(message: Mapping[str, Any], command: str) -> Any:
    """The text of a text-protocol assistant message beside its command: the history entry's `thought`, which
    SWE-agent records as its parser split the model's output (sweagent/agent/agents.py@3ea751c087 L714-727):
    for the XML parser everything outside the last `<command>…</command>` block, stripped
    (sweagent/tools/parsing.py@3ea751c087 L168-218), for the fenced one everything outside the last ``` block
    (L109-165). The `action` and `identity` parsers return the whole message as both thought and action
    (L92, L368): a message that is its command alone has no text beside it (a thought that merely repeats the
    command beside its fenced block is what the model wrote twice, and stays). A history entry without a
    `thought`, or whose content is no text, loses the fenced block that holds the command (`text_beside_block`).
    The thought is stripped, as the XML parser strips it."""
    thought, whole = message.get("thought"), message.get("content")
    if not isinstance(thought, str) or not isinstance(whole, str):
        return text_beside_block(message, command)
    thought = thought.strip()
    return "" if thought == command.strip() == whole.strip() else thought


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
        history = split_tool_messages(actions_to_tool_calls(data["history"], action_of, text_beside=thought_beside))
        add_messages(builder, history, where=lambda n: f"history message {n}", is_demonstration=lambda m: bool(m.get("is_demo")))
        info = mapping_of(data.get("info"))
        meta: dict[str, Any] = {"recorded_steps": len(data.get("trajectory") or [])}
        if isinstance(info.get("model_stats"), Mapping):
            meta["aggregate_usage"] = info["model_stats"]
        for key in ("exit_status", "submission"):
            if key in info:
                meta[key] = info[key]
        return [builder.finish(path.stem, source={"environment": data.get("environment")}, meta=meta)]
