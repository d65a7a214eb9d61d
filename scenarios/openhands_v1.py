"""OpenHands V1 events: the software-agent-sdk's (OpenHands/software-agent-sdk@611629e6, spec openhands.md §0 "SDK").

Owns the V1 event rules (`_V1Run`: the model input each event becomes, `to_llm_message`) and the V1 containers the
importer hands over (`scenarios/openhands.py`, which registers the format, sniffs and dispatches here; this module
imports nothing of that one): a persisted conversation (`read_v1_conversation`, given its `base_state.json`; the
events are the files of the `events/` folder beside it), the conversation folder itself (`v1_conversation_entry`), a
bare list of V1 events (`read_v1_events`: a JSON list, JSON lines, an evaluation run's `history`), and the inputs
refused with what to pass instead: one event file or the `events/` folder of a conversation (`refuse_v1_event_file`,
`refuse_v1_events_folder`), an OpenHands app server's event files, a folder of them or one
(`refuse_app_server_events`, which says why they are not read). Paths below are under openhands-sdk/openhands/sdk/
unless named otherwise.

- The conversation is the active branch of the event tree: from the state's `leaf_event_id` up the `parent_id`
  links (`v1_active_branch`); the events off it are counted (`meta["off_branch"]`), state updates, completion logs,
  token and streaming events skipped and counted (`meta["skipped"]`).
- `SystemPromptEvent`, `MessageEvent` (user or assistant), `ActionEvent` (a tool call of an LLM response, whose
  thought and reasoning ride on its first action), `ObservationEvent` / `UserRejectObservation` /
  `AgentErrorEvent` (the tool message answering `tool_call_id`) are what the model read; a `Condensation` is the
  recording agent's own compaction, a marker `{"event": "compaction"}`; pauses, interrupts, errors, hooks and ACP
  tool calls are markers. A V1 kind not listed stops the import with an error naming the event.
- Usage is the recorded `TokenUsage` of each LLM response, by response id, from the state's `stats`
  (`V1Usage`); a bare event list records none.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compaction_bench.importing import ImportFailure
from compaction_bench.scenarios.builder import (
    TranscriptBuilder,
    as_arguments,
    as_text,
    image_attachment,
    list_of,
    mapping_of,
    token_counts,
)
from compaction_bench.scenarios.readers import read_json_reported
from compaction_bench.transcript import Attachment, Item, Transcript, Usage, json_type

#: The format name of every OpenHands transcript, V0's and V1's: `OpenHandsImporter.format` (scenarios/openhands.py
#: imports it from here, so that the V1 reader needs nothing of the V0 one).
FORMAT = "openhands"

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
#: What the importer's `sniff` looks for: a V1 event's `kind`, and in a `base_state.json` the state's `agent`.
V1_KIND_RE = re.compile(
    r'"kind"\s*:\s*"(SystemPromptEvent|MessageEvent|ActionEvent|ObservationEvent|UserRejectObservation|AgentErrorEvent|'
    r'Condensation|CondensationRequest|CondensationSummaryEvent|ConversationStateUpdateEvent|PauseEvent|InterruptEvent|'
    r'ConversationErrorEvent|HookExecutionEvent|ACPToolCallEvent)"'
)
V1_STATE_RE = re.compile(r'"agent"\s*:\s*\{')
#: The fields of a terminal observation's `metadata` (`CmdOutputMetadata`,
#: openhands-tools/openhands/tools/terminal/metadata.py@611629e6 L20-42; V0's `CmdOutputMetadata` has the same), kept
#: in a result's meta as `command_metadata`.
V1_COMMAND_METADATA = ("exit_code", "pid", "username", "hostname", "working_dir", "py_interpreter_path", "prefix", "suffix")


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
        openhands-tools/openhands/tools/terminal/definition.py@611629e6 L173-200). For that rendering the meta also
        keeps the length of the extended content (`extended_content_chars`: the text's last characters, after the
        "\n" that joins them to a content that is not empty) and the observation's `full_output_save_dir`, which
        names the file a cut output is saved to."""
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
            meta["command_metadata"] = {k: v for k, v in observation["metadata"].items() if k in V1_COMMAND_METADATA}
        if isinstance(observation.get("full_output_save_dir"), str):
            meta["full_output_save_dir"] = observation["full_output_save_dir"]
        if extended:
            meta["extended_content_chars"] = len(extended)
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
    if recorded["summary_offset"] is not None and not _is_whole(recorded["summary_offset"]):
        problems.append(f"summary_offset is {recorded['summary_offset']!r}, no whole number of at least 0")
    if not isinstance(recorded["llm_response_id"], str):
        problems.append("llm_response_id is no string")
    return problems


def _is_whole(value: Any) -> bool:
    """A whole number of at least 0 (`int`, `Field(ge=0)`); JSON true and false are no numbers here."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


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


def v1_conversation_entry(folder: Path) -> str | None:
    """The file a persisted V1 conversation given as its folder is read from: `base_state.json`, when the folder
    holds it and the `events/` folder (`persistence_const.py@611629e6 L4-11`; the agent server keeps each conversation
    so, as `<conversations_path>/<conversation id hex>/`, openhands-agent-server/openhands/agent_server/
    conversation_service.py@611629e6 L706-713); None for any other folder."""
    if os.path.isfile(folder / V1_BASE_STATE) and os.path.isdir(folder / V1_EVENTS_DIR):  # os.path: no error for a folder it may not read
        return V1_BASE_STATE
    return None


def refuse_v1_events_folder(folder: Path) -> None:
    """The `events/` folder of a persisted V1 conversation is no conversation: its state is the folder above it."""
    if folder.name == V1_EVENTS_DIR and os.path.isfile(folder.parent / V1_BASE_STATE):
        raise ImportFailure(f"{folder}: the events of an OpenHands V1 conversation; import the whole conversation: its folder, "
                            f"{folder.parent}")


#: An OpenHands app server's copy of a V1 conversation's events (`FilesystemEventService`,
#: All-Hands-AI/OpenHands:openhands/app_server/event/filesystem_event_service.py@156d0686 L28-79, L309-326): one extensionless
#: file per event, `<persistence_dir>/v1/events/<conversation id>/<YYYYMMDDHHMMSS>_<event class>_<event id hex>`.
APP_SERVER_EVENT_NAME = re.compile(r"^\d{14}_[A-Za-z]\w*_[0-9a-fA-F]{8,}$")


#: Why app-server event files are not read and what to pass instead (`refuse_app_server_events`).
APP_SERVER_REFUSAL = ("which are not read: they are ordered only to the second, may miss events and record no usage; pass the "
                      "agent server's saved conversation instead, the folder holding base_state.json and events/ "
                      "(/workspace/conversations/<conversation id>/ in OpenHands' sandboxes)")


def refuse_app_server_events(folder: Path) -> None:
    """A folder of app-server event files (`APP_SERVER_EVENT_NAME`) is not read, and the error says what to pass
    instead. Such a folder is no record of the conversation: the app server orders its files by name
    (`search_events`, filesystem_event_service.py@156d0686 L227-273), that is to the second and then by event class
    name, not in the order the events were logged (the system prompt sorts after the user's first message of the
    same second); it holds only what the agent server posted to its webhook (`on_event`,
    openhands/app_server/event_callback/webhook_router.py@156d0686 L127-156, logs a failed save and answers success,
    so the event is lost); and it has no `base_state.json`, so neither the usage nor the active branch. The agent
    server's own copy has all three: the conversation folder (`v1_conversation_entry`), `/workspace/conversations/`
    in OpenHands' sandboxes (`OH_CONVERSATIONS_PATH`, openhands/app_server/sandbox/docker_sandbox_spec_service.py@156d0686
    L43)."""
    try:
        names = sorted(name for name in os.listdir(folder) if APP_SERVER_EVENT_NAME.match(name))
    except OSError:
        return  # a folder it may not list: refused as a folder
    example = next((name for name in names if os.path.isfile(folder / name)), None)
    if example is not None:
        raise ImportFailure(f"{folder}: an OpenHands app server's event files ({example}, ...), {APP_SERVER_REFUSAL}")


def refuse_app_server_event_file(path: Path) -> None:
    """One app-server event file is not read either (`refuse_app_server_events`)."""
    if APP_SERVER_EVENT_NAME.match(path.name):
        raise ImportFailure(f"{path}: one of an OpenHands app server's event files, {APP_SERVER_REFUSAL}")
