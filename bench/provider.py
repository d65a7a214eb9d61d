"""The simulated provider: true token counts, overflow errors, cached prefixes and usage.

For each request of a cell it renders the messages, counts their true tokens with the profile's
tokenizer (memoized per message; the counts of the prefix a request shares with a kept entry are
reused, so only the messages after it are counted), raises an overflow error with the real
provider's message text when the profile's overflow rule refuses it (input over the input limit, or input
plus requested output over the context), computes the cached
prefix against the cell's kept cache entries (the two newest accepted requests, eighty on GPT-5.6 and later, and
the newest turn request's, each gone once unused for longer than the TTL by the recorded timestamps; where reads end at
breakpoints, on Anthropic and GPT-5.6 and later, the entry that serves the longest read at a breakpoint, else
the longest prefix), comparing message hashes
first and tokens only inside the first differing message (memoized per pair of messages and skipped
for an older entry that cannot share more; `compaction_bench.caching` applies the provider's rules), in billed tokens:
hidden reasoning is cached with the prefix that holds it, up to the first message one of the two
requests bills reasoning for and the other does not (`_billed_prefix`; on a Claude model that drops
earlier turns' thinking, a thinking message is such reasoning: a new user message drops the last turn's,
and the cache from the first of them on, as Anthropic's context-editing guide says clearing thinking
does), the tokens
written to the cache and the tokens re-billed (already-sent messages outside the cached part), and
returns usage in the shape strategies read. These are the only cache numbers of a run: the engine
stores them on each request record and the metrics read them there. With `recorded_usage` the
transcript's own usage is reported instead (the engine decides when that is valid).

On Anthropic the lookback from a breakpoint is measured in content blocks (`caching.blocks_of`),
read lazily for the few messages between an entry and a breakpoint (`_BlockCounts`), never for the
whole request.

A request the provider accepted can still be refused by the model behind it (a summarizer whose own
count finds the prompt too long): that prompt was never processed, so it cached nothing and
refreshed nothing. `withdraw` takes its entry back, restoring the kept entries, the newest turn
entry and the count of accepted requests to what they were before it was sent, so no later request
reads from it.

One provider is one model's cache: providers cache per model (Claude Code's guide to its prompt
caching, https://code.claude.com/docs/en/prompt-caching, warns that switching models mid-session
makes the next turn uncached), and a request to another model never reads or writes this model's
entries (the engine gives a summarizer of another model a provider of its own,
`compaction_bench.replay`).
"""

from __future__ import annotations

import itertools
import operator
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import cast, overload

from compaction_bench.caching import (
    CacheMarks,
    CacheOutcome,
    blocks_of,
    cache_outcome,
    leading_system,
    newest_input,
    rebilled_tokens,
)
from compaction_bench.log_view import Cumulative, LogView, SharedPrefixes, as_messages, first_difference
from compaction_bench.profiles import IMPLICIT_READS, PREFIX_READS, ModelProfile
from compaction_bench.request import Message, Request
from compaction_bench.tokens import HiddenTokens, TokenCounter, shared_counter
from compaction_bench.transcript import Usage, parse_timestamp

#: Tokens of framing per message (role markers), as in OpenAI's chat format accounting.
MESSAGE_OVERHEAD = 4
#: Tokens of framing per tool call inside an assistant message.
TOOL_CALL_OVERHEAD = 3
#: How many earlier requests of the cell are kept as cache entries (the newest ones), besides the newest
#: turn request's: a provider keeps a prefix until its TTL passes, however many requests came after it,
#: so the summary calls a step makes after its turn request (Aider's recursive summaries) do not evict
#: that turn's entry (`SimulatedProvider._keep`).
RECENT_ENTRIES = 2
#: How many earlier requests of the cell are kept instead where reads end at GPT-5.6's implicit breakpoints (one a
#: request, `profiles.IMPLICIT_READS`): "For cache matching, OpenAI considers up to the latest 80 breakpoints in the
#: conversation". Two would do for a session that only grows (a request reads the previous one's end), not where
#: the newest two breakpoints lie past the part a request shares: a new user message ends the billing of the last
#: turn's reasoning, so it reads at the end of the request that opened that turn, and a summary call at an older one
#: (on the Codex rollout MoonMind 2025-11-12 at gpt-5.6@64k, two of `none`'s 89 requests read 0 with two kept,
#: $2.751 against $2.711, and four of `opencode-v2`'s, $3.208 against $3.074).
OPENAI_BREAKPOINTS_CONSIDERED = 80
#: How many contexts counted with `SimulatedProvider.count` are kept as counting bases.
COUNTED_KEPT = 8
#: How many pairs of differing messages keep their common token prefix (`SimulatedProvider._inside`).
INSIDES_KEPT = 4096
#: How many distinct messages `SimulatedProvider` remembers the first count of (`_first_counted`); past
#: it, it forgets them all and looks every re-billed candidate up in the cache entries.
FIRST_COUNTED_KEPT = 1_000_000


@dataclass(frozen=True)
class ProviderError:
    """A provider-shaped error, as an agent would receive it."""

    provider: str
    status: int
    code: str
    message: str

    @property
    def is_overflow(self) -> bool:
        """OpenAI's `context_length_exceeded`, or Anthropic's invalid request that says the prompt is too long or
        that the input and `max_tokens` exceed the context (`overflow_error`)."""
        return self.code == "context_length_exceeded" or self.message.startswith(ANTHROPIC_OVERFLOWS)

    def to_dict(self) -> dict[str, object]:
        return {"provider": self.provider, "status": self.status, "code": self.code, "message": self.message}


#: The `provider` of the error of a request the agent itself did not send (`StrategyContext.refuse_request`).
AGENT_REFUSAL = "agent"


#: How Anthropic's overflow errors start: the input alone over the window, or the input and `max_tokens` together.
ANTHROPIC_OVERFLOWS = ("prompt is too long", "input length and `max_tokens` exceed context limit")


def overflow_error(profile: ModelProfile, input_tokens: int, max_output: int) -> ProviderError:
    """The error text the real provider returns for a request of `input_tokens` asking for `max_output` that does not
    fit (`ModelProfile.overflows`). Anthropic (a Claude model on any provider) says "prompt is too long" with the
    input's count when the input alone is over the window, and, on a model that counts `max_tokens` against it
    (before Claude 4.5), "input length and `max_tokens` exceed context limit: I + M > W" when only the two together
    are (the text Claude Code parses to lower its `max_tokens`, docs/specs/claude-code.md §13)."""
    if profile.cache.provider == "anthropic":
        window = profile.context_window
        if profile.overflow == "input+output" and input_tokens <= window:
            message = (f"{ANTHROPIC_OVERFLOWS[1]}: {input_tokens} + {max_output} > {window}, "
                       "decrease input length or `max_tokens` and try again")
        else:
            message = f"{ANTHROPIC_OVERFLOWS[0]}: {input_tokens} tokens > {window} maximum"
        return ProviderError("anthropic", 400, "invalid_request_error", message)
    return ProviderError(
        "openai",
        400,
        "context_length_exceeded",
        "Your input exceeds the context window of this model. Please adjust your input and try again.",
    )


@dataclass(frozen=True)
class Outcome:
    """What the provider did with one request."""

    true_tokens: int
    overflow: bool
    error: ProviderError | None
    cache: CacheOutcome
    usage: Usage

    @property
    def cached_tokens(self) -> int:
        return self.cache.cached_tokens


def _timestamp_seconds(value: str | None) -> float | None:
    moment = parse_timestamp(value)
    return None if moment is None else moment.timestamp()


class MessageCounter:
    """True token counts of messages: the profile's tokenizer plus message framing (memoized per message).

    The provider counts with it; metrics that need a count (a fact's age) use one alone, never a
    second provider."""

    def __init__(
        self, profile: ModelProfile, counter: TokenCounter | None = None, hidden: HiddenTokens | None = None, *,
        strip_thinking: bool = False,
    ) -> None:
        self.profile = profile
        self.counter = counter or shared_counter(profile.tokenizer)
        self._message_tokens: dict[Message, int] = {}
        # `strip_thinking`: the model drops earlier turns' thinking (`profiles.strips_earlier_thinking`) and the
        # requests do not ask to keep it; a thinking message then bills as hidden reasoning does, its visible count 0.
        self._strips = strip_thinking
        self._thinking: dict[Message, int] = {}
        if strip_thinking:
            hidden = replace(hidden or HiddenTokens({}, frozenset()), thinking=self._thinking_tokens)
        self.hidden = hidden  # billed reasoning the messages do not show (compaction_bench.tokens)

    def message_tokens(self, message: Message) -> int:
        cached = self._message_tokens.get(message)
        if cached is None:
            cached = self._tokens(message)
            if len(self._message_tokens) > 200_000:
                self._message_tokens.clear()
            self._message_tokens[message] = cached
        return cached

    def _tokens(self, message: Message) -> int:
        """`message_tokens` without the memo (the texts' counts are memoized by the token counter): a thinking
        message dropped with earlier turns counts nothing visible (its tokens are `_thinking_tokens`, billed after
        the last user message)."""
        if self._strips and message.role == "reasoning":
            return 0
        return self._shown_tokens(message)

    def _thinking_tokens(self, message: Message) -> int:
        """A thinking message's tokens where they bill (`HiddenTokens.thinking`), memoized per message."""
        tokens = self._thinking.get(message)
        if tokens is None:
            if len(self._thinking) > 200_000:
                self._thinking.clear()
            tokens = self._thinking[message] = self._shown_tokens(message)
        return tokens

    def _shown_tokens(self, message: Message) -> int:
        """The tokens of a message as sent: framing, content, call id, tool calls and images."""
        count = self.counter.count
        # Every field the model reads counts, call ids included (OpenAI's counting recipe).
        tokens = MESSAGE_OVERHEAD + count(message.content) + count(message.tool_call_id or "")
        for call in message.tool_calls:
            tokens += TOOL_CALL_OVERHEAD + count(call.id) + count(call.name) + count(call.arguments)
        return tokens + sum(self.profile.image_tokens for a in message.attachments if a.is_image)

    def count(self, messages: Sequence[Message]) -> int:
        return sum(self.message_tokens(m) for m in messages) + (self.hidden.total(messages) if self.hidden is not None else 0)

    def boundaries(self, messages: tuple[Message, ...]) -> list[int]:
        out, total = [], 0
        hidden = self.hidden.per_message(messages) if self.hidden else [0] * len(messages)
        for m, extra in zip(messages, hidden, strict=True):
            total += self.message_tokens(m) + extra
            out.append(total)
        return out


class _Entry:
    """One accepted request kept for the cache model: its messages, the cumulative token counts at
    the end of each message without (`visible`) and with (`boundaries`) hidden reasoning, its time,
    its number of leading system messages, the index of its last user message (where hidden
    reasoning starts to bill) and, built only when asked, its messages as a set and the index of its newest
    system, user or tool message (where GPT-5.6 places its breakpoint)."""

    __slots__ = ("_base", "_newest", "_set", "_system", "_tail", "boundaries", "last_user", "marked_prefix", "messages", "n", "reads", "time",
                 "visible")

    def __init__(
        self, messages: Sequence[Message], visible: Cumulative, boundaries: Cumulative, time: float | None, last_user: int,
        base: tuple[frozenset[Message], int] | None, marked_prefix: int = 0,
    ) -> None:
        self.messages, self.visible, self.boundaries, self.time, self.last_user = messages, visible, boundaries, time, last_user
        #: the leading messages whose end the request marks (`Request.cache_prefix_messages`)
        self.marked_prefix = marked_prefix
        self.n = len(messages)
        #: later reads of this entry: the tokens each read, by the time it was last read (`SimulatedProvider._live`)
        self.reads: dict[int, float] = {}
        self._system: int | None = None
        self._newest: int | None = None
        self._set: frozenset[Message] | None = None
        self._tail: frozenset[Message] | None = None  # the own tail of a `LogView` request, as a set
        self._base = base  # (the set of the entry this one extends, how many messages it had)

    @property
    def system(self) -> int:
        """How many leading system messages the request has (`caching.leading_system`; read when first asked)."""
        if self._system is None:
            self._system = leading_system(m.role for m in self.messages)
        return self._system

    @property
    def newest_input(self) -> int:
        """The index of its newest system, user or tool message, where GPT-5.6 places its breakpoint
        (`caching.newest_input`; read when first asked)."""
        if self._newest is None:
            self._newest = newest_input(self.messages)
        return self._newest

    @property
    def has_set(self) -> bool:
        return self._set is not None

    def holds(self, messages: Sequence[Message], indexes: dict[int, _LogIndex]) -> list[bool]:
        """Whether this request sent each of `messages` (a view of a log is looked up in the log's index)."""
        if isinstance(self.messages, LogView):
            log = self.messages.log
            index = indexes.get(id(log))
            if index is None:
                index = indexes[id(log)] = _LogIndex(log)
            if self._tail is None:
                self._tail = frozenset(self.messages.tail)
            return index.holds(self.messages, messages, self._tail)
        own = self.set()
        return [m in own for m in messages]

    def set(self) -> frozenset[Message]:
        if self._set is None:
            if self._base is not None:
                known, shared = self._base
                self._set = known.union(self.messages[shared:])
            else:
                self._set = frozenset(self.messages)
            self._base = None
        return self._set


#: How many of a view's last log messages `_LogIndex` compares with a message before indexing the log.
NEAR_END = 64


class _LogIndex:
    """The first position of each message in an append-only log (`LogView`), extended as the log grows:
    whether a view of the log holds a message, without building a set per request.

    The log is indexed only when a message is not found otherwise: in the view's tail, or, while the
    index does not cover the view, among its last `NEAR_END` log messages (after a compaction the few messages looked for are mostly the
    initial context re-injected and the compaction's own item, which the last request ended with, and
    a new history's log would be indexed whole for them)."""

    __slots__ = ("first", "indexed", "log")

    def __init__(self, log: list[Message]) -> None:
        self.log = log
        self.first: dict[Message, int] = {}
        self.indexed = 0

    def holds(self, view: LogView, messages: Sequence[Message], tail: frozenset[Message]) -> list[bool]:
        """Whether `view` (whose tail is the set `tail`) holds each of `messages`."""
        length = view.length
        held = [m in tail for m in messages]
        if self.indexed < length and not all(held):  # the index does not cover the view yet: its last messages first
            near = frozenset(self.log[max(length - NEAR_END, 0) : length])
            held = [h or m in near for h, m in zip(held, messages, strict=True)]
        if all(held):
            return held
        first, log = self.first, self.log
        if first:
            for n in range(self.indexed, len(log)):
                first.setdefault(log[n], n)
        else:  # a new index in C: from the last message to the first, so a repeated one keeps its first position
            first.update(zip(reversed(log), range(len(log) - 1, -1, -1), strict=True))
        self.indexed = len(log)
        return [h or first.get(m, length) < length for h, m in zip(held, messages, strict=True)]


class _BlockCounts(Sequence[int]):
    """The Anthropic content blocks of each message of a request (`caching.blocks_of`), counted when read:
    the lookback reads at most 20 of them per check, so no list over the whole request is built. A thinking
    message before `dropped` (the request's last user message, where the model drops earlier turns' thinking;
    -1: none) is no block: the API removed it before it placed the request's blocks."""

    __slots__ = ("_dropped", "_messages")

    def __init__(self, messages: Sequence[Message], dropped: int = -1) -> None:
        self._messages = messages
        self._dropped = dropped

    def __len__(self) -> int:
        return len(self._messages)

    def _of(self, n: int, message: Message) -> int:
        return 0 if n < self._dropped and message.role == "reasoning" else blocks_of(message)

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> list[int]: ...
    def __getitem__(self, index: int | slice) -> int | list[int]:
        if isinstance(index, slice):
            return [self._of(n, self._messages[n]) for n in range(*index.indices(len(self._messages)))]
        n = index if index >= 0 else len(self._messages) + index
        return self._of(n, self._messages[n])


class SimulatedProvider(MessageCounter):
    """One cell's provider: counts (`MessageCounter`), refuses what does not fit, and keeps the most
    recent requests for the cache model.

    Per request it compares the new messages with each kept entry's (`first_difference`; two different
    logs through what `SharedPrefixes` knows of them), reuses the cumulative counts of the entry it shares
    most with, and counts only the messages after that: work proportional to what changed, not to the
    context. A context counted or sent again as the same object is not compared at all. `placement` is where
    the agent puts its Anthropic cache breakpoints (`caching.CacheMarks`; the other providers cache without them)."""

    def __init__(
        self, profile: ModelProfile, counter: TokenCounter | None = None, hidden: HiddenTokens | None = None, *,
        strip_thinking: bool = False, placement: CacheMarks = CacheMarks.SYSTEM_AND_TAIL,
    ) -> None:
        super().__init__(profile, counter, hidden, strip_thinking=strip_thinking)
        self.placement = placement
        # how many of the newest accepted requests stay cache entries (`_keep`)
        self._kept = OPENAI_BREAKPOINTS_CONSIDERED if profile.cache.reads == IMPLICIT_READS else RECENT_ENTRIES
        # The most recent accepted requests (a turn request and a summary request can both
        # leave a cache entry); a new request reads from the one it shares the longest prefix with.
        self._recent: list[_Entry] = []  # oldest first (`_keep`)
        self._turn: _Entry | None = None  # the newest turn request's entry, kept while it is in `_recent`
        # the newest accepted request that ended with a user message, kept too where earlier thinking is dropped (`_keep`)
        self._opening: _Entry | None = None
        # Counting bases besides the cache entries: the last request sent (accepted or not), the last of
        # each kind, and the last contexts counted (`count`; a strategy may count two or three contexts
        # per request, e.g. its unedited and its edited prompt): a request reuses the counts of whichever of
        # these it shares the most leading messages with (a session that keeps overflowing grows past
        # every cache entry; a strategy counts the context it is about to send, or one it sends beside it).
        self._bases: dict[str, _Entry] = {}
        self._counted: deque[_Entry] = deque(maxlen=COUNTED_KEPT)
        self._indexes: dict[int, _LogIndex] = {}  # by `id` of the log, for the logs of `_recent`'s views
        # what is known of how many leading messages two different logs share (a strategy's full history and its edited one)
        self._prefixes = SharedPrefixes()
        self._insides: dict[tuple[Message, Message], int] = {}  # `_inside` of pairs of messages met before
        # How many requests had been accepted when each distinct message was first counted: one first
        # counted after the newest cache entry was accepted is in no entry, so `_rebilled` does not look
        # for it (a request after a compaction holds a new history, whose log would be indexed for a few
        # new messages). None once `FIRST_COUNTED_KEPT` were remembered.
        self._first_counted: dict[Message, int] | None = {}
        self._accepted = 0
        # What `withdraw` restores: the kept entries, the turn and opening entries, and the entry a read refreshed with
        # its former reads, before the last accepted request (None when the last request sent was not accepted, or was
        # withdrawn already).
        self._undo: tuple[list[_Entry], _Entry | None, _Entry | None, tuple[_Entry, dict[int, float]] | None] | None = None

    def message_tokens(self, message: Message) -> int:
        """`MessageCounter.message_tokens`, remembering when a message was first counted."""
        tokens = self._message_tokens.get(message)
        if tokens is None:
            tokens = super().message_tokens(message)
            first = self._first_counted
            if first is not None and len(first) < FIRST_COUNTED_KEPT:
                first.setdefault(message, self._accepted)
            elif first is not None:
                self._first_counted = None
        return tokens

    def count(self, messages: Sequence[Message]) -> int:
        """`MessageCounter.count`, with the counts of the prefix it shares with a cache entry or a counting
        base reused; the context counted becomes a counting base."""
        messages = as_messages(messages)
        base, shared = self._base(messages, self._recent)
        if base is not None and base.messages is messages:
            return base.boundaries.last()  # counted before (it is still a base)
        last_user = self._last_user(messages, base, shared)
        visible, boundaries = self._counts(messages, base, shared, last_user)
        self._counted.append(_Entry(messages, visible, boundaries, None, last_user, None))
        return boundaries.last()

    def count_new(self, messages: Sequence[Message]) -> int:
        """`MessageCounter.count` of messages no context holds yet (a step's recorded output): no base is
        looked for, they do not become one, and they are not memoized as messages (a strategy's own equal
        message would otherwise be compared with them field by field at each lookup; their texts are)."""
        return sum(map(self._tokens, messages)) + (self.hidden.total(messages) if self.hidden is not None else 0)

    def _base(self, messages: Sequence[Message], candidates: Sequence[_Entry], best: _Entry | None = None, shared: int = 0) -> tuple[_Entry | None, int]:
        """The entry among `candidates` and the counting bases that shares the most leading messages with
        `messages` (an entry of the same messages object at once, else the first found on a tie), and how
        many it shares. Which one it is changes no count, only how many messages are counted anew.
        The newest are looked at first: they are the likeliest to share the most, after which the older,
        shorter ones are skipped without a comparison."""
        entries = (*reversed(self._counted), *self._bases.values(), *reversed(candidates))
        for entry in entries:
            if entry.messages is messages:
                return entry, entry.n
        seen, n = {id(best.messages) if best is not None else None}, len(messages)
        current = messages[shared] if shared < n else None
        for entry in entries:
            if shared == n:
                break
            if entry.n <= shared or id(entry.messages) in seen:
                continue  # it cannot share more, or its messages were compared already (an entry of each kind holds them)
            seen.add(id(entry.messages))
            other = entry.messages[shared]
            if other is not current and other != current:
                continue  # it cannot share more than `shared` either (a rewrite there, or a part counted alone): not compared
            common = self._prefixes.first_difference(entry.messages, messages)
            if common > shared:
                best, shared = entry, common
                current = messages[shared] if shared < n else None
        return best, shared

    def _last_user(self, messages: Sequence[Message], base: _Entry | None, shared: int) -> int:
        """`HiddenTokens.last_user` of a request that shares its first `shared` messages with `base`: only the
        messages after those are read when `base` knows where its own last user message is."""
        if self.hidden is None or not self.hidden.bills:
            return -1
        own = self.hidden.last_user(messages[shared:])
        if own >= 0:
            return shared + own
        if base is not None and base.last_user < shared:
            return base.last_user
        return self.hidden.last_user(messages[:shared])

    # ------------------------------------------------------------- prefixes
    def _body(self, message: Message) -> str:
        """The message's tokens after its framing: content, then its tool calls."""
        calls = "".join(f"\n{c.name} {c.arguments}" for c in message.tool_calls)
        return f"{message.content}{calls}"

    def _inside(self, previous: Message, current: Message) -> int:
        """Common tokens inside two differing messages: the framing (`MESSAGE_OVERHEAD`, shared only when
        the roles match), then the common prefix of the body's token ids (less than either message).
        Memoized per pair: a rewritten message meets its former self in more than one request."""
        if previous.role != current.role:
            return 0
        key = (previous, current)
        tokens = self._insides.get(key)
        if tokens is None:
            same = self.counter.common_prefix(self._body(previous), self._body(current))
            # (never below 0: a dropped thinking message shows nothing, `_tokens`)
            tokens = max(0, min(MESSAGE_OVERHEAD + same, self.message_tokens(previous) - 1, self.message_tokens(current) - 1))
            if len(self._insides) >= INSIDES_KEPT:
                self._insides.clear()
            self._insides[key] = tokens
        return tokens

    def _inside_bound(self, previous: Message, current: Message) -> int:
        """An upper bound of `_inside` from the two messages' counts alone (no tokenizing)."""
        if previous.role != current.role:
            return 0
        return max(0, min(self.message_tokens(previous), self.message_tokens(current)) - 1)

    def _billed_prefix(self, kept: _Entry, common: int, messages: Sequence[Message], last_user: int) -> tuple[int, bool]:
        """The billed tokens (hidden reasoning included) of the first `common` messages, which `kept` and the
        request share, and whether both bill all of them alike. Reasoning bills only after a request's last
        user message (`HiddenTokens.last_user`), so between the two requests' last user messages one of them bills a message's
        reasoning and the other does not: their billed prefixes part at the first such message that has any."""
        if not common:
            return 0, True
        if self.hidden is None or not self.hidden.bills or kept.last_user == last_user:
            return kept.boundaries[common - 1], True  # every shared message bills the same in both
        low, high = sorted((kept.last_user, last_user))
        for n in range(low + 1, min(high, common - 1) + 1):
            if self.hidden.of_message(messages[n]):
                return (kept.boundaries[n - 1] if n else 0), False
        return kept.boundaries[common - 1], True

    def _bills_hidden(self, kept: _Entry, n: int, messages: Sequence[Message], last_user: int) -> bool:
        """Whether `kept` or the request (whose last user message is at `last_user`) bills hidden reasoning
        for its message `n` (where hidden tokens sit inside a message is not modelled, so no common prefix inside
        such a message is counted): a message bills its reasoning when it comes after its request's last
        user message (`HiddenTokens.billed`), read from the message, not from the two requests' counts."""
        hidden = self.hidden
        if hidden is None or not hidden.bills:
            return False
        return bool((n > kept.last_user and hidden.of_message(kept.messages[n])) or (n > last_user and hidden.of_message(messages[n])))

    def common_prefix_tokens(self, previous: Sequence[Message], current: Sequence[Message]) -> int:
        """Longest common token prefix: whole equal messages, then tokens inside the first differing one."""
        shared = first_difference(previous, current)
        tokens = sum(self.message_tokens(previous[n]) for n in range(shared))
        if shared < len(previous) and shared < len(current):
            tokens += self._inside(previous[shared], current[shared])
        return tokens

    def _counts(self, messages: Sequence[Message], base: _Entry | None, shared: int, last_user: int) -> tuple[Cumulative, Cumulative]:
        """(visible, boundaries) cumulative counts of `messages`, reusing `base`'s for its first `shared` messages.

        Hidden reasoning bills after the last user message, so `base`'s boundaries are reused only
        as far as both requests bill the same messages' reasoning."""
        if base is not None and (base.messages is messages or shared == base.n == len(messages)):
            # the same messages (no entry's counts are ever appended to; the same messages bill the same reasoning)
            return base.visible, base.boundaries
        if base is None:
            shared = 0
        visible = base.visible.prefix(shared) if base is not None else Cumulative()
        new = messages[shared:] if shared else messages  # (all of a `LogView` without copying it)
        memo = self._message_tokens
        found = list(map(memo.get, new))  # looked up in C; a count is never 0 (`MESSAGE_OVERHEAD`), a miss None
        tokens = cast("list[int]", found) if all(found) else [t or self.message_tokens(m) for t, m in zip(found, new, strict=True)]
        visible.extend(list(itertools.accumulate(tokens, initial=visible.last()))[1:])
        if self.hidden is None or not self.hidden.bills:
            return visible, visible  # nothing hidden: the boundaries are the visible counts (one list, not appended to once returned)
        boundaries = Cumulative()
        if base is not None:
            same_billing = shared
            if min(base.last_user, shared - 1) != min(last_user, shared - 1):
                same_billing = max(0, min(base.last_user, last_user) + 1)
            boundaries = base.boundaries.prefix(same_billing)
            # the reused visible counts are the same messages', so the rest of the boundaries adds their hidden part
            ends = visible[same_billing - 1 : shared] if same_billing else [0, *visible[:shared]]
            reused = [end - begin for begin, end in itertools.pairwise(ends)]
            boundaries.extend(self._billed(reused, messages[same_billing:shared], same_billing, last_user, boundaries.last()))
        boundaries.extend(self._billed(tokens, new, shared, last_user, boundaries.last()))
        return visible, boundaries

    def _billed(self, tokens: list[int], messages: Sequence[Message], start: int, last_user: int, total: int) -> list[int]:
        """Running totals from `total` of `messages`, at `start` of a request whose last user message is
        at `last_user`, whose visible counts are `tokens`: with their hidden reasoning (`HiddenTokens.billed`:
        only the messages after the last user message bill it)."""
        assert self.hidden is not None
        return list(itertools.accumulate(map(operator.add, tokens, self.hidden.billed(messages, start, last_user)), initial=total))[1:]

    def _rebilled(self, messages: Sequence[Message], boundaries: Cumulative, cached_tokens: int, shared: list[int]) -> int:
        """Re-billed tokens of an accepted request against the current cache entries (`caching.rebilled_tokens`).

        Messages that end inside the cached part re-bill nothing, so only the rest is looked up; the
        messages inside the longest prefix an entry shares with the request are in that entry, so they
        are known without a lookup (after an expired cache, most of the request) and go to the rule as
        one run of known tokens: the rule re-bills such a run's uncached tokens, as it does each of its
        messages'."""
        first = boundaries.bisect_right(cached_tokens)
        if first >= len(messages) or not self._recent:
            return 0
        top = max(first, *shared)  # messages[first:top] were sent at the same positions by an entry
        rest = messages[top:]
        known = [False] * len(rest)
        # every message of the request was counted (by now); those first counted after the newest entry was accepted are in none
        newest, first_counted = self._accepted - 1, self._first_counted
        looked = range(len(rest)) if first_counted is None else [n for n, m in enumerate(rest) if first_counted.get(m, newest) <= newest]
        if looked:
            candidates = [rest[n] for n in looked]
            held = [False] * len(candidates)
            for entry in self._recent:
                held = [k or h for k, h in zip(held, entry.holds(candidates, self._indexes), strict=True)]
            for n, h in zip(looked, held, strict=True):
                known[n] = h
        start = boundaries[first - 1] if first else 0
        ends = boundaries[top - 1 if top > first else top :]  # the run's end, then the rest's messages'
        counts = list(map(operator.sub, ends, [start, *ends[:-1]]))
        return rebilled_tokens(counts, [True, *known] if top > first else known, cached_tokens - start)

    # ------------------------------------------------------------- sending
    def _live(self, kept: _Entry, now: float | None) -> int | None:
        """How much of a cache entry the provider still holds at `now`: all of it (None) while it is within the
        TTL of being written; after that, the most tokens a later request read of it within the TTL (0: none).
        A read refreshes what it read (Anthropic: the cache "is refreshed for no additional cost each time the
        cached content is used"; OpenAI clears prefixes after minutes of inactivity, evaluation.md §7), not the
        rest of the entry. Without timestamps nothing expires."""
        ttl = self.profile.cache.ttl_seconds
        if now is None or kept.time is None or now - kept.time <= ttl:
            return None
        return max((tokens for tokens, time in kept.reads.items() if now - time <= ttl), default=0)

    def _outcome(self, kept: _Entry | None, prefix: int, total: int, entry: _Entry) -> CacheOutcome:
        """The provider's rules (`caching.cache_outcome`) for a request (`entry`, of `total` billed tokens) that
        shares `prefix` tokens with the live cache entry `kept` (None: no live entry)."""
        implicit = self.profile.cache.reads == IMPLICIT_READS
        return cache_outcome(
            self.profile.cache,
            prefix_tokens=prefix,
            total_tokens=total,
            previous_boundaries=kept.boundaries if kept is not None else Cumulative(),
            previous_system=kept.system if kept is not None else 0,
            current_boundaries=entry.boundaries,
            current_system=entry.system,
            current_blocks=(_BlockCounts(entry.messages, entry.last_user if self._strips else -1)
                            if self.profile.cache.provider == "anthropic" else None),
            least_blocks=0 if self._strips else 1,
            placement=self.placement,
            previous_newest_input=kept.newest_input if implicit and kept is not None else None,
            current_newest_input=entry.newest_input if implicit else None,
            previous_prefix=kept.marked_prefix if kept is not None else 0,
            current_prefix=entry.marked_prefix,
        )

    def _keep(self, entry: _Entry, kind: str) -> None:
        """Keep an accepted request as a cache entry: the newest `RECENT_ENTRIES` (`OPENAI_BREAKPOINTS_CONSIDERED` on
        GPT-5.6 and later), and the newest turn request's entry while later summary calls would push it out (the
        provider still holds it: entries expire by time, `send`, not by how many requests came after them)."""
        if kind == "turn":
            self._turn = entry
        if self._strips and self.profile.cache.provider == "anthropic" and entry.n and entry.messages[entry.n - 1].role == "user":
            # where earlier turns' thinking is dropped, the next user message loses the cache from this turn's first
            # thinking on: what it can still read was written at a breakpoint of the request that opened the turn
            self._opening = entry
        recent, kept_count = self._recent, self._kept
        recent.append(entry)
        if len(recent) > kept_count:
            turn, opening = self._turn, self._opening
            self._recent = [kept for kept in recent[:-kept_count] if kept is turn or kept is opening] + recent[-kept_count:]

    def _written(self, request: Request, entry: _Entry) -> _Entry:
        """The cache entry an accepted request leaves: all of it, or, for a `skip_cache_write` request on Anthropic,
        its messages before the last (its one breakpoint is on the message before it: nothing after that message
        is written, and its lookback starts there). It bills the same reasoning it did as the whole request."""
        n = entry.n
        if not request.skip_cache_write or self.profile.cache.provider != "anthropic" or n < 2:
            return entry
        messages = entry.messages
        head = (
            LogView(messages.log, messages.length, messages.tail[: n - 1 - messages.length])
            if isinstance(messages, LogView) and messages.length < n
            else as_messages(messages[: n - 1])
        )
        return _Entry(head, entry.visible.prefix(n - 1), entry.boundaries.prefix(n - 1), entry.time, entry.last_user, None, entry.marked_prefix)

    def send(
        self,
        request: Request,
        *,
        output_tokens: int = 0,
        timestamp: str | None = None,
        recorded_usage: Usage | None = None,
    ) -> Outcome:
        """Process one request; the cache state advances only for requests that were accepted."""
        messages = request.messages  # a tuple or a `LogView` (`Request` stores one of them)
        shared = [self._prefixes.first_difference(entry.messages, messages) for entry in self._recent]
        # The cache entry sharing the most leading messages (the newest on a tie) lends its counts, unless a
        # counting base (`_bases`, `_counted`) shares strictly more.
        base_index = max(range(len(shared)), key=lambda n: (shared[n], n), default=None)
        base = self._recent[base_index] if base_index is not None else None
        base, base_shared = self._base(messages, (), base, shared[base_index] if base_index is not None else 0)
        last_user = self._last_user(messages, base, base_shared)
        visible, boundaries = self._counts(messages, base, base_shared, last_user)
        true_tokens = boundaries.last()
        reserved = request.max_output_tokens or 0
        now = _timestamp_seconds(timestamp)
        policy = self.profile.cache
        # The live cache entry with the longest common prefix, the newest on a tie: from the newest on, the tokens
        # inside a differing message are counted only when they could make an older entry's prefix longer. An
        # entry unused for longer than the TTL (by the recorded timestamps) is gone from the provider's cache,
        # and the others still serve theirs.
        best: _Entry | None = None
        best_prefix = 0
        alive: list[tuple[_Entry, int]] = []
        for kept, common in reversed(list(zip(self._recent, shared, strict=True))):
            held = self._live(kept, now)
            if held == 0:
                continue
            prefix, alike = self._billed_prefix(kept, common, messages, last_user)
            if held is not None:  # only a part of it that a later request read is still held
                prefix = min(prefix, held)
            elif alike and common < kept.n and common < len(messages) and not self._bills_hidden(kept, common, messages, last_user):
                previous, current = kept.messages[common], messages[common]
                if best is None or prefix + self._inside_bound(previous, current) > best_prefix:
                    prefix += self._inside(previous, current)
            alive.append((kept, prefix))
            if best is None or prefix > best_prefix:
                best, best_prefix = kept, prefix
        entry = _Entry(messages, visible, boundaries, now, last_user, None, request.cache_prefix_messages)
        written = self._written(request, entry)  # the part of the request its breakpoints write
        # a request without a breakpoint where reads end at one (on GPT-5.6, explicit mode without one): nothing read,
        # nothing written, no entry left (`_keep` below)
        cached = request.cache_control or policy.reads == PREFIX_READS
        served: _Entry | None = None  # the entry the read comes from
        cache = CacheOutcome(best_prefix, 0, 0)
        if cached:
            cache, served = self._outcome(best, best_prefix, written.boundaries.last(), written), best
        if cached and policy.reads != PREFIX_READS:
            # Anthropic, and GPT-5.6 ("OpenAI considers up to the latest 80 breakpoints"), serve the longest entry
            # written at a breakpoint of any earlier request they hold: the one sharing the longest prefix may have no
            # breakpoint inside it. Only a prefix longer than the read found can read more.
            for kept, prefix in alive:
                if kept is not best and prefix > cache.cached_tokens:
                    other = self._outcome(kept, prefix, written.boundaries.last(), written)
                    if other.cached_tokens > cache.cached_tokens:
                        cache, served = CacheOutcome(best_prefix, other.cached_tokens, other.cache_write_tokens), kept
        if self.profile.overflows(true_tokens, reserved):  # the profile's provider rule (compaction_bench.profiles)
            self._bases["sent"] = self._bases[request.kind] = entry
            self._undo = None
            error = overflow_error(self.profile, true_tokens, reserved)
            return Outcome(true_tokens, True, error, CacheOutcome(best_prefix, 0, 0), Usage())
        rebilled = self._rebilled(messages, boundaries, cache.cached_tokens, shared)
        cache = CacheOutcome(cache.prefix_tokens, cache.cached_tokens, cache.cache_write_tokens, rebilled)
        # A request that extends an entry whose set was built gets its set from that one.
        if base is not None and base_shared == base.n and base.has_set:
            entry._base = (base.set(), base_shared)
        self._bases["sent"] = self._bases[request.kind] = entry
        refreshed = (served, dict(served.reads)) if served is not None and cache.cached_tokens and now is not None else None
        self._undo = (list(self._recent), self._turn, self._opening, refreshed)
        if refreshed is not None and now is not None:
            refreshed[0].reads[cache.cached_tokens] = now
        if cached:
            self._keep(written, request.kind)
        self._accepted += 1
        live = {id(kept.messages.log) for kept in self._recent if isinstance(kept.messages, LogView)}
        for gone in self._indexes.keys() - live:
            del self._indexes[gone]
        if recorded_usage is not None:
            usage = recorded_usage
        else:
            usage = Usage(
                input=true_tokens,
                cached_input=cache.cached_tokens,
                cache_write=cache.cache_write_tokens,
                output=output_tokens,
                total=true_tokens + output_tokens,
            )
        return Outcome(true_tokens, False, None, cache, usage)

    def withdraw(self) -> None:
        """Take back the cache entry of the last request `send` accepted: the model behind the provider refused
        it (its own count found it too long), so its prompt was never processed and nothing of it was cached.
        The kept entries (an older one it had pushed out included), the newest turn entry and the reads of the
        entry it read from are what they were before it was sent, and it no longer counts as accepted (a message first counted for it is in no
        entry). Its counts stay known as a counting base: they are the same messages' counts all the same."""
        if self._undo is None:
            raise RuntimeError("no accepted request to withdraw: the last request sent was refused or withdrawn already")
        self._recent, self._turn, self._opening, refreshed = self._undo
        if refreshed is not None:
            refreshed[0].reads = refreshed[1]
        self._undo = None
        self._accepted -= 1
