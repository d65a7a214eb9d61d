"""Importer for OpenHands (OpenDevin) event streams (MANIFEST "openhands-events").

Owns the containers (a bare event list `*.json`; evaluation output JSONL with one run per line
under `history`, one transcript per line, where a line that is no run is a problem of every
transcript of the file; the 2024 resolver output with flat action/observation dicts) and the event
rules:

- `system` and user `message` actions are system and user items; an agent `message` is an
  assistant reply; `recall` actions, `change_agent_state` and `agent_state_changed` / `null`
  observations are markers; a `recall` observation is injected context (a synthetic user item);
- every other action is a tool call: `tool_call_metadata.tool_call_id` is its call id (else
  `event-<id>`), actions that share `tool_call_metadata.model_response.id` form one model
  response, whose `usage` counts once; `args.thought` is the response's text;
- an observation answers the call named by its `tool_call_metadata.tool_call_id`, else the one of
  its `cause` event, else (old flat records without ids) the latest unanswered call; an `error`
  observation linked to nothing is what OpenHands shows the model as a user message (synthetic).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from compaction_bench.importing import Importer, ImportFailure, read_head
from compaction_bench.scenarios.builder import TranscriptBuilder, as_arguments, as_text, mapping_of
from compaction_bench.scenarios.openai_style import openai_usage
from compaction_bench.scenarios.readers import read_json_reported, read_jsonl
from compaction_bench.transcript import Attachment, Transcript, json_type

FORMAT = "openhands"
NON_TOOL_ACTIONS = frozenset({"message", "system", "recall", "change_agent_state"})
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


class _Run:
    """Converts one event list into a transcript."""

    def __init__(self, path: Path, where: str, line: int | None) -> None:
        self.builder = TranscriptBuilder(path, FORMAT)
        self.where, self.line = where, line
        self.responses: dict[str, int] = {}
        self.calls_by_event: dict[str, str] = {}
        self.unanswered: list[str] = []
        self.spoken: set[int] = set()  # the responses whose text is imported (`_spoken`)

    def events(self, events: list[Any]) -> None:
        for n, event in enumerate(events):
            if not isinstance(event, Mapping):
                self.builder.problem(f"{self.where} event {n}: not an object ({type(event).__name__}); kept as a marker", self.line)
                self.builder.add("marker", json.dumps(event, ensure_ascii=False), meta={"event": "unreadable-event"})
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
        b = self.builder
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
            b.add("system", as_text(args.get("content") or event.get("message")), id=ident, timestamp=ts)
        elif kind == "message" and source == "user":
            images = args.get("image_urls") or []
            attachments = tuple(Attachment(mime="image/url", name=str(u)) for u in images if isinstance(u, str))
            b.add("user", as_text(args.get("content") or event.get("message")), id=ident, attachments=attachments, timestamp=ts)
        elif kind == "message":
            response = self._response(n, metadata)
            b.add("assistant", as_text(args.get("content") or event.get("message")), id=ident, response=response, timestamp=ts)
        elif kind in NON_TOOL_ACTIONS:
            b.add("marker", as_text(event.get("message")), id=ident, timestamp=ts, meta={"event": kind, "source": str(source)})
        else:
            response = self._response(n, metadata)
            thought = self._spoken(metadata, response, args.get("thought"))
            if thought.strip():
                b.add("assistant", thought, id=f"{ident}:thought", response=response, timestamp=ts)
            call_id = str(metadata.get("tool_call_id") or ident)
            b.add(
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

    def observation(self, n: int, event: Mapping[str, Any]) -> None:
        b = self.builder
        kind = str(event.get("observation"))
        ts = event.get("timestamp") if isinstance(event.get("timestamp"), str) else None
        ident = f"event-{event.get('id', n)}"
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
            b.add(
                "tool_result",
                text,
                id=ident,
                call_id=call_id,
                is_error=kind == "error" or (isinstance(exit_code, int) and exit_code not in (0, -1)),
                timestamp=ts,
                meta=observation_meta(kind, event),
            )
        elif kind == "recall":
            b.add("user", text, id=ident, synthetic=True, timestamp=ts, meta={"observation": kind})
        elif kind == "error":
            b.add("user", text, id=ident, synthetic=True, timestamp=ts, meta={"observation": kind, "error": True})
        elif kind in MARKER_OBSERVATIONS:
            b.add("marker", as_text(event.get("message")), id=ident, timestamp=ts, meta={"event": f"observation:{kind}"})
        else:
            cause = event.get("cause")
            b.add("tool_result", text, id=ident, call_id=f"event-{cause}", timestamp=ts, meta=observation_meta(kind, event))


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


class OpenHandsImporter(Importer):
    format = FORMAT
    description = "OpenHands event stream (event list JSON, evaluation/resolver output JSONL with one run per line)"
    suffixes = (".json", ".jsonl")
    priority = 45

    @classmethod
    def sniff(cls, path: Path, head: str) -> bool:
        return head.lstrip()[:1] in ("[", "{") and bool(_EVENT_RE.search(head))

    def load(self, path: Path, **options: Any) -> list[Transcript]:
        if read_head(path, 1024).lstrip()[:1] == "[":  # decompressed, BOM removed
            events, problems = read_json_reported(path)
            return [self._run(path, events, problems, path.stem, None, {}, None)]
        lines = read_jsonl(path)
        runs: list[tuple[int, Mapping[str, Any]]] = []
        for number, record in lines.lines:  # every line is looked at before any run is built: all carry the file's problems
            if isinstance(record, Mapping) and isinstance(record.get("history"), list):
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
            out.append(self._run(path, record["history"], lines.problems, f"{path.stem}:{name}", number, meta, model))
        return out

    @staticmethod
    def _run(
        path: Path, events: Any, problems: list[str], name: str, line: int | None, meta: dict[str, Any], model: str | None
    ) -> Transcript:
        if not isinstance(events, list):
            raise ImportFailure(f"{path}:{line or 1}: expected a list of OpenHands events, got a JSON {type(events).__name__}")
        run = _Run(path, f"line {line}" if line else "events", line)
        run.builder.problems.extend(problems)
        run.builder.model = model
        run.events(events)
        return run.builder.finish(name, source={"line": line} if line else {}, meta=meta)
