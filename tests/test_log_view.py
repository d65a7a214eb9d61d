"""Shared-log contexts and shared-prefix counts (compaction_bench.log_view) behave as the tuples and
lists they replace, and the engine's diff of two contexts finds what a full comparison finds."""

from __future__ import annotations

import bisect
import itertools
import random

import pytest

from compaction_bench.log_view import Cumulative, LogView, first_difference, identical_run, iter_from
from compaction_bench.records import KeptIds
from compaction_bench.replay import removed_ids
from compaction_bench.request import Message, Request

MESSAGES = [Message("user" if n % 3 == 0 else "assistant", f"m{n}", item_ids=(f"i{n}",)) for n in range(40)]


def plain_first_difference(a, b) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_a_view_is_the_tuple_of_its_messages():
    log = list(MESSAGES[:30])
    view = LogView(log, 20, (MESSAGES[35], MESSAGES[36]))
    expected = (*MESSAGES[:20], MESSAGES[35], MESSAGES[36])
    log.append(MESSAGES[39])  # the owner appends: the view does not change
    assert len(view) == 22 and tuple(view) == expected and view == expected and expected == view
    assert view[0] is MESSAGES[0] and view[-1] is MESSAGES[36] and view[20] is MESSAGES[35]
    for start in range(-3, 24):
        for stop in (None, 0, 5, 19, 20, 21, 22, 30, -1):
            assert view[start:stop] == expected[start:stop]
    assert view[::2] == expected[::2]
    assert view + (MESSAGES[1],) == (*expected, MESSAGES[1]) and (MESSAGES[1],) + view == (MESSAGES[1], *expected)
    assert hash(view) == hash(expected) and MESSAGES[35] in view and view.index(MESSAGES[35]) == 20
    with pytest.raises(IndexError):
        view[22]
    with pytest.raises(ValueError):
        LogView(log, 32)
    for start in range(0, 24):  # read from a position on in place, as the tuple's slice
        assert tuple(iter_from(view, start)) == expected[start:] == tuple(iter_from(expected, start)) == tuple(iter_from(list(expected), start))
    copy = Message(MESSAGES[3].role, MESSAGES[3].content, item_ids=MESSAGES[3].item_ids)  # equal, another object
    assert identical_run(iter_from(view, 0), [*MESSAGES[:3], copy, *MESSAGES[4:]], 22) == 3
    assert identical_run(iter_from(view, 1), MESSAGES[1:], 19) == 19 and identical_run(iter_from(view, 1), MESSAGES[1:], 5) == 5
    longer = view.followed_by(MESSAGES[2], MESSAGES[3])
    assert longer == (*expected, MESSAGES[2], MESSAGES[3]) and longer.log is log and view == expected
    assert Request(view).messages is view  # a request keeps the view (a list becomes a tuple)
    assert Request(list(expected)).messages == expected and isinstance(Request(list(expected)).messages, tuple)


def test_first_difference_of_views_of_one_log_and_of_anything_else():
    rng = random.Random(3)
    log = list(MESSAGES[:25])
    views = [LogView(log, n, tuple(rng.choice(MESSAGES) for _ in range(rng.randrange(4)))) for n in (0, 3, 10, 25, 25, 24)]
    views.append(LogView(list(MESSAGES[:25]), 25))  # another log with the same messages
    others = [(), tuple(MESSAGES[:12]), tuple(MESSAGES[:25]) + (MESSAGES[30],), [*MESSAGES[:5], Message("user", "m5")]]
    for a in views + others:
        for b in views + others:
            assert first_difference(a, b) == plain_first_difference(tuple(a), tuple(b)), (a, b)


def test_cumulative_prefixes_share_chunks_but_never_each_others_appends():
    rng = random.Random(5)
    plain: list[list[int]] = [[]]
    shared = [Cumulative()]
    for _ in range(3000):
        k = rng.randrange(len(plain))
        if rng.random() < 0.2:  # cut a prefix of some list, as the provider does for a request sharing part of another
            n = rng.randrange(len(plain[k]) + 1)
            plain.append(plain[k][:n])
            shared.append(shared[k].prefix(n))
        else:  # extend any list, including one others were cut from, by up to a chunk and a half
            totals = list(itertools.accumulate((rng.randrange(1, 50) for _ in range(rng.choice([1, 2, rng.randrange(400)]))),
                                               initial=plain[k][-1] if plain[k] else 0))[1:]
            plain[k].extend(totals)
            shared[k].extend(totals)
    for a, b in zip(plain, shared, strict=True):
        assert list(b) == a and len(b) == len(a) and b.last() == (a[-1] if a else 0)
        if a:
            assert b[len(a) - 1] == a[-1] and b[-1] == a[-1] and b[1:4] == a[1:4]
            start, stop = sorted(rng.randrange(-len(a) - 2, len(a) + 2) for _ in range(2))
            assert b[start:stop] == a[start:stop] and b[stop:start] == a[stop:start] and b[start::3] == a[start::3]



def test_cumulative_bisect_is_the_bisect_of_the_plain_list():
    rng = random.Random(7)
    for size in (0, 1, 255, 256, 257, 600, 1300):
        # running totals with repeats (a message counted 0 more is not possible, but equal totals across a
        # chunk edge test the rule for ties)
        totals = list(itertools.accumulate(rng.choice([0, 1, 2, 40]) for _ in range(size)))
        shared = Cumulative()
        shared.extend(totals)
        for cut in (shared, shared.prefix(size // 2)):
            plain = list(cut)
            values = [-1, 0, *(rng.randrange(-5, (plain[-1] if plain else 0) + 5) for _ in range(200)), *plain[::37]]
            for value in values:
                assert cut.bisect_right(value) == bisect.bisect_right(plain, value), (size, value)


def test_a_log_index_finds_what_the_view_holds():
    from compaction_bench.provider import _LogIndex

    rng = random.Random(9)
    pool = [Message("user", f"m{n % 30}") for n in range(60)]  # equal messages as other objects: m0 and m30...
    for _ in range(40):
        log: list[Message] = []
        index = _LogIndex(log)
        for _ in range(rng.randrange(1, 6)):  # the log grows between lookups: a new index, then indexed further
            log.extend(rng.choice(pool) for _ in range(rng.randrange(1, 90)))
            view = LogView(log, rng.randrange(len(log) + 1), tuple(rng.choice(pool) for _ in range(rng.randrange(3))))
            asked = [rng.choice(pool) for _ in range(20)]
            held = set(view)
            assert index.holds(view, asked, frozenset(view.tail)) == [m in held for m in asked]


def test_the_removed_and_kept_ids_of_a_rewrite_are_those_a_full_comparison_finds():
    rng = random.Random(11)
    pool = MESSAGES + [Message("tool", f"placeholder {n}", item_ids=(f"i{n}",)) for n in range(40)]
    pool += [Message("user", "summary", item_ids=()), Message("assistant", "two", item_ids=("i1", "i2"))]
    for _ in range(400):
        before = [rng.choice(pool) for _ in range(rng.randrange(12))]
        after = list(before)
        for _ in range(rng.randrange(4)):  # edit, drop, insert or replace a run, anywhere
            where = rng.randrange(len(after) + 1)
            action = rng.randrange(4)
            if action == 0 and where < len(after):
                after[where] = rng.choice(pool)
            elif action == 1:
                del after[where : where + rng.randrange(1, 4)]
            elif action == 2:
                after.insert(where, rng.choice(pool))
            else:
                after[: where] = [rng.choice(pool)]
        before_ids = [i for m in before for i in m.item_ids]
        after_ids = {i for m in after for i in m.item_ids}
        expected_removed = list(dict.fromkeys(i for i in before_ids if i not in after_ids))
        expected_kept = tuple(dict.fromkeys(i for i in before_ids if i in after_ids))
        removed = removed_ids(tuple(before), tuple(after))
        assert list(removed) == expected_removed
        kept = KeptIds(tuple(before), removed.keys())
        assert kept == expected_kept and list(kept) == list(expected_kept) and len(kept) == len(expected_kept)
