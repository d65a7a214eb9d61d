"""Importer for mini-swe-agent trajectories (`*.traj.json`, MANIFEST "mini-swe-agent-traj").

Owns the container: `{info, messages, trajectory_format, instance_id}` (model from
`info.config.model.model_name`, per-message usage in `extra.response.usage`, the final `exit`
message as a marker) and the legacy variant (a bare message list whose bash command sits in a
```mswea_bash_command``` or ```bash block; the next user message is its output). The message
conversion itself is `compaction_bench.scenarios.openai_style`.

User-role messages the agent loop wrote itself are synthetic user items marked `meta["from_agent"]`
(`written_by_agent`): sent to the model as recorded, but no user turn and no source of what the user
said. They are its format-error notice (`format_error_template`; from 2.0 marked
`extra.interrupt_type: "FormatError"`, in 1.x told by its wording) and the output of a command no tool
call asked for (a human-issued command's observation). The interactive agent's interruptions
(`UserInterruption`, `UserRejection`, `UserNewTask`) carry what the user typed and stay user turns. An
assistant message whose bash block is answered by an interruption ran nothing: the block stays text, no call.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from compaction_bench.importing import Importer, ImportFailure
from compaction_bench.scenarios.builder import TranscriptBuilder, as_text, mapping_of
from compaction_bench.scenarios.openai_style import actions_to_tool_calls, add_messages, openai_usage, sniff_messages
from compaction_bench.scenarios.readers import read_json_reported
from compaction_bench.transcript import Transcript, Usage

FORMAT = "mini-swe-agent"
_BLOCK_RE = re.compile(r"```(mswea_bash_command|bash)[ \t]*\n(.*?)```", re.S)


def bash_block(message: Mapping[str, Any]) -> tuple[str, str] | None:
    """The (tool, command) of a legacy assistant message: its first bash block, if any."""
    content = message.get("content")
    match = _BLOCK_RE.search(content) if isinstance(content, str) else None
    return ("bash", match.group(2).strip()) if match else None


#: The opening of mini-swe-agent 1.x's format-error notice, in the `AgentConfig` default ("Please always provide
#: EXACTLY ONE action in triple backticks.") and every shipped config ("… in triple backticks, found
#: {{actions|length}} actions.", "… in the `<bash_code>` block, …" in swebench_xml.yaml): SWE-agent/mini-swe-agent
#: v1.17.5 (68d367bf) src/minisweagent/agents/default.py and config/*.yaml. 1.x adds it as a plain user message
#: (`DefaultAgent.run`: `self.add_message("user", str(e))`), so its wording is what tells it.
V1_FORMAT_ERROR = "Please always provide EXACTLY ONE action in "
#: `extra` fields of an observation (a command's output), `format_observation_messages` in
#: models/utils/actions_text.py and actions_toolcall.py (a83fcae8); role "user" when no tool call asked for it.
OBSERVATION_FIELDS = ("raw_output", "returncode")


def interruption(message: Any) -> str | None:
    """The kind of interruption message the agent loop added (2.0+: `extra.interrupt_type`, set by every
    `InterruptAgentFlow` message, src/minisweagent/exceptions.py and agents/*.py @a83fcae8; 1.x: "FormatError"
    for the notice's wording), None for any other message."""
    if not isinstance(message, Mapping) or message.get("role") != "user":
        return None
    kind = mapping_of(message.get("extra")).get("interrupt_type")
    if kind is not None:
        return str(kind)
    return "FormatError" if as_text(message.get("content")).startswith(V1_FORMAT_ERROR) else None


def written_by_agent(message: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The meta of a user-role message the agent loop wrote itself, None for one a person wrote.

    A format error is `format_error_template` rendered by the agent (`parse_toolcall_actions`,
    `parse_regex_actions` @a83fcae8; `DefaultAgent.parse_action` in 1.x); an observation left in the user
    role is a command's output. The interactive agent's `UserInterruption`, `UserRejection` and
    `UserNewTask` messages wrap what the user typed (agents/interactive.py `_interrupt`): a person's."""
    kind = interruption(message)
    if kind == "FormatError":
        return {"event": "format-error", "interrupt_type": kind}
    if kind is None and any(field in mapping_of(message.get("extra")) for field in OBSERVATION_FIELDS):
        return {"event": "command-output"}
    return None


def message_usage(message: Mapping[str, Any], report: Callable[[str], None]) -> Usage | None:
    extra = message.get("extra")
    response = extra.get("response") if isinstance(extra, Mapping) else None
    return openai_usage(response.get("usage"), report) if isinstance(response, Mapping) else None


class MiniSweAgentImporter(Importer):
    format = FORMAT
    description = "mini-swe-agent trajectory (.traj.json), tool-calling or legacy bash-block"
    suffixes = (".traj.json", ".json")
    priority = 40

    @classmethod
    def sniff(cls, path: Path, head: str) -> bool:
        if '"mini_version"' in head or ('"trajectory_format"' in head and "mini-swe-agent" in head):
            return True
        return sniff_messages(head) and ("mswea_bash_command" in head or path.name.endswith(".traj.json"))

    def load(self, path: Path, **options: Any) -> list[Transcript]:
        data, problems = read_json_reported(path)
        info: Any
        if isinstance(data, list):
            messages, info, instance = data, {}, None
        elif isinstance(data, Mapping) and isinstance(data.get("messages"), list):
            messages, info, instance = data["messages"], data.get("info") or {}, data.get("instance_id")
        else:
            raise ImportFailure(f"{path}:1: not a mini-swe-agent trajectory (expected a message list or an object with 'messages')")
        builder = TranscriptBuilder(path, FORMAT)
        builder.problems.extend(problems)
        config = info.get("config") if isinstance(info, Mapping) else None
        model = config.get("model") if isinstance(config, Mapping) else None
        builder.model = model.get("model_name") if isinstance(model, Mapping) else None
        chat = actions_to_tool_calls(messages, bash_block, refuses_action=lambda m: interruption(m) is not None)
        add_messages(builder, chat, usage_of=message_usage, written_by_agent=written_by_agent, marker_roles=("exit",))
        meta: dict[str, Any] = {"trajectory_format": data.get("trajectory_format") if isinstance(data, Mapping) else "legacy"}
        if isinstance(info, Mapping):
            meta.update({k: info[k] for k in ("model_stats", "exit_status", "mini_version") if k in info})
        return [builder.finish(str(instance or path.name.removesuffix(".json").removesuffix(".traj")), meta=meta)]
