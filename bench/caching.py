"""Prompt-cache model: how many tokens of a request a provider would serve from its cache.

Given the longest common token prefix with the previous request of the same cell, the provider's
rules (specs/evaluation.md §7) decide what is billed as a cache read:
- OpenAI: nothing below `min_prefix` (1,024) tokens; above it, whole `block`s (128 tokens).
- Anthropic: a read ends at a cache breakpoint of the previous request (automatic caching puts
  them at message boundaries; up to 20 blocks are looked back), at least `min_prefix` long; the
  rest of the request is written to the cache at `write_multiplier` × the input price.
- Both: an entry older than `ttl_seconds` (from recorded timestamps, when there are any) is gone.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from bench.profiles import CachePolicy

ANTHROPIC_LOOKBACK_BLOCKS = 20


@dataclass(frozen=True)
class CacheOutcome:
    prefix_tokens: int  # raw longest common prefix, in tokens
    cached_tokens: int  # billed as cache reads
    cache_write_tokens: int  # billed as cache writes (providers that charge them)


def cache_outcome(
    policy: CachePolicy,
    *,
    prefix_tokens: int,
    total_tokens: int,
    previous_boundaries: Sequence[int],
    expired: bool = False,
) -> CacheOutcome:
    """Apply a provider's rules to a raw common prefix.

    `previous_boundaries` are the cumulative token counts at the end of each message of the
    previous request (ascending); they are where Anthropic breakpoints can sit.
    """
    if expired:
        prefix_tokens = 0
    if policy.provider == "anthropic":
        candidates = list(previous_boundaries[-ANTHROPIC_LOOKBACK_BLOCKS:])
        index = bisect.bisect_right(candidates, prefix_tokens) - 1
        cached = candidates[index] if index >= 0 else 0
        if cached < policy.min_prefix:
            cached = 0
        write = total_tokens - cached if total_tokens >= policy.min_prefix else 0
        return CacheOutcome(prefix_tokens, cached, max(write, 0))
    if prefix_tokens < policy.min_prefix:
        return CacheOutcome(prefix_tokens, 0, 0)
    cached = prefix_tokens // policy.block * policy.block
    return CacheOutcome(prefix_tokens, cached, 0)
