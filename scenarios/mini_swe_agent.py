"""Importer for mini-swe-agent trajectories (`*.traj.json`, MANIFEST "mini-swe-agent-traj").

Owns the container: `{info, messages, trajectory_format, instance_id}` (model from
`info.config.model.model_name`, per-message usage in `extra.response.usage`, the final `exit`
message as a marker) and the legacy variant (a bare message list whose bash command sits in a
```mswea_bash_command``` or ```bash block; the next user message is its output). The message
conversion itself is `compaction_bench.scenarios.openai_style`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from compaction_bench.importing import Importer, ImportFailure
from compaction_bench.scenarios.builder import TranscriptBuilder
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
        add_messages(builder, actions_to_tool_calls(messages, bash_block), usage_of=message_usage, marker_roles=("exit",))
        meta: dict[str, Any] = {"trajectory_format": data.get("trajectory_format") if isinstance(data, Mapping) else "legacy"}
        if isinstance(info, Mapping):
            meta.update({k: info[k] for k in ("model_stats", "exit_status", "mini_version") if k in info})
        return [builder.finish(str(instance or path.name.removesuffix(".json").removesuffix(".traj")), meta=meta)]
