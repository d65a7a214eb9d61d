"""The simulated provider: true token counts, overflow errors, cached prefixes and usage.

For each request of a cell it renders the messages, counts their true tokens with the profile's
tokenizer (memoized per message, so a replay stays linear), raises an overflow error with the real
provider's message text when the profile's overflow rule refuses it (input over the input limit, or input
plus requested output over the context), computes the cached
prefix against the previous request of the same cell (message hashes first, tokens only inside
the first differing message; `compaction_bench.caching` applies the provider's rules), the tokens
written to the cache and the tokens re-billed (already-sent messages outside the cached part), and
returns usage in the shape strategies read. These are the only cache numbers of a run: the engine
stores them on each request record and the metrics read them there. With `recorded_usage` the
transcript's own usage is reported instead (the engine decides when that is valid).
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass, replace
from datetime import datetime

from compaction_bench.caching import CacheOutcome, cache_outcome, leading_system, rebilled_tokens
from compaction_bench.profiles import ModelProfile
from compaction_bench.request import Message, Request
from compaction_bench.tokens import HiddenTokens, TokenCounter, shared_counter
from compaction_bench.transcript import Usage

#: Tokens of framing per message (role markers), as in OpenAI's chat format accounting.
MESSAGE_OVERHEAD = 4
#: Tokens of framing per tool call inside an assistant message.
TOOL_CALL_OVERHEAD = 3
#: How many earlier requests of the cell are kept as cache entries.
RECENT_ENTRIES = 2


@dataclass(frozen=True)
class ProviderError:
    """A provider-shaped error, as an agent would receive it."""

    provider: str
    status: int
    code: str
    message: str

    @property
    def is_overflow(self) -> bool:
        """OpenAI's `context_length_exceeded`, or Anthropic's invalid request that says the prompt is too long."""
        return self.code == "context_length_exceeded" or self.message.startswith("prompt is too long")

    def to_dict(self) -> dict[str, object]:
        return {"provider": self.provider, "status": self.status, "code": self.code, "message": self.message}


def overflow_error(profile: ModelProfile, tokens: int) -> ProviderError:
    """The error text the real provider returns for a request that does not fit."""
    if profile.provider == "anthropic":
        return ProviderError(
            "anthropic", 400, "invalid_request_error", f"prompt is too long: {tokens} tokens > {profile.context_window} maximum"
        )
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
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class MessageCounter:
    """True token counts of messages: the profile's tokenizer plus message framing (memoized per message).

    The provider counts with it; metrics that need a count (a fact's age) use one alone, never a
    second provider."""

    def __init__(self, profile: ModelProfile, counter: TokenCounter | None = None, hidden: HiddenTokens | None = None) -> None:
        self.profile = profile
        self.counter = counter or shared_counter(profile.tokenizer)
        self.hidden = hidden  # billed reasoning the messages do not show (compaction_bench.tokens)
        self._message_tokens: dict[Message, int] = {}

    def message_tokens(self, message: Message) -> int:
        cached = self._message_tokens.get(message)
        if cached is None:
            count = self.counter.count
            # Every field the model reads counts, call ids included (OpenAI's counting recipe).
            cached = MESSAGE_OVERHEAD + count(message.content) + count(message.tool_call_id or "")
            for call in message.tool_calls:
                cached += TOOL_CALL_OVERHEAD + count(call.id) + count(call.name) + count(call.arguments)
            cached += sum(self.profile.image_tokens for a in message.attachments if a.is_image)
            if len(self._message_tokens) > 200_000:
                self._message_tokens.clear()
            self._message_tokens[message] = cached
        return cached

    def count(self, messages: tuple[Message, ...] | list[Message]) -> int:
        hidden = sum(self.hidden.per_message(messages)) if self.hidden else 0
        return sum(self.message_tokens(m) for m in messages) + hidden

    def boundaries(self, messages: tuple[Message, ...]) -> list[int]:
        out, total = [], 0
        hidden = self.hidden.per_message(messages) if self.hidden else [0] * len(messages)
        for m, extra in zip(messages, hidden, strict=True):
            total += self.message_tokens(m) + extra
            out.append(total)
        return out


class SimulatedProvider(MessageCounter):
    """One cell's provider: counts (`MessageCounter`), refuses what does not fit, and keeps the most
    recent requests for the cache model."""

    def __init__(self, profile: ModelProfile, counter: TokenCounter | None = None, hidden: HiddenTokens | None = None) -> None:
        super().__init__(profile, counter, hidden)
        # The most recent accepted requests (a turn request and a summary request can both
        # leave a cache entry); a new request reads from the one it shares the longest prefix with.
        # Each entry: its messages, their cumulative token counts, its time, and its messages as a set.
        self._recent: deque[tuple[tuple[Message, ...], list[int], float | None, frozenset[Message]]] = deque(maxlen=RECENT_ENTRIES)

    # ------------------------------------------------------------- prefixes
    def _body(self, message: Message) -> str:
        """The message's tokens after its framing: content, then its tool calls."""
        calls = "".join(f"\n{c.name} {c.arguments}" for c in message.tool_calls)
        return f"{message.content}{calls}"

    def common_prefix_tokens(self, previous: tuple[Message, ...], current: tuple[Message, ...]) -> int:
        """Longest common token prefix: whole equal messages, then tokens inside the first differing one.

        Inside a message the count follows `message_tokens`: its framing (`MESSAGE_OVERHEAD`, shared
        only when the roles match), then the common prefix of the body's token ids.
        """
        tokens = 0
        index = 0
        for a, b in zip(previous, current, strict=False):
            if a is not b and a != b:
                break
            tokens += self.message_tokens(a)
            index += 1
        if index < len(previous) and index < len(current) and previous[index].role == current[index].role:
            left = self.counter.encode(self._body(previous[index]))
            right = self.counter.encode(self._body(current[index]))
            same = 0
            for x, y in zip(left, right, strict=False):
                if x != y:
                    break
                same += 1
            inside = MESSAGE_OVERHEAD + same
            tokens += min(inside, self.message_tokens(previous[index]) - 1, self.message_tokens(current[index]) - 1)
        return tokens

    def _rebilled(self, messages: tuple[Message, ...], boundaries: list[int], cached_tokens: int) -> int:
        """Re-billed tokens of an accepted request against the current cache entries (`caching.rebilled_tokens`).

        Messages that end inside the cached part re-bill nothing, so only the rest is looked up."""
        first = bisect.bisect_right(boundaries, cached_tokens)
        if first >= len(messages) or not self._recent:
            return 0
        start = boundaries[first - 1] if first else 0
        entries = [entry[3] for entry in self._recent]
        known = [any(m in entry for entry in entries) for m in messages[first:]]
        counts = [end - begin for begin, end in zip([start, *boundaries[first:-1]], boundaries[first:], strict=True)]
        return rebilled_tokens(counts, known, cached_tokens - start)

    # ------------------------------------------------------------- sending
    def send(
        self,
        request: Request,
        *,
        output_tokens: int = 0,
        timestamp: str | None = None,
        recorded_usage: Usage | None = None,
    ) -> Outcome:
        """Process one request; the cache state advances only for requests that were accepted."""
        messages = tuple(request.messages)  # the same object: requests store a tuple
        boundaries = self.boundaries(messages)
        true_tokens = boundaries[-1] if boundaries else 0
        reserved = request.max_output_tokens or 0
        now = _timestamp_seconds(timestamp)
        best_prefix, best_boundaries, best_system, expired = 0, [], 0, False
        for previous, previous_boundaries, then, _ in self._recent:
            prefix = self.common_prefix_tokens(previous, messages)
            if prefix >= best_prefix:
                best_prefix, best_boundaries = prefix, previous_boundaries
                best_system = leading_system(m.role for m in previous)
                expired = now is not None and then is not None and now - then > self.profile.cache.ttl_seconds
        cache = cache_outcome(
            self.profile.cache,
            prefix_tokens=best_prefix,
            total_tokens=true_tokens,
            previous_boundaries=best_boundaries,
            expired=expired,
            previous_system=best_system,
            current_boundaries=boundaries,
            current_system=leading_system(m.role for m in messages),
        )
        if self.profile.overflows(true_tokens, reserved):  # the profile's provider rule (compaction_bench.profiles)
            error = overflow_error(self.profile, true_tokens + reserved)
            return Outcome(true_tokens, True, error, CacheOutcome(best_prefix, 0, 0), Usage())
        cache = replace(cache, rebilled_tokens=self._rebilled(messages, boundaries, cache.cached_tokens))
        self._recent.append((messages, boundaries, now, frozenset(messages)))
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
