"""Importer for OpenHands (OpenDevin) event streams (MANIFEST "openhands-events").

Owns the importer (format registration, sniffing, which reader a file goes to), the containers (a
bare event list `*.json`; evaluation output JSONL with one run per line under `history`, one
transcript per line, where a line that is no run is a problem of every transcript of the file; the
2024 resolver output with flat action/observation dicts) and the V0 event rules (`action` /
`observation` keys, All-Hands-AI/OpenHands@156d0686). V1 events (the software-agent-sdk's,
OpenHands/software-agent-sdk@611629e6: the class name in `kind`) are read by `openhands_v1`, which
owns their rules and their own containers; this module hands it a persisted conversation (its
`base_state.json`, or the conversation folder that holds it beside `events/`: `folder_entry`), JSON
lines of V1 events, and an event list or run `history` that is V1. A list is V1 when most of its
events are; an event of the other form in it is reported and kept as an `unknown-event` marker. The
V0 rules:

- `system` and user `message` actions are system and user items; the system item's meta keeps what
  the event records besides its content: the tool definitions the model was given (`tools`),
  `agent_class` and `openhands_version` (`SystemMessageAction`, `events/action/message.py@156d0686
  L43-66`), a user item's attachments its `image_urls` (a list of URL strings; anything else is reported and
  left out); an agent `message` is an assistant reply; `recall` actions, `change_agent_state` and
  `agent_state_changed` / `null` observations are markers (a recall action's with its `recall_type` and `query`,
  which V0's conversation window reads, `RecallAction`, `events/action/agent.py@156d0686 L89-104`);
- a `condensation` action is the recording agent's own compaction (`CondensationAction`,
  `events/action/agent.py@156d0686 L107-188`), written by its condenser, not by the model: a marker
  `{"event": "compaction"}` with what the event records (`forgotten_event_ids` or the inclusive
  `forgotten_events_start_id` / `forgotten_events_end_id` range, `summary`, `summary_offset`) and the
  ids of this transcript's items of the forgotten events (`forgotten_item_ids`); its text is the
  summary. A `condensation_request` without tool-call metadata is the controller's request after a
  context-window error (`controller/agent_controller.py@156d0686 L969-973`), a marker
  `{"event": "compaction-request"}`; with metadata the model called the `request_condensation` tool;
- every other action is a tool call: `tool_call_metadata.tool_call_id` is its call id (else
  `event-<id>`), actions that share `tool_call_metadata.model_response.id` form one model
  response, whose `usage` counts once; the response's text and the call's arguments are those of the recorded
  `model_response.choices[0].message`, else `args.thought` and the action's args (a field on that path of another
  type is reported, naming the line and the event);
- an observation answers the call named by its `tool_call_metadata.tool_call_id`, else the one of
  its `cause` event, else (old flat records without ids) the latest unanswered call; an `error`
  observation linked to nothing is what OpenHands shows the model as a user message (synthetic);
- a `recall` observation (its `content` is the UI's "Added workspace context", which the model
  never sees) is what V0's `ConversationMemory` makes of it (`memory/conversation_memory.py@156d0686
  L531-666`): with prompt extensions on, a synthetic user item holding the text rendered from its
  `extras` (`workspace_context_text`, `microagent_text`), or nothing when there is nothing to render;
  with them off (`enable_prompt_extensions=False`), nothing. "Nothing" is a marker
  `{"event": "observation:recall", "sent_to_model": false}`, never model input. Either way its meta names the
  recall action it answers (`recall_action`, the item id of its `cause`) and keeps the fields `RecallObservation`
  records (`recall_fields`; of its microagents only their names, `microagents`): V0 holds the observation in its
  history whatever it sends for it (`state_tracker.py@156d0686 L38-47`), which `openhands-v0` replays.

Whether prompt extensions were on is read from the file where it says so (an evaluation run's
`metadata.agent_config.enable_prompt_extensions`). Where it does not (`PromptExtensions`), the
reading is upstream's default for the kind of file, recorded in the recall item's meta
(`prompt_extensions`, `prompt_extensions_recorded: false`, `prompt_extensions_basis`): off for an
evaluation output (a run line with `instance_id` and `metadata`: every `evaluation/benchmarks/*/
run_infer.py` at 156d0686 builds its `AgentConfig` with `enable_prompt_extensions=False`, Multi-SWE-
bench's at L344-350, committed with the example output of the corpus in 3d22520992), on for anything
else (`AgentConfig.enable_prompt_extensions` defaults to True, `core/config/agent_config.py@156d0686
L42`). `disabled_microagents` is never recorded: its default, none, is used.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compaction_bench.importing import Importer, ImportFailure, read_head
from compaction_bench.scenarios.builder import TranscriptBuilder, as_arguments, as_text, list_of, mapping_of
from compaction_bench.scenarios.openai_style import openai_usage
from compaction_bench.scenarios.openhands_v1 import (
    FORMAT,
    V1_BASE_STATE,
    V1_KIND_RE,
    V1_STATE_RE,
    is_v1_event,
    is_v1_list,
    read_v1_conversation,
    read_v1_events,
    refuse_app_server_event_file,
    refuse_app_server_events,
    refuse_v1_event_file,
    refuse_v1_events_folder,
    v1_conversation_entry,
)
from compaction_bench.scenarios.readers import read_json_reported, read_jsonl
from compaction_bench.transcript import Attachment, Item, Transcript, json_type

NON_TOOL_ACTIONS = frozenset({"message", "system", "recall", "change_agent_state"})
#: What a V0 system event records besides its content (`SystemMessageAction`, `events/action/message.py@156d0686 L43-53`).
SYSTEM_FIELDS = ("tools", "agent_class", "openhands_version")
#: The fields of a V0 `CondensationAction` (`events/action/agent.py@156d0686 L107-136`).
CONDENSATION_FIELDS = ("forgotten_event_ids", "forgotten_events_start_id", "forgotten_events_end_id", "summary", "summary_offset")
MARKER_OBSERVATIONS = frozenset({"null", "agent_state_changed"})
_EVENT_RE = re.compile(
    r'"(action|observation)"\s*:\s*"(run|run_ipython|read|edit|write|message|recall|system|think|finish|browse|'
    r'null|error|agent_state_changed|change_agent_state|delegate)"'
)


def _call_arguments(message: Mapping[str, Any] | None, call_id: str, args: Mapping[str, Any]) -> str:
    """The arguments the model sent for `call_id` (from the recorded response's message, `_Run.model_message`), else
    the action's args."""
    for call in list_of((message or {}).get("tool_calls")):
        if isinstance(call, Mapping) and call.get("id") == call_id and isinstance(call.get("function"), Mapping):
            return as_arguments(call["function"].get("arguments"))
    return as_arguments({k: v for k, v in args.items() if k != "thought"})


@dataclass(frozen=True)
class PromptExtensions:
    """Whether V0 sent a recall observation's context to the model (`AgentConfig.enable_prompt_extensions`),
    whether the file records it, and where the value comes from (see the module docstring)."""

    enabled: bool
    recorded: bool
    basis: str

    def meta(self) -> dict[str, Any]:
        return {"prompt_extensions": self.enabled, "prompt_extensions_recorded": self.recorded,
                "prompt_extensions_basis": self.basis}


#: A file that does not say: `AgentConfig`'s default (`core/config/agent_config.py@156d0686 L42`).
DEFAULT_EXTENSIONS = PromptExtensions(True, False, "not recorded; AgentConfig default (agent_config.py@156d0686 L42)")
#: An evaluation run that does not say: every `evaluation/benchmarks/*/run_infer.py` at 156d0686 turns them off.
EVALUATION_EXTENSIONS = PromptExtensions(
    False, False, "not recorded; evaluation run: every evaluation/benchmarks/*/run_infer.py@156d0686 sets enable_prompt_extensions=False"
)


def prompt_extensions_of(record: Mapping[str, Any]) -> PromptExtensions:
    """The prompt-extension setting of an evaluation or resolver output line (an `EvalOutput`, whose `metadata` is
    an `EvalMetadata` with an optional `agent_config`, `evaluation/utils/shared.py@156d0686 L44-69`)."""
    metadata = mapping_of(record.get("metadata"))
    recorded = mapping_of(metadata.get("agent_config")).get("enable_prompt_extensions")
    if isinstance(recorded, bool):
        return PromptExtensions(recorded, True, "recorded: metadata.agent_config.enable_prompt_extensions")
    if "instance_id" in record and metadata:
        return EVALUATION_EXTENSIONS
    return DEFAULT_EXTENSIONS


class _Run:
    """Converts one event list into a transcript."""

    def __init__(self, path: Path, where: str, line: int | None, extensions: PromptExtensions = DEFAULT_EXTENSIONS) -> None:
        self.builder = TranscriptBuilder(path, FORMAT)
        self.where, self.line = where, line
        self.extensions = extensions
        self.responses: dict[str, int] = {}
        self.calls_by_event: dict[str, str] = {}
        self.unanswered: list[str] = []
        self.spoken: set[int] = set()  # the responses whose text is imported (`_spoken`)
        self.items_of_event: dict[str, list[str]] = {}  # the item ids each event became (a condensation names events)
        self.recalled_agents: set[str] = set()  # the microagents of the recall observations read so far
        self.recall_actions: dict[str, str] = {}  # the item id of each recall action, by its event id

    def add(self, event_id: Any, kind: str, text: str = "", **fields: Any) -> Item:
        """`TranscriptBuilder.add`, remembering which event the item came from."""
        item = self.builder.add(kind, text, **fields)
        self.items_of_event.setdefault(str(event_id), []).append(item.id)
        return item

    def events(self, events: list[Any]) -> None:
        for n, event in enumerate(events):
            if not isinstance(event, Mapping):
                self.builder.problem(f"{self.where} event {n}: not an object ({type(event).__name__}); kept as a marker", self.line)
                self.builder.add("marker", json.dumps(event, ensure_ascii=False), meta={"event": "unreadable-event"})
            elif is_v1_event(event):  # a V1 ActionEvent has an `action` too: never read as a V0 action
                self.builder.problem(f"{self.where} event {n}: an OpenHands V1 event ({event['kind']}) among V0 events; "
                                     "kept as a marker", self.line)
                self.builder.add("marker", json.dumps(event, ensure_ascii=False), meta={"event": "unknown-event"})
            elif "action" in event:
                self.action(n, event)
            elif "observation" in event:
                self.observation(n, event)
            else:
                self.builder.problem(f"{self.where} event {n}: neither action nor observation; kept as a marker", self.line)
                self.builder.add("marker", as_text(event.get("message")), meta={"event": "unknown-event"})

    def _response(self, n: int, metadata: Mapping[str, Any]) -> int:
        raw = mapping_of(metadata.get("model_response"))
        key = str(raw.get("id") or "")
        if not key:
            return self.builder.new_response()
        if key not in self.responses:
            self.responses[key] = self.builder.new_response()
            self.builder.set_usage(self.responses[key], openai_usage(raw.get("usage"), self.builder.reporter(self.line, f"{self.where} event {n}")))
            model = raw.get("model")
            self.builder.model = self.builder.model or (model if isinstance(model, str) else None)
        return self.responses[key]

    def model_message(self, n: int, metadata: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The message of the recorded model response, `tool_call_metadata.model_response.choices[0].message` (what V0
        sends back as the assistant message, `conversation_memory.py@156d0686 L258-270`), or None where none is
        recorded. A field on that path, or its `tool_calls`, of another type than litellm's `ModelResponse` gives it
        is reported naming the line and the event (`_malformed`), and the action's own args stand for what it would
        have held."""
        response = metadata.get("model_response")
        choices = response.get("choices") if isinstance(response, Mapping) else None
        choice = choices[0] if isinstance(choices, list) and choices else None
        message = choice.get("message") if isinstance(choice, Mapping) else None
        for field, value, wanted in (("model_response", response, Mapping), ("model_response.choices", choices, list),
                                     ("model_response.choices[0]", choice, Mapping),
                                     ("model_response.choices[0].message", message, Mapping)):
            if value is None:
                return None
            if not isinstance(value, wanted):
                self._malformed(n, field, value, "a list" if wanted is list else "an object")
                return None
        assert isinstance(message, Mapping)
        calls = message.get("tool_calls")
        if calls is None or isinstance(calls, list):
            return message
        self._malformed(n, "model_response.choices[0].message.tool_calls", calls, "a list")
        return {k: v for k, v in message.items() if k != "tool_calls"}

    def _malformed(self, n: int, field: str, value: Any, wanted: str) -> None:
        self.builder.problem(f"{self.where} event {n}: tool_call_metadata.{field} is a JSON {json_type(value)}, not {wanted}; "
                             "the action's args are read instead", self.line)

    def _spoken(self, message: Mapping[str, Any] | None, response: int, thought: Any) -> str:
        """The text the model wrote with a tool call, what V0 sends as the assistant message's content: the
        recorded response's `content` (`message`, `model_message`), once per response (on its first action), else
        the action's `args.thought`. The two differ for a `think` call, whose thought is the content and the tool's
        own thought joined (`combine_thought`, `function_calling.py@156d0686 L49-56`)."""
        if message is None or "content" not in message:
            return thought if isinstance(thought, str) else ""
        if response in self.spoken:
            return ""
        self.spoken.add(response)
        content = message["content"]
        return content if isinstance(content, str) else ""

    def action(self, n: int, event: Mapping[str, Any]) -> None:
        kind = str(event.get("action"))
        args: Mapping[str, Any] = mapping_of(event["args"]) if isinstance(event.get("args"), Mapping) else {
            k: v for k, v in event.items() if k != "action"
        }
        event_id = event.get("id", n)
        ts = event.get("timestamp") if isinstance(event.get("timestamp"), str) else None
        source = event.get("source") or ("user" if n == 0 else "agent")
        metadata = mapping_of(event.get("tool_call_metadata"))
        ident = f"event-{event_id}"
        if kind == "system":
            meta = system_meta(args, self.builder.reporter(self.line, f"{self.where} event {n} (system)"))
            self.add(event_id, "system", as_text(args.get("content") or event.get("message")), id=ident, timestamp=ts, meta=meta)
        elif kind == "message" and source == "user":
            attachments = self.images(n, args.get("image_urls"))
            self.add(event_id, "user", as_text(args.get("content") or event.get("message")), id=ident, attachments=attachments, timestamp=ts)
        elif kind == "message":
            response = self._response(n, metadata)
            self.add(event_id, "assistant", as_text(args.get("content") or event.get("message")), id=ident, response=response, timestamp=ts)
        elif kind == "condensation":
            self.condensation(n, event, args, ident, ts)
        elif kind in NON_TOOL_ACTIONS or (kind == "condensation_request" and not metadata):
            event_name = "compaction-request" if kind == "condensation_request" else kind
            meta = {"event": event_name, "source": str(source)}
            if kind == "recall":  # what V0's `str(event)` and conversation window read of a `RecallAction`
                meta |= {"recall_type": args.get("recall_type"), "query": as_text(args.get("query"))}
                self.recall_actions[str(event_id)] = ident
            self.add(event_id, "marker", as_text(event.get("message")), id=ident, timestamp=ts, meta=meta)
        else:
            response = self._response(n, metadata)
            message = self.model_message(n, metadata)
            thought = self._spoken(message, response, args.get("thought"))
            if thought.strip():
                self.add(event_id, "assistant", thought, id=f"{ident}:thought", response=response, timestamp=ts)
            call_id = str(metadata.get("tool_call_id") or ident)
            self.add(
                event_id,
                "tool_call",
                id=call_id,
                call_id=call_id,
                tool_name=str(metadata.get("function_name") or kind),
                arguments=_call_arguments(message, call_id, args),
                response=response,
                timestamp=ts,
                meta={"action": kind},
            )
            self.calls_by_event[str(event_id)] = call_id
            self.unanswered.append(call_id)

    def images(self, n: int, urls: Any) -> tuple[Attachment, ...]:
        """A user message's `image_urls` (`MessageAction.image_urls: list[str] | None`, `events/action/message.py@156d0686
        L13`), one attachment per URL; a value that is no list, or an entry that is no string, is reported and left
        out."""
        if urls is None:
            return ()
        report = self.builder.reporter(self.line, f"{self.where} event {n}")
        if not isinstance(urls, list):
            report(f"image_urls is a JSON {json_type(urls)}, not a list of URLs; left out")
            return ()
        for k, url in enumerate(urls):
            if not isinstance(url, str):
                report(f"image_urls[{k}] is a JSON {json_type(url)}, not a URL; left out")
        return tuple(Attachment(mime="image/url", name=url) for url in urls if isinstance(url, str))

    def condensation(self, n: int, event: Mapping[str, Any], args: Mapping[str, Any], ident: str, ts: str | None) -> None:
        """A recorded `CondensationAction`: the agent's own compaction, a marker (see the module docstring)."""
        recorded = {k: args.get(k) for k in CONDENSATION_FIELDS}
        for problem in condensation_problems(recorded):
            self.builder.problem(f"{self.where} event {n} (condensation): {problem}; kept as recorded", self.line)
        forgotten = forgotten_event_ids(recorded)
        items = [i for e in forgotten for i in self.items_of_event.get(str(e), ())]
        meta = {"event": "compaction", "action": "condensation", "source": str(event.get("source") or "agent"), **recorded,
                "forgotten_item_ids": items}
        summary = recorded["summary"]
        self.add(event.get("id", n), "marker", summary if isinstance(summary, str) else "", id=ident, timestamp=ts, meta=meta)

    def recall(self, n: int, event: Mapping[str, Any], ident: str, ts: str | None) -> None:
        """A recall observation: the context V0 renders from it, or a marker when V0 sends the model nothing."""
        extras = mapping_of(event.get("extras"))
        recall_type = extras.get("recall_type")
        meta = {"observation": "recall", "recall_type": recall_type, **self.extensions.meta()}
        if str(event.get("cause")) in self.recall_actions:
            meta["recall_action"] = self.recall_actions[str(event.get("cause"))]
        text = ""
        if recall_type not in RECALL_TYPES:
            self.builder.problem(f"{self.where} event {n}: recall observation of unknown recall_type {recall_type!r}; "
                                 "kept as a marker", self.line)
        else:
            fields = recall_fields(extras, self.builder.reporter(self.line, f"{self.where} event {n}"))
            meta["recall_fields"] = {name: fields[name] for name in (*RECALL_TEXT_FIELDS, *RECALL_MAP_FIELDS)} | {
                "microagents": [a["name"] for a in fields["microagent_knowledge"]]}
            if self.extensions.enabled:
                text = recall_text(fields, self.recalled_agents)
                self.recalled_agents.update(a["name"] for a in fields["microagent_knowledge"])
        if text:
            self.add(event.get("id", n), "user", text, id=ident, synthetic=True, timestamp=ts, meta=meta)
        else:
            meta |= {"event": "observation:recall", "sent_to_model": False}
            self.add(event.get("id", n), "marker", as_text(event.get("content")), id=ident, timestamp=ts, meta=meta)

    def observation(self, n: int, event: Mapping[str, Any]) -> None:
        kind = str(event.get("observation"))
        ts = event.get("timestamp") if isinstance(event.get("timestamp"), str) else None
        event_id = event.get("id", n)
        ident = f"event-{event_id}"
        metadata = mapping_of(event.get("tool_call_metadata"))
        text = as_text(event.get("content"))
        call_id = metadata.get("tool_call_id") or self.calls_by_event.get(str(event.get("cause")))
        if not call_id and "cause" not in event and "id" not in event and self.unanswered:
            call_id = self.unanswered[-1]
        if call_id:
            call_id = str(call_id)
            if call_id in self.unanswered:
                self.unanswered.remove(call_id)
            extras = mapping_of(event.get("extras"))
            exit_code = (extras.get("metadata") or {}).get("exit_code") if isinstance(extras.get("metadata"), Mapping) else event.get("exit_code")
            self.add(
                event_id,
                "tool_result",
                text,
                id=ident,
                call_id=call_id,
                is_error=kind == "error" or (isinstance(exit_code, int) and exit_code not in (0, -1)),
                timestamp=ts,
                meta=observation_meta(kind, event),
            )
        elif kind == "recall":
            self.recall(n, event, ident, ts)
        elif kind == "error":
            self.add(event_id, "user", text, id=ident, synthetic=True, timestamp=ts, meta={"observation": kind, "error": True})
        elif kind in MARKER_OBSERVATIONS:
            self.add(event_id, "marker", as_text(event.get("message")), id=ident, timestamp=ts, meta={"event": f"observation:{kind}"})
        else:
            cause = event.get("cause")
            self.add(event_id, "tool_result", text, id=ident, call_id=f"event-{cause}", timestamp=ts, meta=observation_meta(kind, event))


#: The fields of a command observation's `extras.metadata` (`CmdOutputMetadata`,
#: `openhands/events/observation/commands.py@156d0686 L25-35`): V0 renders some around its content
#: (`to_agent_observation`) and all of them in `str(event)`, which its summary prompt shows.
COMMAND_METADATA = ("exit_code", "pid", "username", "hostname", "working_dir", "py_interpreter_path", "prefix", "suffix")


def observation_meta(kind: str, event: Mapping[str, Any]) -> dict[str, Any]:
    """A tool result's meta: its observation type, and for a command (`run`) the recorded metadata V0
    renders around the content (`command_metadata`, the `COMMAND_METADATA` fields it has)."""
    meta: dict[str, Any] = {"observation": kind}
    recorded = mapping_of(event.get("extras")).get("metadata")
    if kind == "run" and isinstance(recorded, Mapping):
        meta["command_metadata"] = {k: recorded[k] for k in COMMAND_METADATA if k in recorded}
    return meta


def system_meta(args: Mapping[str, Any], report: Callable[[str], None]) -> dict[str, Any]:
    """The `SYSTEM_FIELDS` a system event records, each of its type (`tools: list | None`, the others `str | None`,
    `events/action/message.py@156d0686 L50-52`); one of another type is reported and left out."""
    meta: dict[str, Any] = {}
    for name in SYSTEM_FIELDS:
        value = args.get(name)
        wanted = list if name == "tools" else str
        if isinstance(value, wanted):
            meta[name] = value
        elif value is not None:
            report(f"'{name}' is a JSON {json_type(value)}, expected {'a list' if wanted is list else 'a string'}; left out")
    return meta


# --------------------------------------------------------------------------- condensation
def condensation_problems(recorded: Mapping[str, Any]) -> list[str]:
    """What makes a recorded condensation one V0 refuses (`CondensationAction._validate_field_polymorphism`,
    `events/action/agent.py@156d0686 L138-162`): exactly one of an id list and a start/end range, a summary
    with its offset or neither; and fields of the wrong type."""
    problems = []
    ids, start, end = recorded["forgotten_event_ids"], recorded["forgotten_events_start_id"], recorded["forgotten_events_end_id"]
    if (ids is not None) == (start is not None and end is not None):
        problems.append("expected either forgotten_event_ids or forgotten_events_start_id and _end_id")
    if ids is not None and not (isinstance(ids, list) and all(_is_id(i) for i in ids)):
        problems.append("forgotten_event_ids is no list of event ids")
    for name in ("forgotten_events_start_id", "forgotten_events_end_id", "summary_offset"):
        if recorded[name] is not None and not _is_id(recorded[name]):
            problems.append(f"{name} is {recorded[name]!r}, no whole number of at least 0")
    if (recorded["summary"] is None) != (recorded["summary_offset"] is None):
        problems.append("a summary needs its summary_offset and an offset its summary")
    if recorded["summary"] is not None and not isinstance(recorded["summary"], str):
        problems.append(f"summary is a JSON {json_type(recorded['summary'])}, not a string")
    return problems


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def forgotten_event_ids(recorded: Mapping[str, Any]) -> list[int]:
    """`CondensationAction.forgotten` (L164-182): the id list, else every id of the inclusive range."""
    ids, start, end = recorded["forgotten_event_ids"], recorded["forgotten_events_start_id"], recorded["forgotten_events_end_id"]
    if isinstance(ids, list):
        return [i for i in ids if _is_id(i)]
    if _is_id(start) and _is_id(end):
        return list(range(start, end + 1))
    return []


# --------------------------------------------------------------------------- recall
#: `RecallType` (`events/event.py@156d0686 L25-32`).
RECALL_TYPES = ("workspace_context", "knowledge")
#: The string fields of a `RecallObservation` (`events/observation/agent.py@156d0686 L62-83`), all '' by default.
RECALL_TEXT_FIELDS = ("repo_name", "repo_directory", "repo_branch", "repo_instructions", "additional_agent_instructions",
                      "date", "conversation_instructions", "working_dir")
#: Its string-to-string maps: `runtime_hosts` (host to port) and `custom_secrets_descriptions`.
RECALL_MAP_FIELDS = ("runtime_hosts", "custom_secrets_descriptions")
#: A `MicroagentKnowledge`'s fields (L47-59).
MICROAGENT_FIELDS = ("name", "trigger", "content")


def recall_fields(extras: Mapping[str, Any], report: Callable[[str], None]) -> dict[str, Any]:
    """A recall observation's fields from its `extras`, each its default when absent; a field of another type
    (which V0 would not have read back) is reported and taken as its default."""
    fields: dict[str, Any] = {"recall_type": extras.get("recall_type")}
    for name in RECALL_TEXT_FIELDS:
        fields[name] = _typed(extras, name, str, "", report)
    for name in RECALL_MAP_FIELDS:
        fields[name] = _typed(extras, name, Mapping, {}, report)
    agents = []
    for n, agent in enumerate(_typed(extras, "microagent_knowledge", list, [], report)):
        if isinstance(agent, Mapping) and all(isinstance(agent.get(k), str) for k in MICROAGENT_FIELDS):
            agents.append({k: agent[k] for k in MICROAGENT_FIELDS})
        else:
            report(f"microagent_knowledge[{n}] is no {{name, trigger, content}} of strings; left out")
    fields["microagent_knowledge"] = agents
    return fields


def _typed(extras: Mapping[str, Any], name: str, wanted: type, default: Any, report: Callable[[str], None]) -> Any:
    value = extras.get(name)
    if value is None:
        return default
    if not isinstance(value, wanted):
        report(f"recall {name} is a JSON {json_type(value)}; taken as empty")
        return default
    return value


def recall_text(fields: Mapping[str, Any], recalled_agents: set[str]) -> str:
    """The user message V0 makes of a recall observation with prompt extensions on (`conversation_memory.py@156d0686
    L535-659`), '' where it makes none. A workspace context is its rendered context and its microagents' knowledge,
    two text contents of one message, joined here by a line break as V0's string serialisation joins them
    (`core/message.py@156d0686 L87-91`); a knowledge recall is the knowledge of its microagents that no earlier recall
    observation named (`_filter_agents_in_microagent_obs`, L702-749; the earlier ones of the whole recording, where V0
    looks at those of the condensed view)."""
    agents = fields["microagent_knowledge"]
    if fields["recall_type"] == "knowledge":
        return microagent_text([a for a in agents if a["name"] not in recalled_agents])
    return "\n".join(part for part in (workspace_context_text(fields), microagent_text(agents)) if part)


def workspace_context_text(fields: Mapping[str, Any]) -> str:
    """V0's `build_workspace_context` (`utils/prompt.py@156d0686 L107-120`) of a workspace-context recall: the
    `additional_info.j2` template (`agenthub/codeact_agent/prompts/additional_info.j2@156d0686`) rendered with
    Jinja's default whitespace and stripped, '' when the recall has no repository, date, secrets, repository or
    conversation instructions (L571-606). The tags and the lines that carry a recorded value are upstream's; the two
    guidance paragraphs (after the hosts, after the branch) are in this project's words, of about upstream's length."""
    has_repository = bool(fields["repo_name"] or fields["repo_directory"])
    has_runtime = bool(fields["date"] or fields["custom_secrets_descriptions"])
    if not (has_repository or has_runtime or fields["repo_instructions"].strip() or fields["conversation_instructions"]):
        return ""
    instructions = fields["repo_instructions"]
    instructions_block = f"<REPOSITORY_INSTRUCTIONS>\n{instructions}\n</REPOSITORY_INSTRUCTIONS>\n" if instructions else ""
    repository = _repository_info(fields) if has_repository else ""
    return f"{repository}\n{instructions_block}\n{_runtime_information(fields)}".strip()


#: What V0 tells the model after the branch line (own words, see `workspace_context_text`).
BRANCH_GUIDANCE = (
    "IMPORTANT: Keep your work on the branch \"{branch}\" unless:\n"
    "    1. the user asks you to use another branch\n"
    "    2. \"{branch}\" is \"main\", \"master\" or another default branch, where pushing directly may be unsafe\n"
)
#: What V0 tells the model after the hosts list (own words, see `workspace_context_text`).
HOSTS_GUIDANCE = (
    "Use these ports when you start a web server. Also configure the server so that it\n"
    "allows iframes and CORS requests and accepts connections from any host (for example\n"
    "0.0.0.0); with vite.config.js, for instance, set server.host and server.allowedHosts to true\n"
)


def _repository_info(fields: Mapping[str, Any]) -> str:
    branch = fields["repo_branch"]
    checked_out = f"The repository has been checked out to branch \"{branch}\".\n\n" + BRANCH_GUIDANCE.format(branch=branch)
    return ("\n<REPOSITORY_INFO>\n"
            f"At the user's request, repository {fields['repo_name']} has been cloned to {fields['repo_directory']} "
            "in the current working directory.\n"
            f"{checked_out if branch else ''}\n</REPOSITORY_INFO>\n")


def _runtime_information(fields: Mapping[str, Any]) -> str:
    """The template's `<RUNTIME_INFORMATION>` block (V0 always passes a `RuntimeInfo`, L548-562) and the
    conversation instructions inside it."""
    out = "<RUNTIME_INFORMATION>\n"
    if fields["working_dir"]:
        out += f"\nThe current working directory is {fields['working_dir']}\n"
    out += "\n"
    if fields["runtime_hosts"]:
        hosts = "".join(f"* {host} (port {port})\n" for host, port in fields["runtime_hosts"].items())
        out += ("\nThe user has access to the following hosts for accessing a web application,\n"
                f"each of which has a corresponding port:\n{hosts}\n{HOSTS_GUIDANCE}")
    out += "\n"
    if fields["additional_agent_instructions"]:
        out += f"\n{fields['additional_agent_instructions']}\n"
    out += "\n"
    if fields["custom_secrets_descriptions"]:
        secrets = "".join(f"\n* **${name}**: {text}\n" for name, text in fields["custom_secrets_descriptions"].items())
        out += f"\n<CUSTOM_SECRETS>\nYou have access to the following environment variables\n{secrets}\n</CUSTOM_SECRETS>\n"
    out += "\n"
    if fields["date"]:
        out += f"\nToday's date is {fields['date']} (UTC).\n"
    out += "\n</RUNTIME_INFORMATION>\n"
    if fields["conversation_instructions"]:
        out += f"<CONVERSATION_INSTRUCTIONS>\n{fields['conversation_instructions']}\n</CONVERSATION_INSTRUCTIONS>\n"
    return out


def microagent_text(agents: list[Mapping[str, str]]) -> str:
    """V0's `build_microagent_info` (`utils/prompt.py@156d0686 L122-134`): `microagent_info.j2`, one `<EXTRA_INFO>`
    block per microagent, stripped; '' for none."""
    return "".join(
        f"\n<EXTRA_INFO>\nThe following information has been included based on a keyword match for \"{a['trigger']}\".\n"
        f"It may or may not be relevant to the user's request.\n\n{a['content']}\n</EXTRA_INFO>\n"
        for a in agents
    ).strip()


class OpenHandsImporter(Importer):
    format = FORMAT
    description = ("OpenHands event stream: V0 (event list JSON, evaluation/resolver output JSONL with one run per line) and "
                   "V1 software-agent-sdk (a conversation folder, or its base_state.json, with its events/ folder; event lists and lines)")
    suffixes = (".json", ".jsonl")
    priority = 45

    @classmethod
    def sniff(cls, path: Path, head: str) -> bool:
        if head.lstrip()[:1] not in ("[", "{"):
            return False
        if path.name == V1_BASE_STATE and V1_STATE_RE.search(head):
            return True
        return bool(_EVENT_RE.search(head) or V1_KIND_RE.search(head))

    @classmethod
    def folder_entry(cls, folder: Path) -> str | None:
        """A persisted V1 conversation given as its folder is read from its `base_state.json`; its `events/` folder
        and an OpenHands app server's event folder are refused, naming what to pass instead."""
        entry = v1_conversation_entry(folder)
        if entry is None:
            refuse_v1_events_folder(folder)
            refuse_app_server_events(folder)
        return entry

    def load(self, path: Path, **options: Any) -> list[Transcript]:
        if path.name == V1_BASE_STATE:
            return [read_v1_conversation(path)]
        refuse_v1_event_file(path)
        refuse_app_server_event_file(path)
        if read_head(path, 1024).lstrip()[:1] == "[":  # decompressed, BOM removed
            events, problems = read_json_reported(path)
            return [self._run(path, events, problems, path.stem, None, {}, None, DEFAULT_EXTENSIONS)]
        lines = read_jsonl(path)
        if not any(_is_run(record) for _, record in lines.lines) and any(is_v1_event(record) for _, record in lines.lines):
            events = [(f"{path}:{number}", record) for number, record in lines.lines]  # JSON lines of V1 events
            return [read_v1_events(path, events, lines.problems, path.stem, {}, {}, None)]
        runs: list[tuple[int, Mapping[str, Any]]] = []
        for number, record in lines.lines:  # every line is looked at before any run is built: all carry the file's problems
            if _is_run(record):
                runs.append((number, record))
            else:
                what = "no 'history' list" if isinstance(record, Mapping) else f"a JSON {json_type(record)}, not an object"
                lines.problems.append(f"{path}:{number}: not an OpenHands run ({what}); line kept out")
        if not runs:
            raise ImportFailure(f"{path}: no OpenHands run in the file" + (f" ({lines.problems[0]})" if lines.problems else ""))
        out = []
        for number, record in runs:
            issue = mapping_of(record.get("issue"))
            name = record.get("instance_id") or issue.get("number") or number
            meta = {k: record[k] for k in ("metrics", "error", "success", "test_result") if k in record}
            metadata = mapping_of(record.get("metadata"))
            config = mapping_of(metadata.get("llm_config"))
            model = config.get("model") if isinstance(config.get("model"), str) else None
            extensions = prompt_extensions_of(record)
            out.append(self._run(path, record["history"], lines.problems, f"{path.stem}:{name}", number, meta, model, extensions))
        return out

    @staticmethod
    def _run(
        path: Path, events: Any, problems: list[str], name: str, line: int | None, meta: dict[str, Any], model: str | None,
        extensions: PromptExtensions,
    ) -> Transcript:
        if not isinstance(events, list):
            raise ImportFailure(f"{path}:{line or 1}: expected a list of OpenHands events, got a JSON {type(events).__name__}")
        if is_v1_list(events):
            place = f"{path}:{line}: history" if line else f"{path}: events"
            located = [(f"{place}[{n}]", event) for n, event in enumerate(events)]
            return read_v1_events(path, located, problems, name, {"line": line} if line else {}, meta, model)
        run = _Run(path, f"line {line}" if line else "events", line, extensions)
        run.builder.problems.extend(problems)
        run.builder.model = model
        run.events(events)
        return run.builder.finish(name, source={"line": line} if line else {}, meta=meta)


def _is_run(record: Any) -> bool:
    """An evaluation or resolver output line: a run whose events are its `history`."""
    return isinstance(record, Mapping) and isinstance(record.get("history"), list)
