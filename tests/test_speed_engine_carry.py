"""The engine's carried state across compactions gives what the straightforward computation gives.

- `_Carried` (compaction_bench.replay) reads a compaction's `removed_ids` from the previous compaction's
  context after it, by runs of messages found by identity: on random chains of compactions (each
  `before` the previous `after` plus new messages, or a context that is not; each `after` runs of
  `before`, new messages, equal copies (in `after`, or in `before` where the previous context had the
  message itself), repeated or reordered messages, ids shared by several
  messages, messages without ids, empty contexts) its answer, order included, is `removed_ids`'
  (a plain set difference here), and whenever it says it describes the new context, its counts and
  positions are that context's.
- `_SummarizedIds` derives a compaction's summarized ids, each once in order, from the last one's.
- `_surely_carries` answers True only when every item id of the one context is in the other.
- `common_prefix_length` (compaction_bench.log_view), which compares a first block before the rest, counts the
  equal leading elements of tuples, lists and strings.
"""

from __future__ import annotations

import collections
import random

import pytest

from compaction_bench.log_view import FIRST_BLOCK, LogView, common_prefix_length
from compaction_bench.replay import _Carried, _SummarizedIds, _surely_carries, removed_ids
from compaction_bench.request import Message


def _plain_removed(before, after) -> list[str]:
    """The definition: ids of `before` that no message of `after` carries, in `before`'s order, each once."""
    still = {i for m in after for i in m.item_ids}
    return list(dict.fromkeys(i for m in before for i in m.item_ids if i not in still))


class _Pool:
    def __init__(self, rng: random.Random) -> None:
        self.rng, self.n = rng, 0

    def new(self) -> Message:
        self.n += 1
        kind = self.rng.random()
        if kind < 0.1:
            ids: tuple[str, ...] = ()
        elif kind < 0.2:
            ids = (f"i{self.n}", f"i{self.n}b")
        elif kind < 0.3:
            ids = (f"i{self.rng.randrange(max(self.n, 1))}",)  # an id another message may carry too
        else:
            ids = (f"i{self.n}",)
        role = self.rng.choice(("user", "assistant", "tool", "compaction"))
        return Message(role, f"text {self.n}", item_ids=ids)


def _wrap(rng: random.Random, messages: list[Message]):
    """The context as a tuple, or as a `LogView` of a log (with a tail or without)."""
    if rng.random() < 0.5:
        return tuple(messages)
    cut = rng.randint(0, len(messages))
    return LogView(list(messages[:cut]) + [Message("user", "not in the view")] * rng.randrange(2), cut, tuple(messages[cut:]))


def _next_after(rng: random.Random, pool: _Pool, before: list[Message]) -> list[Message]:
    start = rng.randint(0, len(before))
    end = rng.randint(start, len(before))
    run = before[start:end]
    head = [pool.new() for _ in range(rng.randrange(3))]
    tail = [pool.new() for _ in range(rng.randrange(3))]
    roll = rng.random()
    if roll < 0.1 and before:
        head.insert(0, rng.choice(before))  # a message of `before` again (maybe inside the run)
    elif roll < 0.2 and before:
        tail.append(rng.choice(before))
    elif roll < 0.3 and before:
        original = rng.choice(before)  # an equal copy, another object
        tail.append(Message(original.role, original.content, item_ids=original.item_ids))
    elif roll < 0.4 and len(run) > 2:
        cut = rng.randrange(1, len(run))
        run = [*run[:cut], pool.new(), *run[cut:]]  # two runs
    elif roll < 0.45:
        run = []
    return [*head, *run, *tail]


@pytest.mark.parametrize("seed", [18, 19, 20])
def test_carried_removed_ids_equal_the_straightforward_ones_on_random_chains(seed):
    rng = random.Random(seed)
    checked = fast = 0
    for _ in range(300):
        pool = _Pool(rng)
        after = [pool.new() for _ in range(rng.randrange(0, 30))]
        wrapped_after = _wrap(rng, after)
        carried = _Carried.of(wrapped_after)
        for _ in range(rng.randrange(1, 12)):
            if rng.random() < 0.1:
                before = [pool.new() for _ in range(rng.randrange(0, 20))]  # a context that is not the previous one
            else:
                before = [*after, *(pool.new() for _ in range(rng.randrange(0, 6)))]
                if rng.random() < 0.2 and after:
                    before.append(rng.choice(after))
                if rng.random() < 0.1 and after:  # an equal copy (another object) where the previous context had a message
                    n = rng.randrange(len(after))
                    before[n] = Message(before[n].role, before[n].content, item_ids=before[n].item_ids)
            after = _next_after(rng, pool, before)
            wrapped_before, wrapped_after = _wrap(rng, before), _wrap(rng, after)
            expected = _plain_removed(before, after)
            assert list(removed_ids(wrapped_before, wrapped_after)) == expected
            answer = carried.removed(wrapped_before, wrapped_after) if carried is not None else None
            checked += 1
            if answer is None:
                carried = _Carried.of(wrapped_after)
                continue
            fast += 1
            removed, describes = answer
            assert list(removed) == expected
            if not describes:
                carried = _Carried.of(wrapped_after)
                continue
            assert carried is not None and carried.messages is wrapped_after
            assert +carried.counts == collections.Counter(i for m in after for i in m.item_ids)
            assert all(carried.counts.values())
            positions = {key - carried.first for key in (carried.serial[id(m)] for m in after)}
            assert positions == set(range(len(after)))
            assert len(carried.serial) == len(after)
    assert fast > checked // 2  # most steps took the carried path


def test_surely_carries_only_says_yes_when_every_id_is_carried():
    rng = random.Random(5)
    said_yes = 0
    for _ in range(2000):
        pool = _Pool(rng)
        other = [pool.new() for _ in range(rng.randrange(0, 8))]
        messages = [*other[: rng.randint(0, len(other))], *(pool.new() for _ in range(rng.randrange(3)))]
        if rng.random() < 0.5 and other:
            messages.append(rng.choice(other))
        if _surely_carries(_wrap(rng, messages), _wrap(rng, other)):
            said_yes += 1
            assert {i for m in other for i in m.item_ids} <= {i for m in messages for i in m.item_ids}
    assert said_yes > 200


def test_common_prefix_length_is_the_count_of_equal_leading_elements():
    rng = random.Random(11)
    for _ in range(3000):
        n = rng.choice((0, 1, FIRST_BLOCK - 1, FIRST_BLOCK, FIRST_BLOCK + 1, rng.randrange(200)))
        a = [rng.randrange(3) for _ in range(n)]
        b = list(a[: rng.randint(0, n)]) + [rng.randrange(3) for _ in range(rng.randrange(40))]
        expected = next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        assert common_prefix_length(tuple(a), tuple(b)) == expected
        assert common_prefix_length(a, b) == expected
        assert common_prefix_length("".join(map(str, a)), "".join(map(str, b))) == expected



def test_summarized_ids_derived_from_the_last_compactions_are_each_id_once_in_order():
    """`_SummarizedIds` against `dict.fromkeys` of each compaction's ids, on random chains: each list the
    last one's less a few of its first and last ids, with new ids (some said twice, some the last
    one's gone ones again, some equal strings of other objects), some kept ids as equal strings of other
    objects, or a list unrelated to the last."""
    pool = [f"item-{n}" for n in range(400)]
    for seed in range(200):
        rng = random.Random(seed)
        state = _SummarizedIds()
        ids: list[str] = rng.sample(pool, rng.randrange(0, 40))
        for _ in range(30):
            distinct, once = state.distinct(ids)
            assert distinct == tuple(dict.fromkeys(ids)) and once == set(ids)
            if rng.random() < 0.1:
                ids = rng.sample(pool, rng.randrange(0, 60))  # unrelated
                continue
            kept = list(distinct[rng.randrange(0, 4) : len(distinct) - rng.randrange(0, 4)])
            if rng.random() < 0.2:  # some kept ids as equal strings of other objects (compared by value)
                kept = ["".join(i) if rng.random() < 0.3 else i for i in kept]
            new = rng.sample(pool, rng.randrange(0, 6))
            if new and rng.random() < 0.3:
                new.append(new[0])  # an id said twice
            if rng.random() < 0.3:
                new = ["".join(i) for i in new]  # equal strings, other objects
            ids = kept + new
