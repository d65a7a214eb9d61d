"""OpenHands V1 (software-agent-sdk) conversations: the persisted form and bare event lists.

Every event is built by hand in the shape the SDK serialises (`event.model_dump_json(exclude_none=True)`, with the
class name in `kind`), from the classes at OpenHands/software-agent-sdk@611629e6 (openhands-sdk/openhands/sdk/):
`event/llm_convertible/system.py` (SystemPromptEvent), `message.py` (MessageEvent), `action.py` (ActionEvent),
`observation.py` (ObservationEvent, UserRejectObservation, AgentErrorEvent), `event/condenser.py` (Condensation,
CondensationRequest), `event/conversation_state.py`, `event/user_action.py`, `llm/message.py` (TextContent,
ThinkingBlock, MessageToolCall), `llm/utils/metrics.py` (TokenUsage). A conversation is persisted as
`base_state.json` beside `events/event-<index>-<id>.json` (`conversation/persistence_const.py`, `event_store.py`,
`state.py`), the shape of the SDK's own fixture `tests/fixtures/conversations/v1_11_5_cli_default/base_state.json`;
the JSON-lines form is that of `tests/sdk/conversation/goal/fixtures/events.jsonl` (a trimmed real trace).
The expected items follow from what each event sends the model (`to_llm_message`), not from the importer.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from compaction_bench.importing import ImportFailure, detect, load_transcript, load_transcripts
from compaction_bench.scenarios.openhands import OpenHandsImporter
from compaction_bench.transcript import Transcript, Usage
from tests.conftest import assert_user_error, bench_cli

TS = "2026-08-20T10:00:00.000000"


def text(t: str) -> dict:
    return {"cache_prompt": False, "type": "text", "text": t}


def event(kind: str, event_id: str, source: str, parent: str | None = None, **fields: object) -> dict:
    data: dict = {"id": event_id, "timestamp": TS, "source": source, **fields, "kind": kind}
    if parent is not None:
        data["parent_id"] = parent
    return data


def system(event_id: str, **kw: object) -> dict:
    tool = {"description": "Run a bash command", "action_type": "TerminalAction", "observation_type": "TerminalObservation",
            "kind": "TerminalTool", "title": "terminal"}
    return event("SystemPromptEvent", event_id, "agent", system_prompt=text("You are OpenHands agent."), tools=[tool],
                 dynamic_context=text("<RUNTIME_INFORMATION>cwd /repo</RUNTIME_INFORMATION>"), **kw)


def user(event_id: str, said: str, **kw: object) -> dict:
    return event("MessageEvent", event_id, "user", llm_message={"role": "user", "content": [text(said)], "thinking_blocks": []},
                 activated_skills=[], extended_content=[], **kw)


def agent(event_id: str, said: str, response: str, **kw: object) -> dict:
    return event("MessageEvent", event_id, "agent", llm_message={"role": "assistant", "content": [text(said)], "thinking_blocks": []},
                 llm_response_id=response, activated_skills=[], extended_content=[], **kw)


def action(event_id: str, call_id: str, command: str, response: str, thought: str = "", **kw: object) -> dict:
    arguments = json.dumps({"command": command, "security_risk": "LOW", "summary": "run it"})
    kw.setdefault("thinking_blocks", [])
    return event("ActionEvent", event_id, "agent", thought=[text(thought)] if thought else [],
                 action={"command": command, "is_input": False, "reset": False, "kind": "TerminalAction"},
                 tool_name="terminal", tool_call_id=call_id,
                 tool_call={"id": call_id, "name": "terminal", "arguments": arguments, "origin": "completion"},
                 llm_response_id=response, security_risk="LOW", summary="run it", **kw)


def observation(event_id: str, call_id: str, action_id: str, output: str, is_error: bool = False, **kw: object) -> dict:
    obs = {"content": [text(output)], "is_error": is_error, "command": "cmd", "exit_code": 1 if is_error else 0, "timeout": False,
           "metadata": {"exit_code": 1 if is_error else 0, "pid": -1, "username": "openhands", "hostname": "h",
                        "working_dir": "/repo", "py_interpreter_path": None, "prefix": "", "suffix": ""},
           "kind": "TerminalObservation"}
    return event("ObservationEvent", event_id, "environment", tool_name="terminal", tool_call_id=call_id, observation=obs,
                 action_id=action_id, **kw)


def token_usage(response: str, prompt: int, completion: int, cache_read: int = 0) -> dict:
    return {"model": "claude-sonnet-4-5", "prompt_tokens": prompt, "completion_tokens": completion, "cache_read_tokens": cache_read,
            "cache_write_tokens": 0, "reasoning_tokens": 0, "context_window": 200000, "per_turn_token": prompt + completion,
            "response_id": response}


def state(**kw: object) -> dict:
    metrics = {
        "agent": {"model_name": "claude-sonnet-4-5", "accumulated_cost": 0.0, "token_usages": [
            token_usage("resp-1", 1200, 80, 1000), token_usage("resp-2", 1500, 40, 1200), token_usage("resp-3", 900, 20, 0),
            token_usage("resp-lost", 10, 1)]},
        "condenser": {"model_name": "claude-sonnet-4-5", "accumulated_cost": 0.0, "token_usages": [token_usage("resp-sum", 3000, 300)]},
    }
    return {"id": "conv-1", "agent": {"llm": {"model": "claude-sonnet-4-5", "usage_id": "agent"}, "tools": [{"name": "terminal", "params": {}}],
                                      "kind": "Agent"},
            "workspace": {"working_dir": "/repo", "kind": "LocalWorkspace"}, "execution_status": "finished",
            "stats": {"usage_to_metrics": metrics}, **kw}


def write_conversation(folder: Path, events: list[dict], **state_fields: object) -> Path:
    (folder / "events").mkdir(parents=True)
    for n, e in enumerate(events):
        (folder / "events" / f"event-{n:05d}-{e['id']}.json").write_text(json.dumps(e, separators=(",", ":")), encoding="utf-8")
    (folder / "events" / ".eventlog.lock").write_text("", encoding="utf-8")
    path = folder / "base_state.json"
    path.write_text(json.dumps(state(**state_fields)), encoding="utf-8")
    return path


def conversation_events() -> list[dict]:
    """A run with a tool-call batch, an error result, a tool the agent could not run, a condensation, an abandoned
    branch (`b0a10000`: the user's first try, navigated away from) and state updates (no tree nodes)."""
    return [
        system("e0a10000"),
        user("e1a10000", "Fix the failing test", parent="e0a10000"),
        user("b0a10000", "use postgres", parent="e1a10000"),  # abandoned: nothing on the active branch descends from it
        event("ConversationStateUpdateEvent", "c0a10000", "environment", key="execution_status", value="running", parent="e1a10000"),
        action("e2a10000", "toolu_1", "cat calc.py", "resp-1", thought="Let me look.", parent="e1a10000",
               thinking_blocks=[{"type": "thinking", "thinking": "The test is in calc.py", "signature": "sig"}]),
        action("e3a10000", "toolu_2", "cat test_calc.py", "resp-1", parent="e2a10000"),
        observation("e4a10000", "toolu_1", "e2a10000", "def add(a, b): return a - b", parent="e3a10000"),
        observation("e5a10000", "toolu_2", "e3a10000", "No such file", is_error=True, parent="e4a10000"),
        action("e6a10000", "toolu_3", "pytest", "resp-2", parent="e5a10000"),
        event("AgentErrorEvent", "e7a10000", "agent", tool_name="terminal", tool_call_id="toolu_3", error="Tool 'terminal' timed out",
              parent="e6a10000"),
        event("Condensation", "e8a10000", "environment", forgotten_event_ids=["e2a10000", "e3a10000", "e4a10000", "e5a10000"],
              summary="USER_CONTEXT: fix calc.add", summary_offset=2, llm_response_id="resp-sum", parent="e7a10000"),
        agent("e9a10000", "Fixed: add now adds.", "resp-3", parent="e8a10000"),
        event("ConversationStateUpdateEvent", "c1a10000", "environment", key="execution_status", value="finished", parent="e9a10000"),
    ]


def shape(t: Transcript) -> list[tuple]:
    return [(i.kind, i.text, i.call_id) for i in t.items]


EXPECTED = [
    ("system", "You are OpenHands agent.\n<RUNTIME_INFORMATION>cwd /repo</RUNTIME_INFORMATION>", None),
    ("user", "Fix the failing test", None),
    ("reasoning", "The test is in calc.py", None),
    ("assistant", "Let me look.", None),
    ("tool_call", "", "toolu_1"),
    ("tool_call", "", "toolu_2"),
    ("tool_result", "def add(a, b): return a - b", "toolu_1"),
    ("tool_result", "No such file", "toolu_2"),
    ("tool_call", "", "toolu_3"),
    ("tool_result", "Tool 'terminal' timed out", "toolu_3"),
    ("marker", "USER_CONTEXT: fix calc.add", None),
    ("assistant", "Fixed: add now adds.", None),
]


# --------------------------------------------------------------------------- the persisted conversation
def test_a_persisted_conversation_is_read_from_its_state_file(tmp_path):
    path = write_conversation(tmp_path / "conv-1", conversation_events(), leaf_event_id="e9a10000")
    assert detect(path) is OpenHandsImporter
    t = load_transcript(path)
    assert shape(t) == EXPECTED
    assert t.id == "conv-1" and t.model == "claude-sonnet-4-5"
    assert "problems" not in t.meta and "orphans" not in t.meta
    # the abandoned branch is no model input, counted as Claude Code's off-branch lines are; state updates are skipped
    assert t.meta["off_branch"] == 1 and list(t.meta["off_branch_events"]) == ["b0a10000"]
    assert dict(t.meta["skipped"]) == {"ConversationStateUpdateEvent": 2}


def test_tool_calls_carry_the_call_the_model_sent_and_share_their_response(tmp_path):
    t = load_transcript(write_conversation(tmp_path / "c", conversation_events()))
    first, second = (i for i in t.items if i.kind == "tool_call" and i.call_id in ("toolu_1", "toolu_2"))
    assert (first.tool_name, json.loads(first.arguments)["command"]) == ("terminal", "cat calc.py")
    assert first.response == second.response  # one LLM response, two parallel calls (`events_to_messages`)
    thinking = next(i for i in t.items if i.kind == "reasoning")
    assert thinking.response == first.response


def test_results_pair_by_tool_call_id_with_the_error_flag_the_observation_records(tmp_path):
    t = load_transcript(write_conversation(tmp_path / "c", conversation_events()))
    results = {i.call_id: i for i in t.items if i.kind == "tool_result"}
    assert results["toolu_1"].is_error is False and results["toolu_2"].is_error is True
    assert results["toolu_1"].meta["command_metadata"]["working_dir"] == "/repo"
    # AgentErrorEvent.to_llm_message sends the error text alone, no error header: no is_error, meta says what it is
    assert results["toolu_3"].is_error is False and results["toolu_3"].meta["error"] is True


def test_usage_is_the_recorded_token_usage_of_each_llm_response(tmp_path):
    """`stats.usage_to_metrics[*].token_usages` by `response_id`: prompt_tokens includes the cache reads."""
    t = load_transcript(write_conversation(tmp_path / "c", conversation_events()))
    usage = {i.call_id or i.text: i.usage for i in t.items if i.usage is not None}
    assert usage == {"toolu_2": Usage(input=1200, cached_input=1000, output=80), "toolu_3": Usage(input=1500, cached_input=1200, output=40),
                     "Fixed: add now adds.": Usage(input=900, output=20)}
    marker = next(i for i in t.items if i.kind == "marker")
    assert dict(marker.meta["summary_usage"]) == Usage(input=3000, output=300).to_dict()  # the condenser's own call
    assert dict(t.meta["unmatched_token_usages"]) == {"agent": 1}  # resp-lost: named by no event


def test_a_condensation_is_a_compaction_marker_naming_the_items_it_forgot(tmp_path):
    t = load_transcript(write_conversation(tmp_path / "c", conversation_events()))
    marker = next(i for i in t.items if i.kind == "marker")
    forgotten_items = [i.id for i in t.items if i.id.split(":")[0] in ("e2a10000", "e3a10000", "e4a10000", "e5a10000")]
    assert marker.meta["event"] == "compaction" and marker.meta["summary_offset"] == 2
    # the thinking, thought and two calls of resp-1 and the two results
    assert list(marker.meta["forgotten_item_ids"]) == forgotten_items and len(forgotten_items) == 6


def test_the_system_prompt_keeps_its_tools(tmp_path):
    t = load_transcript(write_conversation(tmp_path / "c", conversation_events()))
    (item,) = [i for i in t.items if i.kind == "system"]
    assert [dict(tool)["kind"] for tool in item.meta["tools"]] == ["TerminalTool"]


def test_without_parent_ids_the_log_is_one_branch_and_a_trailing_error_is_read(tmp_path):
    """Events logged before the tree (2026-07-02) have no parent_id: each follows the one before it
    (`_effective_parent_id`), and the leaf is the last event that is no state update or error."""
    events = [e for e in conversation_events() if e["id"] != "b0a10000"]
    for e in events:
        e.pop("parent_id", None)
    events.append(event("ConversationErrorEvent", "d0a10000", "environment", code="LLMError", detail="rate limited"))
    t = load_transcript(write_conversation(tmp_path / "c", events))
    assert shape(t)[:-1] == EXPECTED and "off_branch" not in t.meta
    assert (t.items[-1].kind, t.items[-1].text, t.items[-1].meta["code"]) == ("marker", "rate limited", "LLMError")


def test_the_leaf_the_state_records_chooses_the_branch(tmp_path):
    """HEAD moved back to the abandoned message (`navigate_to`): that branch is the conversation."""
    t = load_transcript(write_conversation(tmp_path / "c", conversation_events(), leaf_event_id="b0a10000"))
    assert [i.text for i in t.items if i.kind == "user"] == ["Fix the failing test", "use postgres"]
    assert t.meta["off_branch"] == 8  # e2..e9: the run after the first message


def test_event_files_after_a_missing_index_are_reported_not_read(tmp_path):
    """`EventLog._scan_and_build_index` stops at the first missing index (event_store.py)."""
    path = write_conversation(tmp_path / "c", conversation_events())
    (path.parent / "events" / "event-00004-e2a10000.json").unlink()
    t = load_transcript(path)
    # indices 0-3 are read; with no leaf recorded, the last of them that is a tree node is the leaf (b0a10000)
    assert [(i.kind, i.text) for i in t.items] == [("system", EXPECTED[0][1]), ("user", "Fix the failing test"), ("user", "use postgres")]
    (problem,) = t.meta["problems"]
    assert "no event file of index 4" in problem and "8 event file(s) after the gap" in problem


def test_an_event_kind_the_importer_does_not_read_stops_the_import_naming_it(tmp_path):
    events = [*conversation_events(), event("BrandNewEvent", "f0a10000", "agent", parent="e9a10000")]
    path = write_conversation(tmp_path / "c", events)
    with pytest.raises(ImportFailure, match=r"event-00013-f0a10000\.json: OpenHands V1 event of kind 'BrandNewEvent' \(id 'f0a10000'\)"):
        load_transcript(path)


def test_one_event_file_points_at_the_conversation_state(tmp_path):
    path = write_conversation(tmp_path / "c", conversation_events())
    one = path.parent / "events" / "event-00001-e1a10000.json"
    with pytest.raises(ImportFailure, match="one event of an OpenHands V1 conversation; import the whole conversation"):
        load_transcript(one)


# --------------------------------------------------------------------------- bare event lists
def test_a_json_list_of_v1_events_is_read_the_same_way_without_usage(tmp_path):
    path = tmp_path / "events.json"
    path.write_text(json.dumps(conversation_events()), encoding="utf-8")
    t = load_transcript(path)
    assert shape(t) == EXPECTED and all(i.usage is None for i in t.items)
    assert t.meta["off_branch"] == 1


def test_json_lines_of_v1_events_are_one_conversation(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in conversation_events()), encoding="utf-8")
    assert detect(path) is OpenHandsImporter
    assert shape(load_transcript(path)) == EXPECTED


def test_an_evaluation_run_whose_history_is_v1_events_is_read_as_v1(tmp_path):
    path = tmp_path / "output.jsonl"
    run = {"instance_id": "calc-1", "history": conversation_events(), "metrics": {"accumulated_cost": 0.1}}
    path.write_text(json.dumps(run) + "\n", encoding="utf-8")
    (t,) = load_transcripts(path)
    assert shape(t) == EXPECTED and t.meta["metrics"]["accumulated_cost"] == 0.1


def test_a_v1_action_among_v0_events_is_reported_not_read_as_a_v0_action(tmp_path):
    """A V1 ActionEvent has an `action` key too (an object): it must not be taken for a V0 action."""
    v0 = [{"id": 0, "source": "user", "action": "message", "args": {"content": "hi"}},
          {"id": 1, "source": "agent", "action": "run", "args": {"command": "ls"}},
          {"id": 2, "source": "agent", "observation": "run", "cause": 1, "content": "a.py"}]
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps([*v0, action("x", "toolu_9", "rm -rf /", "r")]), encoding="utf-8")
    t = load_transcript(path)
    assert [i.kind for i in t.items] == ["user", "tool_call", "tool_result", "marker"]
    assert "toolu_9" not in {i.call_id for i in t.items}
    assert any("an OpenHands V1 event (ActionEvent) among V0 events" in p for p in t.meta["problems"])


def test_other_v1_events_become_what_the_model_sees_or_markers(tmp_path):
    events = [
        user("u", "go"),
        action("a", "toolu_1", "rm x", "r1"),
        event("UserRejectObservation", "rj", "user", tool_name="terminal", tool_call_id="toolu_1", action_id="a",
              rejection_reason="not that file", rejection_source="user"),
        event("CondensationRequest", "cr", "environment"),
        event("PauseEvent", "p", "user"),
        event("MessageEvent", "h", "hook", llm_message={"role": "user", "content": [text("hook context")]}, extended_content=[text("more")]),
    ]
    path = tmp_path / "events.json"
    path.write_text(json.dumps(events), encoding="utf-8")
    t = load_transcript(path)
    assert [(i.kind, i.text) for i in t.items] == [
        ("user", "go"), ("tool_call", ""), ("tool_result", "Action rejected: not that file"),
        ("marker", ""), ("marker", ""), ("user", "hook context\nmore")]
    assert [i.meta.get("event") for i in t.items if i.kind == "marker"] == ["compaction-request", "PauseEvent"]
    assert t.items[-1].synthetic is True  # a hook's message is injected context, not the user's


def test_a_recorded_token_count_that_is_no_count_leaves_that_usage_unknown(tmp_path):
    """`TokenUsage` counts are whole numbers of at least 0 (`Field(ge=0)`, metrics.py L34-59); another value is a
    problem naming the record, and that response's usage is unknown, never 0."""
    path = write_conversation(tmp_path / "c", conversation_events())
    data = json.loads(path.read_text(encoding="utf-8"))
    data["stats"]["usage_to_metrics"]["agent"]["token_usages"][0]["prompt_tokens"] = "1200"
    path.write_text(json.dumps(data), encoding="utf-8")
    t = load_transcript(path)
    assert next(i for i in t.items if i.call_id == "toolu_2" and i.kind == "tool_call").usage is None
    (problem,) = t.meta["problems"]
    assert "stats.usage_to_metrics['agent'].token_usages[0]: usage field 'prompt_tokens'" in problem


# --------------------------------------------------------------------------- a conversation folder as the input
def test_a_conversation_folder_is_read_from_its_state_file(tmp_path):
    """The SDK persists a conversation as a folder, `base_state.json` beside `events/` (persistence_const.py): the
    folder itself is the conversation, read as its `base_state.json` is."""
    folder = write_conversation(tmp_path / "conv-1", conversation_events(), leaf_event_id="e9a10000").parent
    (from_folder,) = load_transcripts(folder)
    (from_state,) = load_transcripts(folder / "base_state.json")
    assert shape(from_folder) == EXPECTED and from_folder.dumps() == from_state.dumps()
    proc = bench_cli("inspect", str(folder))
    assert proc.returncode == 0, proc.stderr
    assert "conv-1 (openhands)" in proc.stdout
    assert "assistant 2, marker 1, reasoning 1, system 1, tool_call 3, tool_result 3, user 1" in proc.stdout


def test_bench_run_takes_a_glob_of_conversation_folders(tmp_path):
    """`bench run convs/*`: each folder is one scenario, named after it."""
    convs = tmp_path / "convs"
    write_conversation(convs / "first", conversation_events(), leaf_event_id="e9a10000")
    other = [user("e1a10000", "Fix the other test", parent="e0a10000") if e["id"] == "e1a10000" else e for e in conversation_events()]
    write_conversation(convs / "second", other, id="conv-2", leaf_event_id="e9a10000")
    folders = sorted(str(p) for p in convs.glob("*"))  # what the shell hands over for convs/*
    proc = bench_cli("run", *folders, "-s", "none", "-p", "32k", "-j", "1", "-o", str(tmp_path / "runs"), "--run-id", "r", "--no-report")
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((tmp_path / "runs" / "r" / "manifest.json").read_text(encoding="utf-8"))
    assert [(s["name"], s["session_id"], s["items"]) for s in manifest["scenarios"]] == [("first", "conv-1", 12), ("second", "conv-2", 12)]


def test_other_folders_are_refused_as_folders(tmp_path):
    """Only a folder holding both `base_state.json` and `events/` is a conversation; a format that reads no folder
    refuses it too."""
    folder = write_conversation(tmp_path / "conv", conversation_events()).parent
    no_events = tmp_path / "no-events"
    no_events.mkdir()
    (no_events / "base_state.json").write_text(json.dumps(state()), encoding="utf-8")
    for path, forced in ((tmp_path / "empty", "auto"), (no_events, "auto"), (folder, "claude-code")):
        path.mkdir(exist_ok=True)
        with pytest.raises(ImportFailure, match="^" + re.escape(f"{path}: is a directory; pass the files inside it")):
            load_transcripts(path, format=forced)


def test_the_events_folder_points_at_its_conversation_folder(tmp_path):
    folder = write_conversation(tmp_path / "conv", conversation_events()).parent
    proc = bench_cli("inspect", str(folder / "events"))
    assert_user_error(proc, f"{folder / 'events'}: the events of an OpenHands V1 conversation", f"its folder, {folder}")


def app_server_folder(folder: Path) -> Path:
    """The OpenHands app server's copy of a conversation (`FilesystemEventService._save_event_to_file`,
    openhands/app_server/event/filesystem_event_service.py@156d0686 L56-79): one file per event named
    `<YYYYMMDDHHMMSS>_<class>_<id hex>`, holding `json.dumps(event.model_dump(mode='json'), indent=2)`."""
    folder.mkdir(parents=True)
    for n, e in enumerate(conversation_events()[:3]):
        e = {**e, "id": f"{n:032x}"}
        (folder / f"20260820100000_{e['kind']}_{n:032x}").write_text(json.dumps(e, indent=2), encoding="utf-8")
    return folder


def test_an_app_server_event_folder_is_refused_saying_what_to_pass(tmp_path):
    """Not read: ordered by file name (to the second, then by class name), so this system prompt would sort after
    the two messages of the same second; the message names the agent server's saved conversation instead."""
    folder = app_server_folder(tmp_path / "v1" / "events" / "6f1c")
    assert_user_error(bench_cli("inspect", str(folder)), f"{folder}: an OpenHands app server's event files",
                      "pass the agent server's saved conversation instead, the folder holding base_state.json and events/")
    one = folder / f"20260820100000_SystemPromptEvent_{0:032x}"
    assert_user_error(bench_cli("inspect", str(one)), f"{one}: one of an OpenHands app server's event files", "base_state.json")


def test_a_run_of_a_conversation_folder_records_its_digest_and_a_score_sees_it_change(tmp_path):
    """A folder input's manifest sha256 was null (a Hub id's), so `bench score` could not tell that the conversation
    changed since the run. It is now the digest of the folder's files (`runner.input_sha256`)."""
    folder = write_conversation(tmp_path / "conv", conversation_events(), leaf_event_id="e9a10000").parent
    proc = bench_cli("run", str(folder), "-s", "none", "-p", "32k", "-j", "1", "-o", str(tmp_path / "runs"), "--run-id", "r", "--no-report")
    assert proc.returncode == 0, proc.stderr
    run = tmp_path / "runs" / "r"
    (entry,) = json.loads((run / "manifest.json").read_text(encoding="utf-8"))["scenarios"]
    assert entry["file"] == str(folder) and isinstance(entry["sha256"], str) and len(entry["sha256"]) == 64
    assert bench_cli("score", str(run), "--out", str(tmp_path / "same"), "--no-report").returncode == 0
    (asked,) = (folder / "events").glob("event-*-e1a10000.json")  # the user's request
    asked.write_text(asked.read_text(encoding="utf-8").replace("Fix the failing test", "Mend the failing test"), encoding="utf-8")
    proc = bench_cli("score", str(run), "--out", str(tmp_path / "changed"), "--no-report")
    assert proc.returncode == 2 and f"{folder} changed since the run" in proc.stderr, proc.stderr
