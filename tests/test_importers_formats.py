"""Format rules of the importers on small hand-built files whose right answer is worked out by hand:
Claude Code (branches, sidechains, message-id grouping, compaction markers), mini-swe-agent,
SWE-agent, OpenHands, Aider, OpenAI messages / tau-bench, Hugging Face datasets; and detection."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from compaction_bench.importing import ImportFailure, detect, load_transcript, load_transcripts
from compaction_bench.transcript import Usage


def write_jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def kinds(transcript) -> list[str]:
    return [i.kind for i in transcript.items]


# --------------------------------------------------------------------------- Claude Code
def cc(uuid: str, parent: str | None, kind: str, message: Any = None, **extra: Any) -> dict[str, Any]:
    line = {"uuid": uuid, "parentUuid": parent, "type": kind, "isSidechain": False, "sessionId": "s1", "timestamp": f"t-{uuid}"}
    if message is not None:
        line["message"] = message
    return line | extra


def asst(msg_id: str, block: dict[str, Any], output: int) -> dict[str, Any]:
    usage = {"input_tokens": 5, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 20, "output_tokens": output}
    return {"id": msg_id, "role": "assistant", "model": "claude-x", "content": [block], "usage": usage}


@pytest.fixture
def claude_file(tmp_path: Path) -> Path:
    lines = [
        {"type": "summary", "summary": "title", "leafUuid": "u9"},
        cc("u1", None, "user", {"role": "user", "content": "fix the bug"}),
        cc("a1", "u1", "assistant", asst("msgA", {"type": "thinking", "thinking": "look first"}, 3)),
        cc("a2", "a1", "assistant", asst("msgA", {"type": "tool_use", "id": "t1", "name": "Read", "input": {"path": "x.py"}}, 30)),
        cc("r1", "a2", "user", {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "print(1)"}]}),
        cc("dead", "u1", "assistant", asst("msgDead", {"type": "text", "text": "abandoned"}, 1)),
        cc("s1", None, "user", {"role": "user", "content": "subagent task"}, isSidechain=True),
        cc("s2", "s1", "assistant", asst("msgS", {"type": "text", "text": "sub result"}, 2), isSidechain=True),
        "not json at all",
        cc("a3", "r1", "assistant", asst("msgB", {"type": "text", "text": "fixed"}, 7)),
        cc("cb", None, "system", subtype="compact_boundary", content="Conversation compacted", logicalParentUuid="a3",
           compactMetadata={"trigger": "auto", "preTokens": 155000}),
        cc("cs", "cb", "user", {"role": "user", "content": "Summary: the bug was fixed"}, isCompactSummary=True),
        cc("u2", "cs", "user", {"role": "user", "content": [{"type": "text", "text": "thanks"}, {"type": "tool_result", "tool_use_id": "gone", "content": "?"}]}),
        cc("a4", "u2", "assistant", asst("msgC", {"type": "text", "text": "welcome"}, 2)),
    ]
    path = tmp_path / "session.jsonl"
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines), encoding="utf-8")
    return path


def test_claude_code_live_branch_grouping_usage_and_markers(claude_file: Path):
    assert detect(claude_file).format == "claude-code"
    (t,) = load_transcripts(claude_file)
    # a user line's tool results answer the previous response, so they come before its text
    assert [i.id for i in t.items] == ["u1", "a1", "t1", "r1:t1", "a3", "cb", "cs", "u2:gone", "u2", "a4"]
    assert kinds(t) == ["user", "reasoning", "tool_call", "tool_result", "assistant", "marker", "marker", "tool_result", "user", "assistant"]
    steps = t.steps()
    assert [len(s.items) for s in steps] == [2, 1, 1]  # msgA's two lines are one response
    # usage counted once per message id, from its last (complete) copy; Anthropic → Usage
    assert steps[0].usage == Usage(input=125, cached_input=100, cache_write=20, output=30)
    assert t.items[2].usage == steps[0].usage and t.items[1].usage is None
    assert [i.turn for i in t.items] == [0, 0, 0, 0, 0, 0, 0, 0, 1, 1]
    assert t.by_id["cb"].meta["event"] == "compaction" and t.by_id["cb"].meta["preTokens"] == 155000
    assert t.by_id["cs"].meta["event"] == "compaction-summary" and "bug was fixed" in t.by_id["cs"].text
    assert t.by_id["t1"].arguments == '{"path": "x.py"}' and t.by_id["t1"].tool_name == "Read"
    assert list(t.meta["orphans"]) == ["u2:gone"]
    assert t.meta["off_branch"] == 1 and t.meta["skipped"] == {"summary": 1}
    assert len(t.meta["problems"]) == 1 and f"{claude_file}:9:" in t.meta["problems"][0]
    assert t.model == "claude-x" and t.source["format"] == "claude-code" and t.id == "s1"


def test_claude_code_sidechains_are_kept_apart_and_selectable(claude_file: Path):
    (side,) = load_transcripts(claude_file, chain="sidechains")
    assert [i.id for i in side.items] == ["s1", "s2"] and side.id == "s1:sidechain-0"
    assert [t.meta["chain"] for t in load_transcripts(claude_file, chain="all")] == ["main", "sidechain-0"]
    with pytest.raises(ImportFailure, match="unknown chain"):
        load_transcripts(claude_file, chain="nope")


def test_claude_code_subagent_file_imports_its_sidechain(tmp_path: Path):
    path = write_jsonl(tmp_path / "agent-1.jsonl", [
        cc("s1", None, "user", {"role": "user", "content": "warmup"}, isSidechain=True),
        cc("s2", "s1", "assistant", asst("m1", {"type": "text", "text": "ok"}, 2), isSidechain=True),
    ])
    (t,) = load_transcripts(path)
    assert kinds(t) == ["user", "assistant"] and t.meta["chain"] == "sidechain-0"


# --------------------------------------------------------------------------- mini-swe-agent / SWE-agent
def test_mini_swe_agent_legacy_bash_blocks_become_tool_calls(tmp_path: Path):
    path = tmp_path / "run.traj.json"
    path.write_text(json.dumps([
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "Fix it"},
        {"role": "assistant", "content": "Look:\n```mswea_bash_command\ncat a.py\n```"},
        {"role": "user", "content": "<returncode>0</returncode><output>x</output>"},
        {"role": "assistant", "content": "Older style:\n```bash\nls -la\n```"},
        {"role": "user", "content": "a.py"},
        {"role": "assistant", "content": "All done, no command."},
        {"role": "user", "content": "Please continue"},
    ]), encoding="utf-8")
    assert detect(path).format == "mini-swe-agent"
    t = load_transcript(path)
    assert kinds(t) == ["system", "user", "assistant", "tool_call", "tool_result", "assistant", "tool_call", "tool_result", "assistant", "user"]
    calls = [i for i in t.items if i.kind == "tool_call"]
    assert [json.loads(c.arguments)["command"] for c in calls] == ["cat a.py", "ls -la"]
    assert [i.call_id for i in t.items if i.kind == "tool_result"] == [c.call_id for c in calls]
    assert len(t.real_user_messages()) == 2


def test_mini_swe_agent_usage_from_extra_response(tmp_path: Path):
    usage = {"prompt_tokens": 1000, "completion_tokens": 50, "total_tokens": 1050, "prompt_tokens_details": {"cached_tokens": 800},
             "completion_tokens_details": {"reasoning_tokens": 20}}
    path = tmp_path / "x.traj.json"
    path.write_text(json.dumps({"info": {"mini_version": "1.0", "config": {"model": {"model_name": "m-1"}}}, "trajectory_format": "mini-swe-agent-1.1",
        "messages": [{"role": "user", "content": "go"}, {"role": "assistant", "content": "", "reasoning_content": "hmm",
                      "tool_calls": [{"id": "c1", "function": {"name": "bash", "arguments": "{}"}}], "extra": {"response": {"usage": usage}}},
                     {"role": "tool", "tool_call_id": "c1", "content": "ok"}, {"role": "exit", "content": "diff"}]}), encoding="utf-8")
    t = load_transcript(path)
    assert kinds(t) == ["user", "reasoning", "tool_call", "tool_result", "marker"]
    assert t.items[2].usage == Usage(input=1000, cached_input=800, output=50, reasoning=20, total=1050)
    assert t.model == "m-1" and t.items[4].meta["role"] == "exit"


def test_swe_agent_actions_and_observations(tmp_path: Path):
    path = tmp_path / "demo.traj"
    path.write_text(json.dumps({"history": [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "demo text", "is_demo": True},
        {"role": "user", "content": "the task"},
        {"role": "assistant", "content": "open it\n```\nopen a.py\n```", "action": "open a.py\n"},
        {"role": "user", "content": "[File: a.py]"},
        {"role": "assistant", "content": "fc", "tool_calls": [{"id": "k1", "function": {"name": "edit", "arguments": "{}"}}]},
        {"role": "tool", "content": "edited", "tool_call_ids": ["k1"]},
        {"role": "assistant", "content": "done", "action": "submit"},
    ], "trajectory": [], "info": {"model_stats": {"tokens_sent": 10, "tokens_received": 2}}}), encoding="utf-8")
    assert detect(path).format == "swe-agent"
    t = load_transcript(path)
    assert kinds(t) == ["system", "user", "user", "assistant", "tool_call", "tool_result", "assistant", "tool_call", "tool_result", "assistant", "tool_call"]
    assert t.items[1].synthetic and not t.items[2].synthetic and t.items[1].meta["demonstration"]
    assert t.items[4].tool_name == "open" and t.items[5].call_id == t.items[4].call_id
    # The model wrote the command once, in its fenced block: it is the call's, not the message text's too.
    assert t.items[3].text == "open it" and json.loads(t.items[4].arguments) == {"command": "open a.py\n"}
    assert t.items[8].call_id == "k1" and t.meta["aggregate_usage"] == {"tokens_sent": 10, "tokens_received": 2}
    assert t.orphans()["calls_without_result"] == [t.items[10].id]


# --------------------------------------------------------------------------- OpenHands
def test_openhands_links_calls_groups_responses_and_reports_orphans(tmp_path: Path):
    response = {"id": "r1", "model": "m", "usage": {"prompt_tokens": 100, "completion_tokens": 9},
                "choices": [{"message": {"tool_calls": [{"id": "c1", "function": {"name": "execute_bash", "arguments": "{\"command\": \"ls\"}"}}]}}]}
    meta1 = {"function_name": "execute_bash", "tool_call_id": "c1", "model_response": response, "total_calls_in_response": 2}
    meta2 = {"function_name": "str_replace_editor", "tool_call_id": "c2", "model_response": response, "total_calls_in_response": 2}
    events = [
        {"id": 0, "source": "user", "action": "message", "args": {"content": "hi"}},
        {"id": 1, "source": "agent", "action": "run", "args": {"command": "ls", "thought": "look"}, "tool_call_metadata": meta1},
        {"id": 2, "source": "agent", "observation": "run", "content": "a.py", "cause": 1, "tool_call_metadata": meta1, "extras": {"metadata": {"exit_code": 0}}},
        {"id": 3, "source": "agent", "action": "read", "args": {"path": "a.py"}, "tool_call_metadata": meta2},
        {"id": 4, "source": "agent", "observation": "read", "content": "print(1)", "cause": 3},
        {"id": 5, "source": "agent", "observation": "run", "content": "stray", "cause": 99},
        {"id": 6, "source": "environment", "observation": "agent_state_changed", "content": ""},
    ]
    path = tmp_path / "events.json"
    path.write_text(json.dumps(events), encoding="utf-8")
    assert detect(path).format == "openhands"
    t = load_transcript(path)
    assert kinds(t) == ["user", "assistant", "tool_call", "tool_result", "tool_call", "tool_result", "tool_result", "marker"]
    assert t.items[2].arguments == '{"command": "ls"}'
    assert [i.call_id for i in t.items if i.kind == "tool_result"] == ["c1", "c2", "event-99"]
    (step,) = t.steps()  # both calls came from one model response: usage once, on its last item
    assert step.usage == Usage(input=100, output=9) and t.items[4].usage == step.usage
    assert list(t.meta["orphans"]) == ["event-5"]


def test_openhands_evaluation_output_is_one_transcript_per_line(tmp_path: Path):
    def run(n: int) -> dict:
        return {"instance_id": f"i{n}", "metadata": {"llm_config": {"model": "llm-x"}},
                "history": [{"id": 0, "source": "user", "action": "message", "args": {"content": f"task {n}"}}]}
    path = tmp_path / "output.jsonl"
    path.write_text(json.dumps(run(1)) + "\n{broken\n" + json.dumps(run(2)) + "\n", encoding="utf-8")
    ts = load_transcripts(path)
    assert [t.id for t in ts] == ["output:i1", "output:i2"] and ts[0].model == "llm-x"
    assert f"{path}:2:" in ts[0].meta["problems"][0]


# --------------------------------------------------------------------------- Aider
def test_aider_sessions_turns_and_token_lines(tmp_path: Path):
    path = tmp_path / ".aider.chat.history.md"
    path.write_text(
        "# aider chat started at 2024-08-05 19:33:02\n\n> Aider v0.47\n> Models: claude-3-5-sonnet with diff edit format\n\n"
        "#### first line  \n#### second line  \n\nHere is the fix:\n\nfile.py\n```\n<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n```\n\n"
        "> Tokens: 1.2k sent, 1,000 cached, 34 received. Cost: $0.01 message, $0.01 session.  \n> Applied edit to file.py  \n\n"
        "#### hi  \n> Error during API call  \n> Tokens: 2,431 sent, 0 received.  \n\n"
        "# aider chat started at 2024-08-05 20:00:00\n\n#### /add x.py  \n",
        encoding="utf-8",
    )
    assert detect(path).format == "aider"
    first, second = load_transcripts(path)
    assert kinds(first) == ["marker", "user", "assistant", "marker", "user", "assistant", "marker"]
    assert first.items[1].text == "first line\nsecond line" and first.model == "claude-3-5-sonnet"
    assert ">>>>>>> REPLACE" in first.items[2].text  # a `>` in an edit block is reply text, not output
    assert first.items[2].usage == Usage(input=2200, cached_input=1000, output=34)
    assert first.items[5].meta["no_reply"] and first.items[5].usage == Usage(input=2431, output=0)
    assert [i.turn for i in first.items if i.kind == "user"] == [0, 1]
    assert kinds(second) == ["user"] and second.source["started"] == "2024-08-05 20:00:00"


# --------------------------------------------------------------------------- OpenAI messages / tau-bench
def test_openai_messages_jsonl_with_bad_line_and_orphan(tmp_path: Path):
    path = tmp_path / "chat.jsonl"
    path.write_text(
        json.dumps({"role": "user", "content": [{"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}) + "\n"
        + '{"role": "assistant", "content": "cut in ha\n'
        + json.dumps({"role": "tool", "tool_call_id": "nope", "content": "result"}) + "\n",
        encoding="utf-8",
    )
    assert detect(path).format == "openai-messages"
    t = load_transcript(path)
    assert kinds(t) == ["user", "tool_result"]
    assert t.items[0].attachments[0].mime == "image/png" and t.items[0].text == "see"
    assert list(t.meta["orphans"]) == [t.items[1].id] and f"{path}:2:" in t.meta["problems"][0]


def test_tau_bench_container_is_one_transcript_per_run(tmp_path: Path):
    traj = [{"role": "system", "content": "policy"}, {"role": "user", "content": "change my flight"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "get", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c", "name": "get", "content": "{}"}]
    path = tmp_path / "runs.json"
    path.write_text(json.dumps([{"task_id": 0, "trial": 0, "reward": 1.0, "info": {}, "traj": traj},
                                {"task_id": 1, "trial": 0, "reward": 0.0, "info": {}, "traj": traj[:2]}]), encoding="utf-8")
    assert detect(path).format == "openai-messages"
    first, second = load_transcripts(path)
    assert kinds(first) == ["system", "user", "tool_call", "tool_result"] and kinds(second) == ["system", "user"]
    assert first.id == "runs:task0:trial0" and second.meta["reward"] == 0.0


# --------------------------------------------------------------------------- Hugging Face datasets
def test_hf_dataset_local_jsonl_with_column_mapping(tmp_path: Path):
    rows = [{"id": "a", "conversations": [{"from": "human", "value": "hello"}, {"from": "gpt", "value": "hi!"}]},
            {"id": "b", "conversations": [{"from": "human", "value": "bye"}]}]
    path = write_jsonl(tmp_path / "data.jsonl", rows)
    ts = load_transcripts(path, format="hf-dataset", role_key="from", content_key="value", id_column="id")
    assert [t.id for t in ts] == ["data:a", "data:b"]
    assert [(i.kind, i.text) for i in ts[0].items] == [("user", "hello"), ("assistant", "hi!")]
    with pytest.raises(ImportFailure, match="no message column missing"):
        load_transcripts(path, format="hf-dataset", messages="missing")


def test_hf_dataset_parquet_is_detected(tmp_path: Path):
    import pandas as pd

    path = tmp_path / "chats.parquet"
    pd.DataFrame({"messages": [[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]]}).to_parquet(path)
    assert detect(path).format == "hf-dataset"
    (t,) = load_transcripts(path)
    assert kinds(t) == ["user", "assistant"] and t.source["format"] == "hf-dataset"


def test_hf_hub_id_offline_fails_fast_with_one_message(monkeypatch, no_network):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    started = time.perf_counter()
    with pytest.raises(ImportFailure, match="cannot be loaded offline"):
        load_transcripts("some-org/some-dataset", format="hf-dataset")
    assert time.perf_counter() - started < 2
