"""The offline summarizer's choice of lines (`_select`, issue 18) against scoring and sorting every line.

`_select` keeps the candidate lines of the last request's parts by salience (`_Chain`), finds the next
request's parts in it by identity, and merges the buckets by score on a heap, skipping lines too long
for what is left of the budget. The straightforward computation scores every line of the request
(salience plus `RECENCY` times its position over the last position), sorts them all by (score, newer
first) and takes greedily what fits. Checked on random parts (saliences that tie across buckets,
repeated and 4-character lines, budgets down to nothing) sent as consecutive requests that
slide, grow, shrink, repeat a part and replace parts by equal new objects, and on hand-built ties.
"""

from __future__ import annotations

import random

from compaction_bench.offline_models import RECENCY, SHORTEST_LINE, _Part, _select
from tests.test_speed_summarizer import take_greedily

SALIENCES = (1.0, 1.5, 2.5, 3.0, 3.5, 4.0, 4.5, 7.0)


def straightforward(parts: list[_Part], budget: int) -> list[tuple[int, str, tuple[str, ...]]]:
    """Score every candidate line, sort them all by (-score, -position), take greedily what fits."""
    last = max(sum(part.size for part in parts) - 1, 0) or 1
    scored = []
    offset = 0
    for part in parts:
        for n, line, salience, categories in part.candidates:
            scored.append((salience + RECENCY * (offset + n) / last, offset + n, line, categories))
        offset += part.size
    return take_greedily(scored, budget)


def random_part(rng: random.Random, words: list[str]) -> _Part:
    size = rng.randint(1, 6)
    candidates = []
    for n in range(size):
        if rng.random() < 0.7:
            line = rng.choice(words) if rng.random() < 0.3 else "x" * rng.choice((4, 5, 7, 12, 30, 90, 400)) + str(rng.random())[: rng.randint(0, 6)]
            salience = rng.choice(SALIENCES)
            candidates.append((n, line, salience, (f"s{salience}",)))
    return _Part(size, tuple(candidates))


def check(parts: list[_Part], budget: int) -> None:
    assert _select(parts, budget) == straightforward(parts, budget), (len(parts), budget)


def test_consecutive_requests_choose_as_sorting_every_line():
    rng = random.Random(18)
    words = ["abcd", "done", "error: x", "a" * 40, "b" * 100]
    pool = [random_part(rng, words) for _ in range(400)]
    low, high = 0, 30
    for _ in range(200):
        move = rng.random()
        if move < 0.4:  # the window slides: a few of the oldest parts go, a few new ones come
            low, high = low + rng.randint(0, 3), min(high + rng.randint(0, 4), len(pool))
        elif move < 0.55:  # the newest parts are replaced by others (new objects, some equal to the old)
            for k in range(max(high - 3, low), high):
                pool[k] = random_part(rng, words) if rng.random() < 0.5 else _Part(pool[k].size, pool[k].candidates)
        elif move < 0.65:  # a request that shares nothing, then one that shares its start
            low = rng.randint(0, len(pool) - 40)
            high = low + rng.randint(0, 40)
        elif move < 0.75:
            high = max(low, high - rng.randint(1, 5))
        parts = pool[low:high]
        if rng.random() < 0.2 and parts:  # a part twice, and a part repeated at the front
            parts = [parts[-1], *parts, parts[0]]
        for budget in (-3, 0, SHORTEST_LINE - 1, SHORTEST_LINE, 10, 60, 450, 2_000, 6_000, 100_000):
            check(parts, budget)
        if high >= len(pool) - 5:
            pool += [random_part(rng, words) for _ in range(200)]


def test_long_sliding_windows_drop_what_they_no_longer_hold():
    rng = random.Random(7)
    pool = [random_part(rng, ["abcd"]) for _ in range(3_000)]
    for low in range(0, 2_500, 37):  # past 64 dropped parts the chain forgets them; a request before them starts it anew
        check(pool[low : low + 400], 5_752)
    check(pool[:50], 5_752)


def test_ties_across_saliences_go_to_the_newer_line():
    # Salience 3.0 at the last position and 4.0 at the first both score 4.0: the newer line comes first.
    parts = [_Part(1, ((0, "first line", 4.0, ("a",)),)), _Part(2, ((1, "second line", 3.5, ("b",)),)), _Part(1, ((0, "last line", 3.0, ("c",)),))]
    assert 3.0 + RECENCY * 3 / 3 == 4.0 + RECENCY * 0 / 3
    assert _select(parts, len("last line") + 3) == [(3, "last line", ("c",))]
    for budget in range(0, 60):
        check(parts, budget)
    # A line too long for what is left is passed over, and a shorter, lower one still fits.
    parts = [_Part(3, ((0, "tiny", 1.0, ("z",)), (1, "y" * 50, 2.0, ("y",)), (2, "z" * 20, 7.0, ("x",))))]
    assert _select(parts, 23 + 7) == [(0, "tiny", ("z",)), (2, "z" * 20, ("x",))]
    assert _select([], 100) == []
    # A line said twice is chosen once, at its newer place (the two score alike but for their recency).
    parts = [_Part(1, ((0, "run the suite", 3.0, ("g",)),)), _Part(1, ((0, "other line", 1.0, ("p",)),)),
             _Part(1, ((0, "run the suite", 3.0, ("g",)),))]
    assert _select(parts, 100) == [(1, "other line", ("p",)), (2, "run the suite", ("g",))]
