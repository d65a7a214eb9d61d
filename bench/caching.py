"""Prompt-cache model: how many tokens of a request a provider would serve from its cache.

Given the longest common token prefix with the previous request of the same cell, the provider's
rules (docs/specs/evaluation.md §7) decide what is billed as a cache read, by where the policy says a
read may end (`CachePolicy.reads`):
- Anywhere in the prefix (OpenAI before GPT-5.6, Gemini, DeepSeek, Mistral): nothing below `min_prefix`
  (OpenAI 1,024) tokens; above it, whole `block`s (OpenAI 128 tokens). A model with a write premium
  (`write_multiplier` > 0: some Qwen, GLM and MiniMax entries) writes what the request newly caches:
  its whole blocks (from `min_prefix` on) after the part it read (which tokens such an API bills as
  written is not documented; this is Anthropic's rule with the provider's granularity).
- At breakpoints (Anthropic, GPT-5.6 and later): a request writes cache entries at its breakpoints,
  and a read is the longest entry of an earlier request that lies inside the common prefix and is at
  least `min_prefix` long, matched exactly (no shorter unmarked prefix, no rounding); the rest of the
  request up to its last breakpoint is written (`_breakpoint_read`, `cache_outcome`). Who places the
  breakpoints and how far back a read is looked for differ:
- Anthropic: a request writes cache entries at its breakpoints (at most `breakpoints` of them),
  which the agent places (`CacheMarks`): most coding agents mark the end of the leading system prompt
  and the ends of the last messages; Aider by default marks nothing (caching on Anthropic is opt-in
  per block), and with `--cache-prompts` only its system prompt in a replay. A read is the longest entry of the previous request that lies
  inside the common prefix, is at least `min_prefix` long, and is found by the provider's
  lookback from one of the new request's own breakpoints (`ANTHROPIC_LOOKBACK_BLOCKS`).
  The rest of the request, up to its last breakpoint, is written at
  `write_multiplier` × the input price; a request without a breakpoint reads and writes nothing.
- GPT-5.6 and later (`IMPLICIT_READS`): OpenAI places one breakpoint per request, at the end of its
  newest system, user or tool message (`newest_input`; assistant output cannot carry one), and finds
  an earlier one with no lookback limit; agents' marks (`CacheMarks`) play no part. What is written
  from the read up to that breakpoint is billed where the map prices a write premium (1.25×).
- All: an entry older than `ttl_seconds` (from recorded timestamps, when there are any) is gone.

The lookback counts content blocks, not messages. Anthropic's prompt-caching guide
(https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching, "How automatic prefix checking
works") states the rule: "the system automatically checks for cache hits at all previous content
block boundaries (up to approximately 20 blocks before your explicit breakpoint)"; content further
back is not checked unless another breakpoint lies within reach of it ("When to use multiple
breakpoints"). A block is an element of a message's `content` array (or of the `system` array), so one message can
span several: an assistant turn of text and N parallel `tool_use` blocks is N + 1 blocks, and the
N `tool_result` blocks answering them are N more (Anthropic merges them into one user turn; the
blocks stay N). So one step of parallel tool calls can move a breakpoint 2N + 1 blocks past the
previous request's entries, and an entry within 20 messages of a breakpoint may lie beyond its 20
blocks. Each message's block count is its own (`blocks_of`, the wire layout of
`compaction_bench.metrics.integrity`); the distance from an entry to a breakpoint is the sum of the
block counts of the messages after the entry up to and including the breakpoint's, and the entry
is found when that is below `ANTHROPIC_LOOKBACK_BLOCKS` (the breakpoint's own block is the first of
the 20 positions checked). Every message is at least one block, so that sum reads at most 20
messages whatever the request's length.

Re-billed tokens (`rebilled_tokens`) are the tokens of a request outside its cached part that
belong to messages the cell had already sent in one of its recent cache entries: content paid for
again because the prefix broke in front of it (compaction, in-place edits, reordering).
`compaction_bench.provider` applies both rules to every request it accepts; the numbers are on
each request record.
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from compaction_bench.profiles import IMPLICIT_READS, MARKED_READS, PREFIX_READS, CachePolicy

if TYPE_CHECKING:
    from compaction_bench.request import Message

#: How many content-block positions Anthropic checks for an earlier entry, from a breakpoint's own block back.
ANTHROPIC_LOOKBACK_BLOCKS = 20
#: The messages an implicit GPT-5.6 breakpoint can end at (`newest_input`): langchain4j's
#: `OpenAiOfficialPromptCacheBreakpoint` takes system, user and tool-result messages, "assistant output blocks are not
#: among the block types OpenAI accepts a breakpoint on" (nor reasoning or compaction items).
IMPLICIT_BREAKPOINT_ROLES = frozenset({"system", "developer", "user", "tool"})


class CacheMarks(enum.Enum):
    """Where an agent places Anthropic cache breakpoints (`cache_control`) in its requests; OpenAI, Gemini and
    the other providers cache automatically and ignore them."""

    #: The end of the leading system prompt and the ends of the last messages (most coding agents).
    SYSTEM_AND_TAIL = "system-and-tail"
    #: The end of the leading system prompt and the end of the leading messages each request names
    #: (`Request.cache_prefix_messages`, 0: the system prompt's alone; Aider's `--cache-prompts`, whose last mark
    #: follows its history).
    SYSTEM_AND_PREFIX = "system-and-prefix"
    #: No breakpoint: nothing is read from or written to the cache.
    NONE = "none"


@dataclass(frozen=True)
class CacheOutcome:
    prefix_tokens: int  # raw longest common prefix, in tokens
    cached_tokens: int  # billed as cache reads
    cache_write_tokens: int  # billed as cache writes (providers that charge them)
    rebilled_tokens: int = 0  # uncached tokens of messages already sent in a recent cache entry


def leading_system(roles: Iterable[str]) -> int:
    """How many messages at the start of a request are system/developer prompt."""
    count = 0
    for role in roles:
        if role not in ("system", "developer"):
            break
        count += 1
    return count


def blocks_of(message: Message) -> int:
    """How many content blocks `message` is on Anthropic's wire (the layout `metrics/integrity.py` checks).

    A tool result is one `tool_result` block (what it holds is nested inside it), a reasoning item one
    thinking block, a compaction item one text block; any other message is a text block when it has
    text, one `tool_use` block per tool call and one image block per image it carries, and at least one
    block. Leading system messages are blocks of the `system` array, which the lookback counts too."""
    role = message.role
    if role in ("tool", "reasoning", "compaction"):
        return 1
    count = (1 if message.content else 0) + len(message.tool_calls)
    if message.attachments:
        count += sum(1 for a in message.attachments if a.is_image)
    return count or 1


def newest_input(messages: Sequence[Message]) -> int:
    """The index of the newest message an implicit GPT-5.6 breakpoint can end at (`IMPLICIT_BREAKPOINT_ROLES`),
    -1 for none: read from the end, where it nearly always is."""
    for n in range(len(messages) - 1, -1, -1):
        if messages[n].role in IMPLICIT_BREAKPOINT_ROLES:
            return n
    return -1


def breakpoints(
    boundaries: Sequence[int], system_messages: int, limit: int, placement: CacheMarks = CacheMarks.SYSTEM_AND_TAIL,
    prefix_messages: int = 0,
) -> list[int]:
    """Message indices whose end carries a breakpoint: the leading system prompt's end and the last
    messages, `limit` in all, or the fewer of these that `placement` marks (`SYSTEM_AND_PREFIX`: the system
    prompt's end and that of the request's first `prefix_messages`)."""
    n = len(boundaries)
    if n == 0 or limit <= 0 or placement is CacheMarks.NONE:
        return []
    if placement is CacheMarks.SYSTEM_AND_PREFIX:
        return sorted({end - 1 for end in (system_messages, prefix_messages) if 0 < end <= n})[-limit:]
    if 0 < system_messages <= n:
        return sorted({system_messages - 1, *range(max(n - (limit - 1), 0), n)})
    return list(range(max(n - limit, 0), n))


def within_lookback(index: int, marks: Sequence[int], blocks: Sequence[int] | None, least_blocks: int = 1) -> bool:
    """Whether the boundary at the end of message `index` is found by the lookback from one of the breakpoints
    at the ends of messages `marks` (ascending): fewer than `ANTHROPIC_LOOKBACK_BLOCKS` content blocks from the
    one after it or at it, `blocks[i]` being message i's count (None: one block per message). The nearest such
    breakpoint is the only one to try (the others are further), and at most 20 messages are read where every
    message is at least one block (`least_blocks`); where some are none (thinking the API dropped, 0), the
    messages are read until 20 blocks are counted."""
    at = bisect.bisect_left(marks, index)
    if at == len(marks):
        return False
    mark = marks[at]
    if blocks is None or (least_blocks > 0 and mark - index >= ANTHROPIC_LOOKBACK_BLOCKS):  # 20 messages are 20 blocks
        return mark - index < ANTHROPIC_LOOKBACK_BLOCKS
    distance = 0
    for n in range(index + 1, mark + 1):
        distance += blocks[n]
        if distance >= ANTHROPIC_LOOKBACK_BLOCKS:
            return False
    return True


def _marks(
    policy: CachePolicy, boundaries: Sequence[int], system_messages: int, newest: int | None, placement: CacheMarks, prefix_messages: int = 0,
) -> list[int]:
    """Message indices of a request whose end carries a breakpoint: the agent's (`breakpoints`, Anthropic) or the
    provider's one at message `newest` (`IMPLICIT_READS`; None: the last message, -1: none)."""
    if policy.reads == IMPLICIT_READS:
        at = len(boundaries) - 1 if newest is None else newest
        return [at] if 0 <= at < len(boundaries) else []
    return breakpoints(boundaries, system_messages, policy.breakpoints, placement, prefix_messages)


def _breakpoint_read(
    policy: CachePolicy,
    prefix_tokens: int,
    previous_boundaries: Sequence[int],
    previous_marks: Sequence[int],
    current_boundaries: Sequence[int] | None,
    current_marks: Sequence[int] | None,
    current_blocks: Sequence[int] | None,
    least_blocks: int,
) -> int:
    """The tokens read at the longest breakpoint of the earlier request (`previous_marks`) inside the common prefix and at
    least `min_prefix` long; on Anthropic (`MARKED_READS`, with the current request's `current_marks` known) only
    one the lookback from those marks finds."""
    lookback = policy.reads == MARKED_READS and current_marks is not None
    # The longest entry that qualifies is the read: the entries are tried from the longest down, and the first one
    # found is it (the lookback, the only check that reads messages, runs for as few entries as that takes).
    for i in reversed(previous_marks):
        entry = previous_boundaries[i]
        if entry > prefix_tokens:
            continue
        if entry < policy.min_prefix:
            break  # every shorter entry is below the minimum too
        if lookback:
            assert current_boundaries is not None and current_marks is not None
            index = bisect.bisect_left(current_boundaries, entry)
            on_boundary = index < len(current_boundaries) and current_boundaries[index] == entry
            if not on_boundary or not within_lookback(index, current_marks, current_blocks, least_blocks):
                continue
        return entry
    return 0


def cache_outcome(
    policy: CachePolicy,
    *,
    prefix_tokens: int,
    total_tokens: int,
    previous_boundaries: Sequence[int],
    expired: bool = False,
    previous_system: int = 0,
    current_boundaries: Sequence[int] | None = None,
    current_system: int = 0,
    current_blocks: Sequence[int] | None = None,
    least_blocks: int = 1,
    placement: CacheMarks = CacheMarks.SYSTEM_AND_TAIL,
    previous_newest_input: int | None = None,
    current_newest_input: int | None = None,
    previous_prefix: int = 0,
    current_prefix: int = 0,
) -> CacheOutcome:
    """Apply a provider's rules to a raw common prefix.

    `previous_boundaries` / `current_boundaries` are the cumulative token counts at the end of each
    message of the previous / current request (ascending) and `*_system` their numbers of leading
    system messages: they place Anthropic's breakpoints. Without `current_boundaries` the lookback
    limit is not applied. `current_blocks[i]` is how many content blocks message i of the current
    request is on Anthropic's wire (`blocks_of`; only the few messages between an entry and a
    breakpoint are read, so a lazy sequence will do); None counts one block per message.
    `least_blocks` is the fewest any message is: 0 where the API drops some (earlier turns' thinking).
    `placement` is where the agent put the breakpoints of both requests (Anthropic only); the write ends at
    the current request's last one. `*_newest_input` is the index of each request's newest system, user or tool
    message (`newest_input`), where GPT-5.6 places its breakpoint (None: the last message). `*_prefix` is the number of
    leading messages whose end each request marks under `CacheMarks.SYSTEM_AND_PREFIX` (`Request.cache_prefix_messages`).
    """
    if expired:
        prefix_tokens = 0
    if policy.reads != PREFIX_READS:
        marks = (_marks(policy, current_boundaries, current_system, current_newest_input, placement, current_prefix)
                 if current_boundaries is not None else None)
        previous_marks = _marks(policy, previous_boundaries, previous_system, previous_newest_input, placement, previous_prefix)
        cached = _breakpoint_read(
            policy, prefix_tokens, previous_boundaries, previous_marks, current_boundaries, marks, current_blocks, least_blocks,
        )
        if policy.reads == MARKED_READS and placement is CacheMarks.SYSTEM_AND_TAIL:
            written_to = total_tokens  # the tail's breakpoint is the request's end
        elif marks is None:  # the request's messages are not given: GPT-5.6's breakpoint taken as its end, an agent's unknown
            written_to = total_tokens if policy.reads == IMPLICIT_READS else 0
        else:
            assert current_boundaries is not None
            written_to = current_boundaries[marks[-1]] if marks else 0
        write = written_to - cached if written_to >= policy.min_prefix else 0
        if policy.reads == IMPLICIT_READS and policy.write_multiplier <= 0:
            write = 0  # OpenAI bills writes only where the map prices a premium (as before GPT-5.6)
        return CacheOutcome(prefix_tokens, cached, max(write, 0))
    cached = prefix_tokens // policy.block * policy.block if prefix_tokens >= policy.min_prefix else 0
    cacheable = total_tokens // policy.block * policy.block if total_tokens >= policy.min_prefix else 0
    write = max(cacheable - cached, 0) if policy.write_multiplier > 0 else 0
    return CacheOutcome(prefix_tokens, cached, write)


def rebilled_tokens(message_tokens: Sequence[int], known: Sequence[bool], cached_tokens: int) -> int:
    """Tokens after the cached part of a request that belong to already-sent messages.

    `message_tokens[i]` is the i-th message's token count and `known[i]` whether that message was
    in one of the cell's recent cache entries; a message that straddles the cached boundary counts
    only its uncached part.
    """
    total, start = 0, 0
    for count, seen in zip(message_tokens, known, strict=True):
        end = start + count
        if seen and end > cached_tokens:
            total += end - max(start, cached_tokens)
        start = end
    return total
