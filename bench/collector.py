"""The garbage collector's pace while replays and a run's cells run (issue 18).

A replay allocates millions of short-lived containers (requests, records, lists of runs and ids),
nearly all of which reference counting frees at once; the collector's default pace (a young
collection every 700 net allocations) traverses the ones alive at that moment again and again,
the large lists a compaction builds among them, and promotes enough of them that the whole heap
is traversed a few times per long session; measuring a cell allocates alike. `spaced_collections`
spaces the young collections while the outermost replay (`replay`) or cell (the runner's) of the
process runs and restores the process's own thresholds when it
ends: nothing is left changed, no collection is skipped (cycles are still found, later), and a
process that turned automatic collection off (threshold 0) keeps it off. Nested and concurrent
replays (threads) share one setting: the first to start sets it, the last to end restores it.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: The young generation's threshold while a replay runs: net container allocations between young collections.
REPLAY_YOUNG_THRESHOLD = 100_000

_lock = threading.Lock()
_active = 0
#: the process's thresholds while a replay runs; changed in place, so that no object a caller froze
#: (`gc.freeze`) before a replay is freed by it
_saved = [0, 0, 0]


@contextmanager
def spaced_collections() -> Iterator[None]:
    """Run the block with young collections at most every `REPLAY_YOUNG_THRESHOLD` allocations."""
    global _active
    with _lock:
        if not _active:
            _saved[:] = gc.get_threshold()
            if _saved[0] and _saved[0] < REPLAY_YOUNG_THRESHOLD:
                gc.set_threshold(REPLAY_YOUNG_THRESHOLD, *_saved[1:])
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if not _active:
                gc.set_threshold(*_saved)
