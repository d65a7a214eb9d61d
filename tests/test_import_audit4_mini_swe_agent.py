"""mini-swe-agent's own format-error notice is no user turn. The agent loop renders `format_error_template`
when it cannot parse the model's action and adds it as a user-role message (SWE-agent/mini-swe-agent
src/minisweagent/models/utils/actions_toolcall.py and actions_text.py, marked `extra.interrupt_type:
"FormatError"` from 2.0; a plain user message worded "Please always provide EXACTLY ONE action in …" in 1.x,
agents/default.py and config/*.yaml @v1.17.5). It was imported as a real user turn, and the miner asked
"What did the user say about …?" from it. It is now a synthetic user item marked `meta["from_agent"]`: sent
to the model as recorded, no user turn, mined for nothing the user said. What the interactive agent's user
typed (`UserRejection`, agents/interactive.py) stays a user turn."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from compaction_bench.importing import load_transcripts
from compaction_bench.request import message_from_item
from compaction_bench.scenarios.mining import mine_probes
from compaction_bench.transcript import Item, Transcript
from tests.conftest import CORPORA, corpus_files

#: mini-swe-agent 2.2.7's swebench config `format_error_template` as rendered in the recorded run below (message 266).
FORMAT_ERROR = (
    "Tool call error:\n\n<error>\nError parsing tool call arguments: Expecting ':' delimiter: line 1 column 8 (char 7)."
    "Missing 'command' argument in bash tool call.\n</error>\n\nHere is general guidance on how to submit correct toolcalls:\n\n"
    "Every response needs to use the 'bash' tool at least once to execute commands.\n\n"
    "Call the bash tool with your command as the argument:\n- Tool: bash\n- Arguments: {\"command\": \"your_command_here\"}\n\n"
    "If you have completed your assignment, please consult the first message about how to\n"
    "submit your solution (you will not be able to continue working on this task after that)."
)
#: The 1.x notice of the default and mini configs (config/default.yaml @v1.17.5), rendered for 0 and 2 actions.
V1_FORMAT_ERROR = (
    "Please always provide EXACTLY ONE action in triple backticks, found {n} actions.\n"
    "If you want to end the task, please issue the following command: `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`\n"
    "without any other command."
)
REJECTION = "Commands not executed. The user rejected your commands with the following message: Always run the tests with pytest -x."


def call(cid: str, command: str) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command})}}


def users(transcript: Transcript) -> list[Item]:
    return [i for i in transcript.items if i.kind == "user"]


def write_trajectory(path: Path, messages: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"trajectory_format": "mini-swe-agent-1.1", "info": {"mini_version": "2.2.7"}, "messages": messages}))
    return path


def test_a_format_error_is_an_agent_written_message_not_a_user_turn(tmp_path):
    path = write_trajectory(tmp_path / "run.traj.json", [
        {"role": "system", "content": "You are a helpful assistant that can interact with a computer."},
        {"role": "user", "content": "Please fix the failing date parser in utils.py."},
        {"role": "assistant", "content": "Look first.", "tool_calls": [call("c1", "cat utils.py")]},
        {"role": "tool", "tool_call_id": "c1", "content": "<returncode>0</returncode>\n<output>def parse(): ...</output>",
         "extra": {"raw_output": "def parse(): ...", "returncode": 0}},
        {"role": "user", "content": FORMAT_ERROR, "extra": {"interrupt_type": "FormatError"}},
        {"role": "assistant", "content": "Retrying.", "tool_calls": [call("c2", "python -m pytest")]},
        {"role": "tool", "tool_call_id": "c2", "content": "<returncode>1</returncode>", "extra": {"returncode": 1}},
        {"role": "user", "content": REJECTION, "extra": {"interrupt_type": "UserRejection"}},
        {"role": "exit", "content": "", "extra": {"exit_status": "Submitted", "submission": ""}},
    ])
    (t,) = load_transcripts(path)
    task, notice, rejection = users(t)
    assert notice.text == FORMAT_ERROR and notice.synthetic and notice.meta["from_agent"]
    assert notice.meta["interrupt_type"] == "FormatError"
    assert message_from_item(notice).role == "user" and message_from_item(notice).content == FORMAT_ERROR  # sent as recorded
    assert t.real_user_messages() == [task, rejection]  # what the user typed stays a user turn
    assert not [p for p in mine_probes(t) if p.source == notice.id]


def test_a_block_written_instead_of_a_tool_call_ran_nothing(tmp_path):
    # tool-calling run, the model wrote a bash block as text: `parse_toolcall_actions` finds no tool call and the loop
    # answers "No tool calls found…"; the block was never run, so it is no call and the notice no output of one
    notice = "Tool call error:\n\n<error>\nNo tool calls found in the response. Every response MUST include at least one tool call.\n</error>"
    path = write_trajectory(tmp_path / "text.traj.json", [
        {"role": "user", "content": "Count the lines of setup.py."},
        {"role": "assistant", "content": "Counting:\n\n```bash\nwc -l setup.py\n```"},
        {"role": "user", "content": notice, "extra": {"interrupt_type": "FormatError"}},
        {"role": "assistant", "content": "", "tool_calls": [call("c1", "wc -l setup.py")]},
        {"role": "tool", "tool_call_id": "c1", "content": "12 setup.py"},
    ])
    (t,) = load_transcripts(path)
    assert [i.kind for i in t.items] == ["user", "assistant", "user", "tool_call", "tool_result"]
    assert t.items[1].text == "Counting:\n\n```bash\nwc -l setup.py\n```"
    assert t.items[2].text == notice and t.items[2].meta["from_agent"] and len(t.real_user_messages()) == 1


def test_a_human_issued_commands_output_is_agent_written(tmp_path):
    # interactive human mode (agents/interactive.py `query`): the user's command, then its observation as a user
    # message, no tool call asking for it (actions_toolcall.py `format_toolcall_observation_messages`)
    path = write_trajectory(tmp_path / "human.traj.json", [
        {"role": "user", "content": "Tidy the repo."},
        {"role": "user", "content": "User command: \n```bash\ngit status\n```", "extra": {"actions": [{"command": "git status"}]}},
        {"role": "user", "content": "<returncode>0</returncode>\n<output>clean</output>", "extra": {"raw_output": "clean", "returncode": 0}},
    ])
    (t,) = load_transcripts(path)
    task, command, output = users(t)
    assert t.real_user_messages() == [task, command]
    assert output.synthetic and output.meta == {"event": "command-output", "from_agent": True}


def test_a_legacy_format_error_is_told_by_its_wording_and_the_refused_blocks_stay_text(tmp_path):
    path = tmp_path / "legacy.traj.json"
    two_blocks = "Both:\n\n```bash\nls\n```\n\n```bash\npwd\n```"
    path.write_text(json.dumps([
        {"role": "system", "content": "You are a helpful assistant that can do anything."},
        {"role": "user", "content": "Your task: list the files."},
        {"role": "assistant", "content": "I will think first."},
        {"role": "user", "content": V1_FORMAT_ERROR.format(n=0)},
        {"role": "assistant", "content": two_blocks},
        {"role": "user", "content": V1_FORMAT_ERROR.format(n=2)},
        {"role": "assistant", "content": "Now one:\n\n```bash\nls\n```"},
        {"role": "user", "content": "Observation: a.py"},
    ]))
    (t,) = load_transcripts(path, format="mini-swe-agent")
    assert [i.kind for i in t.items] == ["system", "user", "assistant", "user", "assistant", "user", "assistant", "tool_call", "tool_result"]
    task, zero, two = users(t)
    assert t.real_user_messages() == [task]
    assert zero.meta["from_agent"] and two.meta["from_agent"] and zero.text == V1_FORMAT_ERROR.format(n=0)
    assert t.items[4].text == two_blocks  # nothing ran: no call, the blocks stay the model's text
    assert [json.loads(i.arguments or "")["command"] for i in t.items if i.kind == "tool_call"] == ["ls"]


@pytest.mark.corpora
def test_the_recorded_format_error_is_no_user_turn_and_mines_no_constraint():
    path = CORPORA / "mini-swe-agent-traj/SWE-agent__mini-swe-agent/deepseek_chat_test_1-100__django__django-13964.traj.json"
    raw = json.loads(path.read_text(encoding="utf-8"))["messages"][266]
    assert raw["extra"] == {"interrupt_type": "FormatError"} and raw["content"] == FORMAT_ERROR
    (t,) = load_transcripts(path)
    notice = next(i for i in users(t) if i.text == FORMAT_ERROR)
    assert notice.synthetic and notice.meta["from_agent"]
    assert len(t.real_user_messages()) == 1  # the task only
    assert not [p for p in mine_probes(t) if p.source == notice.id]


@pytest.mark.corpora
@pytest.mark.parametrize("path", corpus_files("mini-swe-agent-traj"), ids=lambda p: p.name[:60])
def test_every_recorded_run_has_the_task_as_its_only_user_turn(path: Path):
    """The corpus runs are batch runs (no interactive user): the task is the one message a person gave; every other
    user-role message is the loop's (a format error, or an observation, which becomes a tool result)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    messages = data if isinstance(data, list) else data["messages"]
    notices = [m["content"] for m in messages if (m.get("extra") or {}).get("interrupt_type") == "FormatError"]
    (t,) = load_transcripts(path)
    assert len(t.real_user_messages()) == 1
    assert [i.text for i in users(t) if i.meta.get("from_agent")] == notices
