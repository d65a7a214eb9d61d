"""Cache churn per request, and agreement of the cache model with recorded provider usage.

The cache model itself (longest common token prefix, floored to the provider's rules, TTL) is
`bench.caching` applied by `bench.provider` during the replay; its numbers are on each request
record. This module adds what the records do not say directly:
- re-billed tokens: tokens of a request outside its cached prefix that belong to messages the
  cell had already sent in a still-cached earlier request (content paid for again because the
  prefix broke in front of it: compaction, in-place edits, reordering);
- `recorded_agreement`: replay a transcript through `none` with its recorded usage and compare the
  modelled cached count of every request with the provider's recorded one.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace
from statistics import median
from collections.abc import Sequence
from typing import Any

from bench.profiles import ModelProfile, get_profile
from bench.provider import RECENT_ENTRIES, SimulatedProvider
from bench.replay import RequestRecord, replay
from bench.transcript import Transcript

SENT_KINDS = ("turn", "summary")
#: The window of the agreement replay: large enough that no recorded session overflows.
UNLIMITED_WINDOW = 100_000_000


def sent(request: RequestRecord) -> bool:
    """A request the provider accepted and billed (final contexts are only probed, never sent)."""
    return request.kind in SENT_KINDS and not request.overflow


def rebilled_tokens(requests: Sequence[RequestRecord], provider: SimulatedProvider) -> list[int]:
    """Per request: uncached tokens of messages already sent in one of the recent cache entries.

    Token counts and message hashes are memoized per message object (strategies reuse their
    messages), so the pass stays linear in the number of messages.
    """
    recent: deque[set[int]] = deque(maxlen=RECENT_ENTRIES)  # message hashes of the recent entries
    memo: dict[int, tuple[int, int]] = {}  # id(message) -> (tokens, hash)
    out: list[int] = []
    for request in requests:
        if not sent(request):
            out.append(0)
            continue
        known = recent[0].union(*list(recent)[1:]) if recent else set()
        keys: set[int] = set()
        total, start = 0, 0
        for message in request.messages:
            found = memo.get(id(message))
            if found is None:
                found = memo[id(message)] = (provider.message_tokens(message), hash(message))
            count, key = found
            keys.add(key)
            end = start + count
            if end > request.cached_tokens and key in known:
                total += end - max(start, request.cached_tokens)
            start = end
        out.append(total)
        recent.append(keys)
    return out


def recorded_agreement(transcript: Transcript, profile: str | ModelProfile) -> dict[str, Any]:
    """Modelled vs recorded cached tokens for a replay of `none` with the transcript's own usage.

    Compared are the requests whose recorded usage reports input tokens. `mae_share` is the mean
    over those requests of |modelled cached / modelled input − recorded cached / recorded input|
    (shares, so tokens the transcript never recorded, such as a tool schema, do not count as
    error); `mae_tokens_share` is Σ|modelled − recorded cached| / Σ recorded input. The window is
    widened so that no request is rejected: what is compared is the cache model, and a session the
    recording agent compacted natively would otherwise overflow under `none`.
    """
    profile = get_profile(profile)
    profile = replace(profile, context_window=max(profile.context_window, UNLIMITED_WINDOW))
    result = replay(transcript, "none", profile=profile, usage="recorded")
    rows = [r for r in result.requests if r.kind == "turn" and not r.overflow and r.usage is not None and r.usage.input > 0]
    with_cached = [r for r in rows if r.usage is not None and r.usage.cached_input > 0]
    shares = [abs(r.cached_tokens / r.true_tokens - r.usage.cached_input / r.usage.input) for r in rows if r.true_tokens]
    recorded_input = sum(r.usage.input for r in rows)
    return {
        "transcript": transcript.id,
        "profile": profile.name,
        "requests": len(rows),
        "requests_with_recorded_cache": len(with_cached),
        "recorded_cached_tokens": sum(r.usage.cached_input for r in rows),
        "modelled_cached_tokens": sum(r.cached_tokens for r in rows),
        "recorded_hit_rate": sum(r.usage.cached_input for r in rows) / recorded_input if recorded_input else None,
        "modelled_hit_rate": sum(r.cached_tokens for r in rows) / max(sum(r.true_tokens for r in rows), 1) if rows else None,
        "mae_share": sum(shares) / len(shares) if shares else None,
        "mae_tokens_share": sum(abs(r.cached_tokens - r.usage.cached_input) for r in rows) / recorded_input if recorded_input else None,
        # What the provider counted that the transcript does not hold (system prompt, tool schemas):
        "unrecorded_tokens_median": float(median(r.usage.input - r.true_tokens for r in rows)) if rows else None,
    }
