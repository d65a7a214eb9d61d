"""OpenHands audit 5: V0's recall events in its view, V0's uncached summary requests, the SDK's terminal rendering,
malformed recorded responses, V0's unlinked error observation and the SDK's merged user messages.

Right answers come from upstream, cited per test: V0 at All-Hands-AI/OpenHands@156d0686 (paths under openhands/),
the SDK at OpenHands/software-agent-sdk@611629e6 (its own tests ported where it has them), and from the recorded
Multi-SWE-bench runs of the corpus, read here with `json` alone.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from compaction_bench.importing import load_transcript, load_transcripts
from compaction_bench.profiles import get_profile
from compaction_bench.provider import ProviderError
from compaction_bench.replay import replay
from compaction_bench.strategies.openhands import OpenHands, OpenHandsV0, _event_str, sdk_truncate
from compaction_bench.transcript import Item
from tests.conftest import CORPORA
from tests.pi_builders import Session, small_profile
from tests.test_openhands_strategy import _Context

MULTI_SWE = CORPORA / "openhands-events/All-Hands-AI__OpenHands/multi_swe_bench_examples_output.jsonl"
ERROR_LINE = "\n[Error occurred in processing last action]"  # conversation_memory.py L514-517
TASK = "Fix the failing test in utils.py"


def _runs() -> list[dict[str, Any]]:
    return [json.loads(line) for line in MULTI_SWE.read_text(encoding="utf-8").split("\n") if line.strip()]


def _v0_run(steps: int, recall_extras: dict[str, Any], output: str = "FIRST-{k}") -> list[dict[str, Any]]:
    """A V0 history as the controller logs it: the system prompt, the task, the `RecallAction` on it
    (`source` user, `query` the task) and its `RecallObservation` (`cause` the action), then one
    `execute_bash` call per step and its `run` observation."""
    history: list[dict[str, Any]] = [
        {"id": 0, "source": "agent", "action": "system", "args": {"content": "You are OpenHands agent.", "tools": []}},
        {"id": 1, "source": "user", "action": "message", "args": {"content": TASK, "image_urls": None}},
        {"id": 2, "source": "user", "action": "recall", "message": f"Retrieving content for: {TASK}",
         "args": {"recall_type": "workspace_context", "query": TASK, "thought": ""}},
        {"id": 3, "source": "environment", "cause": 2, "observation": "recall", "content": "Added workspace context",
         "extras": {"recall_type": "workspace_context", "microagent_knowledge": [], **recall_extras}},
    ]
    n = 4
    for k in range(steps):
        call = f"call_{k}"
        response = {"id": f"resp-{k}", "choices": [{"message": {"content": f"Step {k}", "tool_calls": [
            {"id": call, "type": "function", "function": {"name": "execute_bash", "arguments": json.dumps({"command": f"cat part{k}"})}}]}}],
            "usage": {"prompt_tokens": 1000, "completion_tokens": 10}}
        metadata = {"function_name": "execute_bash", "tool_call_id": call, "model_response": response, "total_calls_in_response": 1}
        history.append({"id": n, "source": "agent", "action": "run", "args": {"command": f"cat part{k}", "thought": f"Step {k}"},
                        "tool_call_metadata": metadata})
        history.append({"id": n + 1, "source": "agent", "cause": n, "observation": "run", "content": output.format(k=k),
                        "extras": {"command": f"cat part{k}", "metadata": {"exit_code": 0}}, "tool_call_metadata": metadata})
        n += 2
    return history


# --------------------------------------------------------------------------- finding 1: V0's recall events
def test_v0_recall_events_count_toward_max_size_and_stay_in_the_kept_head(tmp_path: Path):
    # state_tracker.py L38-47: the agent history drops only NullAction, NullObservation, ChangeAgentStateAction and
    # AgentStateChangedObservation, so the RecallAction and RecallObservation are view events even when the
    # observation renders to nothing (prompt extensions off, as every evaluation run sets them). Before step k the
    # view holds 4 + 2k events; LLMSummarizingCondenser(120, 4) condenses when len(view) > 120 (L160-161): first at
    # step 59 (122 events). Its head is view[:4] = [system, task, RecallAction, RecallObservation], it keeps
    # 120 // 2 - 4 - 1 = 55 events from the tail and forgets the inclusive id range of view[4:67]: ids 4-66, the
    # calls and outputs of steps 0-30 and the call of step 31 (L52-157).
    path = tmp_path / "output.jsonl"
    run = {"instance_id": "demo-1", "metadata": {"agent_config": {"enable_prompt_extensions": False}}, "history": _v0_run(65, {})}
    path.write_text(json.dumps(run) + "\n", encoding="utf-8")
    result = replay(load_transcript(path), "openhands-v0", profile="gpt-5")
    first = result.compactions[0]
    assert first.step == 59
    assert first.details["forgotten_range"] == [4, 66]
    # the recall events render to nothing: the summary follows the task, with V0's "\n\n" between user messages
    assert [m.role for m in first.after[:3]] == ["system", "user", "user"]
    assert first.after[2].content == "\n\n" + first.summary
    assert not any("FIRST-0" in m.content for m in first.after)
    assert [r.meta["view_events"] for r in result.requests if r.step == 58 and r.kind == "turn"] == [120]


def test_v0_conversation_window_keeps_the_recalled_workspace_context(tmp_path: Path):
    # conversation_window_condenser.py L72-99: besides the system message and the first user message, the
    # RecallAction whose query is that message's content and its RecallObservation are essential events, never
    # forgotten. With prompt extensions on (an event list: AgentConfig's default) that observation is the workspace
    # context V0 sends as a user message (conversation_memory.py L531-629), here the repository instructions.
    extras = {"repo_name": "acme/widgets", "repo_directory": "widgets", "repo_branch": "main", "date": "2025-11-01",
              "repo_instructions": "ALWAYS run `make lint` before committing. Secret codeword: PELICAN.", "working_dir": "/workspace"}
    path = tmp_path / "events.json"
    path.write_text(json.dumps(_v0_run(20, extras, output="part {k}: " + "data " * 800)), encoding="utf-8")
    result = replay(load_transcript(path), "openhands-v0", profile=small_profile(6_000))
    windows = [c for c in result.compactions if c.trigger == "conversation-window"]
    assert windows
    for window in windows:
        assert any("PELICAN" in m.content for m in window.before)
        assert [m.role for m in window.after[:3]] == ["system", "user", "user"]
        assert "PELICAN" in window.after[2].content and "event-3" in window.after[2].item_ids


def test_v0_shows_the_recorded_recall_events_as_their_v0_strings():
    # RecallAction.__str__ (events/action/agent.py L101-104): "**RecallAction**\nQUERY: " and the query's first 50
    # characters. RecallObservation.__str__ (events/observation/agent.py L109-138) of a workspace context: its
    # recall_type (a RecallType again after event_from_dict, serialization/observation.py L128-131, formatted as
    # `RecallType.WORKSPACE_CONTEXT`), repo name, the first 20 characters of the instructions, the hosts' dict,
    # "date=…" joined to "custom_secrets_descriptions=…" by the missing comma, then its microagents' names.
    record = _runs()[0]  # ponylang__ponyc-4595: the recall action is event 2, its observation event 4
    recorded = {e["id"]: e for e in record["history"]}
    v0 = OpenHandsV0(SimpleNamespace(profile=get_profile("64k")))  # only the profile is read
    for item in load_transcripts(MULTI_SWE)[0].items:  # the inputs, as a replay hands them over
        if item.kind == "marker":
            v0.on_marker(item)
        elif not item.is_model_output:
            v0.on_input(item)
    action, observation = [e for e in v0.log.events if e.items[0].id in ("event-2", "event-4")]
    assert _event_str(action) == f"**RecallAction**\nQUERY: {recorded[2]['args']['query'][:50]}"
    assert recorded[4]["extras"]["runtime_hosts"] == {"http://localhost:54079": 54079, "http://localhost:58272": 58272}
    assert _event_str(observation) == (
        "**RecallObservation**\nrecall_type=RecallType.WORKSPACE_CONTEXT, repo_name=, repo_instructions=..., "
        "runtime_hosts={'http://localhost:54079': 54079, 'http://localhost:58272': 58272}, additional_agent_instructions=..., "
        "date=2025-04-30custom_secrets_descriptions={}, conversation_instructions=..., microagent_knowledge=github, gitlab")
    # they are the third and fourth events of V0's view, after the system prompt and the task
    assert [e.kind for e in v0.log.events[:4]] == ["system", "message", "recall", "unlinked_observation"]


# --------------------------------------------------------------------------- finding 2: V0's summary requests
def test_v0_summary_requests_write_no_cache():
    # llm_summarizing_condenser.py L163-179: `llm_config.caching_prompt = False` for the condenser's LLM ("we'll pay
    # for the cache writes but never get a chance to save on a read"), so its request carries no Anthropic
    # cache_control breakpoint and writes nothing; the agent's own turns keep theirs (apply_prompt_caching).
    s = Session()
    s.user("Find the failing test.")
    for k in range(14):
        s.assistant(f"Step {k}.", calls=[(f"c{k}", "execute_bash", {"command": f"run {k}"})])
        s.result(f"c{k}", f"out {k}\n" + "log line\n" * 300, name="execute_bash")
    s.assistant("done")
    result = replay(s.transcript(), "openhands-v0", profile="claude-sonnet", options={"max_size": 12})
    summaries = [r for r in result.requests if r.kind == "summary"]
    assert summaries and all(r.true_tokens > 2_000 for r in summaries)
    assert [r.cache_write_tokens for r in summaries] == [0] * len(summaries)
    assert sum(r.cache_write_tokens for r in result.requests if r.kind == "turn") > 0


# --------------------------------------------------------------------------- finding 3: the SDK's terminal results
#: A real terminal result's metadata (the SDK's `tests/sdk/conversation/goal/fixtures/events.jsonl@611629e6`, its
#: last ObservationEvent), with the last line of its output.
TERMINAL_METADATA = {"exit_code": 1, "pid": -1, "username": "openhands", "hostname": "runtime-sfzcsbejkqbokdub-7c4d4748c7-pb2st",
                     "working_dir": "/workspace/project", "py_interpreter_path": "/usr/local/bin/python", "prefix": "",
                     "suffix": "\n[The command completed with exit code 1.]"}
SAVE_DIR = "/workspace/conversations/e18b827d3440425a9ff7353c4a6d6a3a/observations"
OUTPUT = "json.decoder.JSONDecodeError: Expecting value: line 2 column 1 (char 1)"


def _v1_terminal_events(output: str, metadata: dict[str, Any], is_error: bool = False) -> list[dict[str, Any]]:
    def text(t: str) -> dict[str, Any]:
        return {"cache_prompt": False, "type": "text", "text": t}

    observation = {"content": [text(output)], "is_error": is_error, "command": "python3 -c ...", "exit_code": metadata["exit_code"],
                   "timeout": False, "metadata": metadata, "full_output_save_dir": SAVE_DIR, "kind": "TerminalObservation"}
    events = [
        {"id": "sys-1", "source": "agent", "kind": "SystemPromptEvent", "system_prompt": text("You are OpenHands agent."), "tools": []},
        {"id": "msg-1", "source": "user", "kind": "MessageEvent", "llm_message": {"role": "user", "content": [text("Review the PR.")]}},
        {"id": "act-1", "source": "agent", "kind": "ActionEvent", "thought": [], "tool_name": "terminal", "tool_call_id": "call-1",
         "tool_call": {"id": "call-1", "name": "terminal", "arguments": json.dumps({"command": "python3 -c ..."})},
         "action": {"command": "python3 -c ...", "kind": "TerminalAction"}, "llm_response_id": "resp-1"},
        {"id": "obs-1", "source": "environment", "kind": "ObservationEvent", "tool_name": "terminal", "tool_call_id": "call-1",
         "observation": observation, "action_id": "act-1"},
        {"id": "msg-2", "source": "agent", "kind": "MessageEvent", "llm_response_id": "resp-2",
         "llm_message": {"role": "assistant", "content": [text("Done.")]}},
    ]
    for n, event in enumerate(events[1:], 1):  # one linear branch
        event["parent_id"] = events[n - 1]["id"]
    return events


def _sdk_tool_message(tmp_path: Path, events: list[dict[str, Any]]) -> str:
    path = tmp_path / "events.json"
    path.write_text(json.dumps(events), encoding="utf-8")
    result = replay(load_transcript(path), "openhands", profile=small_profile(1_000_000))
    return next(m.content for r in result.requests for m in r.messages if m.role == "tool")


def test_sdk_sends_a_terminal_result_as_to_llm_content_renders_it(tmp_path: Path):
    # terminal/definition.py L173-200: prefix + content + suffix, then the working directory, the Python interpreter
    # and, unless the exit code is -1, "[Command finished with exit code N]" (the SDK's own
    # test_terminal_observation_truncation_under_limit has the same form); an error's header comes first, its own
    # text content (tool/schema.py L366, L411-424).
    expected = (OUTPUT + "\n[The command completed with exit code 1.]\n[Current working directory: /workspace/project]\n"
                "[Python interpreter: /usr/local/bin/python]\n[Command finished with exit code 1]")
    assert _sdk_tool_message(tmp_path, _v1_terminal_events(OUTPUT, TERMINAL_METADATA)) == expected
    failed = _sdk_tool_message(tmp_path, _v1_terminal_events(OUTPUT, TERMINAL_METADATA, is_error=True))
    assert failed == "[An error occurred during execution.]\n" + expected
    running = TERMINAL_METADATA | {"exit_code": -1, "suffix": "", "py_interpreter_path": None}
    assert _sdk_tool_message(tmp_path, _v1_terminal_events(OUTPUT, running)) == OUTPUT + "\n[Current working directory: /workspace/project]"


def test_sdk_cuts_a_long_terminal_result_at_30000_naming_the_saved_output(tmp_path: Path):
    # definition.py L193-198: `maybe_truncate(ret, MAX_CMD_OUTPUT_SIZE=30000, save_dir=full_output_save_dir,
    # tool_prefix="terminal")`; with a save dir the notice names `<dir>/terminal_output_<sha256[:8]>.txt` and the
    # line the cut starts around (truncate.py L28-46, L84-117): the head keeps ceil((30000 - 113) / 2) characters.
    rendered = "x" * 45_000 + ("\n[The command completed with exit code 1.]\n[Current working directory: /workspace/project]\n"
                               "[Python interpreter: /usr/local/bin/python]\n[Command finished with exit code 1]")
    notice = ("<response clipped><NOTE>Due to the max output limit, only part of the full response has been shown to you. "
              f"The complete output has been saved to {SAVE_DIR}/terminal_output_{hashlib.sha256(rendered.encode()).hexdigest()[:8]}.txt"
              " - you can use other tools to view the full content (truncated part starts around line 2).</NOTE>")
    head = (30_000 - 113 + 1) // 2
    tail = 30_000 - len(notice) - head
    sent = _sdk_tool_message(tmp_path, _v1_terminal_events("x" * 45_000, TERMINAL_METADATA))
    assert sent == rendered[:head] + notice + rendered[-tail:]
    assert len(sent) == 30_000 and sent.endswith("x\n[The command completed with exit code 1.]\n[Current working directory: "
                                                 "/workspace/project]\n[Python interpreter: /usr/local/bin/python]\n"
                                                 "[Command finished with exit code 1]")


def test_sdk_truncate_with_a_save_dir_follows_the_sdks_own_tests(tmp_path: Path):
    # tests/sdk/utils/test_truncate.py@611629e6, with its pytest `tmp_path` as the save dir: the file named by the
    # content's hash (L215-240); a persist notice longer than the limit gives the base notice cut to it (L243-258); a
    # notice that leaves less room than the proposed head ends the text (L261-279); the line number lies inside the
    # content (L305-323); a short content is left alone (L326-340).
    save_dir = str(tmp_path)
    content = "Test content for hashing " * 20
    digest = hashlib.sha256(content.encode("utf-8")).hexdigest()[:8]
    assert str(tmp_path / f"test_output_{digest}.txt") in sdk_truncate(content, 300, save_dir=save_dir, tool_prefix="test")
    assert len(sdk_truncate("A" * 1000, 50, save_dir=save_dir, tool_prefix="test")) == 50
    moved = sdk_truncate("A" * 1000, 500, save_dir=save_dir, tool_prefix="test")
    assert len(moved) == 500 and moved.endswith("</NOTE>")
    lines = "".join(f"Line {i}\n" for i in range(1, 101))
    line = int(sdk_truncate(lines, 500, save_dir=save_dir, tool_prefix="test").split("starts around line ")[1].split(")")[0])
    assert 1 <= line <= 100
    assert sdk_truncate("Short", 100, save_dir=save_dir, tool_prefix="test") == "Short"


def test_sdk_summary_preview_of_a_terminal_result_shows_its_exit_code(tmp_path: Path):
    # observation.py L74-83: the ObservationEvent preview is `"".join(content_to_str(observation.to_llm_content))`,
    # the rendered text, cut at 500 characters.
    events = _v1_terminal_events(OUTPUT, TERMINAL_METADATA)
    path = tmp_path / "events.json"
    path.write_text(json.dumps(events), encoding="utf-8")
    result = replay(load_transcript(path), "openhands", profile=small_profile(1_000_000),
                    options={"max_size": 4, "keep_first": 0})  # 5 events > 4: the action and its result are summarised
    prompt = next(r for r in result.requests if r.kind == "summary").messages[0].content
    assert "Result: " + OUTPUT + "\n[The command completed with exit code 1.]\n[Current working directory: /workspace/project]" in prompt
    assert "[Command finished with exit code 1]" in prompt


# --------------------------------------------------------------------------- finding 5: malformed recorded fields
def _damaged(tmp_path: Path, damage: Any, name: str) -> Path:
    runs = _runs()
    damage(runs[2]["history"][40])  # line 3 of the file, its event 40 (an action with its model response)
    path = tmp_path / name
    path.write_text("\n".join(json.dumps(r) for r in runs) + "\n", encoding="utf-8")
    return path


def test_a_malformed_model_response_is_one_problem_naming_its_line_and_event(tmp_path: Path):
    # The importer's rule: a recorded field of the wrong type is reported where it is and the run is read without it.
    # V0 reads `model_response.choices[0].message` and its `tool_calls` (conversation_memory.py L258-270).
    cases = {
        "choices": (lambda e: e["tool_call_metadata"]["model_response"].__setitem__("choices", 5),
                    "tool_call_metadata.model_response.choices is a JSON int, not a list"),
        "message": (lambda e: e["tool_call_metadata"]["model_response"]["choices"][0].__setitem__("message", "oops"),
                    "tool_call_metadata.model_response.choices[0].message is a JSON string, not an object"),
        "tool_calls": (lambda e: e["tool_call_metadata"]["model_response"]["choices"][0]["message"].__setitem__("tool_calls", 7),
                       "tool_call_metadata.model_response.choices[0].message.tool_calls is a JSON int, not a list"),
    }
    for name, (damage, problem) in cases.items():
        path = _damaged(tmp_path, damage, f"{name}.jsonl")
        transcripts = load_transcripts(path)
        assert len(transcripts) == 3
        problems = [p for p in transcripts[2].meta.get("problems", ()) if "model_response" in p]
        assert problems == [f"{path}:3: line 3 event 40: {problem}; the action's args are read instead"]
        # the call is still there, its arguments the action's own
        call = transcripts[2].by_id[_runs()[2]["history"][40]["tool_call_metadata"]["tool_call_id"]]
        assert call.kind == "tool_call" and json.loads(call.arguments or "{}")


def test_image_urls_are_read_only_as_a_list_of_strings(tmp_path: Path):
    # MessageAction.image_urls: list[str] | None (events/action/message.py L13): a string is no list of URLs (not 34
    # one-character images), and an entry that is no string is left out; both are reported.
    def events(urls: Any) -> Path:
        path = tmp_path / "events.json"
        path.write_text(json.dumps([{"id": 0, "source": "user", "action": "message",
                                     "args": {"content": "Look at this.", "image_urls": urls}}]), encoding="utf-8")
        return path

    text = load_transcript(events("https://example.com/screenshot.png"))
    assert text.items[0].attachments == ()
    assert any("image_urls is a JSON string, not a list of URLs; left out" in p for p in text.meta["problems"])
    mixed = load_transcript(events(["https://example.com/a.png", 7]))
    assert [a.name for a in mixed.items[0].attachments] == ["https://example.com/a.png"]
    assert any("image_urls[1] is a JSON int, not a URL; left out" in p for p in mixed.meta["problems"])


# --------------------------------------------------------------------------- finding 6: V0's unlinked error
def test_v0_sends_an_error_linked_to_no_call_with_its_error_line():
    # conversation_memory.py L514-517: every ErrorObservation is `truncate_content(content)` and "\n[Error occurred
    # in processing last action]"; one without tool-call metadata (a FunctionCallValidationError) is returned as a
    # user message (L672-685). ponylang__ponyc-4593 records one (its event 29).
    run = load_transcripts(MULTI_SWE)[1]
    recorded = next(e for e in _runs()[1]["history"] if e.get("observation") == "error" and "tool_call_metadata" not in e)
    result = replay(run, "openhands-v0", profile="1m")
    sent = {m.content for r in result.requests for m in r.messages if m.role == "user"}
    assert recorded["content"] + ERROR_LINE in sent
    assert recorded["content"] not in sent


def _step(strategy: Any, k: int) -> None:
    strategy.on_response([Item(id=f"t{k}", kind="assistant", text=f"step {k}", response=k),
                          Item(id=f"c{k}", kind="tool_call", call_id=f"c{k}", tool_name="bash", arguments="{}", response=k)], None, True)
    strategy.on_input(Item(id=f"r{k}", kind="tool_result", call_id=f"c{k}", tool_name="bash", text=f"out {k}"))


def test_v0_window_skips_a_leading_unlinked_error_as_an_observation():
    # conversation_window_condenser.py L100-147: the view [task, a0, o0, a1, o1, a2, o2, error, a3, o3, a4, o4] has
    # one essential event (no system message, no recall); it keeps max(1, (12 - 1) // 2) = 5 recent events,
    # view[7:] = [error, a3, o3, a4, o4], whose leading Observations are dropped: the ErrorObservation is one. So
    # ids 1-7 are forgotten, the error with them.
    v0 = OpenHandsV0(_Context())
    v0.on_user_turn(Item(id="u", kind="user", text="Investigate the flaky test."))
    for k in range(3):
        _step(v0, k)
    error = "Parameter 'command' is expected to be one of ['view', 'create']."
    v0.on_input(Item(id="e", kind="user", text=error, synthetic=True, meta={"observation": "error", "error": True}))
    for k in range(3, 5):
        _step(v0, k)
    v0.on_overflow(ProviderError("openai", 400, "context_length_exceeded", "context length exceeded"))
    request = v0.request()
    [window] = v0.ctx.compactions
    assert window["trigger"] == "conversation-window" and window["details"]["forgotten_range"] == [1, 7]
    assert not any(error in m.content for m in request.messages)


# --------------------------------------------------------------------------- minor: the SDK merges user messages
def test_sdk_sends_adjacent_plain_user_messages_as_one():
    # event/base.py L107-175: `events_to_messages` appends a plain user message's content to the plain user message
    # before it (`_can_merge_user_messages`); the string serializer joins the text contents with "\n" (llm/message.py
    # L330-340). Two user turns without a reply between them are one message, also when the second arrives after the
    # first was sent.
    sdk = OpenHands(_Context())
    sdk.on_user_turn(Item(id="u1", kind="user", text="Investigate the flaky test."))
    assert [m.content for m in sdk.request().messages] == ["Investigate the flaky test."]
    sdk.on_user_turn(Item(id="u2", kind="user", text="It fails on CI only."))
    [message] = sdk.request().messages
    assert (message.role, message.content, message.item_ids) == ("user", "Investigate the flaky test.\nIt fails on CI only.", ("u1", "u2"))


def test_sdk_summary_and_the_next_user_turn_are_one_message():
    # 41 question/answer pairs: 82 events > max_size 80 (EVENTS); the summary, a plain user message at the
    # forgetting start, is followed by a user turn, and the two are sent as one message.
    s = Session()
    for k in range(41):
        s.user(f"question {k}: " + "q" * 200)
        s.assistant(f"answer {k}: " + "a" * 200)
    result = replay(s.transcript(), "openhands", profile="64k")
    after = result.compactions[0].after
    assert not [n for n in range(len(after) - 1) if after[n].role == after[n + 1].role == "user"]
    joined = next(m for m in after if m.content.startswith(result.compactions[0].summary or "?"))
    assert joined.content.startswith(f"{result.compactions[0].summary}\nquestion ")
