"""Claude Code's client-side compaction as strategies (docs/specs/claude-code.md).

`claude-code` follows BASE, Claude Code 2.0.57, the version that wrote the corpus sessions:

- §2.1 window `W` (the profile's), reserve `R = min(CLAUDE_CODE_MAX_OUTPUT_TOKENS‖32,000 capped at
  64,000, the model's output cap)`, threshold `T = W − R − 13,000`, the lower-only
  `CLAUDE_AUTOCOMPACT_PCT_OVERRIDE`; compaction iff enabled and `count ≥ T`; `R` is also the
  request's `max_tokens`;
- §2.2 the count: `in + cache_creation + cache_read + out` of the newest assistant response that is
  not synthetic or an interrupt placeholder, nothing added for later messages, 0 after a boundary;
- §2.3 the check before every request, microcompact first; a failed compaction sends the
  original messages, no retry and no breaker;
- §5 microcompact: eligible tools, the newest 3 protected, oldest cleared while more than 40,000
  estimated result tokens remain, applied only at the warning line (`T − 20,000`) and when it
  frees ≥ 20,000; cleared ids stay cleared;
- §3 the summary request: everything since the last boundary plus the nine-section prompt with
  `<analysis>`, the summariser system prompt, at most 20,000 output tokens;
- §4 the new context: the summary message (prefix, `Analysis:`/`Summary:` formatting, trailing
  ".", the continuation sentence for auto only), then up to 5 recently read files (≤ 5,000 tokens
  each, ≤ 50,000 in all, a path-only note otherwise) and the todo list; no verbatim tail;
- §2.4 a manual `/compact` where the recording has a manual `compact_boundary` (threshold ignored).

`claude-code-2.1` applies §8 (2.1.112): reserve `min(max output, 20,000)`, an optional auto-compact
window, the count plus a chars/4 estimate of every message after the newest response (§8.2), the
consecutive-failure and rapid-refill breakers and the prompt-too-long retry that drops the oldest
API rounds (§8.3), the new wrapper without the analysis (§8.5), the text-only prompt (§8.4), and
no count-based microcompact (§8.6).

Not reproduced: hooks (PreCompact/SessionStart output is not in the transcripts), plan files, the
2.1 skill/task attachments, the blocking limit (the simulated provider rejects what does not fit).
Re-read files are the newest content the transcript shows for that path (a Read result or a
Write's content): the file system of the session is not available.

Requests are views of one append-only log of wire messages (compaction_bench.log_view) that starts
anew only at a compaction, a clearing or a late system message, so a request costs what it adds; a
context that did not change since it was last built (a compaction's `after`, then the request) is the
same object, and so is a summary message whose text the summarizer gave last time.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from compaction_bench.log_view import LogView
from compaction_bench.provider import ProviderError
from compaction_bench.request import Message, Request
from compaction_bench.strategies.components import chars_div4, usage_context_tokens
from compaction_bench.strategies.history import ItemHistory
from compaction_bench.strategy import Strategy, StrategyContext, SummaryOverflow
from compaction_bench.transcript import Item, Usage

#: §4.1 wrapper prefix (BASE) and the auto-only continuation sentence: protocol strings.
SUMMARY_PREFIX = (
    "This session is being continued from a previous conversation that ran out of context. "
    "The conversation is summarized below:"
)
CONTINUE_SENTENCE = (
    "Please continue the conversation from where we left it off without asking the user any further questions. "
    "Continue with the last task that you were asked to work on."
)
#: §8.5 wrapper of 2.1.x; the continuation paragraph is in our words.
SUMMARY_PREFIX_LATER = (
    "This session is being continued from a previous conversation that ran out of context. "
    "The summary below covers the earlier portion of the conversation."
)
CONTINUE_LATER = (
    "Carry on with the work directly from where it stopped. Do not acknowledge this summary or recap it, "
    "and do not ask the user anything first."
)
#: §5 microcompact placeholder.
CLEARED_RESULT = "[Old tool result content cleared]"
#: §8.3 marker put in front of a retried summary input that would start with an assistant turn.
PTL_RETRY_MARKER = "[earlier conversation truncated for compaction retry]"
#: §2.2 interrupt and rejection placeholders (set `K00`): responses starting with these do not count.
INTERRUPT_TEXTS = frozenset(
    {
        "[Request interrupted by user]",
        "[Request interrupted by user for tool use]",
        "The user doesn't want to take this action right now. STOP what you are doing and wait for the user to tell you how to proceed.",
        "The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it was a file edit, the new_string was NOT written to the file). STOP what you are doing and wait for the user to tell you how to proceed.",
        "No response requested.",
    }
)
#: §2.1 per-model output caps, first lower-cased substring match wins.
MODEL_OUTPUT_CAPS = (
    ("3-5", 8_192),
    ("claude-3-opus", 4_096),
    ("claude-3-sonnet", 8_192),
    ("claude-3-haiku", 4_096),
    ("opus-4-5", 64_000),
    ("opus-4", 32_000),
    ("sonnet-4", 64_000),
    ("haiku-4", 64_000),
)
#: §4.2 files never restored: the memory files, the agent's todo files and plan files.
NOT_RESTORED = re.compile(r"(^|/)CLAUDE(\.local)?\.md$|/\.claude/todos/|/\.claude/plans/")
READ_TOOLS = frozenset({"Read"})
WRITE_TOOLS = frozenset({"Write", "Edit", "MultiEdit", "NotebookEdit"})
TODO_TOOL = "TodoWrite"
#: §4.2 rendering of restored files and the todo list (short protocol strings, nudges in our words).
FILE_CALL = "Called the Read tool with the following input: "
FILE_RESULT = "Result of calling the Read tool: "
FILE_REFERENCE = (
    "Note: {path} was read before the conversation was summarized, but it is too large to include here. "
    "Use the Read tool if you need it again."
)
TODO_REMINDER = (
    "Your todo list has changed. DO NOT mention this explicitly to the user. Here are the latest contents of your todo list:"
)
TODO_NUDGE = "Go on with the tasks in the list where they apply."
#: the runs of blank lines `format_summary` collapses (a run of two stays as it is).
BLANK_RUN = re.compile(r"\n\n+")


@cache
def model_output_cap(model: str) -> int:
    """§2.1 `cap(model)` (per model name once per process: every replay asks it for its model)."""
    lowered = model.lower()
    return next((cap for key, cap in MODEL_OUTPUT_CAPS if key in lowered), 32_000)


def env_max_output(value: int | None, default: int = 32_000, ceiling: int = 64_000) -> int:
    """§2.1 validated `CLAUDE_CODE_MAX_OUTPUT_TOKENS`: unset or ≤ 0 → 32,000; above 64,000 → 64,000."""
    if value is None or value <= 0:
        return default
    return min(value, ceiling)


def auto_compact_threshold(effective: int, buffer: int, pct_override: float | None) -> int:
    """§2.1 `T = E − 13,000`, or `min(floor(E·p/100), E − 13,000)` for `0 < p ≤ 100`."""
    threshold = effective - buffer
    if pct_override is not None and 0 < pct_override <= 100:
        threshold = min(int(effective * pct_override // 100), threshold)
    return threshold


def format_summary(text: str, *, keep_analysis: bool = True) -> str:
    """§4.1 `format()`: `<analysis>` → `Analysis:`, `<summary>` → `Summary:`, blank-line runs collapsed.
    With `keep_analysis=False` (2.1.69+, §8.5) the analysis block is removed."""
    text = _replace_block(text, "analysis", "Analysis:\n" if keep_analysis else None)
    text = _replace_block(text, "summary", "Summary:\n")
    if "\n\n\n" in text:
        text = BLANK_RUN.sub("\n\n", text)
    return text.strip()


def _replace_block(text: str, tag: str, heading: str | None) -> str:
    """`re.sub(r"<tag>(.*?)</tag>", heading + group(1).strip(), text, count=1, flags=re.S)` (removed for
    `heading=None`), by two searches: the leftmost match opens at the first `<tag>` and closes at the first
    `</tag>` after it, and when that opening has no closing after it no later one has. The regular
    expression tried the lazy group at every opening, each time to the end of the text: a summary that
    quotes its prompt ("inside <summary> tags") without closing it cost a scan per `<tag>` it holds."""
    opening, closing = f"<{tag}>", f"</{tag}>"
    start = text.find(opening)
    if start < 0:
        return text
    end = text.find(closing, start + len(opening))
    if end < 0:
        return text
    block = "" if heading is None else heading + text[start + len(opening) : end].strip()
    return text[:start] + block + text[end + len(closing) :]


@cache
def tool_names(listed: str) -> frozenset[str]:
    """The tool names of a comma-separated option (`microcompact_tools`), read once per process."""
    return frozenset(t.strip() for t in listed.split(",") if t.strip())


@dataclass(frozen=True)
class ClaudeCodeOptions:
    """Upstream defaults of 2.0.57 (§2.1, §3.1, §4.2, §5); environment settings by their variable."""

    #: CLAUDE_CODE_MAX_OUTPUT_TOKENS (None: unset)
    max_output_tokens_env: int | None = None
    #: CLAUDE_AUTOCOMPACT_PCT_OVERRIDE (lower-only)
    autocompact_pct_override: float | None = None
    #: global config autoCompactEnabled
    auto_compact: bool = True
    #: DISABLE_COMPACT (auto and manual)
    disable_compact: bool = False
    #: DISABLE_MICROCOMPACT
    disable_microcompact: bool = False
    #: the model for the output cap; None: the profile's model
    model: str | None = None
    #: the window W; None: the profile's window (200,000 for the Claude profiles, as upstream)
    context_window: int | None = None
    autocompact_buffer: int = 13_000
    warning_buffer: int = 20_000
    default_max_output: int = 32_000
    max_output_ceiling: int = 64_000
    summary_max_output: int = 20_000
    microcompact_keep_recent: int = 3
    microcompact_keep_tokens: int = 40_000
    microcompact_min_saving: int = 20_000
    microcompact_image_tokens: int = 2_000
    microcompact_tools: str = "Read,Bash,Grep,Glob,WebSearch,WebFetch,Edit,Write"
    restore_max_files: int = 5
    restore_file_tokens: int = 5_000
    restore_total_tokens: int = 50_000
    #: replay option: a manual /compact where the recording has a manual compact_boundary
    manual_compact_at_recorded: bool = True


@dataclass(frozen=True)
class ClaudeCode21Options(ClaudeCodeOptions):
    """§8 (2.1.112): reserve cap 20,000, auto-compact window, breakers, prompt-too-long retries."""

    reserve_cap: int = 20_000
    #: CLAUDE_CODE_AUTO_COMPACT_WINDOW / autoCompactWindow (None: unset), clamped to 100,000–1,000,000
    auto_compact_window: int | None = None
    max_consecutive_failures: int = 3
    refill_turns: int = 3
    max_rapid_refills: int = 3
    ptl_retries: int = 3
    ptl_drop_fraction: float = 0.2
    image_tokens: int = 2_000


@dataclass
class _File:
    path: str
    order: int
    content: str | None
    source: str | None
    #: §4.2 how it is restored (whether it fits its own budget, its size in the total budget, its messages),
    #: built once per file version: a file kept by one compaction is restored by the next with the same messages
    restored: tuple[bool, int, tuple[Message, ...]] | None = field(default=None, compare=False, repr=False)


class ClaudeCode(Strategy):
    name = "claude-code"
    description = "Claude Code 2.0.57: W − R − 13,000 on the last usage, microcompact, nine-section summary + restored files and todos"
    spec = "docs/specs/claude-code.md §1-§5, §9, §11"
    Options = ClaudeCodeOptions
    #: 2.1.69+ drops the analysis from the stored summary; 2.1.90+ asks for text only.
    later = False

    def __init__(self, ctx: StrategyContext, options: Any = None) -> None:
        super().__init__(ctx, options)
        o = self.options
        self.window = o.context_window or ctx.profile.context_window
        self.reserve = self._reserve(o.model or ctx.profile.model)
        self.effective = self.window - self.reserve
        self.threshold = auto_compact_threshold(self._compact_window() - self.reserve, o.autocompact_buffer, o.autocompact_pct_override)
        self.system: list[Item] = []
        self.history = ItemHistory()
        #: renders the system items (the same messages for the whole replay: `history` starts anew at each compaction)
        self._system_messages = ItemHistory()
        self.prefix: list[Message] = []
        self.last_usage: int = 0
        self.last_response_at: int | None = None
        self.cleared: set[str] = set()
        self.files: dict[str, _File] = {}
        self.todos: list[Any] = []
        self._clock = 0
        self._calls: dict[str, Item] = {}
        self._marker: Item | None = None
        self.eligible = tool_names(o.microcompact_tools)
        # `tool_pairs(history.items)` as this strategy reads it, kept up to date by `_sync` from the items
        # appended since its last call (and started over when a compaction replaces the history):
        self._synced_items: list[Item] | None = None
        self._synced = 0
        #: the first result of each call id, and the ids of the calls
        self._results: dict[str, Item] = {}
        self._call_ids: set[str] = set()
        #: §5 candidates: the eligible calls whose id is not cleared, in order, how many per id, and the sum
        #: of their results' sizes (0 while unanswered)
        self._live: list[Item] = []
        self._live_ids: Counter[str | None] = Counter()
        self._live_total = 0
        self._sizes: dict[str, int] = {}
        #: the results of the calls whose id is cleared (they carry `CLEARED_RESULT`), by item id
        self._replacements: dict[str, Item] = {}
        #: `messages()` as the view of an append-only log: the system messages, the prefix, then the history's
        #: closed message groups (`ItemHistory.view()`) with the placeholders; copied from `_log_source` up to
        #: `_log_copied`, for `_log_system` system items and the prefix `_log_prefix`. `_log_stale`: a result
        #: already copied got its placeholder (the log starts anew, as a new list: earlier views keep theirs).
        self._log: list[Message] = []
        self._log_source: list[Message] | None = None
        self._log_copied = 0
        self._log_system = 0
        self._log_prefix: list[Message] | None = None
        self._log_stale = False
        #: the last view `messages()` returned, and the history list and length it was built from: returned again
        #: while nothing changed (the same context, the same object)
        self._view: LogView | None = None
        self._view_of: tuple[list[Item], int] = ([], -1)
        #: the summarizer's last text, its trigger and the §4.1 summary message built from them (`_summary_message`)
        self._summary: tuple[str, bool, Message] | None = None
        #: the todo list whose §4.2 message was built last, and that message
        self._todo_message: tuple[list[Any], Message] | None = None
        #: the rendered summary system prompt and instructions, by instructions (`summary_request`)
        self._prompts: dict[str | None, tuple[Message, Message]] = {}

    # ------------------------------------------------------------ limits (§2.1, §8.1)
    def _reserve(self, model: str) -> int:
        o = self.options
        return min(env_max_output(o.max_output_tokens_env, o.default_max_output, o.max_output_ceiling), model_output_cap(model))

    def _compact_window(self) -> int:
        return self.window

    @property
    def enabled(self) -> bool:
        return self.options.auto_compact and not self.options.disable_compact

    # ------------------------------------------------------------ observing
    def on_user_turn(self, item: Item) -> None:
        self.history.append(item)

    def on_input(self, item: Item) -> None:
        if item.kind == "system":
            self.system.append(item)
            return
        self.history.append(item)
        if item.kind == "tool_result" and not item.is_error:
            call = self._calls.get(item.call_id or "")
            if call is not None and call.tool_name in READ_TOOLS:
                self._touch_file(_arguments(call).get("file_path"), item.text, item.id)

    def on_marker(self, item: Item) -> None:
        if item.meta.get("event") != "compaction":
            return
        self._marker = item
        if item.meta.get("trigger") == "manual" and self.options.manual_compact_at_recorded and not self.options.disable_compact:
            self._microcompact()
            self._compact("manual")

    def on_response(self, items: Sequence[Item], usage: Usage | None, needs_follow_up: bool) -> None:
        self.history.extend(items)
        self._marker = None
        first_text = next((i.text for i in items if i.kind == "assistant"), None)
        synthetic = usage is not None and usage.input == 0 and usage.output == 0
        if usage is not None and not synthetic and first_text not in INTERRUPT_TEXTS:
            self.last_usage = usage_context_tokens(usage)
            self.last_response_at = len(self.history.items)
        for item in items:
            if item.kind != "tool_call":
                continue
            self._calls[item.call_id or ""] = item
            # the arguments are read only for the tools whose input the compaction uses (a read's at its result)
            if item.tool_name in WRITE_TOOLS:
                args = _arguments(item)
                if isinstance(path := args.get("file_path"), str):
                    content = args.get("content") if item.tool_name == "Write" and isinstance(args.get("content"), str) else None
                    self._touch_file(path, content, item.id if content is not None else None)
            elif item.tool_name == TODO_TOOL and isinstance(todos := _arguments(item).get("todos"), list):
                self.todos = list(todos)

    def _touch_file(self, path: Any, content: str | None, source: str | None) -> None:
        """§4.2 the read cache: a file read or written (`path` from the call's input; anything but a string is ignored)."""
        if not isinstance(path, str):
            return
        self._clock += 1
        known = self.files.get(path)
        if content is None and known is not None:
            content, source = known.content, known.source
        self.files[path] = _File(path, self._clock, content, source)

    # ------------------------------------------------------------ count (§2.2)
    def count(self) -> int:
        return self.last_usage

    # ------------------------------------------------------------ context
    def messages(self) -> Sequence[Message]:
        """The system messages, the prefix (summary and attachments), then the history with the results of
        cleared calls replaced by `CLEARED_RESULT`: a `LogView` of `_log`, which is extended by the groups
        the history closed since the last call and started anew only when the history, the system messages
        or the prefix changed, or a result it holds was cleared. While none of these changed and no item was
        appended, it is the last view returned (the same context as the same object)."""
        items = self.history.items
        last = self._view
        if (
            last is not None and not self._log_stale and self._view_of[0] is items and self._view_of[1] == len(items)
            and self.prefix is self._log_prefix and len(self.system) == self._log_system
        ):
            return last
        self._sync()
        view = self.history.view()
        if (
            self._log_stale or view.log is not self._log_source
            or len(self.system) != self._log_system or self.prefix is not self._log_prefix
        ):
            self._log = [*self._system_messages.render(self.system), *self.prefix]
            self._log_source, self._log_copied, self._log_system, self._log_prefix = view.log, 0, len(self.system), self.prefix
            self._log_stale = False
        log, new, tail = self._log, view.log[self._log_copied : view.length], view.tail
        if self._replacements:
            new, tail = [*map(self._placeholder, new)], tuple(map(self._placeholder, tail))
        log.extend(new)
        self._log_copied = view.length
        self._view, self._view_of = LogView(log, len(log), tail), (items, len(items))
        return self._view

    def _placeholder(self, message: Message) -> Message:
        """A history message, or its `CLEARED_RESULT` edit when it is a cleared result (`ItemHistory.render`
        with the replacements: a result is never folded, so its message holds that one item, whose id no
        other item of a transcript has)."""
        if message.role == "assistant" or not message.item_ids:
            return message
        result = self._replacements.get(message.item_ids[0])
        return message if result is None else self.history.edited(result, CLEARED_RESULT, None)

    def _sync(self) -> None:
        """Read the items appended to the history since the last call into the pairing state (from the
        start when the history was replaced): `tool_pairs` read once per item, not on every request."""
        items = self.history.items
        if items is not self._synced_items:
            self._synced_items, self._synced = items, 0
            self._results, self._call_ids, self._sizes, self._replacements = {}, set(), {}, {}
            self._live, self._live_ids, self._live_total = [], Counter(), 0
        for n in range(self._synced, len(items)):
            item = items[n]
            call_id = item.call_id
            if item.kind == "tool_call":
                if call_id:
                    self._call_ids.add(call_id)
                result = self._results.get(call_id or "")
                if item.tool_name in self.eligible and call_id not in self.cleared:
                    self._live.append(item)
                    self._live_ids[call_id] += 1
                    self._live_total += self._size(call_id)
                if result is not None and call_id in self.cleared and result.id not in self._replacements:
                    self._replacements[result.id] = result
                    self._log_stale = True  # a result before its call: it may be in the log already
            elif item.kind == "tool_result" and call_id and call_id not in self._results:
                self._results[call_id] = item
                if self._live_ids[call_id]:
                    self._live_total += self._live_ids[call_id] * self._size(call_id)
                if call_id in self._call_ids and call_id in self.cleared:
                    self._replacements[item.id] = item  # not in the log yet: `messages()` syncs before it copies
        self._synced = len(items)

    def _size(self, call_id: str | None) -> int:
        """§5 size of the result answering a call (0 while unanswered), estimated once per result."""
        result = self._results.get(call_id or "")
        if result is None:
            return 0
        size = self._sizes.get(result.id)
        if size is None:
            size = self._sizes[result.id] = self._result_tokens(result)
        return size

    def request(self) -> Request:
        self._on_request()
        marker = self._marker
        self._microcompact()
        count = self.count()
        if self.enabled and count >= self.threshold and self._may_auto_compact():
            self._compact("auto")
        meta: dict[str, Any] = {"count": count}
        if marker is not None:
            meta["after_recorded_compaction"] = marker.id
        return Request(self.messages(), estimate_tokens=count, threshold=self.threshold, max_output_tokens=self.reserve, meta=meta)

    def _on_request(self) -> None:
        """Hook for the 2.1 refill breaker."""

    def _may_auto_compact(self) -> bool:
        return True

    # ------------------------------------------------------------ microcompact (§5)
    def _result_tokens(self, result: Item) -> int:
        return chars_div4(result.text) + self.options.microcompact_image_tokens * sum(1 for a in result.attachments if a.is_image)

    def _microcompact(self) -> None:
        o = self.options
        if o.disable_microcompact or self.later:
            return
        warning_line = (self.threshold if self.enabled else self.effective) - o.warning_buffer
        if self.count() < warning_line:
            return
        # The eligible calls not cleared yet (`_live`, with the sum of their results' sizes), oldest first
        # but the newest `keep_recent`, are marked while more than `keep_tokens` would remain: a prefix.
        self._sync()
        total = self._live_total
        marked, cleared = [], 0
        for n in range(len(self._live) - o.microcompact_keep_recent):
            if total - cleared <= o.microcompact_keep_tokens:
                break
            call = self._live[n]
            marked.append(call.call_id or "")
            cleared += self._size(call.call_id)
        if not marked or cleared < o.microcompact_min_saving:
            return
        before = self.messages()
        self.cleared.update(marked)
        for call_id in marked:
            result = self._results.get(call_id)
            if result is not None:
                self._replacements[result.id] = result
                self._log_stale = True
        self._live = [c for c in self._live if c.call_id not in self.cleared]
        self._live_ids = Counter(c.call_id for c in self._live)
        self._live_total = sum(self._size(c.call_id) for c in self._live)
        for path in [p for p, f in self.files.items() if f.source is not None and self._source_cleared(f.source)]:
            del self.files[path]
        self.ctx.record_compaction(
            trigger="microcompact", before=before, after=self.messages(), summary=None,
            estimate_tokens=self.count(), threshold=warning_line, details={"cleared_calls": marked, "cleared_tokens": cleared},
        )

    def _source_cleared(self, source: str) -> bool:
        item = next((i for i in self.history.items if i.id == source), None)
        return item is not None and item.kind == "tool_result" and item.call_id in self.cleared

    # ------------------------------------------------------------ compaction (§3, §4)
    def summary_request(self, messages: Sequence[Message], instructions: str | None) -> Request:
        prompts = self._prompts.get(instructions)
        if prompts is None:  # rendered once: the same variables give the same text
            system = self.ctx.render_prompt("claude_code_system.j2")
            prompt = self.ctx.render_prompt("claude_code_summary.j2", instructions=instructions, text_only=self.later)
            prompts = self._prompts[instructions] = (Message("system", system), Message("user", prompt))
        return Request(
            [prompts[0], *messages, prompts[1]],
            kind="summary",
            max_output_tokens=self._summary_max_output(),
        )

    def _summary_max_output(self) -> int:
        return self.options.summary_max_output

    def _summarize(self, messages: Sequence[Message]) -> str | None:
        """One summary call; None on failure (§3.4)."""
        try:
            result = self.ctx.summarize(self.summary_request(messages, None))
        except SummaryOverflow:
            return None
        text = result.text.strip()
        if not text or text.startswith("API Error") or text.startswith("Prompt is too long"):
            return None
        return text

    def _compact(self, trigger: str) -> bool:
        before = self.messages()
        body = before[len(self.system):]
        if not body:
            return False  # "No messages to compact" / "Not enough messages to compact." (§2.4)
        count = self.count()
        text = self._summarize(body)
        if text is None:
            self._failed()
            return False
        summarized = [i for m in body for i in m.item_ids]
        message = self._summary_message(text, auto=trigger == "auto")
        summary = message.content
        attachments, restored = self._attachments()
        marker = self._marker
        self.prefix = [message, *attachments]
        self.history = ItemHistory()
        self.last_usage = 0
        self.last_response_at = None
        self._compacted()
        details: dict[str, Any] = {"count": count, "restored_files": restored, "todos": len(self.todos)}
        if marker is not None:
            details["recorded"] = {
                "id": marker.id, "trigger": marker.meta.get("trigger"), "preTokens": marker.meta.get("preTokens"),
            }
        self.ctx.record_compaction(
            trigger=trigger, before=before, after=self.messages(), summary=summary, summarized_ids=summarized,
            estimate_tokens=count, threshold=self.threshold, details=details,
        )
        return True

    def _failed(self) -> None:
        """BASE: no retry, no breaker (§2.3 step 6)."""

    def _compacted(self) -> None:
        """Hook for the 2.1 breakers."""

    def _summary_message(self, text: str, *, auto: bool) -> Message:
        """§4.1 the summary message of a summarizer's text (`wrap_summary`): the last one again, the same
        object, when the text and the trigger are the last ones (a session that summarizes before every
        request often gets the same summary back)."""
        last = self._summary
        if last is None or last[1] != auto or last[0] != text:
            last = self._summary = (text, auto, Message("user", self.wrap_summary(text, auto=auto)))
        return last[2]

    def wrap_summary(self, text: str, *, auto: bool) -> str:
        """§4.1 the summary message."""
        content = f"{SUMMARY_PREFIX}\n{format_summary(text)}."
        return f"{content}\n{CONTINUE_SENTENCE}" if auto else content

    def _attachments(self) -> tuple[list[Message], list[str]]:
        """§4.2: the newest files within their budgets (then the read cache holds only them), the todo list."""
        o = self.options
        files = sorted((f for f in self.files.values() if not NOT_RESTORED.search(f.path)), key=lambda f: -f.order)
        out: list[Message] = []
        kept: dict[str, _File] = {}
        total = 0
        for f in files[: o.restore_max_files]:
            if f.restored is None:
                f.restored = self._restored(f)
            fits, size, messages = f.restored
            if total + size > o.restore_total_tokens:
                continue
            total += size
            out.extend(messages)
            if fits:
                kept[f.path] = f
        self.files = kept
        if self.todos:
            if self._todo_message is None or self._todo_message[0] is not self.todos:
                body = f"{TODO_REMINDER}\n\n{json.dumps(self.todos, ensure_ascii=False)}. {TODO_NUDGE}"
                self._todo_message = (self.todos, Message("user", _reminder(body)))
            out.append(self._todo_message[1])
        return out, [f.path for f in kept.values()]

    def _restored(self, f: _File) -> tuple[bool, int, tuple[Message, ...]]:
        """§4.2 whether a file fits its own budget, its size in the total budget and its messages: the
        re-read (call and result) when it fits, else a note naming it."""
        fits = f.content is not None and chars_div4(f.content) <= self.options.restore_file_tokens
        payload = {"type": "file", "filename": f.path, "content": f.content} if fits else {"type": "compact_file_reference", "filename": f.path}
        size = chars_div4(json.dumps(payload, ensure_ascii=False, separators=(",", ":")))
        if fits:
            # A re-read, not the transcript item: the messages carry no item id.
            return True, size, (
                Message("user", _reminder(FILE_CALL + json.dumps({"file_path": f.path}))),
                Message("user", _reminder(FILE_RESULT + json.dumps(f.content, ensure_ascii=False))),
            )
        return False, size, (Message("user", _reminder(FILE_REFERENCE.format(path=f.path))),)


def _reminder(text: str) -> str:
    return f"<system-reminder>\n{text}\n</system-reminder>"


def _arguments(item: Item) -> dict[str, Any]:
    try:
        value = json.loads(item.arguments or "{}")
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


class ClaudeCode21(ClaudeCode):
    name = "claude-code-2.1"
    description = "Claude Code 2.1.112: reserve ≤ 20,000, usage + chars/4 tail, breakers, prompt-too-long retries, new wrapper"
    spec = "docs/specs/claude-code.md §8"
    Options = ClaudeCode21Options
    later = True

    def __init__(self, ctx: StrategyContext, options: Any = None) -> None:
        self._failures = 0
        self._refills = 0
        self._turns_since: int | None = None
        self._disabled = False
        #: `_estimates` of the history list `_sums_items`; the prefix list whose chars/4 sum was taken last
        self._sums_items: list[Item] | None = None
        self._sums: list[int] = [0]
        self._prefix_tokens: tuple[list[Message] | None, int] = (None, 0)
        super().__init__(ctx, options)

    def _reserve(self, model: str) -> int:
        return min(super()._reserve(model), self.options.reserve_cap)

    def _compact_window(self) -> int:
        configured = self.options.auto_compact_window
        if configured is None or configured <= 0:
            return self.window
        return min(self.window, max(100_000, min(configured, 1_000_000)))

    def _summary_max_output(self) -> int:
        return min(self.options.summary_max_output, self.reserve)

    # §8.2: the usage plus an estimate of everything after the newest response
    def _estimate(self, item: Item) -> int:
        if item.kind == "tool_call":
            return chars_div4((item.tool_name or "") + (item.arguments or ""))
        return chars_div4(item.text) + self.options.image_tokens * sum(1 for a in item.attachments if a.is_image)

    def count(self) -> int:
        start = self.last_response_at if self.last_response_at is not None else 0
        sums = self._estimates()
        extra = sums[-1] - sums[start]
        if self.last_response_at is None:
            prefix, tokens = self._prefix_tokens
            if prefix is not self.prefix:
                self._prefix_tokens = (self.prefix, tokens := sum(chars_div4(m.content) for m in self.prefix))
            extra += tokens
        return self.last_usage + extra

    def _estimates(self) -> list[int]:
        """Running sums of `_estimate` over the history (element n: the first n items), extended by the
        items appended since the last call (started over when the history was replaced)."""
        items = self.history.items
        if items is not self._sums_items:
            self._sums_items, self._sums = items, [0]
        sums = self._sums
        for n in range(len(sums) - 1, len(items)):
            sums.append(sums[-1] + self._estimate(items[n]))
        return sums

    def _on_request(self) -> None:
        # A "turn" of the rapid-refill breaker is read as one pass of the query loop (one API request).
        if self._turns_since is not None:
            self._turns_since += 1

    def _may_auto_compact(self) -> bool:
        return not self._disabled

    def _failed(self) -> None:
        self._failures += 1
        if self._failures >= self.options.max_consecutive_failures:
            self._disabled = True

    def _compacted(self) -> None:
        self._failures = 0
        if self._turns_since is not None and self._turns_since < self.options.refill_turns:
            self._refills += 1
            if self._refills >= self.options.max_rapid_refills:
                self._disabled = True
        else:
            self._refills = 0
        self._turns_since = 0

    def _summarize(self, messages: Sequence[Message]) -> str | None:
        """§8.3: on prompt-too-long, drop the oldest API rounds (enough for the reported excess, else
        the oldest 20%) and retry, up to 3 times."""
        body = list(messages)
        for attempt in range(self.options.ptl_retries + 1):
            try:
                result = self.ctx.summarize(self.summary_request(body, None))
            except SummaryOverflow as overflow:
                if attempt == self.options.ptl_retries:
                    return None
                trimmed = self._drop_oldest_rounds(body, overflow.error, overflow.tokens)
                if trimmed is None:
                    return None
                body = trimmed
                continue
            text = result.text.strip()
            if not text or text.startswith("API Error"):
                return None
            return text
        return None

    def _drop_oldest_rounds(self, body: list[Message], error: ProviderError, tokens: int) -> list[Message] | None:
        groups = _rounds(body)
        if len(groups) < 2:
            return None
        excess = tokens + self._summary_max_output() - self.ctx.profile.context_window if "prompt is too long" in error.message else 0
        drop = 0
        if excess > 0:
            freed = 0
            while drop < len(groups) - 1 and freed < excess:
                freed += self.ctx.count_tokens(groups[drop])
                drop += 1
        else:
            drop = max(1, int(len(groups) * self.options.ptl_drop_fraction))
        rest = [m for g in groups[drop:] for m in g]
        if rest and rest[0].role != "user":
            rest = [Message("user", PTL_RETRY_MARKER), *rest]
        return rest

    def wrap_summary(self, text: str, *, auto: bool) -> str:
        content = f"{SUMMARY_PREFIX_LATER}\n\n{format_summary(text, keep_analysis=False)}"
        return f"{content}\n\n{CONTINUE_LATER}" if auto else content


def _rounds(messages: Sequence[Message]) -> list[list[Message]]:
    """API-round groups: a new group starts at each assistant message (with the results and user text after it)."""
    groups: list[list[Message]] = []
    for message in messages:
        if not groups or (message.role == "assistant" and groups[-1] and groups[-1][-1].role != "assistant"):
            groups.append([])
        groups[-1].append(message)
    return groups

