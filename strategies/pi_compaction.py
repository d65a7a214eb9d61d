"""Pi's compaction pipeline without the LLM calls (docs/specs/pi.md §3, §4.1, §4.4, §5.1).

Owns the version rules (`PiRules`: DEC2025 `83a6c269`, BASE `83378aad`, LATER `2efa728d`: the spec's
`ee24a9ec` and the upstream commits after it through 2efa728d that change a rule, each named at its flag), the
December 2025 preparation (`prepare_compaction_2025`: cuts only at user messages, kept size from
differences of assistant usage, upstream `compaction.ts@83a6c269`; the spec predates nothing of
it, so upstream is the source), the valid cut points and
the newest-first cut walk with its `>=` tie-break and backward extension (§3.2, §3.3; LATER over
every context-visible entry, a6f720e6), split-turn detection, `prepare_compaction` (boundaries per version, `tokensBefore` per version, §3.1), the
conversation serializer with the 2,000-character tool-result truncation counted in UTF-16 code
units, as JavaScript's `String.length` and `slice` count (§4.1, §10; `ConversationSerializer`
serializes each message once for a strategy that summarizes the same messages again, and
extends the text of a list it serialized before), file-operation tracking (§4.4) and overflow
detection (§5.1; LATER with the lists of `overflow.ts@2efa728d`). `prepare_compaction` and `find_cut_point` read the path through a `PathIndex`
(sums and lists along it), so a compaction costs a few lookups, not a pass over the history.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from compaction_bench.strategies.pi_session_tree import (
    CUT_POINT_ROLES,
    Entry,
    PathIndex,
    PiMessage,
    calculate_context_tokens,
    convert_message,
    entry_message,
    is_turn_start,
    latest_compaction_index,
)
from compaction_bench.tokens import utf16_len

TRUNCATION_NOTE = "\n\n[... {n} more characters truncated]"
SPLIT_TURN_SEPARATOR = "\n\n---\n\n**Turn Context (split turn):**\n\n"
NO_PRIOR_HISTORY = "No prior history."

#: `isContextOverflow`'s patterns at 83378aad, all matched case-insensitively (compiled once: a check runs at every
#: step), then its Cerebras check (`overflow.ts@83378aad`).
BASE_OVERFLOW_PATTERNS = tuple(re.compile(p, re.I) for p in (
    r"prompt is too long",
    r"input is too long for requested model",
    r"exceeds the context window",
    r"input token count.*exceeds the maximum",
    r"maximum prompt length is \d+",
    r"reduce the length of the messages",
    r"maximum context length is \d+ tokens",
    r"exceeds the limit of \d+",
    r"exceeds the available context size",
    r"greater than the context length",
    r"context window exceeds limit",
    r"exceeded model token limit",
    r"too large for model with \d+ maximum context length",
    r"model_context_window_exceeded",
    r"context[_ ]length[_ ]exceeded",
    r"too many tokens",
    r"token limit exceeded",
    r"^4(00|13)\s*(status code)?\s*\(no body\)",
))
#: `OVERFLOW_PATTERNS` of `overflow.ts@ee24a9ec` L36-61, in its order, with bbb91fa8's DashScope/Qwen pattern
#: (`overflow.ts@2efa728d` L58).
LATER_OVERFLOW_PATTERNS = tuple(re.compile(p, re.I) for p in (
    r"prompt is too long",
    r"request_too_large",
    r"input is too long for requested model",
    r"exceeds the context window",
    r"exceeds (?:the )?(?:model'?s )?maximum context length(?: of [\d,]+ tokens?|\s*\([\d,]+\))",
    r"input token count.*exceeds the maximum",
    r"maximum prompt length is \d+",
    r"reduce the length of the messages",
    r"maximum context length is \d+ tokens",
    r"exceeds (?:the )?maximum allowed input length of [\d,]+ tokens?",
    r"input \(\d+ tokens\) is longer than the model'?s context length \(\d+ tokens\)",
    r"exceeds the limit of \d+",
    r"exceeds the available context size",
    r"greater than the context length",
    r"context window exceeds limit",
    r"exceeded model token limit",
    r"too large for model with \d+ maximum context length",
    r"prompt has [\d,]+ tokens?, but the configured context size is [\d,]+ tokens?",
    r"model_context_window_exceeded",
    r"prompt too long; exceeded (?:max )?context length",
    r"range of input length should be",
    r"context[_ ]length[_ ]exceeded",
    r"too many tokens",
    r"token limit exceeded",
    r"^4(?:00|13)\s*(?:status code)?\s*\(no body\)",
))
#: `NON_OVERFLOW_PATTERNS` (`overflow.ts@ee24a9ec` L72-76, the same at 2efa728d): they veto every overflow pattern.
LATER_OVERFLOW_EXCLUSIONS = tuple(re.compile(p, re.I) for p in (r"^(Throttling error|Service unavailable):", r"rate limit", r"too many requests"))


@dataclass(frozen=True)
class PiRules:
    """What differs between the versions of Pi the strategies reproduce."""

    version: str
    #: LATER (eeace797): the boundary starts at the previous compaction's firstKeptEntryId (#2608 fix).
    boundary_from_first_kept: bool
    #: LATER: tokensBefore = estimateContextTokens(buildSessionContext(path)).
    tokens_before_full_context: bool
    #: LATER (96f0edd0): images in user messages count 4800 chars.
    user_images: bool
    #: LATER (3d9e14d7): summary maxTokens clamped to the model's max output.
    clamp_to_model_max: bool
    #: LATER (7d08c81a): nothing to compact when both message lists are empty.
    skip_empty: bool
    #: LATER: older compaction entries inside the kept range are emitted as summaries (§10).
    nested_compactions: bool
    #: LATER overflow.ts (ee24a9ec, and bbb91fa8's pattern): its own pattern list, the exclusion list and the `length`
    #: case.
    later_overflow: bool
    #: LATER (72fd9113): the summarizer system prompt says "an AI assistant".
    generic_system_prompt: bool
    #: LATER (da6a81d3): history summaries reason at the session's thinking level (BASE: "high").
    session_thinking_level: bool
    #: LATER: the split-turn prefix request reasons like the history request (BASE: no reasoning option).
    prefix_thinking: bool
    #: LATER (cd95c274, in ee24a9ec): an all-zero usage is no usage (`getAssistantUsage`), and a check on an assistant
    #: whose usage counts 0 tokens takes the estimate path (`agent-session.ts@2efa728d` L2018-2019).
    nonzero_usage: bool
    #: LATER (a6f720e6, 2026-07-09, #6326): the cut walk adds up every context-visible entry (the previous compaction's
    #: summary included), cut points, the backward extension and turn starts read the entries' context messages, and
    #: an empty branch summary is neither a cut point nor summarized (`find_cut_point`).
    context_visible_cuts: bool
    #: LATER (9b3a2059 and 241431c6, #6618, 2026-07-22/23): summary and branch-summary requests go out with
    #: `cacheRetention: "none"` and a fresh `sessionId` (`completeSummarization`, `compaction.ts@2efa728d` L562-581).
    uncached_summaries: bool
    #: LATER: transient errors are `isRetryableAssistantError`'s (pi-ai `utils/retry.ts@ee24a9ec`, with what 4285712b,
    #: 57d96d72, b0c2a90e and 33e40c3e add by 2efa728d), BASE's one regex before.
    later_retry: bool


_LATER_FLAGS = {
    "boundary_from_first_kept": True,
    "tokens_before_full_context": True,
    "user_images": True,
    "clamp_to_model_max": True,
    "skip_empty": True,
    "nested_compactions": True,
    "later_overflow": True,
    "generic_system_prompt": True,
    "session_thinking_level": True,
    "prefix_thinking": True,
    "nonzero_usage": True,
    "context_visible_cuts": True,
    "uncached_summaries": True,
    "later_retry": True,
}
BASE = PiRules("2026-03 (83378aad)", **{k: False for k in _LATER_FLAGS})
#: December 2025 (`core/compaction.ts` at 83a6c269).
DEC2025 = PiRules("2025-12 (83a6c269)", **{k: False for k in _LATER_FLAGS})
LATER = PiRules("2026-07 (2efa728d)", **_LATER_FLAGS)


# --------------------------------------------------------------------------- cut points (§3)
def is_valid_cut_point(entry: Entry, *, context_visible: bool = False) -> bool:
    """§3.2; with `context_visible` (a6f720e6, `findValidCutPoints`, `compaction.ts@2efa728d` L351-363) an empty
    branch summary, which the context leaves out, is none."""
    if entry.type == "message":
        return entry.role in CUT_POINT_ROLES
    if context_visible and entry.type == "branch_summary":
        return bool(entry.summary)
    return entry.type in ("branch_summary", "custom_message")


def ends_backward_extension(entry: Entry, *, context_visible: bool = False) -> bool:
    """Where the backward extension of a cut stops (§3.3): at a message or a compaction entry; with
    `context_visible` (a6f720e6, `compaction.ts@2efa728d` L441-449) at a compaction or any entry the context
    shows (a custom message, a non-empty branch summary)."""
    if context_visible:
        return entry.type == "compaction" or entry_message(entry) is not None
    return entry.type in ("message", "compaction")


@dataclass(frozen=True)
class CutPoint:
    first_kept_index: int
    turn_start_index: int
    is_split_turn: bool


def find_cut_point(
    path: Sequence[Entry], start: int, end: int, keep_recent_tokens: int, *, index: PathIndex, context_visible: bool = False
) -> CutPoint:
    """`findCutPoint` (§3.3): the first valid cut point at or after the entry where the estimates
    added up newest first reach `keep_recent_tokens`, else the first valid cut point of the range
    (upstream lists the valid cut points first; looking for the one needed is the same choice).
    `index` (with the strategy's image rules) gives that entry from its sums along `path`.

    `context_visible` is a6f720e6's walk (`compaction.ts@2efa728d` L403-461): it adds up every entry's context
    messages (a compaction inside the range counts its summary but is never a cut point), an empty branch
    summary is no cut point, the backward extension stops at any context-visible entry, and a cut on an entry
    that starts a turn (`is_turn_start`: user, bash, custom, branch summary) splits none. Before it only a
    user message did, and a cut on a custom message or a branch summary was a split turn starting at itself."""
    cut = None
    reached = index.update(path).walk_back(start, end, keep_recent_tokens, context_visible=context_visible)
    if reached is not None:
        cut = next((c for c in range(reached, end) if is_valid_cut_point(path[c], context_visible=context_visible)), None)
    if cut is None:
        cut = next((c for c in range(start, end) if is_valid_cut_point(path[c], context_visible=context_visible)), None)
    if cut is None:
        return CutPoint(start, -1, False)
    while cut > start and not ends_backward_extension(path[cut - 1], context_visible=context_visible):
        cut -= 1
    starts_turn = is_turn_start(path[cut], context_visible=True) if context_visible else path[cut].type == "message" and path[cut].role == "user"
    if starts_turn:
        return CutPoint(cut, -1, False)
    turn_start = index.turn_start(cut, start, context_visible=context_visible)
    return CutPoint(cut, turn_start, turn_start != -1)


# --------------------------------------------------------------------------- December 2025 (83a6c269)
def assistant_usage_tokens(entry: Entry) -> int | None:
    """`getAssistantUsage` + `calculateContextTokens` at 83a6c269: a non-aborted assistant
    message's context tokens (error messages count, with whatever usage they carry)."""
    message = entry.message
    if entry.type != "message" or message is None or message.role != "assistant":
        return None
    if message.stop_reason == "aborted" or message.usage is None:
        return None
    return calculate_context_tokens(message.usage)


def find_cut_point_2025(path: Sequence[Entry], start: int, end: int, keep_recent_tokens: int) -> int:
    """`findCutPoint` at 83a6c269: the index of the first kept entry, always a user message.

    Walking the assistants newest-first, the kept size is the newest assistant's context tokens
    minus an older one's; at the first difference `>= keepRecentTokens` the cut is the newest user
    message at or before the assistant just newer than that one. Without user messages everything
    is kept; without any usage only the last turn is; if the difference never reaches the budget,
    the cut is `start` (keep everything)."""
    boundaries = [i for i in range(start, end) if path[i].type == "message" and path[i].role == "user"]
    if not boundaries:
        return start
    usages = [(i, t) for i in range(end - 1, start - 1, -1) if (t := assistant_usage_tokens(path[i])) is not None]
    if not usages:
        return boundaries[-1]
    newest = usages[0][1]
    for n in range(1, len(usages)):
        if newest - usages[n][1] >= keep_recent_tokens:
            last_kept = usages[n - 1][0]
            return next((b for b in reversed(boundaries) if b <= last_kept), start)
    return start


def prepare_compaction_2025(path: Sequence[Entry], *, keep_recent_tokens: int) -> Preparation | None:
    """`compact()` at 83a6c269 without the model call: None when the last entry is a compaction
    ("Already compacted"). The boundary starts after the previous compaction entry (its kept tail
    is neither summarized nor kept, as at BASE); `tokensBefore` is the last non-aborted
    assistant's context tokens; only `message` entries are summarized; the previous summary is
    handed over separately (prepended to the summary input by the caller); no split turns, no
    file lists."""
    if not path or path[-1].type == "compaction":
        return None
    prev = latest_compaction_index(path)
    start = prev + 1
    cut = find_cut_point_2025(path, start, len(path), keep_recent_tokens)
    tokens_before = next((t for e in reversed(path) if (t := assistant_usage_tokens(e)) is not None), 0)
    picked = [e for e in path[start:cut] if e.type == "message" and e.message is not None]
    return Preparation(
        first_kept_id=path[cut].id,
        cut_index=cut,
        boundary_start=start,
        messages_to_summarize=[e.message for e in picked if e.message is not None],
        turn_prefix=[],
        is_split_turn=False,
        count_tokens_before=lambda: tokens_before,
        previous_summary=path[prev].summary if prev >= 0 else None,
        file_ops=FileOps(),
        summarized_entries=[e.id for e in picked],
    )


# --------------------------------------------------------------------------- file operations (§4.4)
@dataclass
class FileOps:
    read: set[str] = field(default_factory=set)
    written: set[str] = field(default_factory=set)
    edited: set[str] = field(default_factory=set)

    def seed(self, details: Mapping | None) -> None:
        """From a previous entry's `details` (readFiles → read, modifiedFiles → edited)."""
        if not isinstance(details, Mapping):
            return
        self.read.update(p for p in details.get("readFiles") or () if isinstance(p, str))
        self.edited.update(p for p in details.get("modifiedFiles") or () if isinstance(p, str))

    def add_messages(self, messages: Sequence[PiMessage]) -> None:
        self.add_paths(p for m in messages if m.role == "assistant" for p in m.file_tool_paths)

    def add_paths(self, paths: Iterable[tuple[str, str]]) -> None:
        """Record (tool, path) pairs of read/write/edit calls."""
        targets = {"read": self.read, "write": self.written, "edit": self.edited}
        for name, path in paths:
            targets[name].add(path)

    def lists(self) -> tuple[list[str], list[str]]:
        """(readFiles, modifiedFiles): sorted in UTF-16 code-unit order, read minus modified."""
        modified = self.edited | self.written
        key = utf16_key
        return sorted(self.read - modified, key=key), sorted(modified, key=key)

    def details(self) -> dict[str, list[str]]:
        read, modified = self.lists()
        return {"readFiles": read, "modifiedFiles": modified}

    def tags(self) -> str:
        """The `<read-files>` / `<modified-files>` blocks appended to a summary ("" when both empty)."""
        read, modified = self.lists()
        sections = []
        if read:
            sections.append("<read-files>\n" + "\n".join(read) + "\n</read-files>")
        if modified:
            sections.append("<modified-files>\n" + "\n".join(modified) + "\n</modified-files>")
        return "\n\n" + "\n\n".join(sections) if sections else ""


def utf16_key(text: str) -> bytes:
    """Sort key equal to JavaScript's default (UTF-16 code unit) string order."""
    return text.encode("utf-16-be")


# --------------------------------------------------------------------------- serializer (§4.1)
def serialize_conversation(messages: Sequence[PiMessage], max_tool_chars: int) -> str:
    """`serializeConversation`: the messages' parts joined by blank lines."""
    return "\n\n".join(part for m in messages if (part := serialize_message(m, max_tool_chars)))


def serialize_message(message: PiMessage, max_tool_chars: int) -> str:
    """One message's parts of `serializeConversation`, joined by blank lines ("" when it has none;
    every part is non-empty, so the conversation is these strings joined by blank lines)."""
    parts: list[str] = []
    role = message.role
    if role == "assistant":
        if message.thinking:
            parts.append("[Assistant thinking]: " + "\n".join(message.thinking))
        if message.texts:
            parts.append("[Assistant]: " + "\n".join(message.texts))
        if message.tool_calls:
            calls = "; ".join(f"{c.name}({_call_args(c.arguments)})" for c in message.tool_calls)
            parts.append("[Assistant tool calls]: " + calls)
    elif role == "toolResult":
        text = message.text
        length = utf16_len(text)
        if length > max_tool_chars:
            text = utf16_prefix(text, max_tool_chars) + TRUNCATION_NOTE.format(n=length - max_tool_chars)
        if text:
            parts.append("[Tool result]: " + text)
    else:
        text = llm_user_text(message)
        if text:
            parts.append("[User]: " + text)
    return "\n\n".join(parts)


class ConversationSerializer:
    """`serialize_conversation` that serializes each message once: Pi summarizes a split turn's
    prefix again at every compaction inside that turn, so the same messages come back, with a
    few more at their end. The texts of the last few lists are kept by their first message: a
    list that starts with one of them adds the parts of what follows to its text (the parts are
    joined by blank lines, so the text of a longer list extends that of its prefix)."""

    #: How many recent texts are kept (a compaction serializes its history and its turn prefix).
    RECENT = 4

    def __init__(self, max_tool_chars: int) -> None:
        self.max_tool_chars = max_tool_chars
        #: id(message) → (message, its serialized parts); the message is kept so its id stays its own.
        self._parts: dict[int, tuple[PiMessage, str]] = {}
        #: id(first message) → (the list serialized, its text), oldest first.
        self._recent: dict[int, tuple[list[PiMessage], str]] = {}

    def _join(self, messages: Sequence[PiMessage]) -> str:
        memo, parts = self._parts, []
        for message in messages:
            cached = memo.get(id(message))
            if cached is None:
                cached = memo[id(message)] = (message, serialize_message(message, self.max_tool_chars))
            if cached[1]:
                parts.append(cached[1])
        return "\n\n".join(parts)

    def __call__(self, messages: Sequence[PiMessage]) -> str:
        if not messages:
            return ""
        head = id(messages[0])
        known, done, text = self._recent.pop(head, None), 0, ""
        if known is not None and len(known[0]) <= len(messages) and list(messages[: len(known[0])]) == known[0]:
            done, text = len(known[0]), known[1]
        rest = self._join(messages[done:])
        text = text + "\n\n" + rest if text and rest else text or rest
        self._recent[head] = (list(messages), text)
        if len(self._recent) > self.RECENT:
            del self._recent[next(iter(self._recent))]
        return text


def llm_user_text(message: PiMessage) -> str:
    """The text of a message that convertToLlm turns into a user message."""
    return "".join(m.content for m in convert_message(message))


def utf16_prefix(text: str, units: int) -> str:
    """JavaScript's `text.slice(0, units)`: the first `units` UTF-16 code units. A surrogate pair
    cut in half leaves its high half, which becomes U+FFFD (what a JSON encoder sends for it)."""
    head = text.encode("utf-16-le", "surrogatepass")[: 2 * units].decode("utf-16-le", "surrogatepass")
    return head[:-1] + "\ufffd" if head and "\ud800" <= head[-1] <= "\udbff" else head


def _call_args(arguments: str) -> str:
    try:
        data = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return arguments
    if not isinstance(data, dict):
        return arguments
    return ", ".join(f"{k}={json.dumps(v, ensure_ascii=False, separators=(',', ':'))}" for k, v in data.items())


# --------------------------------------------------------------------------- preparation (§3.1, §3.3)
@dataclass
class Preparation:
    first_kept_id: str
    cut_index: int
    boundary_start: int
    messages_to_summarize: list[PiMessage]
    turn_prefix: list[PiMessage]
    is_split_turn: bool
    #: `tokensBefore` (§3.1), counted when first read: a compaction whose summary request does not
    #: fit (and is tried again at the next check) never reads it.
    count_tokens_before: Callable[[], int]
    previous_summary: str | None
    file_ops: FileOps
    summarized_entries: list[str]

    @cached_property
    def tokens_before(self) -> int:
        return self.count_tokens_before()


def prepare_compaction(path: Sequence[Entry], rules: PiRules, *, keep_recent_tokens: int, index: PathIndex) -> Preparation | None:
    """`prepareCompaction`: None when the path already ends in a compaction (or, LATER, when
    there is nothing to summarize). `index` indexes the path (its estimates with the image and usage
    rules of `rules`). `tokens_before` is counted from `path` when first read, so the path must not
    change while the preparation is in use."""
    if not path or path[-1].type == "compaction":
        return None
    prev = index.update(path).latest_compaction()
    # Where the previous compaction's kept entries start; None when they are not on the path.
    kept = index.position(path[prev].first_kept_id, prev) if prev >= 0 else None
    start = kept if rules.boundary_from_first_kept and kept is not None else prev + 1
    visible = rules.context_visible_cuts
    cut = find_cut_point(path, start, len(path), keep_recent_tokens, index=index, context_visible=visible)
    history_end = cut.turn_start_index if cut.is_split_turn else cut.first_kept_index

    # The entries' messages, compactions apart: LATER skips the previous compaction inside its
    # boundary; BASE's boundary starts after it, so it has none to skip.
    history, history_ids = index.summarized(start, history_end, context_visible=visible)
    prefix, prefix_ids = index.summarized(cut.turn_start_index, cut.first_kept_index, context_visible=visible) if cut.is_split_turn else ([], [])
    if rules.skip_empty and not history and not prefix:
        return None

    def count_tokens_before() -> int:
        """LATER: `estimateContextTokens(buildSessionContext(path))` (its nested compactions
        included); BASE: of the messages from the previous compaction on."""
        sums = index.update(path)
        if not rules.tokens_before_full_context or prev < 0:
            return sums.range_estimate(max(prev, 0))
        assert rules.nested_compactions  # the full context of LATER, the one version that counts it
        return sums.compacted_estimate(prev, prev if kept is None else kept)

    ops = FileOps()
    previous = path[prev] if prev >= 0 else None
    if previous is not None and not previous.from_hook:
        ops.seed(previous.details)
    ops.add_paths(index.file_tool_paths(start, history_end))
    if cut.is_split_turn:
        ops.add_paths(index.file_tool_paths(cut.turn_start_index, cut.first_kept_index))
    return Preparation(
        first_kept_id=path[cut.first_kept_index].id,
        cut_index=cut.first_kept_index,
        boundary_start=start,
        messages_to_summarize=history,
        turn_prefix=prefix,
        is_split_turn=cut.is_split_turn,
        count_tokens_before=count_tokens_before,
        previous_summary=previous.summary if previous is not None else None,
        file_ops=ops,
        summarized_entries=history_ids + prefix_ids,
    )


# --------------------------------------------------------------------------- overflow (§5.1)
def is_context_overflow(message: PiMessage, context_window: int, rules: PiRules, *, length_ratio: float) -> bool:
    """`isContextOverflow` per version."""
    if message.stop_reason == "error" and message.error_message:
        text = message.error_message
        if rules.later_overflow and any(p.search(text) for p in LATER_OVERFLOW_EXCLUSIONS):
            return False
        patterns = LATER_OVERFLOW_PATTERNS if rules.later_overflow else BASE_OVERFLOW_PATTERNS
        if any(p.search(text) for p in patterns):
            return True
    usage = message.usage
    if usage is None or not context_window:
        return False
    # Pi's usage.input + cacheRead = canonical input minus cache writes.
    prompt = usage.input - usage.cache_write
    if message.stop_reason == "stop" and prompt > context_window:
        return True
    return bool(
        rules.later_overflow
        and message.stop_reason == "length"
        and usage.output == 0
        and prompt >= length_ratio * context_window
    )
