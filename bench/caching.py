"""Prompt-cache model: how many tokens of a request a provider would serve from its cache.

Given the longest common token prefix with the previous request of the same cell, the provider's
rules (docs/specs/evaluation.md §7) decide what is billed as a cache read:
- OpenAI: nothing below `min_prefix` (1,024) tokens; above it, whole `block`s (128 tokens).
- Anthropic: a request writes cache entries at its breakpoints (at most `breakpoints` of them,
  placed as coding agents commonly place them: the end of the leading system prompt and the ends
  of the last messages). A read is the longest entry of the previous request that lies
  inside the common prefix, is at least `min_prefix` long, and is found by the provider's
  lookback of at most 20 blocks (messages here) before one of the new request's own breakpoints.
  The rest of the request, up to its last breakpoint (its end), is written at
  `write_multiplier` × the input price.
- Both: an entry older than `ttl_seconds` (from recorded timestamps, when there are any) is gone.

Re-billed tokens (`rebilled_tokens`) are the tokens of a request outside its cached part that
belong to messages the cell had already sent in one of its recent cache entries: content paid for
again because the prefix broke in front of it (compaction, in-place edits, reordering).
`compaction_bench.provider` applies both rules to every request it accepts; the numbers are on
each request record.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from compaction_bench.profiles import CachePolicy

ANTHROPIC_LOOKBACK_BLOCKS = 20


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


def breakpoints(boundaries: Sequence[int], system_messages: int, limit: int) -> list[int]:
    """Message indices whose end carries a breakpoint: the leading system prompt's end and the last
    messages, `limit` in all."""
    n = len(boundaries)
    if n == 0 or limit <= 0:
        return []
    if 0 < system_messages <= n:
        return sorted({system_messages - 1, *range(max(n - (limit - 1), 0), n)})
    return list(range(max(n - limit, 0), n))


def _anthropic_read(
    policy: CachePolicy,
    prefix_tokens: int,
    previous_boundaries: Sequence[int],
    previous_system: int,
    current_boundaries: Sequence[int] | None,
    current_system: int,
) -> int:
    entries = [previous_boundaries[i] for i in breakpoints(previous_boundaries, previous_system, policy.breakpoints)]
    marks = breakpoints(current_boundaries, current_system, policy.breakpoints) if current_boundaries is not None else None
    best = 0
    for entry in entries:
        if entry > prefix_tokens or entry < policy.min_prefix or entry <= best:
            continue
        if marks is not None:
            assert current_boundaries is not None
            index = bisect.bisect_left(current_boundaries, entry)
            on_boundary = index < len(current_boundaries) and current_boundaries[index] == entry
            if not on_boundary or not any(0 <= mark - index < ANTHROPIC_LOOKBACK_BLOCKS for mark in marks):
                continue
        best = entry
    return best


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
) -> CacheOutcome:
    """Apply a provider's rules to a raw common prefix.

    `previous_boundaries` / `current_boundaries` are the cumulative token counts at the end of each
    message of the previous / current request (ascending) and `*_system` their numbers of leading
    system messages: they place Anthropic's breakpoints. Without `current_boundaries` the lookback
    limit is not applied.
    """
    if expired:
        prefix_tokens = 0
    if policy.provider == "anthropic":
        cached = _anthropic_read(policy, prefix_tokens, previous_boundaries, previous_system, current_boundaries, current_system)
        write = total_tokens - cached if total_tokens >= policy.min_prefix else 0
        return CacheOutcome(prefix_tokens, cached, max(write, 0))
    if prefix_tokens < policy.min_prefix:
        return CacheOutcome(prefix_tokens, 0, 0)
    cached = prefix_tokens // policy.block * policy.block
    return CacheOutcome(prefix_tokens, cached, 0)


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
