"""Cache churn per request: re-billed tokens.

The cache model itself (longest common token prefix, floored to the provider's rules, TTL) is
`compaction_bench.caching` applied by `compaction_bench.provider` during the replay; its numbers are on each request
record. This module adds what the records do not say directly:
- re-billed tokens: tokens of a request outside its cached prefix that belong to messages the
  cell had already sent in a still-cached earlier request (content paid for again because the
  prefix broke in front of it: compaction, in-place edits, reordering).
The agreement of the cache model with recorded provider usage is `compaction_bench.fidelity`'s.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from compaction_bench.provider import RECENT_ENTRIES, SimulatedProvider
from compaction_bench.replay import RequestRecord

SENT_KINDS = ("turn", "summary")
#: The window of the agreement replay: large enough that no recorded session overflows.


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
