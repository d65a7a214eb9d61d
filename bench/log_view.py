"""Contexts that share an append-only message log, and cumulative counts that share their prefix.

A strategy whose context only grows (no compaction yet, or none at all) sends requests that are
each the previous one plus a few messages. Built as tuples, every request costs a copy of the
whole context, every comparison with the previous request a pass over it, and every stored
request its own copy: quadratic time and memory in the session's length. `LogView` avoids all
three: it is the first `length` messages of a shared append-only `list` followed by a short
`tail`, so it is built in O(len(tail)), two views of one log share their first
`min(length, length)` messages without looking at them (`first_difference`), and a stored view
holds only its tail. Views of two different logs (a history and its edited copy) are compared
through `SharedPrefixes`, which remembers how far the two logs agree.

`Cumulative` does the same for the provider's running token counts: chunks of `CHUNK` counts,
never changed once full, shared by every count list that starts with them, so a request's counts
reuse its predecessor's in O(len / CHUNK) and store only what is new.
"""

from __future__ import annotations

import bisect
import itertools
import operator
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, overload

if TYPE_CHECKING:
    from compaction_bench.request import Message


class LogView(Sequence["Message"]):
    """An immutable sequence of messages: `log[:length]` then `tail`.

    The owner of `log` only appends to it, so `log[:length]` never changes once a view is taken.
    Indexing, slicing (which returns a tuple), equality with any sequence of messages and
    concatenation (a tuple) behave as on a tuple of the same messages."""

    __slots__ = ("_hash", "length", "log", "tail")

    def __init__(self, log: list[Message], length: int, tail: tuple[Message, ...] = ()) -> None:
        if not 0 <= length <= len(log):
            raise ValueError(f"a view of {length} messages of a log of {len(log)}")
        self.log, self.length, self.tail = log, length, tail
        self._hash: int | None = None

    def __len__(self) -> int:
        return self.length + len(self.tail)

    def __iter__(self) -> Iterator[Message]:
        return itertools.chain(itertools.islice(self.log, self.length), self.tail)

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Message, ...]: ...
    def __getitem__(self, index: int | slice) -> Message | tuple[Message, ...]:
        if index.__class__ is int:  # the common case first: a message of the log part, then one of the tail
            length = self.length
            if 0 <= index < length:
                return self.log[index]
            n = index + length + len(self.tail) if index < 0 else index
            if 0 <= n < length:
                return self.log[n]
            if length <= n < length + len(self.tail):
                return self.tail[n - length]
            raise IndexError("LogView index out of range")
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                return tuple(self)[index]
            stop = max(start, stop)  # an empty slice: no offset into the tail may turn negative
            if start >= self.length:
                return self.tail[start - self.length : stop - self.length]
            if stop <= self.length:
                return tuple(self.log[start:stop])
            return (*self.log[start : self.length], *self.tail[: stop - self.length])
        n = index + len(self) if index < 0 else index
        if not 0 <= n < len(self):
            raise IndexError("LogView index out of range")
        return self.log[n] if n < self.length else self.tail[n - self.length]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, (LogView, tuple, list)):
            return NotImplemented
        return len(self) == len(other) and first_difference(self, other) == len(self)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(tuple(self))
        return self._hash

    def iter_from(self, start: int) -> Iterator[Message]:
        """The messages from position `start` on, without copying any (the log's part read in place)."""
        if start >= self.length:
            return iter(self.tail[start - self.length :])
        return itertools.chain(itertools.islice(self.log, start, self.length), self.tail)

    def followed_by(self, *messages: Message) -> LogView:
        """This view with `messages` after it: a view of the same log (built in O(len(tail)), no copy)."""
        return LogView(self.log, self.length, (*self.tail, *messages))

    def __add__(self, other: Sequence[Message]) -> tuple[Message, ...]:
        return (*self, *other)

    def __radd__(self, other: Sequence[Message]) -> tuple[Message, ...]:
        return (*other, *self)

    def __repr__(self) -> str:
        return f"LogView({len(self)} messages: {self.length} of a shared log, {len(self.tail)} own)"


def identical_run(a: Iterable[Any], b: Iterable[Any], limit: int) -> int:
    """How many leading elements of `a` and `b` are the very same objects, up to `limit` (neither may end
    before it): compared by identity in C, up to the first that differs, no element is read (`indexOf`
    finds the first True of the `is not` flags by identity, with no Python call per element)."""
    try:
        return operator.indexOf(map(operator.is_not, itertools.islice(a, limit), b), True)
    except ValueError:  # no flag is True: all `limit` are the same
        return limit


def iter_from(messages: Sequence[Message], start: int) -> Iterator[Message]:
    """`messages[start:]` as an iterator, without copying a tuple's, a list's or a `LogView`'s messages."""
    return messages.iter_from(start) if isinstance(messages, LogView) else itertools.islice(messages, start, None)


def as_messages(messages: Sequence[Message]) -> tuple[Message, ...] | LogView:
    """The form a request stores: a `LogView` as it is, anything else as a tuple (the same tuple if it is one)."""
    return messages if isinstance(messages, (LogView, tuple)) else tuple(messages)


def first_difference(previous: Sequence[Message], current: Sequence[Message]) -> int:
    """How many leading messages two requests share (equal messages).

    Two views of one log share their common log part without a look; otherwise the sequences are
    compared in C by slices (the same object first), so a request that extends the previous one
    costs one pass and no Python call."""
    if isinstance(previous, LogView) and isinstance(current, LogView) and previous.log is current.log:
        short, other = (previous, current) if previous.length <= current.length else (current, previous)
        shared = short.length
        end = min(shared + len(short.tail), len(other))
        # the shorter log part's own tail against the other view's messages there
        return shared + common_prefix_length(short.tail[: end - shared], other[shared:end]) if end > shared else shared
    n = min(len(previous), len(current))
    if n > FIRST_BLOCK:  # the first messages first: two contexts that differ there cost no copy of either
        head = common_prefix_length(tuple(previous[:FIRST_BLOCK]), tuple(current[:FIRST_BLOCK]))
        if head < FIRST_BLOCK:
            return head
    return common_prefix_length(tuple(previous[:n]), tuple(current[:n]))  # the same tuple when it is one already


class SharedPrefixes:
    """`first_difference` that remembers how many leading messages two distinct logs share.

    Two views of different logs (a strategy's full history and its edited copy, say) would otherwise
    be compared from their first message on every request. Both logs only grow, so once their first
    `n` messages are known equal they stay equal, and once a difference is found it stays: each pair
    of logs is compared once per message appended to it. The logs of a remembered pair are kept alive
    (an `id` is never reused while it is a key); at `PAIRS_KEPT` pairs the memory starts anew."""

    PAIRS_KEPT = 32

    __slots__ = ("_pairs",)

    def __init__(self) -> None:
        # (id of one log, id of the other) -> [log, other log, leading messages known equal, whether they differ there]
        self._pairs: dict[tuple[int, int], list[Any]] = {}

    def first_difference(self, previous: Sequence[Message], current: Sequence[Message]) -> int:
        if not (isinstance(previous, LogView) and isinstance(current, LogView)) or previous.log is current.log:
            return first_difference(previous, current)
        limit = min(previous.length, current.length)
        shared = self._common(previous.log, current.log, limit)
        end = min(len(previous), len(current))
        if shared < limit or shared == end:
            return shared
        # past the shorter log part: that view's tail against the other's messages
        return shared + common_prefix_length(previous[shared:end], current[shared:end])

    def _common(self, a: list[Message], b: list[Message], limit: int) -> int:
        """How many of the first `limit` messages the logs `a` and `b` share."""
        key = (id(a), id(b)) if id(a) < id(b) else (id(b), id(a))
        pair = self._pairs.get(key)
        if pair is None:
            if len(self._pairs) >= self.PAIRS_KEPT:
                self._pairs.clear()
            pair = self._pairs[key] = [a, b, 0, False]
        known, differs = pair[2], pair[3]
        if not differs and known < limit:
            end = min(len(a), len(b))
            stop = min(known + FIRST_BLOCK, end)  # the first messages first: no copy of two logs that differ there
            same = known + common_prefix_length(a[known:stop], b[known:stop])
            if same == stop < end:
                same += common_prefix_length(a[stop:end], b[stop:end])
            pair[2], pair[3] = same, same < end
            known = same
        return min(known, limit)


#: How many leading elements `common_prefix_length` compares first.
FIRST_BLOCK = 16


def common_prefix_length(a: Any, b: Any) -> int:
    """How many leading elements two tuples (or lists, or characters two strings) share: compared in C
    by slices, the first `FIRST_BLOCK` first (two contexts that differ near their start, a rewritten
    history against the old one, cost no copy of either), then the rest, then halving the differing range."""
    low, high = 0, min(len(a), len(b))
    if high > FIRST_BLOCK:
        if a[:FIRST_BLOCK] != b[:FIRST_BLOCK]:
            high = FIRST_BLOCK
        else:
            low = FIRST_BLOCK
    if a[low:high] == b[low:high]:
        return high
    while high - low > 1:  # a[:low] == b[:low] and a[:high] != b[:high]
        middle = (low + high) // 2
        if a[low:middle] == b[low:middle]:
            low = middle
        else:
            high = middle
    return low


#: Counts per chunk of a `Cumulative` (a power of two).
CHUNK = 256
_SHIFT = CHUNK.bit_length() - 1


class Cumulative(Sequence[int]):
    """An append-only list of running totals whose full chunks are shared with the lists it was cut from."""

    __slots__ = ("_chunks", "_n")

    def __init__(self) -> None:
        self._chunks: list[list[int]] = []
        self._n = 0

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> list[int]: ...
    def __getitem__(self, index: int | slice) -> int | list[int]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._n)
            if step != 1:
                return [self[n] for n in range(start, stop, step)]
            out: list[int] = []
            for chunk in range(start >> _SHIFT, ((stop - 1) >> _SHIFT) + 1 if stop > start else 0):
                offset = chunk << _SHIFT  # the chunks' own slices, copied in C
                out.extend(self._chunks[chunk][max(start - offset, 0) : stop - offset])
            return out
        n = index + self._n if index < 0 else index
        if not 0 <= n < self._n:
            raise IndexError("Cumulative index out of range")
        return self._chunks[n >> _SHIFT][n & (CHUNK - 1)]

    def __iter__(self) -> Iterator[int]:
        return itertools.islice(itertools.chain.from_iterable(self._chunks), self._n)

    def last(self, default: int = 0) -> int:
        """The last total (`default` when empty): the last chunk's last count, as no chunk holds counts past `len`."""
        return self._chunks[-1][-1] if self._n else default

    def bisect_right(self, value: int) -> int:
        """`bisect.bisect_right(self, value)` of these non-decreasing totals: the chunk by the chunks' last
        totals, then the place in it, both in C (`bisect` over the list itself would call `__getitem__`
        for each look)."""
        chunks = self._chunks
        k = bisect.bisect_right(list(map(operator.itemgetter(-1), chunks)), value) if len(chunks) > 1 else 0
        return self._n if k == len(chunks) else (k << _SHIFT) + bisect.bisect_right(chunks[k], value)

    def prefix(self, n: int) -> Cumulative:
        """A new list of the first `n` totals: full chunks shared, the partial one copied (it is appended to)."""
        if not 0 <= n <= self._n:
            raise ValueError(f"a prefix of {n} of {self._n} totals")
        out = Cumulative()
        full, rest = divmod(n, CHUNK)
        out._chunks = self._chunks[:full]
        if rest:
            out._chunks.append(self._chunks[full][:rest])
        out._n = n
        return out

    def extend(self, totals: list[int]) -> None:
        """Append `totals`, a chunk's worth at a time (a full chunk, possibly shared, is never appended to)."""
        at, n = 0, len(totals)
        while at < n:
            room = CHUNK - (self._n & (CHUNK - 1))
            if room == CHUNK:
                self._chunks.append([])
            part = totals[at : at + room]
            self._chunks[-1].extend(part)
            self._n += len(part)
            at += len(part)

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, (Cumulative, list, tuple)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]
