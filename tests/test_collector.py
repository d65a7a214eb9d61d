"""The collector's pace during replays (compaction_bench.collector): spaced while the outermost replay
runs, the process's own thresholds back afterwards, whatever they were and however the replay ended."""

from __future__ import annotations

import gc
import threading

import pytest

import compaction_bench as bench
from compaction_bench.collector import REPLAY_YOUNG_THRESHOLD, spaced_collections
from compaction_bench.request import Request
from compaction_bench.scenarios.synthetic import generate
from compaction_bench.strategies.baselines import NoCompaction


@pytest.fixture
def thresholds():
    """The process's thresholds, put back after the test whatever it set."""
    saved = gc.get_threshold()
    yield saved
    gc.set_threshold(*saved)


def test_young_collections_are_spaced_during_the_block_and_the_thresholds_restored(thresholds):
    gc.set_threshold(500, 7, 9)
    with spaced_collections():
        assert gc.get_threshold() == (REPLAY_YOUNG_THRESHOLD, 7, 9)
        with spaced_collections():  # a nested replay keeps the setting
            assert gc.get_threshold() == (REPLAY_YOUNG_THRESHOLD, 7, 9)
        assert gc.get_threshold() == (REPLAY_YOUNG_THRESHOLD, 7, 9)
    assert gc.get_threshold() == (500, 7, 9)
    with pytest.raises(RuntimeError), spaced_collections():
        raise RuntimeError("a replay that fails")
    assert gc.get_threshold() == (500, 7, 9)


def test_a_process_without_automatic_collection_or_with_a_wider_pace_keeps_its_own(thresholds):
    for own in ((0, 10, 10), (REPLAY_YOUNG_THRESHOLD * 2, 10, 10)):
        gc.set_threshold(*own)
        with spaced_collections():
            assert gc.get_threshold() == own
        assert gc.get_threshold() == own


def test_overlapping_replays_in_threads_restore_the_thresholds_when_the_last_ends(thresholds):
    gc.set_threshold(700, 10, 10)
    inside, release = threading.Event(), threading.Event()

    def replay_in_thread() -> None:
        with spaced_collections():
            inside.set()
            release.wait(5)

    worker = threading.Thread(target=replay_in_thread)
    worker.start()
    assert inside.wait(5)
    with spaced_collections():
        assert gc.get_threshold()[0] == REPLAY_YOUNG_THRESHOLD
    assert gc.get_threshold()[0] == REPLAY_YOUNG_THRESHOLD  # the thread's replay still runs
    release.set()
    worker.join(5)
    assert gc.get_threshold() == (700, 10, 10)


class _Observing(NoCompaction):
    """`none`, noting the collector's thresholds at each request."""

    seen: list[tuple[int, int, int]] = []

    def request(self) -> Request:
        _Observing.seen.append(gc.get_threshold())
        return super().request()


def test_a_replay_runs_at_the_spaced_pace_and_leaves_the_thresholds_as_it_found_them(thresholds):
    gc.set_threshold(650, 11, 12)
    transcript = generate("short-turns", seed=0, target_tokens=20_000).transcript
    _Observing.seen.clear()
    result = bench.replay(transcript, _Observing, profile="32k")
    assert result.requests and set(_Observing.seen) == {(REPLAY_YOUNG_THRESHOLD, 11, 12)}
    assert gc.get_threshold() == (650, 11, 12)
