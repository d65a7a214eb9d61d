"""OpenHands condensers as strategies (docs/specs/openhands.md).

`openhands` is the SDK preset `LLMSummarizingCondenser(max_size=80, keep_first=4)`, the condenser of
`get_default_agent` and of spawned sub-agents (§1; `OpenHands/software-agent-sdk@611629e6`:
`openhands-tools/openhands/tools/preset/default.py` L71-108, `default_condenser` in
`context/condenser/llm_summarizing_condenser.py` L505-515). It is not what the OpenHands V1 app server builds:
its `_create_condenser` passes no sizes, so its condenser has the class defaults 240/2 (L48-51; `OpenHands/OpenHands@
d3fe34a1 openhands/app_server/app_conversation/app_conversation_service_base.py`, `max_size` set only from the
user's `condenser_max_size`), which is the variant `openhands@max_size=240,keep_first=2`. The rules:

- §2.2 a view of events (system prompt, messages, one action per tool call, one observation per
  result, summary events), condensed before every LLM call; several summaries may live in one view.
  Upstream the condensation is an agent step of its own without an LLM call; here it and the
  following LLM call are one replay step (the context the model sees is the same);
- §4.1/§4.2 three reasons: REQUEST (after a context-window error, §2.3), TOKENS (the view's token
  count > min(max_tokens, input window)), EVENTS (`len(view) > max_size`); TOKENS and REQUEST are
  HARD, EVENTS alone SOFT (a SOFT failure proceeds uncondensed);
- §4.3 `events_from_tail` = the minimum over the reasons' targets, both ends moved to the next
  valid manipulation index (§4.4 batch atomicity, tool-call matching, tool loops of an Anthropic model's
  thinking blocks), the 10 %
  minimum progress; a negative target (REQUEST on a view under 10 events) leaves no valid end, so the
  HARD requirement goes to the hard reset, as upstream;
- §4.5 the summary prompt with `<EVENT>` blocks built from the 500-character display previews,
  inserted as a plain `user` message at the forgetting start;
- §4.6 the hard context reset on a failed HARD condensation: everything summarised at offset 0,
  event strings shrunk by 0.8 per retry, up to 5 attempts;
- §6 a tool message's text clipped at 50,000 characters by `maybe_truncate` when it is serialised, and a
  failed result's "[An error occurred during execution.]" header before it and in its preview (`sdk_tool_text`;
  not in the spec, upstream followed); a terminal result rendered as `TerminalObservation.to_llm_content`
  renders it, with its command metadata and its 30,000-character cut, in the message and the preview
  (`sdk_observation_text`; not in the spec, upstream followed);
- adjacent plain user messages (a summary and the user's next turn, two user turns) sent as one message, as
  `events_to_messages` merges them (`_can_merge_user_messages`, `event/base.py@611629e6` L107-175; not in the spec,
  upstream followed);
- every turn and summary request asks for the max output the SDK reads from litellm's map (`sdk_max_output`; not in
  the spec, upstream followed), as V0's do (`v0_max_output`).

`openhands-v0` is the V0 web-server pipeline of OpenHands 0.62 (§1, §5.9) on V0's history, which holds every event
but `NullAction`, `NullObservation` and the agent-state events (`controller/state/state_tracker.py@156d0686 L38-47`):
the recall events too, a `RecallAction` (no message) and its `RecallObservation` (the context V0 sent the model for
it, or nothing: the OpenHands importer's synthetic user item or its `observation:recall` marker, `on_marker`), which
count toward `max_size`, sit in the kept head and are window essentials (upstream answers §11's open question 4).
The stages: `ConversationWindowCondenser` (only on a context-window request, no summary; the essentials are the
system message, the first user message and the recall action whose query it is with that action's observation,
§5.2, `conversation_window_condenser.py@156d0686 L72-99`) → `BrowserOutputCondenser(attention_window=2)` (§5.4) →
`LLMSummarizingCondenser(keep_first=4, max_size=120)` (§5.1: count-only cut, `<PREVIOUS SUMMARY>` and `<EVENT id=N>`
blocks with 10,000-char middle truncation, forgetting an inclusive id range, newest summary only; its requests
uncached, as V0 sets `caching_prompt = False` on the summariser's LLM, `llm_summarizing_condenser.py@156d0686
L163-179`). An event's block is V0's `str(event)` (`_event_str`): the `__str__` (or dataclass repr) of the action
class CodeActAgent makes of the tool call (its name: `execute_bash`, `str_replace_editor`, `think`, `finish`, …; any
other an MCP tool) and of the observation the runtime answers it with, `RecallAction` and `RecallObservation` of a
recall. Messages are built as V0 does (§7): an assistant message is emitted only once every call of it has its
observation, and orphaned calls or observations are dropped silently; a recorded command's result is rendered with
its metadata as V0 renders it (`v0_observation_text`); observations are cut at 30,000 characters, an error
observation then gets its "[Error occurred in processing last action]" line (`v0_error_observation`; one linked to
no call, which V0 sends as a user message, too, and which counts as an observation where the window skips leading
ones); only an IPython cell's and the interactive browser's results send their images (`v0_tool_images`); a
user message sends its images, each after an "Image N:" label (`v0_user_message`). The
assistant message is the whole model response (its text and every call, forgotten ones included),
sent when one of its actions is in the view and every call has its observation there; else the
response and its observations are lost without a wire error. Each compaction lists the view's calls
and results so lost in `details["orphaned_calls"]` / `["orphaned_results"]`. A user message that
follows another starts with two newlines, as V0 formats them. The summariser runs on the masked view:
masked browser outputs are condensation observations, never summarised events (§5.1).

Both render their view incrementally: each event's messages are built once, and a view that extends
the one rendered last only adds its new events to the rendering, whose messages form the append-only
log the requests' views share (compaction_bench.log_view). §4.3's token target counts the view's
prefixes from one rendering that adds an event per count.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath
from typing import Any

from compaction_bench.log_view import LogView
from compaction_bench.profiles import ModelProfile, model_family
from compaction_bench.provider import ProviderError
from compaction_bench.request import Message, Request, ToolCall
from compaction_bench.strategy import OptionError, Range, Strategy, StrategyContext, SummaryOverflow
from compaction_bench.transcript import Attachment, Item, Usage

N_CHAR_PREVIEW = 500
#: §6 V0 observation truncation marker (protocol string).
V0_TRUNCATION = "\n[... Observation truncated due to length ...]\n"
#: §6 SDK clip notice (protocol string).
SDK_CLIP = "<response clipped><NOTE>Due to the max output limit, only part of the full response has been shown to you.</NOTE>"
#: SDK `DEFAULT_TEXT_CONTENT_LIMIT` (`utils/truncate.py@611629e6 L12`): a tool message's text content over it is
#: clipped when the message is serialised (`llm/message.py@611629e6 L330-336, L360-365, L471-479`).
SDK_TOOL_TEXT_LIMIT = 50_000
#: `DEFAULT_TRUNCATE_NOTICE_WITH_PERSIST` (`utils/truncate.py@611629e6 L20-25`; protocol string): the notice of a
#: cut whose full text was saved to a file.
SDK_CLIP_SAVED = ("<response clipped><NOTE>Due to the max output limit, only part of the full response has been shown to "
                  "you. The complete output has been saved to {file_path} - you can use other tools to view the full "
                  "content (truncated part starts around line {line_num}).</NOTE>")
#: `MAX_CMD_OUTPUT_SIZE` (`openhands-tools/openhands/tools/terminal/constants.py@611629e6 L18`): a terminal
#: observation's rendered text is cut to it (`TerminalObservation.to_llm_content`, terminal/definition.py L173-200).
SDK_MAX_CMD_OUTPUT = 30_000
#: The SDK observation class whose `to_llm_content` renders its command metadata (terminal/definition.py@611629e6 L146).
SDK_TERMINAL_OBSERVATION = "TerminalObservation"
#: SDK `Observation.ERROR_MESSAGE_HEADER` (`tool/schema.py@611629e6 L366`): the text content put before an error
#: observation's content (`to_llm_content`, L411-424; protocol string).
SDK_ERROR_HEADER = "[An error occurred during execution.]\n"
#: §5.4 masked browser observation.
BROWSER_MASK = "Visited URL {url}\nContent omitted"
#: V0 `ErrorObservation`'s line after its truncated content (`conversation_memory.py@156d0686 L514-517`).
V0_ERROR_SUFFIX = "\n[Error occurred in processing last action]"
#: V0 placeholder for the previous summary when there is none (§5.1).
NO_SUMMARY = "No events summarized"
#: Models whose max output the SDK sets to 64,000 whatever litellm's map says (`llm.py@611629e6 L2404-2411`).
SDK_64K_MODELS = ("claude-3-7-sonnet", "claude-sonnet-4", "kimi-k2-thinking")
#: The same list of V0 (`openhands/llm/llm.py@156d0686 L515-526`).
V0_64K_MODELS = ("claude-3-7-sonnet", "claude-3.7-sonnet", "claude-sonnet-4", "claude-sonnet-4-5-20250929", "claude-haiku-4-5-20251001")


def sdk_max_output(profile: ModelProfile) -> int | None:
    """The SDK's `effective_max_output_tokens` when the LLM config sets none (`_init_model_info_and_caps`,
    `llm.py@611629e6 L2402-2497`), sent on every turn (`max_output_tokens` on the Responses path, L27-30 of
    `responses_options.py`; `max_completion_tokens` else, `chat_options.py` L28-34) and by the condenser's copy
    of the LLM: 64,000 for the models of `SDK_64K_MODELS`; else the model's max output in litellm's map, halved
    when it is at least the input window; none when the map does not describe the model (`in_model_map`), so
    nothing is sent; at most 100,000 for an o3 model. (A custom `base_url` caps it at 16,384: a profile of a
    model in the map stands for the provider's own API.)"""
    model = profile.model
    found: int | None
    if any(m in model for m in SDK_64K_MODELS):
        found = 64_000
    elif not profile.in_model_map:
        found = None
    else:
        found = profile.max_output // 2 if profile.max_output >= profile.context_window else profile.max_output
    if "o3" in model:
        found = 100_000 if found is None else min(found, 100_000)
    return found


def v0_max_output(profile: ModelProfile) -> int | None:
    """V0's `config.max_output_tokens` when unset (`init_model_info`, `openhands/llm/llm.py@156d0686 L513-535`), sent
    as `max_completion_tokens` on every call, the condenser's too (L112-116): 64,000 for `V0_64K_MODELS`, else the
    model's max output in litellm's map, none when the map does not describe the model (`in_model_map`)."""
    if any(m in profile.model for m in V0_64K_MODELS):
        return 64_000
    return profile.max_output if profile.in_model_map else None


@dataclass(eq=False)
class Event:
    """One view event. `kind`: system | message | action | observation | summary, and in V0's view recall (a
    `RecallAction`, its `text` the query) | unlinked_observation (an observation that answers no tool call: a
    recall observation, an error linked to no call)."""

    id: int
    kind: str
    items: tuple[Item, ...] = ()
    source: str = "agent"
    text: str = ""
    response: int | None = None
    call_id: str = ""
    tool_name: str = ""
    arguments: str = ""
    thinking: tuple[Item, ...] = ()
    is_error: bool = False
    masked: bool = False
    #: an observation's action: the first action logged with its call id (V0's `cause`), what V0's
    #: `str(event)` of the observation reads the call's tool and arguments from (`_event_str`); a recall
    #: observation's recall action
    cause: Event | None = field(default=None, repr=False)
    #: the event's own messages, built once by the strategy that renders it (an event is never changed
    #: once built; a masked copy is a new event)
    rendered: tuple[Message, ...] | None = field(default=None, init=False, repr=False)
    #: V0: its user message after another user message, with the "\n\n" V0 puts before it (built once)
    joined: Message | None = field(default=None, init=False, repr=False)

    @property
    def item_ids(self) -> tuple[str, ...]:
        return tuple(i.id for i in self.items)


class EventLog:
    """Items as OpenHands events, with increasing integer ids."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._next = 0
        #: the actions of each model response, by the id of each of them (V0 sends the whole response)
        self.batch_of: dict[int, tuple[Event, ...]] = {}
        #: the first action logged with each call id
        self.first_action: dict[str, Event] = {}

    def new(self, kind: str, **fields: Any) -> Event:
        event = Event(id=self._next, kind=kind, **fields)
        self._next += 1
        self.events.append(event)
        return event

    def observe(self, item: Item) -> Event | None:
        if item.kind == "system":
            return self.new("system", items=(item,), text=item.text, source="environment")
        if item.kind == "user":
            return self.new("message", items=(item,), text=item.text, source="user")
        if item.kind == "tool_result":
            return self.new("observation", items=(item,), text=item.text, call_id=item.call_id or "",
                            tool_name=item.tool_name or "", is_error=item.is_error, source="environment",
                            cause=self.first_action.get(item.call_id or ""))
        return None

    def response(self, items: Sequence[Item]) -> list[Event]:
        """A model response: one action per tool call (the first carries the thought and thinking), or one message."""
        texts = [i for i in items if i.kind == "assistant"]
        thinking = tuple(i for i in items if i.kind == "reasoning")
        calls = [i for i in items if i.kind == "tool_call"]
        response = items[0].response if items else None
        if not calls:
            if not texts and not thinking:
                return []
            return [self.new("message", items=tuple(items), text="\n".join(i.text for i in texts), thinking=thinking,
                             response=response)]
        out = []
        for n, call in enumerate(calls):
            extra = tuple(texts) + thinking if n == 0 else ()
            out.append(self.new("action", items=(*extra, call), text="\n".join(i.text for i in texts) if n == 0 else "",
                                response=response, call_id=call.call_id or "", tool_name=call.tool_name or "",
                                arguments=call.arguments or "", thinking=thinking if n == 0 else ()))
        batch = tuple(out)
        self.batch_of.update((a.id, batch) for a in batch)
        for action in batch:
            self.first_action.setdefault(action.call_id, action)
        return out


def recorded_system_fields(event: Event) -> Mapping[str, Any]:
    """What the recording of a system prompt event keeps besides its text: the OpenHands importer puts its tool
    definitions (`tools`, a list), `agent_class` and `openhands_version` in the system item's meta; fields of
    another type, or none, are not returned (a transcript of another agent records none of them)."""
    meta = event.items[0].meta if event.items else {}
    fields: dict[str, Any] = {}
    if isinstance(meta.get("tools"), (list, tuple)):
        fields["tools"] = meta["tools"]
    for name in ("agent_class", "openhands_version"):
        if isinstance(meta.get(name), str):
            fields[name] = meta[name]
    return fields


def _clip(text: str, limit: int, marker: str) -> str:
    """Keep the head and tail halves around `marker` (V0 `truncate_content`)."""
    if limit <= 0 or len(text) <= limit:
        return text
    half = limit // 2
    return text[:half] + marker + text[-half:]


def sdk_truncate(text: str, limit: int | None, save_dir: str | None = None, tool_prefix: str = "output") -> str:
    """SDK `maybe_truncate` (`utils/truncate.py@611629e6 L50-117`): no limit (None or 0) or a short
    enough text is left as it is; a limit the notice alone fills gives the notice cut to the limit;
    otherwise room for the notice, then the head (rounded up) and the tail. With a `save_dir` the full text is
    saved to `<save_dir>/<tool_prefix>_output_<its SHA-256, 8 hex digits>.txt` (`_save_full_content`, L28-46), and
    the notice names that file and the line the cut starts around (the head's line count + 1); the head keeps its
    length unless the longer notice leaves less room (the write is taken to succeed)."""
    if not limit or limit < 0 or len(text) <= limit:
        return text
    if len(SDK_CLIP) >= limit:
        return SDK_CLIP[:limit]
    head = (limit - len(SDK_CLIP) + 1) // 2
    notice = SDK_CLIP
    if save_dir:
        path = PurePosixPath(save_dir) / f"{tool_prefix}_output_{hashlib.sha256(text.encode()).hexdigest()[:8]}.txt"
        notice = SDK_CLIP_SAVED.format(file_path=path, line_num=len(text[:head].splitlines()) + 1)
        if len(notice) >= limit:
            return notice[:limit]
    room = limit - len(notice)
    head = min(head, room)
    tail = room - head
    return text[:head] + notice + (text[-tail:] if tail else "")


def _preview(text: str, n: int) -> str:
    # Upstream (`action.py@611629e6 L150-154`, `observation.py L78-82`, `system.py L90-94`) marks the cut
    # with "..."; spec §4.5 writes "[...]": upstream wins.
    return text[:n] + "..." if len(text) > n else text


def _generic_preview(text: str, n: int) -> str:
    """`MessageEvent` and `LLMConvertibleEvent.__str__` (`message.py@611629e6 L133-136`, `base.py L95-99`):
    a text longer than `n` keeps its first `n - 3` characters and "..."."""
    return text[: n - 3] + "..." if len(text) > n else text


def event_preview(event: Event, n: int = N_CHAR_PREVIEW, tools: int = 0) -> str:
    """SDK `str(event)` (§4.5): a display preview, not what the model saw; actions show no arguments.

    `tools`: the number of tools the system prompt event carries (its preview names the count)."""
    if event.kind == "action":
        # Upstream names the action's class (`TerminalAction`, …); a replayed transcript's tools have no
        # OpenHands action class, so the tool's name stands for it.
        return f"ActionEvent (agent)\n  Thought: {_preview(event.text, n)}\n  Action: {event.tool_name}"
    if event.kind == "observation":
        # `"".join(content_to_str(observation.to_llm_content))` (`observation.py@611629e6 L74-83`): an error's
        # header comes first; no extended content
        own, _ = sdk_observation_text(event)
        result = SDK_ERROR_HEADER + own if event.is_error else own
        return f"ObservationEvent (environment)\n  Tool: {event.tool_name}\n  Result: {_preview(result, n)}"
    if event.kind == "system":
        # `SystemPromptEvent.__str__` (`system.py@611629e6 L87-104`); its source is "agent".
        return f"SystemPromptEvent (agent)\n  System: {_preview(event.text, n)}\n  Tools: {tools} available"
    if event.kind == "message":
        role = "user" if event.source == "user" else "assistant"
        if role == "assistant" and not event.text:
            # `message.py@611629e6 L151-152`: a model message without text content (only reasoning); the
            # thinking-block count is shown only next to text
            return f"MessageEvent ({event.source})\n  {role}: [no text content]"
        thinking = f" [Thinking blocks: {len(event.thinking)}]" if event.thinking else ""
        return f"MessageEvent ({event.source})\n  {role}: {_generic_preview(event.text, n)}{thinking}"
    return f"CondensationSummaryEvent ({event.source})\n  user: {_generic_preview(event.text, n)}"


def manipulation_indices(view: Sequence[Event], thinking_blocks: bool = True) -> list[int]:
    """§4.4: cut points 0..len that split no batch, no open call and no thinking tool loop. A tool loop starts at an
    action with thinking blocks, which the SDK fills only from litellm's Anthropic-specific `thinking_blocks`
    (`ToolLoopAtomicityProperty`, `llm/message.py@611629e6` L482-537): `thinking_blocks` False (another model's
    reasoning, sent as `reasoning_content`) forms no loop."""
    n = len(view)
    valid = [True] * (n + 1)
    result_at = {e.call_id: i for i, e in enumerate(view) if e.kind == "observation"}
    for i in range(1, n):
        a, b = view[i - 1], view[i]
        if a.kind == "action" and b.kind == "action" and a.response is not None and a.response == b.response:
            valid[i] = False  # BatchAtomicity
    for i, e in enumerate(view):
        if e.kind == "action":
            end = result_at.get(e.call_id)
            stop = n if end is None or end < i else end
            for j in range(i + 1, stop + 1):
                valid[j] = False  # ToolCallMatching: no cut while the call is open
    in_loop = False
    for i, e in enumerate(view):
        if e.kind == "action" and e.thinking and thinking_blocks:
            in_loop = True
        elif e.kind in ("action", "observation"):
            if in_loop:
                valid[i] = False  # ToolLoopAtomicity
        else:
            in_loop = False
    return [i for i, ok in enumerate(valid) if ok]


def find_next(indices: Sequence[int], at: int) -> int:
    for i in indices:
        if i >= at:
            return i
    raise ValueError(f"no valid manipulation index at or after {at}")


class _NoCondensation(Exception):
    """`NoCondensationAvailableException`."""


class _SdkMessages:
    """SDK `events_to_messages` (`event/base.py@611629e6 L107-175`), one event at a time: each event's own messages
    are built once (on the event); the actions of one response (without thinking) fold into one assistant message,
    and a plain user message that follows one joins it (`_can_merge_user_messages`: their text contents in one
    message, joined here by a line break as the string serializer joins them, `llm/message.py` L330-340)."""

    def __init__(self) -> None:
        self.out: list[Message] = []
        #: the response whose actions the last assistant message holds
        self.batch: int | None = None

    def add(self, e: Event) -> None:
        if e.kind != "action":
            self.batch = None
        elif self.batch is not None and e.response == self.batch and not e.thinking:
            prev = self.out[-1]
            call = ToolCall(e.call_id, e.tool_name, e.arguments)
            self.out[-1] = replace(prev, tool_calls=prev.tool_calls + (call,), item_ids=prev.item_ids + e.item_ids[-1:])
            return
        if e.rendered is None:
            e.rendered = self.own(e)
        out = self.out
        for message in e.rendered:
            if out and _plain_user(message) and _plain_user(out[-1]):
                prev = out[-1]
                out[-1] = replace(prev, content=f"{prev.content}\n{message.content}", item_ids=prev.item_ids + message.item_ids,
                                  attachments=prev.attachments + message.attachments)
            else:
                out.append(message)
        if e.kind == "action":
            self.batch = e.response

    @property
    def open(self) -> bool:
        """Whether the last message may still change: it holds actions, which a later action of its response folds
        into, or it is a plain user message, which a later one joins."""
        return self.batch is not None or bool(self.out) and _plain_user(self.out[-1])

    @staticmethod
    def own(e: Event) -> tuple[Message, ...]:
        if e.kind == "system":
            return (Message("system", e.text, item_ids=e.item_ids),)
        if e.kind == "summary":
            return (Message("user", e.text),)
        if e.kind == "message" and e.source == "user":
            return (Message("user", e.text, item_ids=e.item_ids, attachments=e.items[0].attachments),)
        if e.kind == "message":
            return (*(Message("reasoning", t.text, item_ids=(t.id,)) for t in e.thinking),
                    Message("assistant", e.text, item_ids=tuple(i.id for i in e.items if i.kind == "assistant")))
        if e.kind == "action":
            ids = tuple(i.id for i in e.items if i.kind in ("assistant", "tool_call"))
            return (*(Message("reasoning", t.text, item_ids=(t.id,)) for t in e.thinking),
                    Message("assistant", e.text, tool_calls=(ToolCall(e.call_id, e.tool_name, e.arguments),), item_ids=ids))
        return (Message("tool", sdk_tool_text(e), tool_call_id=e.call_id, item_ids=e.item_ids, name=e.tool_name,
                        is_error=e.is_error, attachments=e.items[0].attachments),)


def _plain_user(message: Message) -> bool:
    """`_is_plain_user_message` (`event/base.py@611629e6`): a user message with no tool-call metadata."""
    return message.role == "user" and not message.tool_calls and message.tool_call_id is None and message.name is None


def sdk_tool_text(e: Event) -> str:
    """The text an SDK observation's tool message sends: its content as one text content (`sdk_observation_text`,
    the extended content after it), clipped to `SDK_TOOL_TEXT_LIMIT` by `maybe_truncate` when the message is
    serialised (each text content on its own, `message.py@611629e6 L360-365`), after the error header's own text
    content for a failed result (`schema.py@611629e6 L411-424`; the transcript's error flag stands for
    `Observation.is_error`). This request shape has one text per message: the two contents are joined as they
    follow each other."""
    text = sdk_truncate("\n".join(t for t in sdk_observation_text(e) if t), SDK_TOOL_TEXT_LIMIT)
    return SDK_ERROR_HEADER + text if e.is_error else text


def sdk_observation_text(e: Event) -> tuple[str, str]:
    """An SDK observation's content as its `to_llm_content` renders it (the error header aside), and the extended
    content `ObservationEvent.to_llm_message` sends after it (`observation.py@611629e6 L66-72`), both of the result's
    text (the V1 importer's `extended_content_chars` says where the second starts). A `TerminalObservation`'s
    content is `prefix + content + suffix` and its command metadata's lines (`command_output_text` of the recorded
    `command_metadata`, the class defaults for what is not recorded), cut at `SDK_MAX_CMD_OUTPUT` by `maybe_truncate`
    with the observation's `full_output_save_dir` (`terminal/definition.py@611629e6 L173-200`); any other's is as
    recorded."""
    meta = e.items[0].meta if e.items else {}
    extended = meta.get("extended_content_chars")
    own, more = e.text, ""
    if isinstance(extended, int) and 0 < extended <= len(e.text):
        own, more = e.text[: max(len(e.text) - extended - 1, 0)], e.text[len(e.text) - extended:]
    if meta.get("observation") == SDK_TERMINAL_OBSERVATION:
        save_dir = meta.get("full_output_save_dir")
        own = sdk_truncate(command_output_text(own, command_metadata(e)), SDK_MAX_CMD_OUTPUT,
                           save_dir if isinstance(save_dir, str) else None, "terminal")
    return own, more


#: `CmdOutputMetadata`'s fields and defaults, in its order, the same in V0 (`openhands/events/observation/
#: commands.py@156d0686 L25-35`) and the SDK (`openhands-tools/openhands/tools/terminal/metadata.py@611629e6 L20-42`):
#: what `model_dump()` gives for a command whose recording kept none of them.
COMMAND_METADATA_DEFAULTS: Mapping[str, Any] = {
    "exit_code": -1, "pid": -1, "username": None, "hostname": None, "working_dir": None,
    "py_interpreter_path": None, "prefix": "", "suffix": "",
}


def command_metadata(e: Event) -> dict[str, Any]:
    """A command result's `CmdOutputMetadata` as a dict: the recorded fields (the OpenHands importers'
    `command_metadata`), upstream's defaults for the others (`COMMAND_METADATA_DEFAULTS`)."""
    recorded = e.items[0].meta.get("command_metadata") if e.items else None
    if not isinstance(recorded, Mapping):
        return dict(COMMAND_METADATA_DEFAULTS)
    return {name: recorded.get(name, default) for name, default in COMMAND_METADATA_DEFAULTS.items()}


def command_output_text(content: str, metadata: Mapping[str, Any]) -> str:
    """A command's output as V0's `CmdOutputObservation.to_agent_observation` (`commands.py@156d0686 L196-204`) and
    the SDK's `TerminalObservation.to_llm_content` (before its cut) render it alike: prefix, content and suffix, then
    a working-directory line, a Python-interpreter line when they are set, and an exit-code line unless the code
    is -1."""
    text = f"{metadata['prefix'] or ''}{content}{metadata['suffix'] or ''}"
    if metadata["working_dir"]:
        text += f"\n[Current working directory: {metadata['working_dir']}]"
    if metadata["py_interpreter_path"]:
        text += f"\n[Python interpreter: {metadata['py_interpreter_path']}]"
    exit_code = metadata["exit_code"]
    if isinstance(exit_code, int) and exit_code != -1:
        text += f"\n[Command finished with exit code {exit_code}]"
    return text


#: The ranges of the condenser sizes both pipelines have, as both `LLMSummarizingCondenser`s check them: the SDK's
#: `max_size` `Field(gt=0)` and `keep_first` `Field(ge=0)`, V0's `max_size >= 1` and `keep_first >= 0` (§5.1). The
#: rule between the two is each Options class's `__post_init__`.
MAX_SIZE = Range(1, what="a number of events")
KEEP_FIRST = Range(0, what="a number of events")


def _check_room(strategy: str, keep_first: int, max_size: int, why: str) -> None:
    """The rule between the two sizes: an EVENTS condensation keeps at least one event from the tail,
    `max_size // 2 - keep_first - 1 > 0`; `why` says whose rule it is."""
    if max_size // 2 - keep_first - 1 <= 0:
        raise OptionError(
            f"options {strategy}.keep_first={keep_first} and {strategy}.max_size={max_size}: keep_first must be less than "
            f"max_size // 2 - 1{why}"
        )


# ===================================================================== SDK
@dataclass(frozen=True)
class OpenHandsOptions:
    """`get_default_agent` preset (80, 4) and the SDK class defaults for the rest (§1, §4); the ranges are the
    SDK's own `Field` constraints. The class defaults of the sizes, 240 and 2, are what the OpenHands V1 app server
    runs (`max_size=240,keep_first=2`, see the module docstring)."""

    #: EVENTS reason: condense when the view holds more than this many events; the tail kept is then at most
    #: max_size // 2 - keep_first - 1 events (§4.1, §4.3).
    max_size: int = field(default=80, metadata={"range": MAX_SIZE})
    #: The first this many view events are never forgotten; forgetting (and the summary) starts at the first valid
    #: cut at or after it (§4.3).
    keep_first: int = field(default=4, metadata={"range": KEEP_FIRST})
    #: condenser max_tokens (None: unset; the model's input window applies, §4.1)
    max_tokens: int | None = None
    #: No condensation when it would forget fewer than this fraction of the view's events (too little progress; §4.3).
    minimum_progress: float = field(default=0.1, metadata={"range": Range(0, 1, low_open=True, high_open=True, what="a fraction of the view")})
    #: Attempts of the hard context reset (a summary of the whole view) after a HARD requirement found no condensation
    #: (§4.6).
    hard_context_reset_max_retries: int = field(default=5, metadata={"range": Range(1, what="a number of attempts")})
    #: After each failed hard-reset attempt the event-string limit (first the longest event string) is multiplied by
    #: this (§4.6).
    hard_context_reset_context_scaling: float = field(
        default=0.8, metadata={"range": Range(0, 1, low_open=True, high_open=True, what="a scaling factor")}
    )
    #: `N_CHAR_PREVIEW` of the event previews the summariser reads
    preview_chars: int = N_CHAR_PREVIEW
    #: The LLM config's `max_output_tokens`, the max tokens of every turn and summary request (None: the SDK's default
    #: from the model's entry in litellm's map, `sdk_max_output`).
    max_output_tokens: int | None = field(default=None, metadata={"range": Range(1, what="a number of output tokens")})

    def __post_init__(self) -> None:
        """The SDK's `validate_keep_first_vs_max_size` (`llm_summarizing_condenser.py@611629e6`): an EVENTS
        condensation must keep at least one event from the tail, `max_size // 2 - keep_first - 1 > 0`."""
        _check_room("openhands", self.keep_first, self.max_size, ", as the SDK requires, to leave room for condensation")


@dataclass
class _Reasons:
    request: bool = False
    tokens: bool = False
    events: bool = False
    extra: dict[str, int] = field(default_factory=dict)


class OpenHands(Strategy):
    name = "openhands"
    description = "OpenHands SDK preset LLMSummarizingCondenser(80, 4) of get_default_agent: REQUEST/TOKENS/EVENTS, pair-safe cut indices, preview-based summary, hard reset"
    spec = "docs/specs/openhands.md §1, §2.2, §2.3, §3, §4, §10"
    Options = OpenHandsOptions

    def __init__(self, ctx: StrategyContext, options: Any = None) -> None:
        super().__init__(ctx, options)
        #: the max tokens of every request (§1: the agent's LLM and the condenser's copy of it)
        self.max_output = self.options.max_output_tokens or sdk_max_output(ctx.profile)
        self.log = EventLog()
        self.view: list[Event] = []
        self.unhandled_request = False
        #: the call ids of the view's actions and observations, as of `_paired[0]` (the view list) and its
        #: first `_paired[1]` events; `_unpaired`: the ids in one set and not the other
        self._paired: tuple[list[Event] | None, int] = (None, 0)
        self._calls: set[str] = set()
        self._results: set[str] = set()
        self._unpaired: set[str] = set()
        #: the view rendered (`_ViewMessages`) as of `_rendered[0]` (the view list) and its first `_rendered[1]`
        #: events, with what `messages()` returned for them (`_rendered[2]`), and its settled messages as the
        #: append-only log the requests' views share
        self._rendered: tuple[list[Event] | None, int, LogView | None] = (None, 0, None)
        self._renderer = _SdkMessages()
        self._log: list[Message] = []

    def on_user_turn(self, item: Item) -> None:
        self.on_input(item)

    def on_input(self, item: Item) -> None:
        if item.is_model_output:
            self.view.extend(self.log.response([item]))
            return
        event = self.log.observe(item)
        if event is not None:
            self.view.append(event)

    def on_response(self, items: Sequence[Item], usage: Usage | None, needs_follow_up: bool) -> None:
        self.view.extend(self.log.response(items))

    def on_overflow(self, error: ProviderError) -> bool:
        # §2.3: LLMContextWindowExceedError → CondensationRequest; the next step condenses (HARD).
        self.unhandled_request = True
        return True

    # ------------------------------------------------------------ messages (SDK events_to_messages)
    def messages(self, view: Sequence[Event] | None = None) -> Sequence[Message]:
        """The view's messages (default: the strategy's view, extended from the events added since the
        last call and returned as a view of the append-only log of its settled messages; the same object
        while the view is unchanged, so the provider finds the request it counted by identity)."""
        if view is not None:
            renderer = _SdkMessages()
            for e in view:
                renderer.add(e)
            return renderer.out
        of, done, rendered = self._rendered
        if of is self.view and done == len(self.view) and rendered is not None:
            return rendered
        if of is not self.view or done > len(self.view):
            self._renderer, self._log, done = _SdkMessages(), [], 0
        renderer = self._renderer
        for e in self.view[done:]:
            renderer.add(e)
        out, log = renderer.out, self._log
        # the last message is open while a later event may change it (`_SdkMessages.open`)
        log += out[len(log): len(out) - 1 if renderer.open else len(out)]
        rendered = LogView(log, len(log), tuple(out[len(log):]))
        self._rendered = (self.view, len(self.view), rendered)
        return rendered

    # ------------------------------------------------------------ reasons (§4.1, §4.2)
    def _effective_max_tokens(self) -> int:
        window = self.ctx.profile.context_window
        return min(self.options.max_tokens, window) if self.options.max_tokens is not None else window

    def _reported_threshold(self) -> int:
        """The smallest view count that fires TOKENS (`Request.threshold`): the reason is strict,
        `get_total_token_count(...) > effective_max_tokens` (§4.1, `llm_summarizing_condenser.py@611629e6`
        L117-154), so one more than `effective_max_tokens`. The count is the whole view's messages, what the
        request sends (§4.7; the replay sends no tool definitions), so the true count compares with it exactly."""
        return self._effective_max_tokens() + 1

    def _reasons(self) -> _Reasons:
        total = self.ctx.count_tokens(self.messages())
        reasons = _Reasons(
            request=self.unhandled_request,
            tokens=total > self._effective_max_tokens(),  # strict (§4.1): reported as `_reported_threshold`
            events=len(self.view) > self.options.max_size,
        )
        reasons.extra["total_tokens"] = total
        return reasons

    def _enforce(self) -> None:
        """`View.enforce_properties` (§4.4): actions without observations and observations without
        actions leave the view (a call the recording never answered, once the next step runs).

        The call ids of both kinds are kept as the view grows; the view is filtered (a new list) only
        when some id is in one set and not the other."""
        of, done = self._paired
        if of is not self.view or done > len(self.view):
            self._calls, self._results, self._unpaired, done = set(), set(), set(), 0
        calls, results, unpaired = self._calls, self._results, self._unpaired
        for e in self.view[done:]:
            if e.kind == "action":
                calls.add(e.call_id)
            elif e.kind == "observation":
                results.add(e.call_id)
            else:
                continue
            if e.call_id in calls and e.call_id in results:
                unpaired.discard(e.call_id)
            else:
                unpaired.add(e.call_id)
        if unpaired:
            self.view = [
                e for e in self.view
                if not (e.kind == "action" and e.call_id not in results) and not (e.kind == "observation" and e.call_id not in calls)
            ]
            # what stays is paired: both sets are now the ids they share
            calls &= results
            results &= calls
            unpaired.clear()
        self._paired = (self.view, len(self.view))

    def request(self) -> Request:
        self._enforce()
        reasons = self._reasons()
        estimate = reasons.extra["total_tokens"]
        if reasons.request or reasons.tokens or reasons.events:
            view = self.view
            hard = reasons.tokens or reasons.request
            try:
                self._condense(reasons)
            except _NoCondensation:
                # SOFT: proceed uncondensed. HARD: hard reset; when that fails too, upstream re-raises and
                # the step fails: here the request goes out as it is and the provider decides.
                if hard:
                    self._hard_reset(reasons)
            if self.view is not view:
                # a condensation replaced the view: the count of the view sent (`get_total_token_count`, §4.7,
                # as the next step's reasons read it), not the one the reasons were read on
                estimate = self.ctx.count_tokens(self.messages())
        return Request(self.messages(), estimate_tokens=estimate, threshold=self._reported_threshold(), max_output_tokens=self.max_output)

    # ------------------------------------------------------------ window (§4.3)
    def _events_from_tail(self, reasons: _Reasons) -> int:
        o = self.options
        candidates = []
        if reasons.request:
            candidates.append(len(self.view) // 2 - o.keep_first - 1)
        if reasons.events:
            candidates.append(o.max_size // 2 - o.keep_first - 1)
        if reasons.tokens:
            total = reasons.extra["total_tokens"]
            reduce = total - self._effective_max_tokens() // 2
            rest = self.view[o.keep_first:]
            if reduce <= 0:
                candidates.append(len(rest))
            else:
                counts = self._prefix_tokens(o.keep_first)
                base = next(counts)
                prefix = len(rest)
                for k, tokens in enumerate(counts, 1):
                    if tokens - base > reduce:
                        prefix = k
                        break
                candidates.append(len(rest) - prefix)
        # Not clamped, as upstream (L297-308): a REQUEST on a view of fewer than 2 * (keep_first + 1) events
        # gives a negative count, the naive end falls past the view, `find_next` raises and a HARD
        # requirement goes to the hard context reset.
        return min(candidates)

    def _prefix_tokens(self, start: int) -> Iterator[int]:
        """`count_tokens(messages(view[:m]))` for m = start, start + 1, … up to the whole view: the events
        are rendered once, in order (the messages of a prefix are those of the renderer after it)."""
        renderer = _SdkMessages()
        for m, e in enumerate(self.view):
            if m >= start:
                yield self.ctx.count_tokens(tuple(renderer.out))
            renderer.add(e)
        yield self.ctx.count_tokens(tuple(renderer.out))

    def _condense(self, reasons: _Reasons) -> None:
        o = self.options
        profile = self.ctx.profile
        indices = manipulation_indices(self.view, thinking_blocks=model_family(profile.provider, profile.model) == "anthropic")
        naive_end = len(self.view) - self._events_from_tail(reasons)
        try:
            start = find_next(indices, o.keep_first)
            end = find_next(indices, naive_end)
        except ValueError:
            raise _NoCondensation from None
        forgotten = self.view[start:end]
        if not forgotten or len(forgotten) < len(self.view) * o.minimum_progress:
            raise _NoCondensation
        try:
            summary = self._summarize(forgotten, None)
        except SummaryOverflow:
            raise _NoCondensation from None
        self._apply(forgotten, summary, start, reasons, "condensation")

    def _preview(self, event: Event) -> str:
        # The system prompt event's preview counts its tools (`len(self.tools)`, `system.py@611629e6 L95`): the
        # tool definitions the recording keeps (`recorded_system_fields`), else the tools the log has called.
        tools = 0
        if event.kind == "system":
            recorded = recorded_system_fields(event).get("tools")
            tools = len(recorded) if recorded is not None else len({e.tool_name for e in self.log.events if e.kind == "action"})
        return event_preview(event, self.options.preview_chars, tools)

    def _summarize(self, events: Sequence[Event], limit: int | None) -> str:
        texts = [sdk_truncate(self._preview(e), limit) for e in events]
        prompt = self.ctx.render_prompt("openhands_summary.j2", v0=False, events=texts, previous=None)
        return self.ctx.summarize(Request([Message("user", prompt)], kind="summary", max_output_tokens=self.max_output)).text

    def _apply(self, forgotten: Sequence[Event], summary: str | None, offset: int, reasons: _Reasons, trigger: str) -> None:
        before = self.messages()
        gone = {e.id for e in forgotten}
        kept = [e for e in self.view if e.id not in gone]
        if summary is not None:
            kept.insert(offset, self.log.new("summary", text=summary, source="environment"))
        self.view = kept
        self.unhandled_request = False
        names = [n for n, on in (("REQUEST", reasons.request), ("TOKENS", reasons.tokens), ("EVENTS", reasons.events)) if on]
        self.ctx.record_compaction(
            trigger=trigger, before=before, after=self.messages(), summary=summary,
            summarized_ids=[i for e in forgotten for i in e.item_ids], estimate_tokens=reasons.extra["total_tokens"],
            threshold=self._reported_threshold(),
            details={"reasons": names, "forgotten_events": len(forgotten), "summary_offset": offset},
        )

    def _hard_reset(self, reasons: _Reasons) -> bool:
        """§4.6: summarise every view event at offset 0, shrinking event strings ×0.8 per failed attempt."""
        o = self.options
        limit: int | None = None
        for _ in range(o.hard_context_reset_max_retries):
            try:
                summary = self._summarize(self.view, limit)
            except SummaryOverflow:
                longest = max((len(self._preview(e)) for e in self.view), default=0)
                limit = int((limit if limit is not None else longest) * o.hard_context_reset_context_scaling)
                continue
            self._apply(list(self.view), summary, 0, reasons, "hard-reset")
            return True
        return False


# ===================================================================== V0
class _V0Messages:
    """V0 message building (§7), one event at a time. Its messages only grow (an assistant message is
    appended once every call of its response has an observation, followed by them), so a view that
    extends the one rendered is rendered by adding the new events."""

    def __init__(self, strategy: OpenHandsV0) -> None:
        self.strategy = strategy
        #: the view rendered so far and its messages
        self.events: list[Event] = []
        self.out: list[Message] = []
        #: the responses waiting for observations (all their actions, by the first one's id) and the
        #: observations waiting to be placed
        self.pending: dict[int, tuple[Event, ...]] = {}
        self.results: dict[str, Message] = {}

    def add(self, e: Event) -> None:
        self.events.append(e)
        out, pending, results = self.out, self.pending, self.results
        if e.kind == "action":
            # `conversation_memory.py@156d0686 L258-270`: any action of a response in the view makes the whole
            # response (its text and all its tool calls, the forgotten ones too) the pending assistant message
            batch = self.strategy.log.batch_of.get(e.id, (e,))
            pending[batch[0].id] = batch
        else:
            if e.rendered is None:
                e.rendered = self.strategy._own_messages(e)
            if e.kind == "observation" and not e.masked:
                results[e.call_id] = e.rendered[0]
            elif e.rendered and e.rendered[0].role == "user" and out and out[-1].role == "user":
                # `_apply_user_message_formatting` (L167-182): "\n\n" before a user message that follows one
                if e.joined is None:
                    e.joined = replace(e.rendered[0], content="\n\n" + e.rendered[0].content)
                out.append(e.joined)
            else:
                out += e.rendered
        if e.kind not in ("action", "observation"):
            return  # nothing pending or answered changed: no batch completes here
        for key in list(pending):
            actions = pending[key]
            if all(a.call_id in results for a in actions):
                out.append(self.strategy._batch_message(actions))
                out += [results.pop(a.call_id) for a in actions]
                del pending[key]


@dataclass(frozen=True)
class OpenHandsV0Options:
    """V0 server pipeline defaults (§1, §5.1, §5.4, §6)."""

    #: The first this many view events are kept; the summary goes right after them (`summary_offset`, §5.1).
    keep_first: int = field(default=4, metadata={"range": KEEP_FIRST})
    #: Summarize, by count alone, when the view holds more than this many events; keep_first events, the summary and
    #: the newest max_size // 2 - keep_first - 1 events remain (§5.1).
    max_size: int = field(default=120, metadata={"range": MAX_SIZE})
    #: characters (0: event strings are not cut)
    max_event_length: int = field(default=10_000, metadata={"range": Range(0, what="a number of characters")})
    #: Browser observations older than the newest this many become "Visited URL <url>\nContent omitted" (§5.4).
    browser_attention_window: int = field(default=2, metadata={"range": Range(0, what="a number of browser observations")})
    #: `max_message_chars`: observation and condensation texts longer than this keep their head and tail halves around
    #: a truncation notice; 0 = no cut (§6, §7).
    max_message_chars: int = 30_000
    #: tool names whose observations are browser output (§5.4)
    browser_tools: str = "browser,browse,browse_interactive,web_read,browser_navigate"
    #: The LLM config's `max_output_tokens`, the max tokens of every turn and summary request (None: V0's default
    #: from the model's entry in litellm's map, `v0_max_output`).
    max_output_tokens: int | None = field(default=None, metadata={"range": Range(1, what="a number of output tokens")})

    def __post_init__(self) -> None:
        """V0's `LLMSummarizingCondenser` checks `keep_first < max_size // 2` when built, and its first condensation
        raises when `max_size // 2 - keep_first - 1` is 0 (`min()` of no forgotten event, §5.1 edge cases): both
        are refused here, the rule the SDK's condenser states."""
        _check_room(
            "openhands-v0", self.keep_first, self.max_size,
            " (V0's condenser refuses keep_first >= max_size // 2 and fails at its first condensation at max_size // 2 - 1)",
        )


class OpenHandsV0(Strategy):
    name = "openhands-v0"
    description = "OpenHands V0 pipeline: conversation window on overflow, browser masking, count-only summarizing cut (120, 4) that loses call/result halves"
    spec = "docs/specs/openhands.md §1, §2.1, §2.3, §3, §5.1, §5.2, §5.4, §5.9, §6, §7"
    Options = OpenHandsV0Options

    def __init__(self, ctx: StrategyContext, options: Any = None) -> None:
        super().__init__(ctx, options)
        #: the max tokens of every request (the agent's LLM and the condenser's copy of it)
        self.max_output = self.options.max_output_tokens or v0_max_output(ctx.profile)
        self.log = EventLog()
        self.forgotten: set[int] = set()
        self.summary: tuple[str, int] | None = None
        self.unhandled_request = False
        self.browser = {t.strip() for t in self.options.browser_tools.split(",") if t.strip()}
        #: the log's events not forgotten, in order: extended from the log's new events (`_sync`), so a
        #: view never walks the whole log
        self._live: list[Event] = []
        self._synced = 0
        #: built once: the summary's event (for the summary it shows), each browser observation's masked
        #: copy (by event id and URL), each batch's assistant message (by its actions' ids)
        self._summary_event: tuple[tuple[str, int], Event] | None = None
        self._masked_copies: dict[tuple[int, str], Event] = {}
        self._batches: dict[tuple[int, ...], Message] = {}
        #: how many browser observations `_live` holds (none to mask up to the attention window)
        self._browsers = 0
        #: each recall action's event, by the id of its marker (what a recall observation's `recall_action` names)
        self._recalls: dict[str, Event] = {}
        #: the last view rendered; its messages are the append-only log the requests' views share
        self._renderer = _V0Messages(self)

    def on_user_turn(self, item: Item) -> None:
        self.on_input(item)

    def on_input(self, item: Item) -> None:
        if item.is_model_output:
            self.log.response([item])
        elif item.kind == "user" and item.meta.get("observation") in ("recall", "error"):
            self._unlinked_observation(item)
        else:
            self.log.observe(item)

    def on_marker(self, item: Item) -> None:
        """V0's recall events that are no model input, events of its history all the same (`state_tracker.py@156d0686
        L38-47`): a `RecallAction` (the importer's `recall` marker) and a recall observation V0 sent nothing for (its
        `observation:recall` marker: prompt extensions off, or nothing to render)."""
        event = item.meta.get("event")
        if event == "recall":
            query = item.meta.get("query")
            self._recalls[item.id] = self.log.new("recall", items=(item,), text=query if isinstance(query, str) else "",
                                                  source=str(item.meta.get("source", "user")))
        elif event == "observation:recall":
            self._unlinked_observation(item)

    def _unlinked_observation(self, item: Item) -> None:
        """An observation that answers no tool call: a recall observation (with its recall action, `recall_action`)
        or an error linked to no call; V0 sends it as a user message, or nothing (`_own_messages`)."""
        action = self._recalls.get(str(item.meta.get("recall_action")))
        self.log.new("unlinked_observation", items=(item,), text="" if item.kind == "marker" else item.text,
                     source="environment", cause=action)

    def on_response(self, items: Sequence[Item], usage: Usage | None, needs_follow_up: bool) -> None:
        self.log.response(items)

    def on_overflow(self, error: ProviderError) -> bool:
        # §2.3: a context-window error adds a CondensationRequestAction (enable_history_truncation).
        self.unhandled_request = True
        return True

    # ------------------------------------------------------------ view (§2.1)
    def _sync(self) -> None:
        for e in self.log.events[self._synced:]:
            if e.id not in self.forgotten:
                self._live.append(e)
                self._browsers += self._is_browser(e)
        self._synced = len(self.log.events)

    def _is_browser(self, e: Event) -> bool:
        return e.kind == "observation" and e.tool_name in self.browser

    def view(self) -> list[Event]:
        """The base view (§2.1) with the browser masking (§5.4), which changes nothing while the view
        holds no more browser observations than the attention window."""
        view = self.base_view()
        return self._browser_masked(view) if self._browsers > self.options.browser_attention_window else view

    def base_view(self) -> list[Event]:
        self._sync()
        view = list(self._live)
        if self.summary is not None:
            text, offset = self.summary
            if self._summary_event is None or self._summary_event[0] is not self.summary:
                self._summary_event = (self.summary, Event(id=-1, kind="summary", text=text, source="environment"))
            view.insert(min(offset, len(view)), self._summary_event[1])
        return view

    def _browser_masked(self, view: list[Event]) -> list[Event]:
        """§5.4: browser observations beyond the newest `attention_window` become a masked observation."""
        seen = 0
        out = list(view)
        for i in range(len(out) - 1, -1, -1):
            e = out[i]
            if self._is_browser(e):
                seen += 1
                if seen > self.options.browser_attention_window:
                    url = _url(self.log.first_action.get(e.call_id))
                    copy = self._masked_copies.get((e.id, url))
                    if copy is None:
                        copy = self._masked_copies[(e.id, url)] = replace(e, text=BROWSER_MASK.format(url=url), masked=True)
                    out[i] = copy
        return out

    # ------------------------------------------------------------ message building (§7)
    def messages(self, view: Sequence[Event] | None = None) -> LogView:
        """The messages of `view` (default: the strategy's view): when it extends the view rendered
        last, the new events are added to that rendering (`_V0Messages`), else it is rendered anew."""
        view = self.view() if view is None else view
        renderer = self._renderer
        done = len(renderer.events)
        if done > len(view) or view[:done] != renderer.events:  # events compare by identity
            renderer = self._renderer = _V0Messages(self)
            done = 0
        for e in view[done:]:
            renderer.add(e)
        return LogView(renderer.out, len(renderer.out))

    def _own_messages(self, e: Event) -> tuple[Message, ...]:
        """The message of an event that is not a tool call (§7), none for a recall action (`_process_action` makes
        none, `conversation_memory.py@156d0686 L184-343`) and for a recall observation V0 sent nothing for."""
        limit = self.options.max_message_chars
        if e.kind == "system":
            return (Message("system", e.text, item_ids=e.item_ids),)
        if e.kind == "summary" or (e.kind == "observation" and e.masked):
            return (Message("user", _clip(e.text, limit, V0_TRUNCATION)),)
        if e.kind == "message" and e.source == "user":
            return (v0_user_message(e.items[0]),)
        if e.kind == "message":
            return (Message("assistant", e.text, item_ids=tuple(i.id for i in e.items if i.kind != "reasoning")),)
        if e.kind == "recall" or e.kind == "unlinked_observation" and e.items[0].kind == "marker":
            return ()
        if e.kind == "unlinked_observation" and e.items[0].meta.get("observation") == "error":
            # an `ErrorObservation` without tool-call metadata: a user message with V0's line (L514-517, L672-685)
            return (Message("user", _clip(e.text, limit, V0_TRUNCATION) + V0_ERROR_SUFFIX, item_ids=e.item_ids),)
        if e.kind == "unlinked_observation":  # a recall observation's context, as the importer rendered it
            return (Message("user", e.text, item_ids=e.item_ids),)
        error = v0_error_observation(e)
        text = _clip(v0_observation_text(e), limit, V0_TRUNCATION) + (V0_ERROR_SUFFIX if error else "")
        return (Message("tool", text, tool_call_id=e.call_id, item_ids=e.item_ids, name=e.tool_name, is_error=e.is_error,
                        attachments=() if error else v0_tool_images(e)),)

    def _batch_message(self, actions: Sequence[Event]) -> Message:
        """The assistant message of one response (all its actions), once all have their observations (§7)."""
        key = tuple(a.id for a in actions)
        message = self._batches.get(key)
        if message is None:
            ids = tuple(i.id for a in actions for i in a.items if i.kind in ("assistant", "tool_call"))
            calls = tuple(ToolCall(a.call_id, a.tool_name, a.arguments) for a in actions)
            # the response's text (on its first action), left out when blank (L266-268)
            text = actions[0].text if actions[0].text.strip() else ""
            message = self._batches[key] = Message("assistant", text, tool_calls=calls, item_ids=ids)
        return message

    # ------------------------------------------------------------ the pipeline (§5.9)
    def request(self) -> Request:
        view = self.view()
        live = self._live
        if self.unhandled_request:
            self._conversation_window(view)
        elif len(view) > self.options.max_size:
            self._summarize(view)
        # the view is built anew only when a condensation forgot events (`_forget` replaces `_live`)
        messages = self.messages(view) if self._live is live else self.messages()
        # V0 counts events, not tokens: no token estimate or token threshold to report.
        return Request(messages, max_output_tokens=self.max_output, meta={"view_events": len(self._live) + (self.summary is not None)})

    def _conversation_window(self, view: list[Event]) -> None:
        """§5.2: keep the essentials (the system message, the first user message, the recall action whose query is
        that message and its observation: `conversation_window_condenser.py@156d0686 L38-99`) and the newest half of
        the rest; no summary."""
        self.unhandled_request = False
        system = next((e for e in view if e.kind == "system"), None)
        first_user = next((e for e in view if e.kind == "message" and e.source == "user"), None)
        if first_user is None:
            return  # an empty condensation (software-agent-sdk#1073)
        essential = [e for e in (system, first_user) if e is not None] + _first_recall(view, first_user)
        num_recent = max(1, (len(view) - len(essential)) // 2)
        recent = view[len(view) - num_recent:]
        # leading observations are skipped, and the summary (an `AgentCondensationObservation`) with them
        # (`conversation_window_condenser.py` L114-124); forgetting it changes nothing, V0 inserts it anew
        while recent and recent[0].kind in V0_OBSERVATIONS:
            recent = recent[1:]
        keep = {e.id for e in essential} | {e.id for e in recent}
        forgotten = [e for e in view if e.id not in keep and e.id >= 0]
        self._forget(forgotten, [e.id for e in forgotten], None, "conversation-window")

    def _summarize(self, view: list[Event]) -> None:
        """§5.1 `get_condensation`: head, previous summary, the forgotten middle by count; an id range.

        It runs after the browser masking (§5.9), so a masked browser output is an
        `AgentCondensationObservation` like the summary (`llm_summarizing_condenser.py@156d0686 L59-69`):
        one at `keep_first` is taken as the previous summary, and none is among the forgotten events or
        their id range."""
        o = self.options
        head = view[: o.keep_first]
        tail_count = o.max_size // 2 - len(head) - 1
        at = view[o.keep_first] if len(view) > o.keep_first else None
        previous = at.text if at is not None and _is_condensation_observation(at) else NO_SUMMARY
        middle = view[o.keep_first: len(view) - tail_count] if tail_count > 0 else []
        forgotten = [e for e in middle if not _is_condensation_observation(e)]
        if not forgotten:
            return
        events = [(e.id, _clip(_event_str(e), o.max_event_length, V0_TRUNCATION)) for e in forgotten]
        prompt = self.ctx.render_prompt("openhands_summary.j2", v0=True, events=events,
                                        previous=_clip(previous, o.max_event_length, V0_TRUNCATION))
        try:
            # uncached: V0 sets `caching_prompt = False` on the summariser's LLM (llm_summarizing_condenser.py@156d0686
            # L163-179)
            request = Request([Message("user", prompt)], kind="summary", max_output_tokens=self.max_output, cache_control=False)
            summary = self.ctx.summarize(request).text
        except SummaryOverflow:
            return
        ids = [e.id for e in forgotten]
        self._forget(forgotten, list(range(min(ids), max(ids) + 1)), (summary, o.keep_first), "condensation")

    def _forget(self, forgotten: Sequence[Event], ids: Sequence[int], summary: tuple[str, int] | None, trigger: str) -> None:
        before = self.messages()
        self.forgotten.update(ids)
        self._sync()
        self._live = [e for e in self._live if e.id not in self.forgotten]
        self._browsers = sum(map(self._is_browser, self._live))
        if summary is not None:
            self.summary = summary
        lost_calls, lost_results = self._unsent(self.base_view())
        self.ctx.record_compaction(
            trigger=trigger, before=before, after=self.messages(), summary=summary[0] if summary else None,
            summarized_ids=[i for e in forgotten for i in e.item_ids] if summary else (),
            threshold=None,
            details={
                "forgotten_range": [min(ids), max(ids)] if ids else None,
                "orphaned_calls": lost_calls,
                "orphaned_results": lost_results,
            },
        )

    def _unsent(self, view: Sequence[Event]) -> tuple[list[str], list[str]]:
        """The call ids of the view's actions and observations that no message carries (§7): a response is
        sent, all its calls and their observations, when the view holds one of its actions and an
        observation for each of its calls."""
        results = {e.call_id for e in view if e.kind == "observation"}
        sent: set[str] = set()
        for e in view:
            if e.kind == "action":
                calls = {a.call_id for a in self.log.batch_of.get(e.id, (e,))}
                if calls <= results:
                    sent |= calls
        return (sorted({e.call_id for e in view if e.kind == "action"} - sent - {""}),
                sorted(results - sent - {""}))


def _is_condensation_observation(e: Event) -> bool:
    """V0 `AgentCondensationObservation`: the summary and each masked browser output."""
    return e.kind == "summary" or e.masked


#: The kinds of V0 view events that are V0 `Observation`s (the summary is an `AgentCondensationObservation`).
V0_OBSERVATIONS = frozenset({"observation", "unlinked_observation", "summary"})


def _first_recall(view: Sequence[Event], first_user: Event) -> list[Event]:
    """The first recall action after the first user message whose query is that message's content, and the first
    observation after it whose cause it is (`conversation_window_condenser.py@156d0686 L72-99`); [] when there is
    none."""
    start = next(i for i, e in enumerate(view) if e is first_user)
    for i in range(start + 1, len(view)):
        action = view[i]
        if action.kind == "recall" and action.text == first_user.text:
            observation = next((e for e in view[i + 1:] if e.kind in V0_OBSERVATIONS and e.cause is action), None)
            return [action] if observation is None else [action, observation]
    return []


#: `MAX_CMD_OUTPUT_SIZE` (`commands.py@156d0686 L22`): a command's output is cut to it when its observation is made.
V0_MAX_CMD_OUTPUT = 30_000


def v0_observation_text(e: Event) -> str:
    """The text V0 sends for a result before its 30,000-character cut: a command's (`run`) whose recording
    kept its metadata (the OpenHands importer's `command_metadata`) is `CmdOutputObservation.to_agent_observation`
    (the cut applies to all of it, `conversation_memory.py@156d0686` L388-399); any other result is its content.
    Not in the spec; upstream followed."""
    recorded = e.items[0].meta.get("command_metadata") if e.items else None
    if not isinstance(recorded, Mapping):
        return e.text
    return command_output_text(e.text, command_metadata(e))


def v0_error_observation(e: Event) -> bool:
    """Whether a result is a V0 `ErrorObservation`: the observation type an OpenHands recording names
    (`meta["observation"]`: a failed command is a `run` observation with its exit code, not an error),
    else the transcript's error flag."""
    recorded = e.items[0].meta.get("observation") if e.items else None
    return recorded == "error" if isinstance(recorded, str) else e.is_error


def v0_tool_images(e: Event) -> tuple[Attachment, ...]:
    """The images a V0 tool message sends (`ConversationMemory._process_observation`, `conversation_memory.py@156d0686`):
    only two observations carry any, an IPython cell's (`execute_ipython_cell`: every image, L405-445) and the
    interactive browser's (`browser`, `BrowseInteractiveAction`; `enable_som_visual_browsing` is on by default:
    one image, its set of marks else its screenshot, L454-482, the result's first image standing for it). Every
    other tool's observation is text alone (an MCP tool's too, L401-404), so a result's images from any other
    tool are not sent. Vision is taken as active, as for a user message's images (`v0_user_message`)."""
    images = tuple(a for a in e.items[0].attachments if a.is_image) if e.items else ()
    if e.tool_name == "execute_ipython_cell":
        return images
    return images[:1] if e.tool_name == "browser" else ()


def _arguments(action: Event | None) -> dict[str, Any]:
    """A call's arguments as `response_to_actions` reads them, `json.loads` (`function_calling.py@156d0686
    L94-99`); arguments that are no JSON object (upstream refuses such a call) count as none."""
    if action is None:
        return {}
    try:
        parsed = json.loads(action.arguments or "{}")
    except json.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _url(action: Event | None) -> str:
    return str(_arguments(action).get("url", ""))


def v0_images(item: Item) -> tuple[Attachment, ...]:
    """A user item's images: the `image_urls` of V0's `MessageAction` (the web client puts every image/* file there,
    as a data URL; other files are uploaded to the workspace and named in the text, `file_urls`, which
    `conversation_memory.py` never sends: `chat-interface.tsx@156d0686 L186-211`)."""
    return tuple(a for a in item.attachments if a.is_image)


def v0_user_message(item: Item) -> Message:
    """The message of a user `MessageAction` with `image_urls`, as V0 sends it (`All-Hands-AI/OpenHands@156d0686`):

    - `ConversationMemory._process_action` (`openhands/memory/conversation_memory.py` L303-322) gives a user
      message the content `[TextContent(content), TextContent("Image 1:"), ImageContent([url1]), TextContent("Image
      2:"), ImageContent([url2]), …]`: every image is added whatever `vision_is_active` (since 93ef1b0c, PR #10645),
      the "Image N:" labels only when it is active;
    - `LLM.format_messages_for_llm` (`openhands/llm/llm.py` L817-842) sets `vision_enabled = vision_is_active()`, and
      `Message._list_serializer` (`openhands/core/message.py` L97-129) sends an `ImageContent` only then; without
      vision the images and labels are not sent at all;
    - a user message with images reaches the event stream only with vision active: `Session.dispatch`
      (`openhands/server/session/session.py` L355-371) refuses it otherwise ("Model does not support image
      upload…").

    So a user message's images are sent, each after its "Image N:" label. This request shape holds one text and
    the attachments after it: the labels join the text with "\n", as V0's `_string_serializer` joins the text
    parts (L87-95); the images are the message's attachments, counted as the provider counts an image."""
    images = v0_images(item)
    text = "\n".join([item.text, *(f"Image {n}:" for n in range(1, len(images) + 1))])
    return Message("user", text, item_ids=(item.id,), attachments=images)


# ===================================================================== V0 str(event)
# What V0's summariser reads of a forgotten event: `str(event)` (`llm_summarizing_condenser.py@156d0686 L134-136`),
# the `__str__` of the event's class, or the dataclass `__repr__` where the class has none. The class is the one
# V0's CodeActAgent makes of the model's tool call (`response_to_actions`, `function_calling.py@156d0686 L73-338`)
# and the one its runtime answers it with. The event as V0 holds it has been through `event_to_dict` and
# `event_from_dict` (`stream.py@156d0686 L177-179`): the fields an action's constructor defaults keep their enum
# members (`action`, `impl_source`), `security_risk` is an `ActionSecurityRisk` again, and an observation's
# `observation` is its class default (`serialization/action.py L100-156`, `serialization/observation.py L101-142`).
# An enum member shows as `<ActionType.READ: 'read'>` in a repr, and as `EventSource.AGENT` in an f-string
# (OpenHands 0.62 runs on Python 3.12-3.13, `pyproject.toml@156d0686 L28`, where a `(str, Enum)` member formats as
# `Class.NAME`).

#: `RISK_LEVELS` (`codeact_agent/tools/security_utils.py@156d0686 L10`) and `ActionSecurityRisk`'s values
#: (`events/action/action.py@156d0686 L14-18`).
_RISKS = {"LOW": 0, "MEDIUM": 1, "HIGH": 2}
#: The observation types V0 renders here (`ObservationType`, `core/schema/observation.py@156d0686`).
_V0_OBSERVATIONS = frozenset({"run", "run_ipython", "read", "edit", "browse", "think", "mcp", "task_tracking",
                              "delegate", "null", "error"})
#: The observation type the runtime answers each CodeAct tool's action with: `CmdRunAction` → `CmdOutputObservation`,
#: `IPythonRunCellAction` → `IPythonRunCellObservation`, `FileEditAction` → `FileEditObservation`,
#: `BrowseInteractiveAction` → `BrowserOutputObservation` (`action_execution_server.py@156d0686`), `AgentThinkAction`
#: → `AgentThinkObservation`, `TaskTrackingAction` → `TaskTrackingObservation` (`runtime/base.py@156d0686
#: L966-1027`), `AgentDelegateAction` → `AgentDelegateObservation`, and any other action that is not runnable
#: (`AgentFinishAction`, `CondensationRequestAction`) → `NullObservation` (L1028). `str_replace_editor`'s `view` is a
#: `FileReadAction` (`read`); any tool V0 does not know is an MCP tool (`mcp`).
_V0_RESULT_OF = {"execute_bash": "run", "execute_ipython_cell": "run_ipython", "str_replace_editor": "edit",
                 "edit_file": "edit", "browser": "browse", "think": "think", "task_tracker": "task_tracking",
                 "delegate_to_browsing_agent": "delegate", "finish": "null", "request_condensation": "null"}


def _thought_line(thought: Any) -> str:
    """The `THOUGHT: …` line of an action's `__str__`, present when the thought is not empty."""
    return f"THOUGHT: {thought}\n" if thought else ""


def _combine_thought(text: str, own: Any) -> Any:
    """`combine_thought` (`function_calling.py@156d0686 L49-56`): the response's text (on the first action of a
    response only, L311-313) before the action's own thought."""
    if text and own:
        return f"{text}\n{own}"
    return text or own


def _risk(arguments: Mapping[str, Any]) -> str:
    """The repr of an action's `security_risk`: the argument's level when it is one of `RISK_LEVELS`
    (`set_security_risk`, `function_calling.py@156d0686 L59-70`), else the default `UNKNOWN`."""
    level = arguments.get("security_risk")
    if isinstance(level, str) and level in _RISKS:
        return f"<ActionSecurityRisk.{level}: {_RISKS[level]}>"
    return "<ActionSecurityRisk.UNKNOWN: -1>"


def _file_edit_str(arguments: Mapping[str, Any], thought: Any, llm_based: bool) -> str:
    """`FileEditAction.__repr__` (`events/action/files.py@156d0686 L117-138`; `str()` falls back to it)."""
    text = f"**FileEditAction**\nPath: [{arguments.get('path', '')}]\nThought: {thought}\n"
    if llm_based:  # `edit_file` (L164-172): start 1 and end -1 by default
        return text + (f"Range: [L{arguments.get('start', 1)}:L{arguments.get('end', -1)}]\n"
                       f"Content:\n```\n{arguments.get('content', '')}\n```\n")
    command = arguments.get("command", "")
    text += f"Command: {command}\n"
    if command == "create":
        text += f"Created File with Text:\n```\n{arguments.get('file_text')}\n```\n"
    elif command == "str_replace":
        text += f"Old String: ```\n{arguments.get('old_str')}\n```\nNew String: ```\n{arguments.get('new_str')}\n```\n"
    elif command == "insert":
        text += f"Insert Line: {arguments.get('insert_line')}\nNew String: ```\n{arguments.get('new_str')}\n```\n"
    elif command == "undo_edit":
        text += "Undo Edit\n"
    return text


def _task_list(arguments: Mapping[str, Any]) -> list[dict[str, Any]]:
    """`task_tracker`'s normalised task list (`function_calling.py@156d0686 L266-291`); what is not a list of
    dicts (upstream refuses the call) counts as no task."""
    tasks = arguments.get("task_list", [])
    return [{"id": t.get("id", f"task-{n + 1}"), "title": t.get("title", "Untitled task"),
             "status": t.get("status", "todo"), "notes": t.get("notes", "")}
            for n, t in enumerate(tasks if isinstance(tasks, list) else []) if isinstance(t, dict)]


def _v0_action_str(e: Event) -> str:
    """`str()` of the action V0 makes of a tool call (`response_to_actions`, `function_calling.py@156d0686
    L101-309`), with the response's text as the first action's thought. An argument the call lacks takes the
    field's default (a required one, which upstream would refuse the call without, is empty)."""
    arguments = _arguments(e)
    name = e.tool_name
    if name == "execute_bash":
        # `CmdRunAction.__str__` (events/action/commands.py L34-39); `is_input` is the string "true" (L111)
        is_input = arguments.get("is_input", "false") == "true"
        return (f"**CmdRunAction (source=EventSource.AGENT, is_input={is_input})**\n{_thought_line(e.text)}"
                f"COMMAND:\n{arguments.get('command', '')}")
    if name == "execute_ipython_cell":  # `IPythonRunCellAction.__str__` (commands.py L55-60)
        return f"**IPythonRunCellAction**\n{_thought_line(e.text)}CODE:\n{arguments.get('code', '')}"
    if name == "browser":  # `BrowseInteractiveAction.__str__` (events/action/browse.py L43-48)
        return f"**BrowseInteractiveAction**\n{_thought_line(e.text)}BROWSER_ACTIONS: {arguments.get('code', '')}"
    if name == "str_replace_editor" and arguments.get("command") == "view":
        # `FileReadAction` has no `__str__`: its dataclass repr (events/action/files.py L9-28; L191-196)
        return (f"FileReadAction(path={arguments.get('path', '')!r}, start=0, end=-1, thought={e.text!r}, "
                f"action=<ActionType.READ: 'read'>, security_risk={_risk(arguments)}, "
                f"impl_source=<FileReadSource.OH_ACI: 'oh_aci'>, view_range={arguments.get('view_range')!r})")
    if name == "str_replace_editor":
        return _file_edit_str(arguments, e.text, llm_based=False)
    if name == "edit_file":
        return _file_edit_str(arguments, e.text, llm_based=arguments.get("impl_source", "llm_based_edit") == "llm_based_edit")
    if name == "think":  # `AgentThinkAction`'s dataclass repr (events/action/agent.py L45-59)
        thought = _combine_thought(e.text, arguments.get("thought", ""))
        return f"AgentThinkAction(thought={thought!r}, action=<ActionType.THINK: 'think'>)"
    if name == "finish":  # `AgentFinishAction`'s dataclass repr (agent.py L22-42)
        return (f"AgentFinishAction(final_thought={arguments.get('message', '')!r}, outputs={{}}, thought={e.text!r}, "
                "action=<ActionType.FINISH: 'finish'>)")
    if name == "request_condensation":  # no thought field: the response's text is not kept (agent.py L191-203)
        return "CondensationRequestAction(action=<ActionType.CONDENSATION_REQUEST: 'condensation_request'>)"
    if name == "task_tracker":
        # `TaskTrackingAction`'s dataclass repr (agent.py L206-228). The loop over the tasks (function_calling.py
        # L274) reuses the index of the loop over the calls (L91): after two tasks or more it is not 0, and the
        # response's text is not made the thought (L312-313). (A later call of one task gets it: its event holds
        # no text, that case is not reproduced.)
        tasks = arguments.get("task_list", [])
        thought = "" if isinstance(tasks, list) and len(tasks) > 1 else e.text
        return (f"TaskTrackingAction(command={arguments.get('command', '')!r}, task_list={_task_list(arguments)!r}, "
                f"thought={thought!r}, action=<ActionType.TASK_TRACKING: 'task_tracking'>)")
    if name == "delegate_to_browsing_agent":  # `AgentDelegateAction`'s dataclass repr (agent.py L76-85)
        return (f"AgentDelegateAction(agent='BrowsingAgent', inputs={arguments!r}, thought={e.text!r}, "
                "action=<ActionType.DELEGATE: 'delegate'>)")
    # `MCPAction.__str__` (events/action/mcp.py L26-32)
    return f"**MCPAction**\n{_thought_line(e.text)}NAME: {name}\nARGUMENTS: {arguments}"


def _v0_observation_type(e: Event, tool: str, arguments: Mapping[str, Any]) -> str:
    """The observation type of a result: the one an OpenHands recording names, else an error when the transcript
    says so (`v0_error_observation`), else what the runtime answers its call's action with (`_V0_RESULT_OF`)."""
    recorded = e.items[0].meta.get("observation") if e.items else None
    if isinstance(recorded, str) and recorded in _V0_OBSERVATIONS:
        return recorded
    if v0_error_observation(e):
        return "error"
    if tool == "str_replace_editor" and arguments.get("command") == "view":
        return "read"
    return _V0_RESULT_OF.get(tool, "mcp")


def _v0_observation_str(e: Event) -> str:
    """`str()` of the observation V0 holds for a result, its content the result's text. Fields no transcript
    records take their dataclass defaults: a browser output's open pages, page index, last action and error
    (`BrowserOutputObservation`, `events/observation/browse.py@156d0686 L8-35`; its URL, which has no default, is
    the call's `url` argument or empty, as for the masked output), a delegate's outputs; a command's metadata
    fields the recording lacks take `CmdOutputMetadata`'s (`COMMAND_METADATA_DEFAULTS`). An `edit_file` edit's
    observation shows a diff of the file's old and new content (`files.py L183-195`), which no transcript records:
    its content stands for it."""
    action = e.cause
    arguments = _arguments(action)
    tool = action.tool_name if action is not None else e.tool_name
    kind = _v0_observation_type(e, tool, arguments)
    content = e.text
    if kind == "run":
        # `CmdOutputObservation.__str__` (events/observation/commands.py L187-194) of an observation whose content
        # was cut to `MAX_CMD_OUTPUT_SIZE` when it was made (L116-120, L138-165); its source is its action's,
        # the agent (runtime/base.py L404-408)
        metadata = command_metadata(e)
        agent_observation = command_output_text(_clip(content, V0_MAX_CMD_OUTPUT, V0_TRUNCATION), metadata)
        return (f"**CmdOutputObservation (source=EventSource.AGENT, exit code={metadata['exit_code']}, "
                f"metadata={json.dumps(metadata, indent=2)})**\n"
                f"--BEGIN AGENT OBSERVATION--\n{agent_observation}\n--END AGENT OBSERVATION--")
    if kind == "run_ipython":  # `IPythonRunCellObservation.__str__` (commands.py L227-231)
        images = [a for a in e.items[0].attachments if a.is_image] if e.items else []
        return f"**IPythonRunCellObservation**\n{content}" + (f"\nImages: {len(images)}" if images else "")
    if kind == "read":  # `FileReadObservation.__str__` (events/observation/files.py L24-26), the action's path
        return f"[Read from {arguments.get('path', '')} is successful.]\n{content}"
    if kind == "edit":  # `FileEditObservation.__str__` of an OH_ACI edit: its content (files.py L183-186)
        return content
    if kind == "browse":  # `BrowserOutputObservation.__str__` (browse.py L41-56)
        return (f"**BrowserOutputObservation**\nURL: {_url(action)}\nError: False\nOpen pages: []\n"
                "Active page index: -1\nLast browser action: \nLast browser action error: \nFocused element bid: \n"
                f"--- Agent Observation ---\n{content}")
    if kind == "think":  # dataclass repr (events/observation/agent.py L32-44)
        return f"AgentThinkObservation(content={content!r}, observation=<ObservationType.THINK: 'think'>)"
    if kind == "mcp":  # dataclass repr (events/observation/mcp.py L8-20); name and arguments are the call's
        return (f"MCPObservation(content={content!r}, observation=<ObservationType.MCP: 'mcp'>, name={tool!r}, "
                f"arguments={arguments!r})")
    if kind == "task_tracking":  # dataclass repr (events/observation/task_tracking.py); a plan's list (base.py L993-1031)
        command = arguments.get("command", "")
        tasks = _task_list(arguments) if command == "plan" else []
        return (f"TaskTrackingObservation(content={content!r}, observation=<ObservationType.TASK_TRACKING: "
                f"'task_tracking'>, command={command!r}, task_list={tasks!r})")
    if kind == "delegate":  # dataclass repr (events/observation/delegate.py L7-22)
        return f"AgentDelegateObservation(content={content!r}, outputs={{}}, observation=<ObservationType.DELEGATE: 'delegate'>)"
    if kind == "null":  # dataclass repr (events/observation/empty.py L7-17)
        return f"NullObservation(content={content!r}, observation=<ObservationType.NULL: 'null'>)"
    return f"**ErrorObservation**\n{content}"  # `ErrorObservation.__str__` (events/observation/error.py L22-23)


def _v0_system_str(event: Event) -> str:
    """`SystemMessageAction.__str__` (`events/action/message.py@156d0686 L59-66`)."""
    recorded = recorded_system_fields(event)
    tools = f"\nTOOLS: {len(recorded['tools'])} tools available" if recorded.get("tools") else ""
    agent_class = f"\nAGENT_CLASS: {recorded['agent_class']}" if recorded.get("agent_class") else ""
    return f"**SystemMessageAction** (source=EventSource.AGENT)\nCONTENT: {event.text}{tools}{agent_class}"


def _event_str(event: Event) -> str:
    """V0 `str(event)` of an event the summariser forgets (see the section's comment). Besides the actions and
    observations:

    - a message is `MessageAction.__str__` (`events/action/message.py@156d0686 L31-40`): its source, its content,
      and for a user message each image's URL (the URL the transcript recorded, `uri`; the OpenHands importer
      keeps an `image_urls` entry as the attachment's name); no `file_urls` are recorded (default None);
    - an error the OpenHands importer turned into a user message (an `ErrorObservation` linked to no call) is
      `ErrorObservation.__str__`;
    - a recall action is `RecallAction.__str__` (`events/action/agent.py@156d0686 L101-104`), a recall observation
      `RecallObservation.__str__` (`_recall_observation_str`);
    - a system prompt is `SystemMessageAction.__str__` (`message.py L59-66`) from the agent
      (`controller/agent.py L84-88`): its `TOOLS:` line counts the tools and its `AGENT_CLASS:` line names the
      class where the recording keeps them (`recorded_system_fields`; an empty tool list has no line, as upstream's
      `if self.tools`); a transcript that keeps neither has the defaults, None: no lines."""
    if event.kind == "action":
        return _v0_action_str(event)
    if event.kind == "observation":
        return _v0_observation_str(event)
    if event.kind == "system":
        return _v0_system_str(event)
    if event.kind == "recall":
        return f"**RecallAction**\nQUERY: {event.text[:50]}"
    item = event.items[0] if event.items else None
    if event.kind == "unlinked_observation" and item is not None and item.meta.get("observation") == "error":
        return f"**ErrorObservation**\n{event.text}"
    if event.kind == "unlinked_observation" and item is not None:
        return _recall_observation_str(item.meta)
    source = "EventSource.USER" if event.source == "user" else "EventSource.AGENT"
    images = v0_images(item) if event.source == "user" and item is not None else ()
    urls = "".join(f"\nIMAGE_URL: {a.uri or a.name}" for a in images)
    return f"**MessageAction** (source={source})\nCONTENT: {event.text}{urls}"


def _recall_observation_str(meta: Mapping[str, Any]) -> str:
    """`RecallObservation.__str__` (`events/observation/agent.py@156d0686 L109-138`) of the fields the OpenHands
    importer keeps (`recall_fields`; their defaults where it kept none). Its `recall_type` is a `RecallType` member
    again (`serialization/observation.py@156d0686 L128-131`), which formats as `RecallType.NAME`; upstream's missing
    comma joins the date and the secrets into one field."""
    recall_type = meta.get("recall_type")
    recorded = meta.get("recall_fields")
    fields: Mapping[str, Any] = recorded if isinstance(recorded, Mapping) else {}
    shown = f"RecallType.{recall_type.upper()}" if recall_type in ("workspace_context", "knowledge") else recall_type
    parts = [f"recall_type={shown}"]
    if recall_type == "workspace_context":
        parts += [f"repo_name={fields.get('repo_name', '')}", f"repo_instructions={fields.get('repo_instructions', '')[:20]}...",
                  f"runtime_hosts={fields.get('runtime_hosts', {})}",
                  f"additional_agent_instructions={fields.get('additional_agent_instructions', '')[:20]}...",
                  f"date={fields.get('date', '')}custom_secrets_descriptions={fields.get('custom_secrets_descriptions', {})}",
                  f"conversation_instructions={fields.get('conversation_instructions', '')[:20]}..."]
    if fields.get("microagents"):
        parts.append(f"microagent_knowledge={', '.join(fields['microagents'])}")
    return "**RecallObservation**\n" + ", ".join(parts)
