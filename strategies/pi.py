"""Pi coding agent compaction: `pi` (LATER rules: the spec's `ee24a9ec`, brought to upstream `2efa728d`,
2026-07-27, by the commits `PiRules` names), `pi-2026-03` (BASE, `83378aad`) and `pi-2025-12` (December
2025, `83a6c269`).

One implementation, parameterized by `PiRules` (strategies/pi_compaction.py); `Pi202512` replaces
the trigger, preparation, summary request and provider transform with the December 2025 ones
(upstream `compaction.ts`, `agent-session.ts`, `agent.ts`, pi-ai `agent-loop.ts` and
`transorm-messages.ts` at that commit, which the spec does not cover: the threshold is checked after
every assistant message and the running loop goes on with its uncompacted messages, the compaction
applying from the next prompt; cuts only at user messages; no overflow recovery, no staleness guard,
no pre-prompt check). The rest implements docs/specs/pi.md:
- §1: the session tree (strategies/pi_session_tree.py) rebuilt from the transcript: items carry
  their Pi entry id and parentId in `meta` (scenarios/pi_session.py); items from other formats
  become entries in order. Recorded compactions are not installed (the strategy compacts on its
  own); their ids are mapped to the strategy's own leaf so later entries attach correctly.
- §2: the trigger `contextTokens > contextWindow - reserveTokens` after each agent run and before
  each user prompt, never between tool calls inside a run (§2.3, issue #8833: upstream still had no
  such check at 0.84.1, earendil-works/pi#7821, so LATER has none either), the staleness guard,
  the error-message path via `estimateContextTokens` (LATER also for an all-zero usage, cd95c274);
  a transient error skips the check only while a retry is scheduled (at most `maxRetries`, upstream
  #1834; LATER's transient errors are pi-ai's `isRetryableAssistantError`), the pre-prompt check has no retry.
- §3/§4: `prepareCompaction`, history summary (initial or update prompt), split-turn prefix
  summary merged with the separator, "No prior history.", file lists, output limits per version;
  LATER's summary and branch-summary requests carry no cache breakpoint (9b3a2059: `cacheRetention: "none"`).
- §5: overflow recovery (only for an error of the current model): provider overflow → errored
  assistant persisted, compaction, one retry per user turn; silent overflow (and LATER's `length` case) → compaction without retry.
- §6: branch summaries when the transcript navigates the tree (`branch` markers and recorded
  `branch_summary` entries).
- §7: a manual `/compact` where the recorded agent compacted, when `compact_at_recorded` is set
  (used to replay real sessions in step with the recording, e.g. for the fidelity table).

`Request.estimate_tokens` is Pi's `estimateContextTokens` of the agent messages (last usage +
chars/4 of what follows), None while that usage predates the compaction the request sends (Pi has no
count of a compacted context until an assistant answers it, §2.4); `Request.threshold` is
`contextWindow - reserveTokens + 1`, the smallest count the strict `>` of §2.2 fires on, reported only
on the first request after a user prompt that a check preceded (the pre-prompt check; for `pi-2025-12`
the check after the previous run's last assistant, whose compaction that request is the first to send):
a request inside a run follows no check that could change it (None with `enabled` off too: no count then
triggers a compaction).

Between compactions the agent messages only grow at their end, so the strategy keeps them, their
wire form and their estimate from one request to the next and adds what was appended (issue 18);
a compaction or a move of the leaf rebuilds them from the path's `PathIndex`, and the wire form
copies the runs of messages the compaction kept. Each request costs what changed, not the length
of the history; a request taken when nothing changed since the last one is the same object.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from compaction_bench.log_view import LogView
from compaction_bench.provider import ProviderError
from compaction_bench.request import Message, Request, ToolCall
from compaction_bench.strategies.pi_branch import (
    BRANCH_SUMMARY_PREAMBLE,
    NO_CONTENT,
    entries_to_summarize,
    prepare_branch_summary,
)
from compaction_bench.strategies.pi_compaction import (
    BASE,
    DEC2025,
    LATER,
    NO_PRIOR_HISTORY,
    SPLIT_TURN_SEPARATOR,
    ConversationSerializer,
    PiRules,
    Preparation,
    is_context_overflow,
    prepare_compaction,
    prepare_compaction_2025,
)
from compaction_bench.strategies.pi_session_tree import (
    ContextEstimator,
    Entry,
    PathIndex,
    PiMessage,
    SessionTree,
    WireFold,
    WireFold2025,
    calculate_context_tokens,
    convert_message,
    entry_message,
    iso_to_ms,
    message_item_ids,
    retimed,
    to_wire_2025,
)
from compaction_bench.strategy import CONTEXT_WINDOW, TOKEN_COUNT, Range, Strategy, SummaryOverflow
from compaction_bench.transcript import Item, Usage

#: Transient errors that Pi retries before any compaction check (§2.3; `_isRetryableError`, `agent-session.ts@83378aad`).
RETRYABLE_ERROR = re.compile(
    r"overloaded|rate.?limit|too many requests|429|500|502|503|504|service.?unavailable|server.?error|"
    r"internal.?error|connection.?error|connection.?refused|other side closed|fetch failed|upstream.?connect|"
    r"reset before headers|terminated|retry delay",
    re.I,
)
#: LATER's transient errors: `RETRYABLE_PROVIDER_ERROR_PATTERN` of pi-ai `utils/retry.ts@ee24a9ec` L26-81, with
#: "socket connection was closed" (4285712b), "stream ended before a terminal response event" (b0c2a90e),
#: "getaddrinfo", "ENOTFOUND", "EAI_AGAIN" (33e40c3e) and "ResourceExhausted" (57d96d72) of `retry.ts@2efa728d`.
LATER_RETRYABLE_ERROR = re.compile(
    "|".join((
        "overloaded", "rate.?limit", "too many requests", "429", "500", "502", "503", "504", "524",
        "service.?unavailable", "server.?error", "internal.?error", "provider.?returned.?error",
        "network.?error", "connection.?error", "connection.?refused", "connection.?lost", "other side closed",
        "fetch failed", "upstream.?connect", "reset before headers", "getaddrinfo", "ENOTFOUND", "EAI_AGAIN",
        "socket hang up", "socket connection was closed", "timed? out", "timeout", "terminated",
        "websocket.?closed", "websocket.?error", "ended without", "stream ended before message_stop",
        "stream ended before a terminal response event", "http2 request did not get a response", "retry delay",
        "you can retry your request", "try your request again", "please retry your request", "ResourceExhausted",
    )),
    re.I,
)
#: LATER: quota and billing errors are never retried (`NON_RETRYABLE_PROVIDER_LIMIT_ERROR_PATTERN`, `retry.ts@ee24a9ec`
#: L7-24, the same at 2efa728d).
LATER_NOT_RETRYABLE_ERROR = re.compile(
    "GoUsageLimitError|FreeUsageLimitError|Monthly usage limit reached|available balance|insufficient_quota|"
    "out of budget|quota exceeded|billing",
    re.I,
)
#: How many recent summary requests' messages are kept (a compaction sends a history and a turn prefix request).
SUMMARY_REQUESTS_KEPT = 4
#: How the December 2025 summary request hands over the previous summary (a user message).
PREVIOUS_SUMMARY_2025 = "Previous session summary:\n"
#: The values of Pi's `ThinkingLevel`.
ThinkingLevel = Literal["off", "minimal", "low", "medium", "high", "xhigh"]
#: Anthropic/Bedrock use budget-based thinking: reasoning raises a request's max tokens (§4.2).
BUDGET_THINKING_PROVIDERS = frozenset({"anthropic", "bedrock"})


@dataclass(frozen=True)
class PiOptions:
    """Pi settings and constants, with the upstream defaults (docs/specs/pi.md §2.1, §3–§6)."""

    #: `compaction.enabled`: False turns off automatic compaction, threshold and overflow alike; a manual /compact
    #: still runs (§2.1, §2.3).
    enabled: bool = True
    #: `compaction.reserveTokens`: compact when contextTokens > contextWindow - this (strict); the summary output
    #: limits are fractions of it (§2.1, §2.2, §4.2).
    reserve_tokens: int = 16384
    #: `compaction.keepRecentTokens`: the newest messages kept verbatim, walked back until their chars/4 estimates
    #: reach this many tokens, then cut at the next valid cut point (§2.1, §3.3).
    keep_recent_tokens: int = 20000
    #: `branchSummary.reserveTokens`: a branch summary's input budget is the context window minus this, in chars/4
    #: tokens; a budget ≤ 0 has no limit (§2.1, §6).
    branch_reserve_tokens: int = 16384
    #: contextWindow used for the branch budget when the model has none.
    branch_default_window: int = field(default=128000, metadata={"range": CONTEXT_WINDOW})
    #: maxTokens of a branch summary request, fixed upstream (§6).
    branch_summary_max_tokens: int = 2048
    #: A compaction or branch summary message past the branch budget is still kept while the running total is below
    #: this × the budget (§6).
    branch_summary_ratio: float = 0.9
    #: Tool results longer than this many characters (UTF-16 units) are cut in the serialized transcript, with a
    #: "[... N more characters truncated]" note (§4.1).
    tool_result_max_chars: int = 2000
    #: History summary maxTokens = floor(this × reserve_tokens), clamped to the model's max output in LATER (§4.2).
    summary_output_ratio: float = 0.8
    #: Split-turn prefix summary maxTokens = floor(this × reserve_tokens), clamped to the model's max output in LATER
    #: (§4.3).
    turn_prefix_output_ratio: float = 0.5
    #: Characters an image counts in the chars/4 estimate: tool-result and custom images, and user images in LATER
    #: (§2.5).
    image_chars: int = 4800
    #: LATER's third overflow case: a `length` stop with 0 output tokens and input + cacheRead ≥ this × the context
    #: window (§5.1).
    overflow_length_ratio: float = 0.99
    #: Whether the model reasons (BASE asks for "high" reasoning in history summaries).
    model_reasoning: bool = True
    #: thinking budgets in tokens, added to a summary request's max tokens by level (§4.2)
    thinking_budget_minimal: int = field(default=1024, metadata={"range": TOKEN_COUNT})
    #: Tokens added to a summary request's max tokens at the `low` thinking level on Anthropic/Bedrock (LATER, §4.2).
    thinking_budget_low: int = field(default=2048, metadata={"range": TOKEN_COUNT})
    #: Tokens added to a summary request's max tokens at the `medium` thinking level on Anthropic/Bedrock
    #: (LATER, §4.2).
    thinking_budget_medium: int = field(default=8192, metadata={"range": TOKEN_COUNT})
    #: Tokens added to a summary request's max tokens at `high` (BASE's only level; LATER's `high` and `xhigh`) on
    #: Anthropic/Bedrock, capped at the model's max output (§4.2).
    thinking_budget_high: int = field(default=16384, metadata={"range": TOKEN_COUNT})
    #: The session's thinking level until a `thinking_level_change` entry sets one: `DEFAULT_THINKING_LEVEL`, "medium"
    #: since a373dce7 (v0.50.2, 2026-01-29), "off" before. Only LATER's summaries read it (§4.2); BASE and December
    #: 2025 ask for "high".
    default_thinking_level: ThinkingLevel = "medium"
    #: `/compact <instructions>` for the manual compactions of `compact_at_recorded`.
    custom_instructions: str = ""
    #: Replay option: run a manual /compact at each recorded compaction the trigger did not fire for.
    compact_at_recorded: bool = False
    #: Auto-retry of transient errors (settings `retry.enabled`, `retry.maxRetries`; §2.3).
    retry_enabled: bool = True
    #: `retry.maxRetries`: transient errors retried at most this many times in a row before the compaction check runs
    #: on the error; 0 retries none (§2.3).
    max_retries: int = field(default=3, metadata={"range": Range(0, what="a number of retries")})


@dataclass(frozen=True)
class Decision:
    """One threshold check: Pi's contextTokens against contextWindow - reserveTokens, strict (§2.2)."""

    context_tokens: int
    threshold: int

    @property
    def fires(self) -> bool:
        return self.context_tokens > self.threshold


def _same_messages(a: Sequence[Message], b: Sequence[Message]) -> bool:
    """Whether two sequences hold the same message objects."""
    return len(a) == len(b) and all(map(operator.is_, a, b))


class PiStrategy(Strategy):
    """Pi's compaction on its session tree; subclasses pick the version rules."""

    Options = PiOptions
    sends_inputs_verbatim = True
    rules: ClassVar[PiRules] = LATER

    def __init__(self, ctx, options=None) -> None:
        super().__init__(ctx, options)
        self.tree = SessionTree()
        self.system: list[Message] = []
        self.aliases: dict[str, str] = {}
        self.clock = 0.0
        self.thinking_level: str = self.options.default_thinking_level
        self.overflow_attempted = False
        self.retry_attempt = 0
        #: The agent's current (provider, model id): the last model_change or successful assistant.
        self.current_model: tuple[str, str] | None = None
        self.removed: set[int] = set()
        self.navigated_from: str | None = None
        self._own_ids = 0
        #: Converted messages by object identity (hashing a message's fields on every request is
        #: the cost); the message is kept with its conversion so its id cannot be reused.
        self._wire_cache: dict[int, tuple[PiMessage, list[Message]]] = {}
        #: Compaction summaries' wire messages by summary text: successive compactions often write the
        #: same summary, and the same object lets comparing two requests skip reading it.
        self._summary_wire: dict[str, list[Message]] = {}
        #: The summary requests' system message, kept while its text stays the same.
        self._summary_system: Message | None = None
        #: The messages of recent summary requests by what their text is made of (system prompt, head,
        #: instructions, the ids of the conversation's messages), oldest first, each with the conversation
        #: (which keeps those ids its messages'): a compaction whose request does not fit is tried again at
        #: the next check with the same input, and the same objects let the provider find the request it
        #: counted before instead of reading its text again.
        self._summary_requests: dict[tuple[str, str, str, tuple[int, ...]], tuple[list[PiMessage], tuple[Message, ...]]] = {}
        #: Rendered prompt templates by name and variables (a render is a function of those; the
        #: context records a template's use at its first render).
        self._prompts: dict[tuple[str, tuple[tuple[str, Any], ...]], str] = {}
        #: `agent_messages` and the state it was built for: (tree generation, path length). Appends
        #: that add no compaction extend it; anything else rebuilds it (§1.4).
        self._context: list[PiMessage] = []
        self._context_key: tuple[int, int] | None = None
        #: Messages removed since `_context` was last brought up to date (dropped from it then).
        self._removals: list[PiMessage] = []
        #: The provider transform and Pi's context estimate, folded over the agent messages as they grow.
        self._wire = WireFold(self._convert)
        #: The log the requests are views of: the system messages, then the output of the fold
        #: `_log_of` (held, so its id stays its own) when `_log_system` system messages were known.
        self._log: list[Message] = []
        self._log_of: list[Message] | None = None
        self._log_system = 0
        #: The last view returned, returned again while the log and the tail stay the same.
        self._last_view: LogView | None = None
        image_chars, rules = self.options.image_chars, self.rules
        self._context_estimate = ContextEstimator(image_chars=image_chars, user_images=rules.user_images, nonzero_usage=rules.nonzero_usage)
        #: Estimates summed and messages listed along the session path (cut walk, kept tails, tokensBefore).
        self._path_index = PathIndex(image_chars=image_chars, user_images=rules.user_images, nonzero_usage=rules.nonzero_usage)
        #: Whether the next request is the first after a user prompt that a check preceded (`Request.threshold`).
        self._prompt_checked = False
        self._serialize = ConversationSerializer(self.options.tool_result_max_chars)

    # ------------------------------------------------------------------ clock and ids
    def _tick(self, raw_ms: float | None = None) -> float:
        """A strictly increasing epoch-ms clock: recorded times where they move forward."""
        self.clock = raw_ms if raw_ms and raw_ms > self.clock else self.clock + 1
        return self.clock

    def _new_id(self, kind: str) -> str:
        self._own_ids += 1
        return f"pi-{kind}-{self._own_ids}"

    # ------------------------------------------------------------------ the tree
    def _resolve(self, entry_id: str | None) -> str | None:
        while entry_id in self.aliases:
            entry_id = self.aliases[entry_id]
        return entry_id

    def _parent_of(self, item: Item) -> str | None:
        if "parent" not in item.meta:
            return self.tree.leaf
        parent = self._resolve(item.meta["parent"])
        return parent if parent is None or parent in self.tree.entries else self.tree.leaf

    def _append_own(self, entry: Entry) -> None:
        """An entry the strategy created: recorded children of the old leaf attach below it."""
        if entry.parent is not None:
            self.aliases[entry.parent] = entry.id
        self.tree.append(entry)

    def _append_recorded(self, item: Item, entry_type: str, message: PiMessage | None, **fields: Any) -> Entry:
        entry_id = str(item.meta.get("entry") or item.id)
        parent = self._parent_of(item)
        raw = message.timestamp if message is not None else iso_to_ms(item.timestamp)
        ts = self._tick(raw)
        if message is not None and ts != message.timestamp:
            message = retimed(message, ts)
        entry = Entry(entry_id, parent, entry_type, ts, message=message, **fields)
        self.tree.branch(parent)
        self.navigated_from = None
        return self.tree.append(entry)

    def agent_messages(self) -> list[PiMessage]:
        """The agent's in-memory messages: the session context minus removed errored assistants.

        Entries appended after the last build only add their messages (none is a compaction, so
        the context's head is unchanged) and a removal only drops its message, looked for from the
        end (a removed message is an errored assistant just appended; one appended since the last
        build is not in the context yet, and is only left out); a compaction or a move of the leaf
        off the path rebuilds the context from the path."""
        path = self.tree.active_path()
        removed = self.removed
        key = self._context_key
        fresh = path[key[1] :] if key is not None and key[0] == self.tree.generation else None
        if fresh is None or any(e.type == "compaction" for e in fresh):
            context = self._path_index.update(path).session_context(nested_compactions=self.rules.nested_compactions)
            self._context = [m for m in context if id(m) not in removed] if removed else context
        else:
            context = self._context
            added = [m for e in fresh if (m := entry_message(e)) is not None]
            appended = set(map(id, added))
            for message in self._removals:
                if id(message) in appended:
                    continue
                at = next((i for i in range(len(context) - 1, -1, -1) if context[i] is message), None)
                if at is not None:
                    del context[at]
            context.extend(m for m in added if id(m) not in removed)
        self._removals.clear()
        self._context_key = (self.tree.generation, len(path))
        return list(self._context)

    def _remove(self, message: PiMessage) -> None:
        """Take an errored assistant out of the agent's messages (a retry, an overflow recovery)."""
        self.removed.add(id(message))
        self._removals.append(message)

    def _last_assistant(self) -> PiMessage | None:
        return next((m for m in reversed(self.agent_messages()) if m.role == "assistant"), None)

    def _convert(self, message: PiMessage) -> list[Message]:
        cached = self._wire_cache.get(id(message))
        if cached is None:
            wire = convert_message(message)
            if message.role == "compactionSummary":  # its wire form is its text's: equal summaries share it
                wire = self._summary_wire.setdefault(message.summary, wire)
            cached = self._wire_cache[id(message)] = (message, wire)
        return cached[1]

    def run_messages(self) -> list[PiMessage]:
        """The messages a request of the agent loop holds: the agent's messages."""
        return self.agent_messages()

    def wire(self) -> LogView:
        return self._view(self._wire.output(self.run_messages()))

    def _view(self, out: list[Message], tail: Sequence[Message] = ()) -> LogView:
        """The system messages, `out` and `tail` as a view of a log that holds the system messages and
        `out`: the fold's list only grows until the fold starts a new one, and the system messages only
        grow, so between two compactions the log grows with them and each request is a view of it (the
        provider compares two views of one log without reading them)."""
        system, log = self.system, self._log
        if self._log_of is not out or self._log_system != len(system):
            log = self._log = [*system, *out]
            self._log_of, self._log_system = out, len(system)
        elif len(log) < len(system) + len(out):
            log.extend(out[len(log) - len(system) :])
        last = self._last_view
        if last is not None and last.log is log and last.length == len(log) and _same_messages(last.tail, tail):
            return last  # nothing changed since: the same request (the provider then reads nothing of it)
        view = self._last_view = LogView(log, len(log), tuple(tail))
        return view

    @property
    def context_window(self) -> int:
        """Pi's `model.contextWindow` (§2.1): the model's whole context, which pi-ai gives GPT-5 as 400,000
        (`models.generated.ts@83378aad`), where the profile's window is GPT-5's 272,000-token input limit."""
        profile = self.ctx.profile
        return profile.context_limit or profile.context_window

    @property
    def threshold(self) -> int:
        return self.context_window - self.options.reserve_tokens

    def _request_threshold(self) -> int | None:
        """The threshold the next request reports: `reported_threshold` on the first request after a user prompt
        that a check preceded, None on any other (`Request.threshold`: no check precedes a request inside a
        run, §2.3, so no count of it fires a compaction; the integrity and Pi audits' finding F1/F6)."""
        checked, self._prompt_checked = self._prompt_checked, False
        return self.reported_threshold if checked else None

    @property
    def reported_threshold(self) -> int | None:
        """The threshold a request and a compaction report: the smallest contextTokens that fires
        `shouldCompact`, which is strict, `contextTokens > contextWindow - reserveTokens` (§2.2,
        `compaction.ts@83378aad` L212-215; the same at 83a6c269, `core/compaction.ts` L72-75, read upstream
        for `pi-2025-12`), so `threshold + 1` (`Request.threshold`). None with `compaction.enabled` off, when
        no count ever triggers a compaction (§2.2)."""
        return self.threshold + 1 if self.options.enabled else None

    # ------------------------------------------------------------------ items → messages
    def _message_ts(self, item: Item) -> float:
        raw = item.meta.get("message_ts")
        return float(raw) if isinstance(raw, (int, float)) else iso_to_ms(item.timestamp)

    def _input_message(self, item: Item) -> tuple[str, PiMessage]:
        """(entry type, message) for a model-input item."""
        ts = self._message_ts(item)
        role = item.meta.get("role")
        if item.kind == "tool_result":
            message = PiMessage(
                role="toolResult",
                texts=(item.text,),
                images=tuple(a for a in item.attachments if a.is_image),
                tool_call_id=item.call_id,
                tool_name=item.tool_name,
                is_error=item.is_error,
                timestamp=ts,
                item_ids=(item.id,),
            )
            return "message", message
        if role == "bashExecution":
            message = PiMessage(
                role="bashExecution",
                texts=(item.text,),
                command=str(item.meta.get("command") or ""),
                output=str(item.meta.get("output") or ""),
                exclude=bool(item.meta.get("excludeFromContext")),
                timestamp=ts,
                item_ids=(item.id,),
            )
            return "message", message
        images = tuple(a for a in item.attachments if a.is_image)
        if role == "custom" or (item.synthetic and role is None):
            entry_type = "custom_message" if item.meta.get("type") == "custom_message" else "message"
            return entry_type, PiMessage(role="custom", texts=(item.text,), images=images, timestamp=ts, item_ids=(item.id,))
        return "message", PiMessage(role="user", texts=(item.text,), images=images, timestamp=ts, item_ids=(item.id,))

    def _assistant_message(self, items: Sequence[Item], usage: Usage | None) -> PiMessage:
        head = items[0]
        calls = tuple(ToolCall(i.call_id or "", i.tool_name or "", i.arguments or "") for i in items if i.kind == "tool_call")
        stop = head.meta.get("stopReason") or ("toolUse" if calls else "stop")
        provider, model = head.meta.get("provider"), head.meta.get("model")
        return PiMessage(
            model=(str(provider), str(model)) if provider and model else None,
            role="assistant",
            texts=tuple(i.text for i in items if i.kind == "assistant"),
            thinking=tuple(i.text for i in items if i.kind == "reasoning"),
            tool_calls=calls,
            stop_reason=stop,
            error_message=head.meta.get("errorMessage"),
            usage=usage,
            timestamp=self._message_ts(head),
            item_ids=tuple(i.id for i in items if i.kind != "reasoning"),
            thinking_ids=tuple(i.id for i in items if i.kind == "reasoning"),
        )

    # ------------------------------------------------------------------ protocol
    def on_user_turn(self, item: Item) -> None:
        """The pre-prompt check, which upstream runs when there is an assistant message to check
        (`agent-session.ts@2efa728d` L1197-1201), then the prompt."""
        last = self._last_assistant()
        self._check(last, post_run=False)
        self._prompt_checked = last is not None
        self.overflow_attempted = False
        entry_type, message = self._input_message(item)
        self._append_recorded(item, entry_type, message)

    def on_input(self, item: Item) -> None:
        if item.kind == "system":
            self.system.append(Message(role="system", content=item.text, item_ids=(item.id,)))
            return
        entry_type, message = self._input_message(item)
        self._append_recorded(item, entry_type, message)

    def on_marker(self, item: Item) -> None:
        event = item.meta.get("event")
        if event == "compaction":
            self._recorded_compaction(item)
        elif event == "branch":
            self.navigated_from = self.tree.leaf
            self.tree.branch(self._resolve(item.meta.get("to")))
        elif event == "branch_summary":
            self._branch_summary(item)
        elif event == "bash_execution":
            _, message = self._input_message(item)
            self._append_recorded(item, "message", message)
        elif "entry" in item.meta:
            if event == "thinking_level_change":
                self.thinking_level = str(item.meta.get("thinkingLevel") or "off")
            if event == "model_change" and item.meta.get("provider") and item.meta.get("modelId"):
                self.current_model = (str(item.meta["provider"]), str(item.meta["modelId"]))
            data = {k: v for k, v in item.meta.items() if k not in ("entry", "parent", "type", "event", "line")}
            self._append_recorded(item, str(event), None, data=data)

    def request(self) -> Request:
        estimate = self._reported_estimate()
        return Request(self.wire(), estimate_tokens=estimate, threshold=self._request_threshold())

    def on_response(self, items: Sequence[Item], usage: Usage | None, needs_follow_up: bool) -> None:
        message = self._append_recorded(items[0], "message", self._assistant_message(items, usage)).message
        assert message is not None
        if message.stop_reason != "error":
            self.overflow_attempted = False
            self.retry_attempt = 0
            if message.model is not None:
                self.current_model = message.model
        if not needs_follow_up and not self._retry_scheduled(message):
            self._check(message, post_run=True)

    def _retry_scheduled(self, message: PiMessage) -> bool:
        """`_handleRetryableError` (§2.3, upstream #1834): a transient error is retried up to
        `maxRetries` times, the errored message leaving the agent's messages; only then (or when
        retries are off) does the compaction check run, on the error path."""
        if message.stop_reason != "error" or not message.error_message or not self.options.retry_enabled:
            return False
        if is_context_overflow(message, self.context_window, self.rules, length_ratio=self.options.overflow_length_ratio):
            return False
        if not self._retryable(message.error_message):
            return False
        self.retry_attempt += 1
        if self.retry_attempt > self.options.max_retries:
            self.retry_attempt = 0
            return False
        self._remove(message)
        return True

    def _retryable(self, error: str) -> bool:
        """Whether an error text is a transient error Pi retries (LATER: `isRetryableAssistantError`)."""
        if self.rules.later_retry:
            return not LATER_NOT_RETRYABLE_ERROR.search(error) and bool(LATER_RETRYABLE_ERROR.search(error))
        return bool(RETRYABLE_ERROR.search(error))

    def _same_model(self, message: PiMessage) -> bool:
        """Overflow recovery only for the current model's own errors (§5.2)."""
        return message.model is None or self.current_model is None or message.model == self.current_model

    def on_overflow(self, error: ProviderError) -> bool:
        message = PiMessage(
            role="assistant", stop_reason="error", error_message=error.message, usage=Usage(), timestamp=self._tick(), model=self.current_model
        )
        parent = self.tree.leaf
        self._append_own(Entry(self._new_id("error"), parent, "message", message.timestamp, message=message))
        return self._check(message, post_run=True) == "retry"

    # ------------------------------------------------------------------ trigger (§2.3, §5.2)
    def _estimate(self) -> int:
        """`estimateContextTokens` of the messages a request of the agent loop holds."""
        return self._context_estimate(self.run_messages()).tokens

    def _reported_estimate(self) -> int | None:
        """What a request reports: `_estimate`, None when its usage is stale. After a compaction the last
        assistant's usage is the size of the context before it, so Pi holds no count of the compacted
        context until an assistant has answered it (`getContextUsage` returns `tokens: null` then, §2.4;
        the staleness guard of §2.3 refuses that usage for the same reason). A compacted context without
        any assistant usage keeps its chars/4 estimate, which reads only its own messages."""
        messages = self.run_messages()
        estimate = self._context_estimate(messages)
        at = estimate.usage_index
        if at is not None and messages[0].role == "compactionSummary" and messages[at].timestamp <= self._sent_since(messages[0]):
            return None
        return estimate.tokens

    def _sent_since(self, summary: PiMessage) -> float:
        """When the requests started sending the compaction `summary` heads: its entry's time (the agent's
        messages are replaced when the entry is saved); an assistant at or before it answered the context
        before the compaction."""
        return summary.timestamp

    def _latest_compaction(self) -> Entry | None:
        return self.tree.latest_compaction()

    def decision(self, message: PiMessage) -> Decision | None:
        """Pi's contextTokens for a check with this assistant message (None: no usable number): its usage, or
        for an error (LATER: also a usage of 0 tokens, or none, cd95c274) `estimateContextTokens` from the last
        valid usage, which must postdate the latest compaction."""
        usage = message.usage
        if message.stop_reason == "error" or (self.rules.nonzero_usage and (usage is None or calculate_context_tokens(usage) == 0)):
            messages = self.agent_messages()
            estimate = self._context_estimate(messages)
            latest = self._latest_compaction()
            if estimate.usage_index is None or (latest and messages[estimate.usage_index].timestamp <= latest.timestamp):
                return None
            return Decision(estimate.tokens, self.threshold)
        if usage is None:
            return None
        return Decision(calculate_context_tokens(usage), self.threshold)

    def _check(self, message: PiMessage | None, *, post_run: bool) -> str | None:
        """`_checkCompaction`; returns "threshold", "overflow", "retry" or None."""
        if not self.options.enabled or message is None:
            return None
        if post_run and message.stop_reason == "aborted":
            return None
        latest = self._latest_compaction()
        if latest is not None and message.timestamp <= latest.timestamp:
            return None
        if self._same_model(message) and is_context_overflow(message, self.context_window, self.rules, length_ratio=self.options.overflow_length_ratio):
            return self._recover_overflow(message)
        decision = self.decision(message)
        if decision is not None and decision.fires and self.compact("threshold", decision=decision):
            return "threshold"
        return None

    def _recover_overflow(self, message: PiMessage) -> str | None:
        if self.overflow_attempted:
            return None
        self.overflow_attempted = True
        will_retry = message.stop_reason != "stop"
        if will_retry:
            self._remove(message)
        if not self.compact("overflow"):
            return None
        return "retry" if will_retry else "overflow"

    # ------------------------------------------------------------------ compaction (§3, §4)
    def _output_limit(self, ratio: float) -> int:
        limit = int(ratio * self.options.reserve_tokens)
        if self.rules.clamp_to_model_max and self.ctx.profile.max_output > 0:
            limit = min(limit, self.ctx.profile.max_output)
        return limit

    def _with_thinking(self, max_tokens: int) -> int:
        """Budget-based thinking raises the request's max tokens (§4.2): BASE always "high" on a
        reasoning model, LATER the session thinking level."""
        o = self.options
        level = self.thinking_level if self.rules.session_thinking_level else "high"
        if not o.model_reasoning or level == "off" or self.ctx.profile.provider not in BUDGET_THINKING_PROVIDERS:
            return max_tokens
        budgets = {
            "minimal": o.thinking_budget_minimal,
            "low": o.thinking_budget_low,
            "medium": o.thinking_budget_medium,
            "high": o.thinking_budget_high,
            "xhigh": o.thinking_budget_high,
        }
        return min(max_tokens + budgets.get(level, o.thinking_budget_high), self.ctx.profile.max_output)

    def _prompt(self, template: str, **variables: Any) -> str:
        """`render_prompt`, rendered once per template and variables."""
        key = (template, tuple(sorted(variables.items())))
        text = self._prompts.get(key)
        if text is None:
            text = self._prompts[key] = self.ctx.render_prompt(template, **variables)
        return text

    def _summary_call(self, conversation: list[PiMessage], instructions: str, max_tokens: int, head: str = "") -> str:
        system = self._prompt("pi_system.j2", generic=self.rules.generic_system_prompt)
        key = (system, head, instructions, tuple(map(id, conversation)))
        known = self._summary_requests.pop(key, None)
        if known is None:
            text = "".join(("<conversation>\n", self._serialize(conversation), "\n</conversation>\n\n", head, instructions))
            if self._summary_system is None or self._summary_system.content != system:
                self._summary_system = Message(role="system", content=system)
            known = (list(conversation), (self._summary_system, Message(role="user", content=text)))
        recent = self._summary_requests
        recent[key] = known
        if len(recent) > SUMMARY_REQUESTS_KEPT:
            del recent[next(iter(recent))]
        request = Request(known[1], kind="summary", max_output_tokens=max_tokens, cache_control=not self.rules.uncached_summaries)
        return self.ctx.summarize(request).text

    def _history_summary(self, messages: list[PiMessage], previous: str | None, focus: str) -> str:
        """`generateSummary` (§4.2): the update prompt and the `<previous-summary>` block only when the
        previous summary is truthy in JS (`previousSummary ? UPDATE… : …`, `if (previousSummary)`,
        `compaction.ts@83378aad` L532, L544, as at 430d8328 and through `compaction.ts@2efa728d` L643,
        L655): an empty previous summary gets the initial prompt and no block."""
        instructions = self._prompt("pi_summary.j2", update=bool(previous))
        if focus:
            instructions += "\n\nAdditional focus: " + focus
        head = f"<previous-summary>\n{previous}\n</previous-summary>\n\n" if previous else ""
        limit = self._with_thinking(self._output_limit(self.options.summary_output_ratio))
        return self._summary_call(messages, instructions, limit, head)

    def summarize_preparation(self, prep: Preparation, focus: str = "") -> str:
        """The summary text of a compaction: history (+ split-turn prefix) + file-op tags.
        `focus` (/compact instructions) reaches the history summary only (#9348)."""
        if prep.is_split_turn and prep.turn_prefix:
            history = (
                self._history_summary(prep.messages_to_summarize, prep.previous_summary, focus)
                if prep.messages_to_summarize
                else NO_PRIOR_HISTORY
            )
            prefix_limit = self._output_limit(self.options.turn_prefix_output_ratio)
            if self.rules.prefix_thinking:
                prefix_limit = self._with_thinking(prefix_limit)
            prefix = self._summary_call(prep.turn_prefix, self._prompt("pi_turn_prefix.j2"), prefix_limit)
            summary = history + SPLIT_TURN_SEPARATOR + prefix
        else:
            summary = self._history_summary(prep.messages_to_summarize, prep.previous_summary, focus)
        return summary + prep.file_ops.tags()

    def compact(self, reason: str, *, decision: Decision | None = None, extra: dict[str, Any] | None = None) -> bool:
        """Prepare, summarize, append the compaction entry and record it; False if nothing was done."""
        path = self.tree.path()
        prep = prepare_compaction(path, self.rules, keep_recent_tokens=self.options.keep_recent_tokens, index=self._path_index)
        if prep is None:
            return False
        try:
            summary = self.summarize_preparation(prep, self.options.custom_instructions if reason == "manual" else "")
        except SummaryOverflow:
            return False
        before = self.wire()  # summarizing changes nothing of the session
        return self._record(
            reason, path, prep, summary, before,
            summarized=prep.messages_to_summarize + prep.turn_prefix, is_split_turn=prep.is_split_turn,
            decision=decision, details=prep.file_ops.details(), extra=extra,
        )

    def _record(
        self,
        reason: str,
        path: Sequence[Entry],
        prep: Preparation,
        summary: str,
        before: Sequence[Message],
        *,
        summarized: Sequence[PiMessage],
        is_split_turn: bool,
        decision: Decision | None,
        details: Mapping[str, Any] | None,
        extra: dict[str, Any] | None,
    ) -> bool:
        """Append the compaction entry to the session and report the compaction (both rule sets)."""
        entry = Entry(
            self._new_id("compaction"),
            self.tree.leaf,
            "compaction",
            self._tick(),
            summary=summary,
            first_kept_id=prep.first_kept_id,
            tokens_before=prep.tokens_before,
            details=details,
        )
        self._append_own(entry)
        first_kept = path[prep.cut_index]
        self._report(
            trigger=reason,
            before=before,
            summary=summary,
            summarized_ids=message_item_ids(summarized),
            estimate_tokens=prep.tokens_before,
            threshold=self.reported_threshold,
            details={
                "version": self.rules.version,
                "entry": entry.id,
                "firstKeptEntryId": prep.first_kept_id,
                "firstKeptRole": first_kept.role or first_kept.type,
                "tokensBefore": prep.tokens_before,
                "isSplitTurn": is_split_turn,
                "boundaryStart": path[prep.boundary_start].id if prep.boundary_start < len(path) else None,
                "summarizedEntries": prep.summarized_entries,
                "contextTokens": decision.context_tokens if decision else None,
                "keptTokensEstimate": self.tail_estimate(path, prep.cut_index),
                **(details or {}),
                **(extra or {}),
            },
        )
        return True

    def _report(self, **record: Any) -> None:
        """Report a compaction just appended to the session: its context after it is the session's now."""
        self.ctx.record_compaction(after=self.wire(), **record)

    def tail_estimate(self, path: Sequence[Entry], start: int) -> int:
        """Pi's estimate of the entries from `start` to the end of the path (what a cut there keeps
        verbatim), as the cut walk counts it (LATER: every context-visible entry)."""
        return self._path_index.update(path).tail(start, context_visible=self.rules.context_visible_cuts)

    # ------------------------------------------------------------------ recorded events
    def _recorded_compaction(self, item: Item) -> None:
        """The recorded agent compacted here; optionally compact too (manual /compact if our
        own trigger does not fire), then map the recorded entry onto our leaf."""
        if self.options.compact_at_recorded and self._annotate_own_compaction(item):
            pass
        elif self.options.compact_at_recorded:
            recorded = {
                "recorded": {
                    "entry": item.meta.get("entry"),
                    "tokensBefore": item.meta.get("tokensBefore"),
                    "firstKeptEntryId": item.meta.get("firstKeptEntryId"),
                }
            }
            self._tick(iso_to_ms(item.timestamp))
            last = self._last_assistant()
            decision = self.decision(last) if last is not None else None
            latest = self._latest_compaction()
            stale = last is None or (latest is not None and last.timestamp <= latest.timestamp)
            fires = bool(decision and decision.fires and not stale)
            recorded["recorded"]["triggerFires"] = fires
            recorded["recorded"]["contextTokens"] = decision.context_tokens if decision else None
            path = self.tree.path()
            first_kept = next((n for n, e in enumerate(path) if e.id == item.meta.get("firstKeptEntryId")), None)
            if first_kept is not None:
                recorded["recorded"]["firstKeptRole"] = path[first_kept].role or path[first_kept].type
                recorded["recorded"]["keptTokensEstimate"] = self.tail_estimate(path, first_kept)
            self.compact("threshold" if fires else "manual", decision=decision, extra=recorded)
        if "entry" in item.meta:
            self.aliases[str(item.meta["entry"])] = self.tree.leaf or ""

    def _annotate_own_compaction(self, item: Item) -> bool:
        """The strategy's own trigger compacted right before this recorded compaction (nothing was
        appended in between): attach the recorded values to that compaction instead of compacting
        again ("Already compacted")."""
        path = self.tree.path()
        details = self._own_record_details(path[-1].id) if path and path[-1].type == "compaction" else None
        if details is None:
            return False
        first_kept = next((n for n, e in enumerate(path) if e.id == item.meta.get("firstKeptEntryId")), None)
        recorded: dict[str, Any] = {
            "entry": item.meta.get("entry"),
            "tokensBefore": item.meta.get("tokensBefore"),
            "firstKeptEntryId": item.meta.get("firstKeptEntryId"),
            "triggerFires": details[0] == "threshold",
            "contextTokens": details[1].get("contextTokens"),
        }
        if first_kept is not None:
            recorded["firstKeptRole"] = path[first_kept].role or path[first_kept].type
            recorded["keptTokensEstimate"] = self.tail_estimate(path, first_kept)
        details[1]["recorded"] = recorded
        return True

    def _own_record_details(self, entry_id: str) -> tuple[str, dict[str, Any]] | None:
        """The trigger and the details of the report of this strategy's compaction entry `entry_id`, when
        it is the last one reported (None otherwise)."""
        # The engine's record of that compaction (a replay context keeps them on `result`).
        result = getattr(self.ctx, "result", None)
        records = list(getattr(result, "compactions", ()))
        if not records or records[-1].details.get("entry") != entry_id:
            return None
        return records[-1].trigger, records[-1].details

    def _branch_summary(self, item: Item) -> None:
        """A recorded branch summary: summarize the abandoned branch ourselves when the transcript
        shows the navigation, else keep the recorded text (the abandoned branch is not in it)."""
        parent = self._parent_of(item)
        old = self.navigated_from if self.navigated_from is not None else (self.tree.leaf if self.tree.leaf != parent else None)
        self.navigated_from = None
        before = self.wire()
        summary = str(item.meta.get("summary") or "")
        details = item.meta.get("details")
        summarized: list[str] = []
        generated = old is not None and old != parent
        if old is not None and generated:
            o = self.options
            window = self.context_window or o.branch_default_window
            prep = prepare_branch_summary(
                entries_to_summarize(self.tree, old, parent),
                budget=window - o.branch_reserve_tokens,
                summary_ratio=o.branch_summary_ratio,
                image_chars=o.image_chars,
                user_images=self.rules.user_images,
            )
            if not prep.messages:
                summary, details = NO_CONTENT, None
            else:
                try:
                    text = self._summary_call(prep.messages, self._prompt("pi_branch_summary.j2"), o.branch_summary_max_tokens)
                except SummaryOverflow:
                    generated = False
                else:
                    summary = BRANCH_SUMMARY_PREAMBLE + text + prep.file_ops.tags()
                    details = prep.file_ops.details()
                    summarized = message_item_ids(prep.messages)
        self.tree.branch(parent)
        entry = self._append_recorded(
            item, "branch_summary", None, summary=summary, details=details, from_id=parent or "root", from_hook=bool(item.meta.get("fromHook"))
        )
        self.ctx.record_compaction(
            trigger="branch",
            before=before,
            after=self.wire(),
            summary=summary,
            summarized_ids=summarized,
            details={"version": self.rules.version, "entry": entry.id, "fromId": entry.from_id, "generated": generated, "abandonedLeaf": old},
        )


class Pi(PiStrategy):
    name = "pi"
    description = (
        "Pi (2026-07 rules, newest as of 2efa728d): session tree, cut points budgeting every context-visible entry, "
        "split-turn summaries, update prompt, file lists, overflow recovery, branch summaries, uncached summary requests"
    )
    spec = "docs/specs/pi.md (LATER, ee24a9ec), brought to upstream earendil-works/pi@2efa728d (PiRules names each commit)"
    rules = LATER


class Pi202603(PiStrategy):
    name = "pi-2026-03"
    description = "Pi (2026-03 rules, 83378aad), including the kept-tail loss of issue #2608"
    spec = "docs/specs/pi.md (BASE, 83378aad)"
    rules = BASE


class Pi202512(PiStrategy):
    """Pi as of December 2025, upstream `badlogic/pi-mono@83a6c269` (`core/compaction.ts`,
    `core/agent-session.ts`, `agent/src/agent.ts`, pi-ai `agent-loop.ts` and `transorm-messages.ts`).

    `checkAutoCompaction` (`agent-session.ts` L586-631) runs after every assistant message and does not
    abort the current operation for auto compaction: it saves the compaction entry and replaces the
    agent's messages, but the running agent loop holds its own list (`agent.ts` L250-259, `agent-loop.ts`
    L25-37, L86: the messages at the prompt plus what the run adds), so the rest of the run still sends the
    whole uncompacted context and its tools still run. The compacted context is sent from the next
    prompt on. (bd0d0676's `tui-renderer.ts` L2224-2230 aborted the run instead; 83a6c269 replaced it.)
    Each later assistant of that run is checked against its own usage, of the uncompacted context, and
    compacts again: the new boundary starts after the previous compaction entry and holds no user
    message, so only the previous summary is summarized, and the previous kept tail is dropped.

    Timing, which upstream leaves to the race of two async calls (the listener that runs the check is
    not awaited by the loop): the summary is made from the session as it is at the check, and the
    compaction entry is saved once the tools of the assistant that triggered it have run, before the
    next response (a tool is fast next to a summary call); no check overlaps another.

    Reporting: a compaction is reported when it takes effect, at the end of its run (the last assistant,
    or an error or abort, or the next prompt when the run ends without one), with the run's context
    before and the compacted context after, so the probe point is the first request that sends it. A
    compaction that a later one of the same run replaces is reported right before that one's summary
    request (its summarizer call stays its own), not probed (no request ever sent it). A session that
    ends inside a run reports that run's last compaction nowhere but in its summary request, and a user
    message queued into a running loop is replayed as the next prompt."""

    name = "pi-2025-12"
    description = (
        "Pi (2025-12 rules, 83a6c269): cuts only at user messages sized by usage differences, threshold after every "
        "assistant message (the running loop keeps its uncompacted context; the compaction applies from the next prompt), "
        "previous summary prepended, no split turns or file lists"
    )
    spec = "upstream badlogic/pi-mono@83a6c269 (compaction.ts, agent-session.ts; predates docs/specs/pi.md BASE)"
    rules = DEC2025

    def __init__(self, ctx, options=None) -> None:
        super().__init__(ctx, options)
        self._wire_2025 = WireFold2025(self._convert)
        #: The running agent loop's own messages once an auto compaction ran during its run (None otherwise):
        #: the agent's messages before that compaction, then what the run added.
        self._loop: list[PiMessage] | None = None
        #: The report of the run's last compaction, waiting for the end of the run (no `before`/`after` yet).
        self._pending: dict[str, Any] | None = None
        #: Saves the compaction entry of the last check once the triggering assistant's tools have run.
        self._saving: Callable[[], bool] | None = None
        #: Whether a recorded compaction is being handled (a compaction made there is saved at once).
        self._at_marker = False
        #: When each compaction summary the running loop went on without took effect (the end of that run), by
        #: the summary message's identity (kept with it, so the id stays its own).
        self._effect_times: dict[int, tuple[PiMessage, float]] = {}

    def run_messages(self) -> list[PiMessage]:
        return self._loop if self._loop is not None else self.agent_messages()

    def on_user_turn(self, item: Item) -> None:
        """No check before a prompt in December 2025; a new prompt starts from the agent's messages. Its first
        request is the first to send what the check after the last assistant decided (the run's own requests
        send their uncompacted messages whatever a check decides), so it reports the threshold."""
        self._end_run()
        self._prompt_checked = self._last_assistant() is not None
        entry_type, message = self._input_message(item)
        self._append_recorded(item, entry_type, message)

    def on_input(self, item: Item) -> None:
        """Tool results (and other input) join the session and, after a compaction, the running loop."""
        if item.kind == "system":
            super().on_input(item)
            return
        entry_type, message = self._input_message(item)
        self._append_to_run(self._append_recorded(item, entry_type, message))

    def request(self) -> Request:
        self._save()
        return Request(self.wire(), estimate_tokens=self._reported_estimate(), threshold=self._request_threshold())

    def wire(self) -> LogView:
        return self._view(*self._wire_2025.parts(self.run_messages()))

    def _save(self) -> None:
        saving, self._saving = self._saving, None
        if saving is not None:
            saving()

    def on_response(self, items: Sequence[Item], usage: Usage | None, needs_follow_up: bool) -> None:
        """`checkAutoCompaction` after every assistant message; the run ends after an assistant without
        tool calls, or an errored or aborted one (`agent-loop.ts` L70-76)."""
        entry = self._append_recorded(items[0], "message", self._assistant_message(items, usage))
        self._append_to_run(entry)
        self._check(self._last_assistant(), post_run=True)
        message = entry.message
        if not needs_follow_up or (message is not None and message.stop_reason in ("error", "aborted")):
            self._end_run()

    def _append_to_run(self, entry: Entry) -> None:
        if self._loop is not None and (message := entry_message(entry)) is not None:
            self._loop.append(message)

    def _end_run(self) -> None:
        """The run is over: the next request starts from the agent's (compacted) messages, and the run's
        last compaction, which takes effect there, is reported."""
        self._save()
        pending, self._pending = self._pending, None
        if self._loop is not None:
            self._took_effect()
        if pending is None:
            self._loop = None
            return
        before = self.wire()
        self._loop = None
        self.ctx.record_compaction(before=before, after=self.wire(), **pending)

    def _took_effect(self) -> None:
        """The running loop ends after an auto compaction: the requests send the compacted context from now
        on, and every assistant so far (the run's included) answered the context before it."""
        latest = self._latest_compaction()
        if latest is not None:
            summary = latest.summary_message
            self._effect_times[id(summary)] = (summary, self.clock)

    def _sent_since(self, summary: PiMessage) -> float:
        """The time the compaction took effect when the running loop went on without it, else its entry's."""
        known = self._effect_times.get(id(summary))
        return known[1] if known is not None and known[0] is summary else summary.timestamp

    def _report(self, **record: Any) -> None:
        """An auto compaction takes effect at the end of its run (reported then); a manual one (which
        aborts the run upstream) at once."""
        if record["trigger"] == "threshold":
            del record["before"]  # the run's context when the compaction takes effect (or is replaced)
            self._pending = record
        else:
            super()._report(**record)

    def _supersede(self) -> None:
        """The run compacts again: its previous compaction, which no request will send, is reported now,
        before this one's summary request, with the session's messages it left after it, and not probed.
        (Should this one's summary request then not fit, which its size, the previous summary and the
        instructions, all but rules out, the switch at the next prompt would have no report of its own.)"""
        pending, self._pending = self._pending, None
        if pending is not None:
            after = [*self.system, *to_wire_2025(self.agent_messages(), self._convert)]
            self.ctx.record_compaction(before=self.wire(), after=after, probe=False, **pending)

    def _own_record_details(self, entry_id: str) -> tuple[str, dict[str, Any]] | None:
        pending = self._pending
        if pending is not None and pending["details"].get("entry") == entry_id:
            return pending["trigger"], pending["details"]
        return super()._own_record_details(entry_id)

    def on_marker(self, item: Item) -> None:
        """A move in the session tree is the user's, between runs; the recorded agent's compaction is
        compared with this strategy's entry, saved by then."""
        event = item.meta.get("event")
        if event in ("branch", "branch_summary"):
            self._end_run()
        elif event == "compaction":
            self._save()
        self._at_marker = True
        try:
            super().on_marker(item)
        finally:
            self._at_marker = False

    def on_overflow(self, error: ProviderError) -> bool:
        """No overflow recovery yet: the error ends the run."""
        return False

    def _last_assistant(self) -> PiMessage | None:
        """The last non-aborted assistant of the agent's messages."""
        return next((m for m in reversed(self.agent_messages()) if m.role == "assistant" and m.stop_reason != "aborted"), None)

    def decision(self, message: PiMessage) -> Decision | None:
        if message.usage is None:
            return None
        return Decision(calculate_context_tokens(message.usage), self.threshold)

    def _check(self, message: PiMessage | None, *, post_run: bool) -> str | None:
        if not self.options.enabled or message is None:
            return None
        decision = self.decision(message)
        if decision is not None and decision.fires and self.compact("threshold", decision=decision):
            return "threshold"
        return None

    def compact(self, reason: str, *, decision: Decision | None = None, extra: dict[str, Any] | None = None) -> bool:
        """`compact()` at 83a6c269 (a failure is silent, `agent-session.ts` L628-630). A manual compaction
        aborts the run first (`compact`, L526-529); an auto compaction leaves the run going on its own
        messages (the agent's messages before this compaction) and reports a compaction of the same run
        that it replaces."""
        self._save()
        path = self.tree.path()
        prep = prepare_compaction_2025(path, keep_recent_tokens=self.options.keep_recent_tokens)
        if prep is None:
            return False
        if reason == "manual":
            self._end_run()
        else:
            self._supersede()
        try:
            summary = self._summary_2025(prep, self.options.custom_instructions if reason == "manual" else "")
        except SummaryOverflow:
            return False
        messages = self.run_messages()  # summarizing changes nothing of the session
        before = self._view(*self._wire_2025.parts(messages))

        def save() -> bool:
            return self._record(
                reason, path, prep, summary, before,
                summarized=prep.messages_to_summarize, is_split_turn=False, decision=decision, details=None, extra=extra,
            )

        if reason != "manual" and self._loop is None:
            self._loop = messages  # a new list: the session's later messages are not the loop's
        if reason == "manual" or self._at_marker:  # where the recorded agent compacted: saved there
            return save()
        self._saving = save
        return True

    def _summary_2025(self, prep: Preparation, focus: str) -> str:
        """`generateSummary` at 83a6c269: the messages themselves (the previous summary first, as a
        user message, whenever there is a previous compaction, an empty summary too: `if
        (prevCompactionIndex >= 0)`, L265-273), then the instructions as a user message; no system
        prompt, no reasoning option, `maxTokens = floor(0.8 * reserveTokens)`."""
        head = [PiMessage(role="user", texts=(PREVIOUS_SUMMARY_2025 + prep.previous_summary,))] if prep.previous_summary is not None else []
        instructions = self._prompt("pi_2025_summary.j2")
        if focus:
            instructions += "\n\nAdditional focus: " + focus
        messages = [*head, *prep.messages_to_summarize, PiMessage(role="user", texts=(instructions,))]
        limit = int(self.options.summary_output_ratio * self.options.reserve_tokens)
        # The session's messages take the wire messages the requests sent (the same objects: the provider
        # knows them); the head and the instructions, made for this request, are converted anew.
        session = {id(m) for m in prep.messages_to_summarize}
        request = Request(
            to_wire_2025(messages, lambda m: self._convert(m) if id(m) in session else convert_message(m)), kind="summary", max_output_tokens=limit
        )
        return self.ctx.summarize(request).text
