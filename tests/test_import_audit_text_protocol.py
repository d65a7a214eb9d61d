"""Text-protocol agents (SWE-agent's `action`, mini-swe-agent's bash blocks) write each command once,
in a fenced block of their message: imported as a tool call, the command leaves the message's text, so
a replay counts it once. Checked on the recorded trajectories against their raw JSON."""

from __future__ import annotations

import json

import pytest

from compaction_bench.importing import load_transcripts
from compaction_bench.scenarios.openai_style import without_block
from tests.conftest import CORPORA


def test_the_block_holding_the_command_leaves_the_text():
    text = "Let me look.\n\n```\nls -la\n```\n\nThen I will read it."
    assert without_block(text, "ls -la\n") == "Let me look.\n\nThen I will read it."
    assert without_block("Run `ls -la` first.", "ls -la") == "Run `ls -la` first."  # no block holds it: kept
    # SWE-agent's parser takes the last block as the action: an earlier block quoting the same text stays
    assert without_block("```\nls\n```\nagain:\n```bash\nls\n```", "ls") == "```\nls\n```\nagain:"


@pytest.mark.corpora
def test_recorded_swe_agent_commands_are_counted_once():
    files = sorted((CORPORA / "swe-agent-traj").glob("*/*.traj"))
    actions = 0
    for path in files:
        history = json.loads(path.read_text(encoding="utf-8")).get("history") or []
        written = [m for m in history if isinstance(m, dict) and m.get("role") == "assistant" and isinstance(m.get("action"), str)
                   and m["action"].strip() and not m.get("tool_calls")]
        (transcript,) = load_transcripts(path)
        texts = {i.response: i.text for i in transcript.items if i.kind == "assistant"}
        calls = [i for i in transcript.items if i.kind == "tool_call" and (i.call_id or "").startswith("action-")]
        assert len(calls) == len(written), path.name
        for message, call in zip(written, calls, strict=True):
            command = json.loads(call.arguments)["command"]
            assert command == message["action"]
            assert f"```\n{command.strip()}\n```" not in texts.get(call.response, ""), path.name
        actions += len(calls)
    assert actions > 100
