"""`openhands-v0`'s summary prompt shows each forgotten event as V0's `str(event)` (All-Hands-AI/OpenHands@156d0686,
`llm_summarizing_condenser.py` L134-136): the `__str__` of the event's class, or its dataclass repr where it has none.

The expected strings are built by hand from upstream's `__str__` code (cited per test) and, for the recorded events of
the Multi-SWE-bench OpenHands file, from what that recording says V0 held: the action's `args` and the observation's
`content` and `extras`. The events the strategy renders are built the way a replay gets them: the model's own tool
call (name and arguments from the recorded model response), its text, and the result's text and recorded metadata.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from compaction_bench.importing import load_transcripts
from compaction_bench.profiles import get_profile
from compaction_bench.replay import replay
from compaction_bench.strategies.openhands import Event, EventLog, OpenHandsV0, _event_str
from compaction_bench.transcript import Attachment, Item
from tests.conftest import CORPORA
from tests.pi_builders import Session, small_profile

MULTI_SWE = CORPORA / "openhands-events/All-Hands-AI__OpenHands/multi_swe_bench_examples_output.jsonl"


def _recorded() -> dict[int, dict[str, Any]]:
    """The first run of the file (ponylang__ponyc-4595), its events by id."""
    first = json.loads(MULTI_SWE.read_text(encoding="utf-8").splitlines()[0])
    return {e["id"]: e for e in first["history"]}


def _replayed(action: dict[str, Any], observation: dict[str, Any] | None = None) -> tuple[Event, Event | None]:
    """A recorded call and its result as the strategy's events: the response's text and the tool call the model sent
    (`tool_call_metadata.model_response`), the result's content, its observation type and a command's whole metadata."""
    message = action["tool_call_metadata"]["model_response"]["choices"][0]["message"]
    [call] = message["tool_calls"]
    log = EventLog()
    [event] = log.response([
        Item(id="text", kind="assistant", text=message["content"], response=0),
        Item(id=call["id"], kind="tool_call", call_id=call["id"], tool_name=call["function"]["name"],
             arguments=call["function"]["arguments"], response=0),
    ])
    if observation is None:
        return event, None
    meta: dict[str, Any] = {"observation": observation["observation"]}
    if "metadata" in observation.get("extras", {}):
        meta["command_metadata"] = observation["extras"]["metadata"]
    result = log.observe(Item(id="result", kind="tool_result", call_id=call["id"], tool_name=call["function"]["name"],
                              text=observation["content"], meta=meta))
    return event, result


def test_a_recorded_command_and_its_output():
    # CmdRunAction.__str__ (events/action/commands.py L34-39); CmdOutputObservation.__str__ (events/observation/
    # commands.py L187-194) with `json.dumps(metadata.model_dump(), indent=2)` and `to_agent_observation` (L196-204).
    # Both come from the agent (runtime/base.py L404-408); an `EventSource` member formats as "EventSource.AGENT".
    events = _recorded()
    action, output = _replayed(events[5], events[6])
    args, content = events[5]["args"], events[6]["content"]
    assert _event_str(action) == ("**CmdRunAction (source=EventSource.AGENT, is_input=False)**\n"
                                  f"THOUGHT: {args['thought']}\nCOMMAND:\nls -l /workspace/ponylang__ponyc__0.1")
    assert output is not None and _event_str(output) == (
        "**CmdOutputObservation (source=EventSource.AGENT, exit code=0, metadata={\n"
        '  "exit_code": 0,\n  "pid": -1,\n  "username": "root",\n  "hostname": "456386d41106",\n'
        '  "working_dir": "/workspace/ponylang__ponyc__0.1",\n  "py_interpreter_path": "",\n  "prefix": "",\n'
        '  "suffix": "\\n[The command completed with exit code 0.]"\n})**\n'
        f"--BEGIN AGENT OBSERVATION--\n{content}\n[The command completed with exit code 0.]\n"
        "[Current working directory: /workspace/ponylang__ponyc__0.1]\n[Command finished with exit code 0]\n"
        "--END AGENT OBSERVATION--")


def test_a_recorded_file_view_and_edit():
    # `str_replace_editor` `view` is a FileReadAction (function_calling.py L191-196), which has no __str__: its
    # dataclass repr (events/action/files.py L9-28), the enums as the event holds them after `event_from_dict`;
    # FileReadObservation.__str__ (events/observation/files.py L24-26). Any other command is a FileEditAction, whose
    # __repr__ (files.py L117-138) str() falls back to; an OH_ACI FileEditObservation is its content (L183-186).
    events = _recorded()
    read, file = _replayed(events[13], events[14])
    args = events[13]["args"]
    assert _event_str(read) == (
        f"FileReadAction(path={args['path']!r}, start=0, end=-1, thought={args['thought']!r}, "
        "action=<ActionType.READ: 'read'>, security_risk=<ActionSecurityRisk.UNKNOWN: -1>, "
        "impl_source=<FileReadSource.OH_ACI: 'oh_aci'>, view_range=None)")
    assert file is not None and _event_str(file) == f"[Read from {events[14]['extras']['path']} is successful.]\n{events[14]['content']}"
    edit, edited = _replayed(events[27], events[28])
    args = events[27]["args"]
    assert _event_str(edit) == (f"**FileEditAction**\nPath: [{args['path']}]\nThought: {args['thought']}\n"
                                f"Command: str_replace\nOld String: ```\n{args['old_str']}\n```\n"
                                f"New String: ```\n{args['new_str']}\n```\n")
    assert edited is not None and _event_str(edited) == events[28]["content"]


def test_a_recorded_thought_and_the_finish():
    # AgentThinkAction, AgentThinkObservation and AgentFinishAction have no __str__: their dataclass reprs
    # (events/action/agent.py L22-59, events/observation/agent.py L32-44). The recorded `args.thought` of the think
    # action is the response's text, a newline and the tool's `thought` (`combine_thought`, function_calling.py
    # L49-56); the finish's `final_thought` is its `message` argument (L147-150; 156d0686 has no task_completed).
    events = _recorded()
    think, logged = _replayed(events[47], events[48])
    assert _event_str(think) == f"AgentThinkAction(thought={events[47]['args']['thought']!r}, action=<ActionType.THINK: 'think'>)"
    assert logged is not None
    assert _event_str(logged) == "AgentThinkObservation(content='Your thought has been logged.', observation=<ObservationType.THINK: 'think'>)"
    finish, _ = _replayed(events[49])
    args = events[49]["args"]
    assert _event_str(finish) == (f"AgentFinishAction(final_thought={args['final_thought']!r}, outputs={{}}, "
                                  f"thought={args['thought']!r}, action=<ActionType.FINISH: 'finish'>)")


def test_imported_messages_and_an_unlinked_error():
    # MessageAction.__str__ (events/action/message.py L31-40); ErrorObservation.__str__ (events/observation/error.py
    # L22-23): the importer turns an error linked to no call into a user item that names its observation type.
    # `openhands-v0` holds it as an observation that answers no call, as V0 does.
    run = load_transcripts(MULTI_SWE)[1]  # ponylang__ponyc-4593: its event 29 is such an error
    v0 = OpenHandsV0(SimpleNamespace(profile=get_profile("64k")))  # only the profile is read
    for item in run.items:  # the inputs, as a replay hands them over
        if item.kind == "marker":
            v0.on_marker(item)
        elif not item.is_model_output:
            v0.on_input(item)
    task = next(e for e in v0.log.events if e.kind == "message")
    error = [e for e in v0.log.events if e.kind == "unlinked_observation"][-1]
    recorded = json.loads(MULTI_SWE.read_text(encoding="utf-8").splitlines()[1])["history"]
    assert _event_str(task) == f"**MessageAction** (source=EventSource.USER)\nCONTENT: {recorded[1]['args']['content']}"
    assert _event_str(error) == ("**ErrorObservation**\nParameter 'command' is expected to be one of "
                                 "['view', 'create', 'str_replace', 'insert', 'undo_edit'].")


def _pair(tool: str, arguments: dict[str, Any], result: str = "out", text: str = "Next step.", **result_fields: Any) -> tuple[str, str]:
    log = EventLog()
    [action] = log.response([Item(id="t", kind="assistant", text=text, response=0),
                             Item(id="c", kind="tool_call", call_id="c", tool_name=tool, arguments=json.dumps(arguments), response=0)])
    observation = log.observe(Item(id="r", kind="tool_result", call_id="c", tool_name=tool, text=result, **result_fields))
    assert observation is not None
    return _event_str(action), _event_str(observation)


def test_the_codeact_tools_no_recording_here_holds():
    # IPythonRunCellAction / IPythonRunCellObservation.__str__ (commands.py L55-60, L227-231): the images counted.
    png = Attachment("image/png", "plot.png")
    assert _pair("execute_ipython_cell", {"code": "plot()"}, attachments=(png, png)) == (
        "**IPythonRunCellAction**\nTHOUGHT: Next step.\nCODE:\nplot()", "**IPythonRunCellObservation**\nout\nImages: 2")
    # BrowseInteractiveAction.__str__ (events/action/browse.py L43-48); BrowserOutputObservation.__str__
    # (events/observation/browse.py L41-56) with the dataclass defaults of what no transcript records.
    assert _pair("browser", {"code": "click('12')"}, "[12] button") == (
        "**BrowseInteractiveAction**\nTHOUGHT: Next step.\nBROWSER_ACTIONS: click('12')",
        "**BrowserOutputObservation**\nURL: \nError: False\nOpen pages: []\nActive page index: -1\nLast browser action: \n"
        "Last browser action error: \nFocused element bid: \n--- Agent Observation ---\n[12] button")
    # `is_input` is true only for the string "true" (function_calling.py L111); a view's range and risk level
    # (L191-196, set_security_risk L59-70).
    assert _pair("execute_bash", {"command": "y", "is_input": "true"}, text="")[0] == (
        "**CmdRunAction (source=EventSource.AGENT, is_input=True)**\nCOMMAND:\ny")
    assert _pair("str_replace_editor", {"command": "view", "path": "/a.py", "view_range": [1, 20], "security_risk": "LOW"})[0] == (
        "FileReadAction(path='/a.py', start=0, end=-1, thought='Next step.', action=<ActionType.READ: 'read'>, "
        "security_risk=<ActionSecurityRisk.LOW: 0>, impl_source=<FileReadSource.OH_ACI: 'oh_aci'>, view_range=[1, 20])")
    assert _pair("str_replace_editor", {"command": "insert", "path": "/a.py", "insert_line": 3, "new_str": "y = 2"})[0] == (
        "**FileEditAction**\nPath: [/a.py]\nThought: Next step.\nCommand: insert\nInsert Line: 3\nNew String: ```\ny = 2\n```\n")
    # A task list of two tasks: the reused loop index (function_calling.py L91, L274) keeps the text out of the thought.
    plan = {"command": "plan", "task_list": [{"id": "t1", "title": "Fix"}, {"status": "done"}]}
    tasks = "[{'id': 't1', 'title': 'Fix', 'status': 'todo', 'notes': ''}, {'id': 'task-2', 'title': 'Untitled task', 'status': 'done', 'notes': ''}]"
    assert _pair("task_tracker", plan, "Task list has been updated with 2 items.") == (
        f"TaskTrackingAction(command='plan', task_list={tasks}, thought='', action=<ActionType.TASK_TRACKING: 'task_tracking'>)",
        "TaskTrackingObservation(content='Task list has been updated with 2 items.', observation=<ObservationType.TASK_TRACKING: "
        f"'task_tracking'>, command='plan', task_list={tasks})")
    # A finish is not runnable: the runtime's answer is a NullObservation (runtime/base.py L1028).
    assert _pair("finish", {"message": "Done."}, "")[1] == "NullObservation(content='', observation=<ObservationType.NULL: 'null'>)"


def test_a_tool_v0_does_not_know_is_an_mcp_tool_and_a_failure_an_error():
    # MCPAction.__str__ (events/action/mcp.py L26-32); MCPObservation's dataclass repr (events/observation/mcp.py),
    # its name and arguments the call's (mcp/utils.py L257-261).
    action, result = _pair("Bash", {"command": "ls", "timeout": 5}, "a.py\n")
    assert action == "**MCPAction**\nTHOUGHT: Next step.\nNAME: Bash\nARGUMENTS: {'command': 'ls', 'timeout': 5}"
    assert result == "MCPObservation(content='a.py\\n', observation=<ObservationType.MCP: 'mcp'>, name='Bash', arguments={'command': 'ls', 'timeout': 5})"
    assert _pair("Bash", {"command": "false"}, "exit 1", is_error=True)[1] == "**ErrorObservation**\nexit 1"


def test_a_command_output_without_metadata_is_cut_when_made():
    # No metadata recorded: CmdOutputMetadata's defaults (commands.py L25-35); the content is cut to 30,000
    # characters when the observation is made (L116-120, L138-165), before the summariser's 10,000 cut.
    _, result = _pair("execute_bash", {"command": "cat big"}, "a" * 20_000 + "b" * 20_000)
    metadata = ('{\n  "exit_code": -1,\n  "pid": -1,\n  "username": null,\n  "hostname": null,\n  "working_dir": null,\n'
                '  "py_interpreter_path": null,\n  "prefix": "",\n  "suffix": ""\n}')
    marker = "\n[... Observation truncated due to length ...]\n"
    assert result == (f"**CmdOutputObservation (source=EventSource.AGENT, exit code=-1, metadata={metadata})**\n"
                      f"--BEGIN AGENT OBSERVATION--\n{'a' * 15_000}{marker}{'b' * 15_000}\n--END AGENT OBSERVATION--")


def test_the_summary_prompt_holds_each_forgotten_event_as_its_v0_string():
    # llm_summarizing_condenser.py L134-136: `<EVENT id={id}>\n{truncate_content(str(event), 10_000)}\n</EVENT>\n`.
    # max_size 12, keep_first 4: ids user 0, step k's call 1 + 2k and output 2 + 2k. At 13 events the middle
    # view[4:12] (12//2 - 4 - 1 = 1 event kept at the end) is forgotten, among it call 2 (id 5), its output (6), call 3 (7).
    s = Session()
    s.user("Find the failing test.")
    for k in range(7):
        s.assistant(f"Step {k}.", calls=[(f"c{k}", "execute_bash", {"command": f"run {k}"})])
        s.result(f"c{k}", ("x" * 6_000 + "y" * 6_000) if k == 2 else f"out {k}", name="execute_bash")
    s.assistant("done")
    result = replay(s.transcript(), "openhands-v0", profile=small_profile(1_000_000), options={"max_size": 12})
    prompt = next(r for r in result.requests if r.kind == "summary").messages[0].content
    header = ('**CmdOutputObservation (source=EventSource.AGENT, exit code=-1, metadata={\n  "exit_code": -1,\n  "pid": -1,\n'
              '  "username": null,\n  "hostname": null,\n  "working_dir": null,\n  "py_interpreter_path": null,\n'
              '  "prefix": "",\n  "suffix": ""\n})**\n--BEGIN AGENT OBSERVATION--\n')
    text = header + "x" * 6_000 + "y" * 6_000 + "\n--END AGENT OBSERVATION--"
    cut = text[:5_000] + "\n[... Observation truncated due to length ...]\n" + text[-5_000:]
    assert ("<EVENT id=5>\n**CmdRunAction (source=EventSource.AGENT, is_input=False)**\nTHOUGHT: Step 2.\nCOMMAND:\nrun 2\n</EVENT>\n"
            f"<EVENT id=6>\n{cut}\n</EVENT>\n<EVENT id=7>\n**CmdRunAction (source=EventSource.AGENT, is_input=False)**\n"
            "THOUGHT: Step 3.\nCOMMAND:\nrun 3\n</EVENT>\n") in prompt
