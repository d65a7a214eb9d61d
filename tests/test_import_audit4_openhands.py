"""OpenHands import audit 4: a recorded condensation, a recall observation and the system event's recorded fields.

Right answers come from upstream V0 (All-Hands-AI/OpenHands@156d0686, cited per test) and from the recorded
Multi-SWE-bench runs of the corpus (`evaluation/benchmarks/multi_swe_bench/examples/output.jsonl`), read here with
`json` alone. The corpus holds no condensation: those tests put the V0 event into a copy of a corpus run in tmp_path.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from compaction_bench.importing import load_transcript, load_transcripts
from compaction_bench.replay import replay
from compaction_bench.tokens import get_encoding
from tests.conftest import CORPORA
from tests.pi_builders import small_profile

MULTI_SWE = CORPORA / "openhands-events/All-Hands-AI__OpenHands/multi_swe_bench_examples_output.jsonl"
#: The V0 event of the audit (`CondensationAction`, ActionType.CONDENSATION, events/action/agent.py@156d0686 L107-188).
CONDENSATION = {"id": 100, "timestamp": "2025-04-30T16:40:00", "source": "agent", "message": "Summary: …",
                "action": "condensation", "args": {"forgotten_events_start_id": 5, "forgotten_events_end_id": 9,
                                                   "summary": "Listed the repo; read src/libponyc.", "summary_offset": 1}}


def _runs() -> list[dict[str, Any]]:
    return [json.loads(line) for line in MULTI_SWE.read_text(encoding="utf-8").split("\n") if line.strip()]


def _write(tmp_path: Path, record: dict[str, Any], name: str = "output.jsonl") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    return path


def _with_event(tmp_path: Path, event: dict[str, Any], after_id: int = 11) -> Path:
    """The first corpus run with `event` put after the event `after_id`."""
    record = _runs()[0]
    at = next(n for n, e in enumerate(record["history"]) if e["id"] == after_id) + 1
    record["history"].insert(at, event)
    return _write(tmp_path, record)


# --------------------------------------------------------------------------- defect 1: condensation
def test_a_recorded_condensation_is_a_compaction_marker_and_no_model_response(tmp_path: Path):
    record = _runs()[0]
    plain = load_transcripts(_write(tmp_path, record, "plain.jsonl"))[0]
    t = load_transcripts(_with_event(tmp_path, CONDENSATION))[0]
    # The condenser wrote it, the model did not: no call, no orphan, no extra model response.
    assert not [i for i in t.items if i.kind == "tool_call" and i.tool_name == "condensation"]
    assert t.orphans() == plain.orphans()
    assert len(t.steps()) == len(plain.steps())
    (marker,) = t.markers("compaction")
    assert marker.id == "event-100" and marker.text == "Listed the repo; read src/libponyc."
    assert {k: marker.meta[k] for k in ("forgotten_events_start_id", "forgotten_events_end_id", "summary", "summary_offset")} == {
        "forgotten_events_start_id": 5, "forgotten_events_end_id": 9,
        "summary": "Listed the repo; read src/libponyc.", "summary_offset": 1}
    # `forgotten` is the inclusive range 5..9 (L164-182): the recorded events 5-9 are three calls (each with the text
    # the model wrote with it) and two outputs; their items, from the raw events' ids and tool-call ids.
    events = {e["id"]: e for e in record["history"]}
    expected = []
    for event_id in range(5, 10):
        event = events[event_id]
        if "action" in event:
            expected += [f"event-{event_id}:thought", event["tool_call_metadata"]["tool_call_id"]]
        else:
            expected.append(f"event-{event_id}")
    assert list(marker.meta["forgotten_item_ids"]) == expected
    assert not t.meta.get("problems")


def test_a_condensation_by_event_ids_without_a_summary(tmp_path: Path):
    # The ConversationWindowCondenser's form: an id list and no summary (conversation_window_condenser.py L165-170).
    event = {"id": 100, "source": "agent", "action": "condensation", "args": {"forgotten_event_ids": [5, 6]}}
    (marker,) = load_transcripts(_with_event(tmp_path, event))[0].markers("compaction")
    assert marker.text == "" and list(marker.meta["forgotten_event_ids"]) == [5, 6] and marker.meta["summary"] is None
    assert len(marker.meta["forgotten_item_ids"]) == 3  # call 5 with its text, output 6


def test_a_condensation_v0_refuses_is_reported_naming_the_event(tmp_path: Path):
    # `_validate_field_polymorphism` (L138-158): an id list and a range at once, a summary without its offset.
    event = {"id": 100, "source": "agent", "action": "condensation",
             "args": {"forgotten_event_ids": [5], "forgotten_events_start_id": 5, "forgotten_events_end_id": 6, "summary": "s"}}
    t = load_transcripts(_with_event(tmp_path, event))[0]
    position = [e["id"] for e in _runs()[0]["history"]].index(11) + 1  # the importer names an event by its position
    problems = [p for p in t.meta["problems"] if "(condensation)" in p]
    assert len(problems) == 2 and all(f"line 1 event {position} (condensation)" in p for p in problems)
    assert len(t.markers("compaction")) == 1  # kept as recorded


def test_the_controllers_condensation_request_is_a_marker(tmp_path: Path):
    # agent_controller.py L969-973: after a context-window error the controller adds `CondensationRequestAction()`,
    # no tool call of the model's.
    plain = load_transcripts(_write(tmp_path, _runs()[0], "plain.jsonl"))[0]
    event = {"id": 100, "source": "agent", "action": "condensation_request", "args": {}}
    t = load_transcripts(_with_event(tmp_path, event))[0]
    assert [i.kind for i in t.items if i.id == "event-100"] == ["marker"]
    assert t.markers("compaction-request") and len(t.steps()) == len(plain.steps()) and t.orphans() == plain.orphans()


# --------------------------------------------------------------------------- defect 2: recall
def test_the_multi_swe_bench_recall_reaches_the_model_as_nothing():
    # conversation_memory.py L660-666: with `enable_prompt_extensions=False`, which multi_swe_bench/run_infer.py
    # L344-350 sets, a RecallObservation gives no message; "Added workspace context" is the UI's `message`.
    # The recorded usage agrees: run 1's recall holds the `github` microagent's knowledge (over 900 o200k tokens), runs
    # 2 and 3 none. Had V0 rendered it, run 1's first request would count that much more beyond its task message than
    # the others'; the three differ by 11 (o200k stands in for Llama 4's tokenizer; system prompt and tools are alike).
    encoding = get_encoding("o200k_base")
    rest, knowledge = [], []
    for run, t in zip(_runs(), load_transcripts(MULTI_SWE), strict=True):
        history = run["history"]
        first = next(e for e in history if e.get("tool_call_metadata"))
        rest.append(first["tool_call_metadata"]["model_response"]["usage"]["prompt_tokens"]
                    - len(encoding.encode(history[1]["args"]["content"])))
        knowledge.append(sum(len(encoding.encode(a["content"])) for a in history[3]["extras"]["microagent_knowledge"]))
        assert not [i for i in t.items if i.text == "Added workspace context" and i.kind != "marker"]
        recall = t.by_id["event-4"]
        assert history[3]["observation"] == "recall" and recall.kind == "marker"
        assert recall.meta["event"] == "observation:recall" and recall.meta["sent_to_model"] is False
        assert recall.meta["prompt_extensions"] is False and recall.meta["prompt_extensions_recorded"] is False
        assert not [i for i in t.items if i.kind == "user" and i.meta.get("observation") == "recall"]
    assert knowledge[0] > 900 and knowledge[1:] == [0, 0]
    assert max(rest) - min(rest) < 50


def _recall_run(extras: dict[str, Any], agent_config: dict[str, Any] | None = None) -> dict[str, Any]:
    history = [
        {"id": 0, "source": "agent", "action": "system", "args": {"content": "You are an agent."}},
        {"id": 1, "source": "user", "action": "message", "args": {"content": "Fix the bug."}},
        {"id": 2, "source": "user", "action": "recall", "args": {"recall_type": extras["recall_type"], "query": "Fix the bug."}},
        {"id": 3, "source": "environment", "observation": "recall", "content": "Added workspace context", "cause": 2, "extras": extras},
    ]
    metadata: dict[str, Any] = {"agent_class": "CodeActAgent", "llm_config": {"model": "m"}}
    if agent_config is not None:
        metadata["agent_config"] = agent_config
    return {"instance_id": "i1", "metadata": metadata, "history": history}


WORKSPACE = {"recall_type": "workspace_context", "repo_name": "acme/app", "repo_directory": "app", "repo_branch": "",
             "repo_instructions": "", "runtime_hosts": {"http://localhost:5000": 5000}, "additional_agent_instructions": "",
             "date": "2025-04-30", "microagent_knowledge": [{"name": "github", "trigger": "git", "content": "Use the API."}]}


def test_a_recorded_agent_config_decides_and_the_context_is_rendered_as_v0_renders_it(tmp_path: Path):
    # conversation_memory.py L535-627: the workspace context (`additional_info.j2`, Jinja's default whitespace, stripped)
    # and the microagent knowledge (`microagent_info.j2`) are two text contents of one user message, joined by a line
    # break when serialised as a string (core/message.py L87-91). The hosts' guidance paragraph is this project's wording.
    from compaction_bench.scenarios.openhands import HOSTS_GUIDANCE

    t = load_transcript(_write(tmp_path, _recall_run(WORKSPACE, {"enable_prompt_extensions": True})))
    recall = t.by_id["event-3"]
    assert recall.kind == "user" and recall.synthetic and recall.meta["prompt_extensions_recorded"] is True
    assert recall.text == (
        "<REPOSITORY_INFO>\nAt the user's request, repository acme/app has been cloned to app in the current working "
        "directory.\n\n</REPOSITORY_INFO>\n\n\n<RUNTIME_INFORMATION>\n\n\n"
        "The user has access to the following hosts for accessing a web application,\neach of which has a corresponding "
        f"port:\n* http://localhost:5000 (port 5000)\n\n{HOSTS_GUIDANCE}\n\n\n\n"
        "Today's date is 2025-04-30 (UTC).\n\n</RUNTIME_INFORMATION>\n"
        "<EXTRA_INFO>\nThe following information has been included based on a keyword match for \"git\".\n"
        "It may or may not be relevant to the user's request.\n\nUse the API.\n</EXTRA_INFO>"
    )
    off = load_transcript(_write(tmp_path, _recall_run(WORKSPACE, {"enable_prompt_extensions": False}), "off.jsonl"))
    assert off.by_id["event-3"].kind == "marker" and off.by_id["event-3"].meta["prompt_extensions_recorded"] is True


def test_an_event_list_takes_upstreams_default_and_filters_knowledge_already_recalled(tmp_path: Path):
    # AgentConfig.enable_prompt_extensions defaults to True (agent_config.py L42). A knowledge recall keeps only the
    # microagents no earlier recall observation named (`_filter_agents_in_microagent_obs`, L702-749).
    events = _recall_run(WORKSPACE)["history"] + [
        {"id": 4, "source": "user", "action": "message", "args": {"content": "Now push it with git."}},
        {"id": 5, "source": "environment", "observation": "recall", "content": "Added microagent knowledge", "cause": 4,
         "extras": {"recall_type": "knowledge", "microagent_knowledge": [
             {"name": "github", "trigger": "git", "content": "Use the API."},
             {"name": "docker", "trigger": "push", "content": "Tag images."}]}},
        {"id": 6, "source": "environment", "observation": "recall", "content": "Added workspace context", "cause": 2,
         "extras": {"recall_type": "workspace_context"}},
    ]
    path = tmp_path / "events.json"
    path.write_text(json.dumps(events), encoding="utf-8")
    t = load_transcript(path)
    assert t.by_id["event-3"].kind == "user" and t.by_id["event-3"].meta["prompt_extensions_recorded"] is False
    assert t.by_id["event-5"].text == (
        "<EXTRA_INFO>\nThe following information has been included based on a keyword match for \"push\".\n"
        "It may or may not be relevant to the user's request.\n\nTag images.\n</EXTRA_INFO>")
    # Nothing to render (no repository, date, instructions or knowledge: L590-627): no message, a marker.
    assert t.by_id["event-6"].kind == "marker" and t.by_id["event-6"].meta["sent_to_model"] is False
    assert not t.meta.get("problems")


# --------------------------------------------------------------------------- defect 3: system event
def test_the_system_items_meta_keeps_the_recorded_tools_agent_class_and_version():
    for run, t in zip(_runs(), load_transcripts(MULTI_SWE), strict=True):
        args = run["history"][0]["args"]
        system = t.by_id["event-0"]
        assert json.loads(json.dumps(system.meta["tools"])) == args["tools"] and len(args["tools"]) == 4
        assert len(json.dumps(args["tools"])) == 8_009
        assert system.meta["agent_class"] == "CodeActAgent" and system.meta["openhands_version"] == "0.35.0"


def _system_event_in_the_summary(strategy: str) -> str:
    """The system prompt event as the summary prompt shows it, forgotten at once (`keep_first` 0) in the run that
    called 3 of its 4 recorded tools (ponylang__ponyc-4593: no `think`)."""
    t = load_transcripts(MULTI_SWE)[1]
    assert len({i.tool_name for i in t.items if i.kind == "tool_call"}) == 3
    result = replay(t, strategy, profile=small_profile(1_000_000), options={"max_size": 12, "keep_first": 0})
    prompt = next(r for r in result.requests if r.kind == "summary").messages[0].content
    start = prompt.index("System")
    return prompt[start : prompt.index("</EVENT>", start)]


def test_the_sdk_preview_counts_the_recorded_tools():
    # SystemPromptEvent.__str__ (system.py@611629e6 L87-104): `Tools: {len(self.tools)} available`.
    assert _system_event_in_the_summary("openhands").endswith("\n  Tools: 4 available\n")


def test_the_v0_string_has_the_tools_and_agent_class_lines():
    # SystemMessageAction.__str__ (events/action/message.py@156d0686 L59-66).
    run = _runs()[1]["history"][0]["args"]
    assert _system_event_in_the_summary("openhands-v0") == (
        f"SystemMessageAction** (source=EventSource.AGENT)\nCONTENT: {run['content']}\nTOOLS: 4 tools available\n"
        "AGENT_CLASS: CodeActAgent\n")
