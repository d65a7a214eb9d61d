"""Importer for OpenHands (OpenDevin) event streams (MANIFEST "openhands-events").

Owns the containers (a bare event list `*.json`; evaluation output JSONL with one run per line
under `history`, one transcript per line, where a line that is no run is a problem of every
transcript of the file; the 2024 resolver output with flat action/observation dicts) and the event
rules. It reads V0 events (`action` / `observation` keys, All-Hands-AI/OpenHands@156d0686) and V1
events (the software-agent-sdk's, OpenHands/software-agent-sdk@611629e6: the class name in `kind`),
which have containers of their own too: a persisted conversation, read from its `base_state.json`
(its events are the files of the `events/` folder beside it), a JSON list or JSON lines of V1 events,
or a run whose `history` holds them. A list is V1 when most of its events are; an event of the other
form in it is reported and kept as an `unknown-event` marker. The V1 rules are `_V1Run`'s (below);
the V0 rules:

- `system` and user `message` actions are system and user items; the system item's meta keeps what
  the event records besides its content: the tool definitions the model was given (`tools`),
  `agent_class` and `openhands_version` (`SystemMessageAction`, `events/action/message.py@156d0686
  L43-66`); an agent `message` is an assistant reply; `recall` actions, `change_agent_state` and
  `agent_state_changed` / `null` observations are markers;
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
  response, whose `usage` counts once; `args.thought` is the response's text;
- an observation answers the call named by its `tool_call_metadata.tool_call_id`, else the one of
  its `cause` event, else (old flat records without ids) the latest unanswered call; an `error`
  observation linked to nothing is what OpenHands shows the model as a user message (synthetic);
- a `recall` observation (its `content` is the UI's "Added workspace context", which the model
  never sees) is what V0's `ConversationMemory` makes of it (`memory/conversation_memory.py@156d0686
  L531-666`): with prompt extensions on, a synthetic user item holding the text rendered from its
  `extras` (`workspace_context_text`, `microagent_text`), or nothing when there is nothing to render;
  with them off (`enable_prompt_extensions=False`), nothing. "Nothing" is a marker
  `{"event": "observation:recall", "sent_to_model": false}`, never model input.

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
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compaction_bench.importing import Importer, ImportFailure, read_head
from compaction_bench.scenarios.builder import (
    TranscriptBuilder,
    as_arguments,
    as_text,
    image_attachment,
    list_of,
    mapping_of,
    token_counts,
)
from compaction_bench.scenarios.openai_style import openai_usage
from compaction_bench.scenarios.readers import read_json_reported, read_jsonl
from compaction_bench.transcript import Attachment, Item, Transcript, Usage, json_type

FORMAT = "openhands"
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


def _call_arguments(metadata: Mapping[str, Any], call_id: str, args: Mapping[str, Any]) -> str:
    """The arguments the model sent for `call_id` (from the raw response), else the action's args."""
    response = mapping_of(metadata.get("model_response"))
    for choice in response.get("choices") or []:
        message = choice.get("message") if isinstance(choice, Mapping) else None
        for call in (message or {}).get("tool_calls") or []:
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

    def _spoken(self, metadata: Mapping[str, Any], response: int, thought: Any) -> str:
        """The text the model wrote with a tool call, what V0 sends as the assistant message's content: the
        recorded response's `content`, once per response (on its first action), else the action's
        `args.thought`. The two differ for a `think` call, whose thought is the content and the tool's own
        thought joined (`combine_thought`, `function_calling.py@156d0686 L49-56`)."""
        choice = next(iter(mapping_of(metadata.get("model_response")).get("choices") or []), None)
        message = choice.get("message") if isinstance(choice, Mapping) else None
        if not isinstance(message, Mapping) or "content" not in message:
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
            images = args.get("image_urls") or []
            attachments = tuple(Attachment(mime="image/url", name=str(u)) for u in images if isinstance(u, str))
            self.add(event_id, "user", as_text(args.get("content") or event.get("message")), id=ident, attachments=attachments, timestamp=ts)
        elif kind == "message":
            response = self._response(n, metadata)
            self.add(event_id, "assistant", as_text(args.get("content") or event.get("message")), id=ident, response=response, timestamp=ts)
        elif kind == "condensation":
            self.condensation(n, event, args, ident, ts)
        elif kind in NON_TOOL_ACTIONS or (kind == "condensation_request" and not metadata):
            event_name = "compaction-request" if kind == "condensation_request" else kind
            self.add(event_id, "marker", as_text(event.get("message")), id=ident, timestamp=ts, meta={"event": event_name, "source": str(source)})
        else:
            response = self._response(n, metadata)
            thought = self._spoken(metadata, response, args.get("thought"))
            if thought.strip():
                self.add(event_id, "assistant", thought, id=f"{ident}:thought", response=response, timestamp=ts)
            call_id = str(metadata.get("tool_call_id") or ident)
            self.add(
                event_id,
                "tool_call",
                id=call_id,
                call_id=call_id,
                tool_name=str(metadata.get("function_name") or kind),
                arguments=_call_arguments(metadata, call_id, args),
                response=response,
                timestamp=ts,
                meta={"action": kind},
            )
            self.calls_by_event[str(event_id)] = call_id
            self.unanswered.append(call_id)

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
        text = ""
        if recall_type not in RECALL_TYPES:
            self.builder.problem(f"{self.where} event {n}: recall observation of unknown recall_type {recall_type!r}; "
                                 "kept as a marker", self.line)
        elif self.extensions.enabled:
            fields = recall_fields(extras, self.builder.reporter(self.line, f"{self.where} event {n}"))
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


# =========================================================================== V1: software-agent-sdk events
# Upstream: OpenHands/software-agent-sdk@611629e6 (spec §0, "SDK"); the files below are under openhands-sdk/openhands/sdk/.

#: A persisted conversation (`conversation/persistence_const.py@611629e6 L4-11`): `base_state.json` (the
#: `ConversationState` without its events, `conversation/state.py@611629e6 L421-443`) beside `events/`, one file per
#: event, `event-<index, 5 digits or more>-<event id>.json`, holding `event.model_dump_json(exclude_none=True)`
#: (`EventLog.append`, `conversation/event_store.py@611629e6`).
V1_BASE_STATE = "base_state.json"
V1_EVENTS_DIR = "events"
V1_EVENT_NAME = re.compile(r"^event-(?P<idx>\d{5,})-(?P<event_id>[0-9a-fA-F\-]{8,})\.json$")
#: The log's lock file (`LOCK_FILE_NAME`, event_store.py@611629e6), no event.
V1_LOCK_FILE = ".eventlog.lock"
#: `ROOT_PARENT_ID` (`event/types.py@611629e6`): the `parent_id` of a root made by `navigate_to(None)`.
V1_ROOT_PARENT = "__root__"
#: Events that are no node of the conversation tree: a state update never becomes the leaf (`append_event`), and a
#: legacy log's trailing error is passed over when the leaf is resolved (`_resolve_active_leaf`, state.py@611629e6
#: L263-335). They are read wherever they are.
V1_ARTIFACTS = frozenset({"ConversationStateUpdateEvent", "ConversationErrorEvent"})
#: Events the SDK never turns into model input and that carry no transcript fact (state sync, completion logs,
#: token ids, streaming deltas: `event/conversation_state.py`, `llm_completion_log.py`, `token.py`,
#: `streaming_delta.py`@611629e6): counted in `meta["skipped"]`.
V1_SKIPPED = frozenset({"ConversationStateUpdateEvent", "LLMCompletionLogEvent", "TokenEvent", "StreamingDeltaEvent"})
#: The token counts of a `TokenUsage` (`llm/utils/metrics.py@611629e6 L34-59`), as `Telemetry._record_usage` fills
#: them (`llm/utils/telemetry.py@611629e6 L192-249`): `prompt_tokens` includes the cached part (LiteLLM's
#: convention, the `Usage.input` one).
V1_COUNTS = ("prompt_tokens", "completion_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens")
_V1_KIND_RE = re.compile(
    r'"kind"\s*:\s*"(SystemPromptEvent|MessageEvent|ActionEvent|ObservationEvent|UserRejectObservation|AgentErrorEvent|'
    r'Condensation|CondensationRequest|CondensationSummaryEvent|ConversationStateUpdateEvent|PauseEvent|InterruptEvent|'
    r'ConversationErrorEvent|HookExecutionEvent|ACPToolCallEvent)"'
)
_V1_STATE_RE = re.compile(r'"agent"\s*:\s*\{')


def is_v1_event(event: Any) -> bool:
    """A V1 event: its class name in `kind` (`DiscriminatedUnionMixin`); V0 events have no `kind`."""
    return isinstance(event, Mapping) and isinstance(event.get("kind"), str)


def is_v1_list(events: list[Any]) -> bool:
    """An event list is V1 when more of its events are V1 events than V0 ones (`action`/`observation` strings)."""
    v1 = sum(1 for e in events if is_v1_event(e))
    v0 = sum(1 for e in events if isinstance(e, Mapping) and not is_v1_event(e) and ("action" in e or "observation" in e))
    return v1 > v0


def _prefixed(report: Callable[[str], None], place: str) -> Callable[[str], None]:
    return lambda message: report(f"{place}: {message}")


@dataclass
class V1Usage:
    """The recorded token usage of each LLM response, by response id: `ConversationState.stats.usage_to_metrics`,
    one `Metrics` per LLM usage id (the agent's, the condenser's, ...), each with a `TokenUsage` per completion
    (`add_token_usage`, metrics.py@611629e6 L178-220). `base_state.json` keeps the full lists; the `stats` state
    updates of the event log hold only snapshots without them (`ConversationStateUpdateEvent.validate_value`)."""

    by_response: dict[str, Usage] = field(default_factory=dict)
    usage_id: dict[str, str] = field(default_factory=dict)
    taken: set[str] = field(default_factory=set)
    unidentified: int = 0

    @classmethod
    def from_state(cls, state: Mapping[str, Any], report: Callable[[str], None]) -> V1Usage:
        out = cls()
        metrics_by_id = mapping_of(mapping_of(state.get("stats")).get("usage_to_metrics"))
        for usage_id, metrics in metrics_by_id.items():
            for n, record in enumerate(list_of(mapping_of(metrics).get("token_usages"))):
                counts = token_counts(record, V1_COUNTS, _prefixed(report, f"stats.usage_to_metrics[{usage_id!r}].token_usages[{n}]"))
                response_id = mapping_of(record).get("response_id")
                if not isinstance(response_id, str) or not response_id:
                    out.unidentified += 1
                elif counts is not None:
                    out.by_response[response_id] = Usage(
                        input=counts["prompt_tokens"], cached_input=counts["cache_read_tokens"], cache_write=counts["cache_write_tokens"],
                        output=counts["completion_tokens"], reasoning=counts["reasoning_tokens"])
                    out.usage_id[response_id] = str(usage_id)
        return out

    def take(self, response_id: Any) -> Usage | None:
        if not isinstance(response_id, str) or response_id not in self.by_response:
            return None
        self.taken.add(response_id)
        return self.by_response[response_id]

    def meta(self) -> dict[str, Any]:
        """What of the recorded usage no event of the transcript names (the responses of abandoned branches, of
        LLM calls no event records), by usage id."""
        left = Counter(self.usage_id[r] for r in self.by_response if r not in self.taken)
        out: dict[str, Any] = {"unmatched_token_usages": dict(sorted(left.items()))} if left else {}
        return out | ({"token_usages_without_response_id": self.unidentified} if self.unidentified else {})


@dataclass(frozen=True)
class V1Head:
    """Where the active branch ends: `ConversationState.leaf_event_id` and `head_is_empty` (state.py@611629e6
    L176-190); a bare event list records neither (the legacy fallback: the last event that is no artifact)."""

    leaf_event_id: str | None = None
    head_is_empty: bool = False


def v1_active_branch(events: list[Any], head: V1Head, report: Callable[[int, str], None]) -> set[int]:
    """The positions of the events on the active branch, `EventLog.path_to_root(leaf)` (event_store.py@611629e6): from
    the leaf, each event's `parent_id`, `__root__` for a root, and for an event without one (logged before the tree,
    2026-07-02) the event before it. A missing parent or a cycle ends the branch there and is reported (`report`
    takes the position of the event concerned)."""
    position: dict[str, int] = {}
    for n, event in enumerate(events):
        event_id = mapping_of(event).get("id")
        if isinstance(event_id, str):
            position.setdefault(event_id, n)  # `_scan_and_build_index` keeps the first of a repeated id
    leaf = _v1_leaf(events, head, position, report)
    branch: set[int] = set()
    while leaf is not None:
        if leaf in branch:
            report(leaf, "the parent_id links run in a cycle through this event; the active branch ends there")
            break
        branch.add(leaf)
        parent = mapping_of(events[leaf]).get("parent_id")
        if parent == V1_ROOT_PARENT or (parent is None and leaf == 0):
            break
        if parent is None:
            leaf -= 1
        elif isinstance(parent, str) and parent in position:
            leaf = position[parent]
        else:
            report(leaf, f"its parent_id {parent!r} names no event of the log; the active branch ends there")
            break
    return branch


def _v1_leaf(events: list[Any], head: V1Head, position: Mapping[str, int], report: Callable[[int, str], None]) -> int | None:
    if head.leaf_event_id is not None:
        if head.leaf_event_id in position:
            return position[head.leaf_event_id]
        report(-1, f"leaf_event_id {head.leaf_event_id!r} names no event of the log; the last event is taken as the leaf")
    elif head.head_is_empty:
        return None
    kinds = [mapping_of(e).get("kind") for e in events]
    return next((n for n in range(len(events) - 1, -1, -1) if kinds[n] not in V1_ARTIFACTS), None)


def v1_content(content: Any, what: str, report: Callable[[str], None], sep: str = "\n") -> tuple[str, tuple[Attachment, ...]]:
    """The text and images of a list of `TextContent` / `ImageContent` (`llm/message.py@611629e6 L161-216`): the texts
    joined by `sep`, each image URL an attachment; a part of another kind is reported and its text kept."""
    if content is None:
        return "", ()
    if not isinstance(content, list):
        report(f"{what} is a JSON {json_type(content)}, not a list of contents; kept as its JSON text")
        return as_text(content), ()
    texts: list[str] = []
    images: list[Attachment] = []
    for n, part in enumerate(content):
        kind = mapping_of(part).get("type")
        if kind == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "image" and isinstance(part.get("image_urls"), list):
            images.extend(_v1_image(url) for url in part["image_urls"] if isinstance(url, str))
        else:
            report(f"{what}[{n}] is no text or image content; its text is kept")
            texts.append(as_text([part]))
    return sep.join(texts), tuple(images)


def _v1_image(url: str) -> Attachment:
    mime, _, data = url.partition(";base64,")
    if data and mime.startswith("data:"):
        return image_attachment(mime.removeprefix("data:"), data)
    return Attachment(mime="image/url", name=url)


class _V1Run:
    """Converts the V1 events of one conversation into a transcript, as V0 events are (`_Run`): the model input
    an event becomes (`to_llm_message`, `LLMConvertibleEvent.events_to_messages`, `event/base.py@611629e6 L75-199`)."""

    def __init__(self, path: Path, usage: V1Usage | None = None) -> None:
        self.builder = TranscriptBuilder(path, FORMAT)
        self.usage = usage or V1Usage()
        self.responses: dict[str, int] = {}
        self.items_of_event: dict[str, list[str]] = {}
        self.condensations: set[str] = set()
        self.skipped: Counter[str] = Counter()
        self.off_branch: list[str] = []
        self.handlers: dict[str, Callable[[str, Mapping[str, Any]], None]] = {
            "SystemPromptEvent": self.system_prompt, "MessageEvent": self.message, "ActionEvent": self.action,
            "ObservationEvent": self.observation, "UserRejectObservation": self.rejection, "AgentErrorEvent": self.agent_error,
            "Condensation": self.condensation, "CondensationRequest": self.condensation_request,
            "CondensationSummaryEvent": self.condensation_summary, "PauseEvent": self.user_action,
            "InterruptEvent": self.user_action, "ConversationErrorEvent": self.error, "ServerErrorEvent": self.error,
            "HookExecutionEvent": self.hook, "ACPToolCallEvent": self.acp_tool_call,
        }

    def report(self, where: str, message: str) -> None:
        self.builder.problems.append(f"{where}: {message}")

    def at(self, where: str) -> Callable[[str], None]:
        return lambda message: self.report(where, message)

    def add(self, event: Mapping[str, Any], kind: str, text: str = "", **fields: Any) -> Item:
        """`TranscriptBuilder.add` with the event's timestamp, remembering which event the item came from."""
        ts = event.get("timestamp")
        item = self.builder.add(kind, text, timestamp=ts if isinstance(ts, str) else None, **fields)
        self.items_of_event.setdefault(str(event.get("id")), []).append(item.id)
        return item

    def read(self, events: list[tuple[str, Any]], head: V1Head, where: str) -> None:
        """Every event in log order (`events`: each with the place it is read from): the tree's nodes off the active
        branch are counted (`meta["off_branch"]`), a V1 kind this importer does not know stops the import
        (`ImportFailure` naming the event). `where` names the state that records the head."""
        on_branch = v1_active_branch([e for _, e in events], head,
                                     lambda n, message: self.report(events[n][0] if n >= 0 else where, message))
        for n, (place, event) in enumerate(events):
            kind = mapping_of(event).get("kind")
            if not is_v1_event(event):
                self.report(place, f"no OpenHands V1 event (a JSON {json_type(event)} without a 'kind'); kept as a marker")
                self.builder.add("marker", json.dumps(event, ensure_ascii=False), meta={"event": "unknown-event"})
            elif kind in V1_SKIPPED:
                self.skipped[str(kind)] += 1
            elif n not in on_branch and kind not in V1_ARTIFACTS:
                self.off_branch.append(str(event.get("id")))
            elif kind in self.handlers:
                self.handlers[str(kind)](place, event)
            else:
                raise ImportFailure(f"{place}: OpenHands V1 event of kind {kind!r} (id {event.get('id')!r}), which this "
                                    "importer does not read; nothing was imported")

    def meta(self) -> dict[str, Any]:
        out: dict[str, Any] = {"event_format": "V1"}
        if self.skipped:
            out["skipped"] = dict(sorted(self.skipped.items()))
        if self.off_branch:
            out["off_branch"] = len(self.off_branch)
            out["off_branch_events"] = list(self.off_branch)
        return out | self.usage.meta()

    # ------------------------------------------------------------------ responses and reasoning
    def response(self, response_id: Any) -> tuple[int, bool]:
        """The transcript response of an LLM response id (its recorded usage set once), and whether it is new:
        the actions of one response share its id (`events_to_messages`); a missing id is a response of its own."""
        if not isinstance(response_id, str) or not response_id:
            return self.builder.new_response(), True
        if response_id in self.responses:
            return self.responses[response_id], False
        self.responses[response_id] = self.builder.new_response()
        self.builder.set_usage(self.responses[response_id], self.usage.take(response_id))
        return self.responses[response_id], True

    def reasoning(self, event: Mapping[str, Any], source: Mapping[str, Any], response: int, where: str) -> None:
        """The model's reasoning of a response, from one source so that it is not counted twice (LiteLLM also
        fills `reasoning_content` from Anthropic thinking blocks): the thinking blocks, which the SDK sends back
        (`_list_serializer`, message.py@611629e6 L342-390), else the Responses reasoning item, else
        `reasoning_content` (`Message` L218-245; `ActionEvent` L24-44)."""
        blocks = list_of(source.get("thinking_blocks"))
        item = mapping_of(source.get("responses_reasoning_item"))
        ident = str(event.get("id"))
        if blocks:
            for n, block in enumerate(blocks):
                self.thinking_block(event, block, f"{ident}:thinking-{n}", response, f"{where}: thinking_blocks[{n}]")
        elif item:
            text = "\n".join(s for s in list_of(item.get("summary")) if isinstance(s, str))
            encrypted = item.get("encrypted_content")
            self.add(event, "reasoning", text, id=f"{ident}:reasoning", response=response, meta={
                "reasoning_source": "responses_reasoning_item", "encrypted_len": len(encrypted) if isinstance(encrypted, str) else 0})
        elif isinstance(source.get("reasoning_content"), str) and source["reasoning_content"]:
            self.add(event, "reasoning", source["reasoning_content"], id=f"{ident}:reasoning", response=response,
                     meta={"reasoning_source": "reasoning_content"})

    def thinking_block(self, event: Mapping[str, Any], block: Any, ident: str, response: int, where: str) -> None:
        """A `ThinkingBlock` (`thinking`) or `RedactedThinkingBlock` (`data`, encrypted; message.py@611629e6 L122-146)."""
        kind = mapping_of(block).get("type")
        if kind == "thinking" and isinstance(block.get("thinking"), str):
            self.add(event, "reasoning", block["thinking"], id=ident, response=response, meta={"reasoning_source": "thinking"})
        elif kind == "redacted_thinking" and isinstance(block.get("data"), str):
            self.add(event, "reasoning", "", id=ident, response=response,
                     meta={"reasoning_source": "redacted_thinking", "encrypted_len": len(block["data"])})
        else:
            self.report(where, "no thinking or redacted_thinking block; kept as reasoning text")
            self.add(event, "reasoning", as_text([block]) or json.dumps(block, ensure_ascii=False), id=ident, response=response,
                     meta={"reasoning_source": "unknown"})

    # ------------------------------------------------------------------ events
    def system_prompt(self, where: str, event: Mapping[str, Any]) -> None:
        """`SystemPromptEvent` (`event/llm_convertible/system.py@611629e6`): one system message, the prompt and the
        optional dynamic context (two text contents, joined here by a line break as the string serializer joins
        them, message.py L330-340); the tools (`ToolDefinition` dumps: kind, description, action type) in meta."""
        texts = [mapping_of(event.get(key)).get("text") for key in ("system_prompt", "dynamic_context")]
        if not isinstance(texts[0], str):
            self.report(where, "SystemPromptEvent without a system_prompt text; kept as an empty system message")
        meta: dict[str, Any] = {"openhands_event": "SystemPromptEvent"}
        if isinstance(event.get("tools"), list):
            meta["tools"] = event["tools"]
        else:
            self.report(where, f"SystemPromptEvent tools is a JSON {json_type(event.get('tools'))}, not a list; left out")
        if isinstance(texts[1], str):
            meta["dynamic_context_chars"] = len(texts[1])
        self.add(event, "system", "\n".join(t for t in texts if isinstance(t, str)), id=str(event.get("id")), meta=meta)

    def message(self, where: str, event: Mapping[str, Any]) -> None:
        """`MessageEvent` (`event/llm_convertible/message.py@611629e6`): its `llm_message` with the `extended_content`
        after it (`to_llm_message`). A user message is a user item (injected, `synthetic`, when its source is not the
        user: a hook's, the environment's); an agent message is the assistant reply of its LLM response."""
        llm = mapping_of(event.get("llm_message"))
        role, source = llm.get("role"), event.get("source")
        text, images = v1_content(llm.get("content"), "llm_message.content", self.at(where))
        extended, _ = v1_content(event.get("extended_content"), "extended_content", self.at(where))
        text = "\n".join(t for t in (text, extended) if t)
        meta: dict[str, Any] = {"openhands_event": "MessageEvent", "source": str(source)}
        meta |= {k: event[k] for k in ("activated_skills", "sender") if event.get(k)}
        if role == "user":
            self.add(event, "user", text, id=str(event.get("id")), attachments=images, synthetic=source != "user", meta=meta)
        elif role == "assistant":
            response, new = self.response(event.get("llm_response_id"))
            if new:
                self.reasoning(event, llm, response, where)
            self.add(event, "assistant", text, id=str(event.get("id")), response=response, attachments=images, meta=meta)
        else:
            self.report(where, f"MessageEvent whose llm_message role is {role!r}, not user or assistant; kept as a marker")
            self.add(event, "marker", text, id=str(event.get("id")), meta=meta | {"event": "unknown-message", "role": role})

    def action(self, where: str, event: Mapping[str, Any]) -> None:
        """`ActionEvent` (`event/llm_convertible/action.py@611629e6`): one tool call of an LLM response, the call as
        the model sent it (`tool_call`: id, name, JSON arguments); the response's thought and reasoning ride on its
        first action (`_combine_action_events`, base.py L177-199). `action` is None for a call the SDK could not
        execute: the model made it all the same."""
        response, new = self.response(event.get("llm_response_id"))
        call = mapping_of(event.get("tool_call"))
        if not call:
            self.report(where, "ActionEvent without its tool_call; the call is rebuilt from tool_call_id, tool_name and action")
        call_id = call.get("id") if isinstance(call.get("id"), str) else event.get("tool_call_id")
        if call.get("id") is not None and event.get("tool_call_id") not in (None, call.get("id")):
            self.report(where, f"tool_call.id {call.get('id')!r} differs from tool_call_id {event.get('tool_call_id')!r}")
        if not isinstance(call_id, str) or not call_id:
            call_id = f"event-{event.get('id')}"
            self.report(where, f"ActionEvent without a tool call id; the call is named {call_id!r}")
        if new:
            self.reasoning(event, event, response, where)
        thought, _ = v1_content(event.get("thought"), "thought", self.at(where))
        if thought.strip():
            self.add(event, "assistant", thought, id=f"{event.get('id')}:thought", response=response,
                     meta={"openhands_event": "ActionEvent"})
        action = mapping_of(event.get("action"))
        arguments = call.get("arguments") if isinstance(call.get("arguments"), str) else as_arguments(
            {k: v for k, v in action.items() if k != "kind"})
        meta: dict[str, Any] = {"openhands_event": "ActionEvent", "action": action.get("kind")}
        meta |= {k: event[k] for k in ("summary", "security_risk") if isinstance(event.get(k), str)}
        self.add(event, "tool_call", id=str(event.get("id")), call_id=call_id,
                 tool_name=str(call.get("name") or event.get("tool_name") or action.get("kind") or ""),
                 arguments=arguments, response=response, meta=meta)

    def observation(self, where: str, event: Mapping[str, Any]) -> None:
        """`ObservationEvent` (`event/llm_convertible/observation.py@611629e6 L32-83`): the tool message answering
        `tool_call_id`. Its text is the observation's `content` (`Observation.text`, `tool/schema.py@611629e6 L399-408`) and
        the `extended_content` after it, its error flag `is_error`: as for V0, the text is what the tool returned
        (the error header a replay puts before a failed result, and a command's rendered metadata, kept in meta as
        `command_metadata`, are the replaying strategy's; `to_llm_content` of `TerminalObservation`,
        openhands-tools/openhands/tools/terminal/definition.py@611629e6 L174-202)."""
        observation = mapping_of(event.get("observation"))
        report = self.at(where)
        if not observation:
            report("ObservationEvent without its observation object; its result is empty")
        text, images = v1_content(observation.get("content"), "observation.content", report, sep="")
        extended, _ = v1_content(event.get("extended_content"), "extended_content", report)
        meta: dict[str, Any] = {"openhands_event": "ObservationEvent", "observation": observation.get("kind")}
        if isinstance(event.get("action_id"), str):
            meta["action_id"] = event["action_id"]
        if isinstance(observation.get("metadata"), Mapping):
            meta["command_metadata"] = {k: v for k, v in observation["metadata"].items() if k in COMMAND_METADATA}
        self.tool_result(where, event, "\n".join(t for t in (text, extended) if t), observation.get("is_error") is True, meta, images)

    def rejection(self, where: str, event: Mapping[str, Any]) -> None:
        """`UserRejectObservation` (observation.py@611629e6 L86-135): the tool message "Action rejected: <reason>"."""
        reason = event.get("rejection_reason", "User rejected the action")
        meta = {"openhands_event": "UserRejectObservation", "rejection_source": event.get("rejection_source", "user")}
        self.tool_result(where, event, f"Action rejected: {as_text(reason)}", False, meta)

    def agent_error(self, where: str, event: Mapping[str, Any]) -> None:
        """`AgentErrorEvent` (observation.py@611629e6 L138-196): the tool message holding the error text. The SDK
        sends no error flag or header with it (`to_llm_message`), so the result is no `is_error` one; `meta.error`."""
        meta = {"openhands_event": "AgentErrorEvent", "error": True}
        self.tool_result(where, event, as_text(event.get("error")), False, meta)

    def tool_result(self, where: str, event: Mapping[str, Any], text: str, is_error: bool, meta: dict[str, Any],
                    images: tuple[Attachment, ...] = ()) -> None:
        call_id = event.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            call_id = f"event-{event.get('action_id')}"
            self.report(where, f"{event.get('kind')} without a tool_call_id; it answers {call_id!r}")
        self.add(event, "tool_result", text, id=str(event.get("id")), call_id=call_id, tool_name=event.get("tool_name")
                 if isinstance(event.get("tool_name"), str) else None, is_error=is_error, attachments=images, meta=meta)

    def condensation(self, where: str, event: Mapping[str, Any]) -> None:
        """`Condensation` (`event/condenser.py@611629e6 L11-96`): the recording agent's own compaction, a marker
        `{"event": "compaction"}` as for V0, with what it records (the forgotten event ids, summary and offset, the
        summarising LLM response and its recorded usage) and the transcript items of the forgotten events."""
        recorded = {k: event.get(k) for k in ("forgotten_event_ids", "summary", "summary_offset", "llm_response_id")}
        for problem in v1_condensation_problems(recorded):
            self.report(where, f"Condensation: {problem}; kept as recorded")
        forgotten = [e for e in list_of(recorded["forgotten_event_ids"]) if isinstance(e, str)]
        meta: dict[str, Any] = {"event": "compaction", "action": "Condensation", "source": str(event.get("source") or "environment"),
                                **recorded, "forgotten_item_ids": [i for e in forgotten for i in self.items_of_event.get(e, ())]}
        usage = self.usage.take(recorded["llm_response_id"])
        if usage is not None:
            meta["summary_usage"] = usage.to_dict()
        self.condensations.add(str(event.get("id")))
        summary = recorded["summary"]
        self.add(event, "marker", summary if isinstance(summary, str) else "", id=str(event.get("id")), meta=meta)

    def condensation_request(self, where: str, event: Mapping[str, Any]) -> None:
        """`CondensationRequest` (condenser.py@611629e6 L99-117), after a context-window error (spec §2.3)."""
        self.add(event, "marker", id=str(event.get("id")), meta={"event": "compaction-request", "source": str(event.get("source"))})

    def condensation_summary(self, where: str, event: Mapping[str, Any]) -> None:
        """`CondensationSummaryEvent` (condenser.py@611629e6 L120-132): made from a `Condensation` when a view is
        built, never logged (`summary_event`). Where one is recorded (an exported view) it is the user message the
        model reads; when its `Condensation` (id `<condensation id>-summary`) is in the log too, that marker holds
        the summary already, and this one is a marker."""
        summary = as_text(event.get("summary"))
        of = str(event.get("id")).removesuffix("-summary")
        if of in self.condensations:
            self.add(event, "marker", summary, id=str(event.get("id")), meta={"event": "compaction-summary", "condensation": of})
        else:
            self.add(event, "user", summary, id=str(event.get("id")), synthetic=True,
                     meta={"openhands_event": "CondensationSummaryEvent", "event": "compaction-summary"})

    def user_action(self, where: str, event: Mapping[str, Any]) -> None:
        """`PauseEvent`, `InterruptEvent` (`event/user_action.py@611629e6`): the user paused or interrupted the run."""
        self.add(event, "marker", id=str(event.get("id")), meta={"event": str(event.get("kind")), "source": str(event.get("source"))})

    def error(self, where: str, event: Mapping[str, Any]) -> None:
        """`ConversationErrorEvent` (`event/conversation_error.py@611629e6`), the agent server's `ServerErrorEvent`:
        the run stopped on an error; no model input."""
        meta = {"event": str(event.get("kind")), **{k: event[k] for k in ("code", "detail") if k in event}}
        self.add(event, "marker", as_text(event.get("detail")), id=str(event.get("id")), meta=meta)

    def hook(self, where: str, event: Mapping[str, Any]) -> None:
        """`HookExecutionEvent` (`event/hook_execution.py@611629e6`): a hook ran; what it adds to the model's input
        is logged as its own message event."""
        keys = ("hook_event_type", "hook_command", "tool_name", "success", "blocked", "exit_code", "reason", "action_id", "message_id")
        self.add(event, "marker", as_text(event.get("additional_context")), id=str(event.get("id")),
                 meta={"event": "HookExecutionEvent", **{k: event[k] for k in keys if k in event}})

    def acp_tool_call(self, where: str, event: Mapping[str, Any]) -> None:
        """`ACPToolCallEvent` (`event/acp_tool_call.py@611629e6`): a tool call an ACP server ran with its own model;
        no OpenHands LLM message (the class says so), a marker with what it records."""
        keys = ("tool_call_id", "title", "status", "tool_kind")
        self.add(event, "marker", as_text(event.get("title")), id=str(event.get("id")),
                 meta={"event": "ACPToolCallEvent", **{k: event[k] for k in keys if k in event}})


def v1_condensation_problems(recorded: Mapping[str, Any]) -> list[str]:
    """What `Condensation` refuses (condenser.py@611629e6 L11-38): forgotten ids that are no list of strings, a
    summary that is no string, an offset that is no whole number of at least 0, no `llm_response_id` string."""
    problems = []
    ids = recorded["forgotten_event_ids"]
    if ids is not None and not (isinstance(ids, list) and all(isinstance(i, str) for i in ids)):
        problems.append("forgotten_event_ids is no list of event ids")
    if recorded["summary"] is not None and not isinstance(recorded["summary"], str):
        problems.append(f"summary is a JSON {json_type(recorded['summary'])}, not a string")
    if recorded["summary_offset"] is not None and not _is_id(recorded["summary_offset"]):
        problems.append(f"summary_offset is {recorded['summary_offset']!r}, no whole number of at least 0")
    if not isinstance(recorded["llm_response_id"], str):
        problems.append("llm_response_id is no string")
    return problems


def read_v1_conversation(path: Path) -> Transcript:
    """A persisted V1 conversation, given its `base_state.json`: the events of `events/` in index order up to the
    first missing index (`EventLog._scan_and_build_index`, which loads no event after a gap: those are reported),
    the active branch from the state's `leaf_event_id`, usage from its `stats`, the model from `agent.llm.model`."""
    state, problems = read_json_reported(path)
    if not isinstance(state, Mapping):
        raise ImportFailure(f"{path}: not an OpenHands V1 conversation state (a JSON {json_type(state)}, not an object)")
    folder = path.parent / V1_EVENTS_DIR
    if not folder.is_dir():
        raise ImportFailure(f"{path}: no {V1_EVENTS_DIR}/ folder beside it; an OpenHands V1 conversation keeps its events there")
    files, file_problems = v1_event_files(folder)
    events = []
    for file in files:
        event, event_problems = read_json_reported(file)
        problems += event_problems
        events.append((str(file), event))
    usage_problems: list[str] = []
    run = _V1Run(path, V1Usage.from_state(state, lambda m: usage_problems.append(f"{path}: {m}")))
    run.builder.problems.extend([*problems, *file_problems, *usage_problems])
    llm = mapping_of(mapping_of(state.get("agent")).get("llm"))
    run.builder.model = llm.get("model") if isinstance(llm.get("model"), str) else None
    leaf = state.get("leaf_event_id")
    run.read(events, V1Head(leaf if isinstance(leaf, str) else None, state.get("head_is_empty") is True), str(path))
    meta = run.meta() | {k: state[k] for k in ("execution_status",) if isinstance(state.get(k), str)}
    name = state.get("id") if isinstance(state.get("id"), str) else path.parent.name
    return run.builder.finish(str(name), source={"conversation": str(path.parent)}, meta=meta)


def v1_event_files(folder: Path) -> tuple[list[Path], list[str]]:
    """The event files of a V1 log in index order, and the problems: a name that is no event file's, a repeated
    index, the files after the first missing index (upstream loads none of them)."""
    problems: list[str] = []
    by_index: dict[int, Path] = {}
    for file in sorted(folder.iterdir()):
        match = V1_EVENT_NAME.match(file.name)
        if match is None:
            if file.name != V1_LOCK_FILE:
                problems.append(f"{file}: no OpenHands event file name (event-<index>-<id>.json); not read")
        elif int(match["idx"]) in by_index:
            problems.append(f"{file}: repeats the index of {by_index[int(match['idx'])].name}; not read")
        else:
            by_index[int(match["idx"])] = file
    count = 0
    while count in by_index:
        count += 1
    after = sorted(i for i in by_index if i > count)
    if after:
        problems.append(f"{folder}: no event file of index {count}; the {len(after)} event file(s) after the gap "
                        f"({by_index[after[0]].name}, ...) are not read, as OpenHands reads none of them")
    if not count:
        raise ImportFailure(f"{folder}: no OpenHands V1 event file (event-00000-<id>.json)")
    return [by_index[i] for i in range(count)], problems


def read_v1_events(path: Path, events: list[tuple[str, Any]], problems: list[str], name: str, source: Mapping[str, Any],
                   meta: Mapping[str, Any], model: str | None) -> Transcript:
    """A bare list of V1 events (a JSON list, JSON lines, an evaluation run's `history`), each with the place it is
    read from: no state records its leaf or its usage."""
    run = _V1Run(path)
    run.builder.problems.extend(problems)
    run.builder.model = model
    run.read(events, V1Head(), str(path))
    return run.builder.finish(name, source=source, meta={**meta, **run.meta()})


def refuse_v1_event_file(path: Path) -> None:
    """One event file of a persisted V1 conversation is no transcript: the conversation is read from its state."""
    if V1_EVENT_NAME.match(path.name) and path.parent.name == V1_EVENTS_DIR:
        raise ImportFailure(f"{path}: one event of an OpenHands V1 conversation; import the whole conversation from its "
                            f"state file, {path.parent.parent / V1_BASE_STATE}")


class OpenHandsImporter(Importer):
    format = FORMAT
    description = ("OpenHands event stream: V0 (event list JSON, evaluation/resolver output JSONL with one run per line) and "
                   "V1 software-agent-sdk (a conversation's base_state.json with its events/ folder, event lists and lines)")
    suffixes = (".json", ".jsonl")
    priority = 45

    @classmethod
    def sniff(cls, path: Path, head: str) -> bool:
        if head.lstrip()[:1] not in ("[", "{"):
            return False
        if path.name == V1_BASE_STATE and _V1_STATE_RE.search(head):
            return True
        return bool(_EVENT_RE.search(head) or _V1_KIND_RE.search(head))

    def load(self, path: Path, **options: Any) -> list[Transcript]:
        if path.name == V1_BASE_STATE:
            return [read_v1_conversation(path)]
        refuse_v1_event_file(path)
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
