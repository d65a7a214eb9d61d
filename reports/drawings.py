"""The report's figures that read the run's tables alone, drawn while the rest of the report is built.

Per scenario its context timelines (`figures.context_timeline`, one per profile, one panel per
strategy), and per profile the overview figures that read only the probes or the requests table
(retention over the session, retention by probe family and fact age, cache over the session), on
the rows the tables compare (`_overview`, `aggregate.compared_rows`: the scenarios every strategy of
the profile finished, and of the probes the paired headline rows):
most of a report's CPU time (seconds each timeline for twenty strategies), and independent of the
summary. So `Drawings` starts drawing them as soon as the merged tables exist: with `jobs` > 1 in a
pool of `jobs` − 1 worker processes (the overview figures first, then the timelines, the largest
scenario first), while this process, the `jobs`-th, summarizes the run and builds the rest of the
report (a worker per core starved that work: the default run's summary took twice its CPU time in
wall time with two workers beside it on two cores); with `jobs` ≤ 1 each is drawn in this process
when the report asks for it. This process draws as well: a figure it asks for that no worker has
taken yet is drawn here (its task cancelled) rather than waited for, and while it waits for one a
worker is drawing it draws the last queued figures no worker has taken, for later. A worker that dies (the
out-of-memory killer) breaks the pool: the figures it left are drawn here, and the report stays whole (the error
Python 3.11's pool thread then dies with is kept from the terminal, `_quiet_breakage`). The workers are
forked (Linux only; elsewhere the figures are drawn in this process): they start with the figures module
loaded and never re-run the caller's main module, they are forked before the run starts its archive thread, and they inherit the tables they
draw (`_FORKED`): a task names a drawing, so no table is pickled and sent (sending them took a
thread of this process about a second of the GIL on the default run, while it summarized the run).
Each drawing runs with the cyclic garbage collector paused (`_without_collection`): a figure makes
thousands of objects, which set off full collections that walk the run's tables every time (a fifth
of a default run's timelines' CPU time); its garbage is collected after it.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, InvalidStateError, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Any

import pandas as pd

from compaction_bench.executors import bind_to_parent
from compaction_bench.metrics.aggregate import compared_rows, shared_scenarios, unfinished
from compaction_bench.reports import figures

#: The columns a timeline reads.
REQUEST_COLUMNS = ["scenario", "profile", "strategy", "repeat", "kind", "request", "step", "true_tokens", "overflow", "refused"]
COMPACTION_COLUMNS = ["scenario", "profile", "strategy", "repeat", "trigger", "step", "tokens_before"]
#: The report's title of the overview figure it shows last, after the one drawn from the summary (retention against cost).
CACHE_FIGURE = "Cache over the session"
#: The overview figures drawn here, in the report's order: (the report's title, the figure, its title before the profile, the table it reads).
OVERVIEW: tuple[tuple[str, Callable[..., str], str, str], ...] = (
    ("Retention over the session", figures.retention_over_session, "facts present over the session", "probes"),
    ("Retention by probe family and fact age", figures.retention_heatmaps, "facts present by family and age", "probes"),
    (CACHE_FIGURE, figures.cache_over_session, "cache hit rate and re-billed tokens", "requests"),
)


def _overview(figure: Callable[..., str], probes: pd.DataFrame | None, requests: pd.DataFrame, title: str, order: Sequence[str]) -> str:
    """`figure` of one profile's rows the tables compare, chosen in the process that draws it: the
    scenarios in which every strategy of the profile finished its cell (`aggregate.shared_scenarios`),
    and of `probes` (None: the figure reads `requests`) the paired headline rows with votes applied
    (`aggregate.compared_rows`), as `aggregate.overall` and the verdict take them."""
    if probes is None:
        return figure(shared_scenarios(requests, unfinished(requests)), title, order)
    return figure(compared_rows(probes, requests), title, order)


#: One drawing: its label (a report title, or "" for a timeline), the figure, and its arguments.
Drawing = tuple[str, Callable[..., str], tuple[Any, ...]]
#: The drawings of the `Drawings` whose pool forks next (by key): its workers inherit them.
_FORKED: dict[tuple[str, str], list[Drawing]] = {}


@contextmanager
def _without_collection() -> Iterator[None]:
    """The cyclic garbage collector paused (if it ran) while the block runs."""
    running = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if running:
            gc.enable()


def _drawing(figure: Callable[..., str], args: tuple[Any, ...]) -> str:
    with _without_collection():
        return figure(*args)


def _draw(key: tuple[str, str], n: int) -> str:
    """In a forked worker: the `n`-th drawing of `key`, from the tables it inherited."""
    _, figure, args = _FORKED[key][n]
    return _drawing(figure, args)


def strategy_order(manifest: Mapping[str, Any], strategies: Iterable[str]) -> list[str]:
    """The report's order of `strategies`: the run's configured order, then any other in name order."""
    present = set(strategies)
    configured = [s for s in manifest.get("config", {}).get("strategies", []) if s in present]
    return configured + sorted(present - set(configured))


def _quiet_breakage(pool: ProcessPoolExecutor) -> Callable[[], None]:
    """Keep from the terminal the one error Python 3.11's pool thread dies with once a worker died after this process
    cancelled a queued drawing (`Drawings._broken`): an `InvalidStateError` traceback, printed while the report goes
    on whole (its figures drawn here); CPython's fix (gh-107219, the thread ignores it) is not in 3.11. Only that error of `pool`'s own
    thread is kept back; every other thread's error reaches the hook as before. Returns what restores the hook."""
    previous = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_type is InvalidStateError and args.thread is getattr(pool, "_executor_manager_thread", None):
            return
        previous(args)

    threading.excepthook = hook

    def restore() -> None:
        if threading.excepthook is hook:
            threading.excepthook = previous

    return restore


#: how long the report waits for a worker's drawing before it asks whether the pool still runs (`Drawings._broken`)
POLL_SECONDS = 1.0


class Drawings:
    """Every scenario's timelines (one per profile, in the order its requests name the profiles) and
    every profile's overview figures, from the run's merged `requests`, `compactions` and `probes`
    tables and its `manifest`; `order` is the report's order of the run's strategies."""

    def __init__(
        self, requests: pd.DataFrame, compactions: pd.DataFrame, probes: pd.DataFrame, manifest: Mapping[str, Any], jobs: int = 1
    ) -> None:
        strategies = {*(requests["strategy"].unique() if "strategy" in requests else ()), *(probes["strategy"].unique() if "strategy" in probes else ())}
        self.order = order = strategy_order(manifest, strategies)
        self._work: dict[tuple[str, str], list[Drawing]] = {}
        tables = {name: frame for name, frame in (("probes", probes), ("requests", requests)) if "profile" in frame and not frame.empty}
        for profile in dict.fromkeys(p for frame in tables.values() for p in frame["profile"].unique()):
            of_profile = {name: frame[frame["profile"] == profile] for name, frame in tables.items()}
            for title, figure, heading, table in OVERVIEW:
                if table in of_profile and not of_profile[table].empty and "requests" in of_profile:
                    read = of_profile.get("probes") if table == "probes" else None
                    drawing: Drawing = (title, _overview, (figure, read, of_profile["requests"], f"{heading} · {profile}", order))
                    self._work.setdefault(("overview", str(profile)), []).append(drawing)
        requests = requests[[c for c in REQUEST_COLUMNS if c in requests.columns]]
        compactions = compactions[[c for c in COMPACTION_COLUMNS if c in compactions.columns]] if not compactions.empty else compactions
        marks = {key: frame for key, frame in compactions.groupby(["scenario", "profile"], sort=False)} if not compactions.empty else {}
        timelines: dict[tuple[str, str], list[Drawing]] = {}
        for scenario, own in requests.groupby("scenario", sort=False):
            for profile_key, frame in own.groupby("profile", sort=False):
                profile = str(profile_key)
                points = marks.get((scenario, profile_key), compactions.iloc[:0])
                # the window as the run recorded it, not as today's code defines the profile
                window = manifest.get("profiles", {}).get(profile, {}).get("context_window")
                args = (frame, points, window, f"{scenario} · {profile}", order)
                timelines.setdefault(("timeline", str(scenario)), []).append(("", figures.context_timeline, args))
        # the overview figures first (the report shows them first), then the largest scenario's timelines first
        self._work.update(sorted(timelines.items(), key=lambda kv: -sum(len(args[0]) for _, _, args in kv[1])))
        count = sum(len(w) for w in self._work.values())
        workers = min((jobs if jobs > 0 else os.cpu_count() or 1) - 1, count)
        self._pool: ProcessPoolExecutor | None = None
        self._restore_hook: Callable[[], None] = lambda: None
        self._futures: dict[tuple[str, str], list[Future[str]]] = {}
        #: drawings this process made while it waited for a worker's, by (key, index), until the report asks for them
        self._here: dict[tuple[tuple[str, str], int], str] = {}
        if workers >= 1 and sys.platform.startswith("linux"):
            # A forking pool starts every worker at the first submit, before it starts its own thread: they
            # inherit `_FORKED` as it is then. They end with this process even when it is killed
            # (`bind_to_parent`), as the cells' do.
            global _FORKED
            _FORKED = self._work
            self._pool = ProcessPoolExecutor(
                max_workers=workers, mp_context=multiprocessing.get_context("fork"), initializer=bind_to_parent, initargs=(os.getpid(),)
            )
            self._restore_hook = _quiet_breakage(self._pool)  # (before the first submit starts the pool's thread)
            for key, work in self._work.items():
                self._futures[key] = [self._pool.submit(_draw, key, n) for n in range(len(work))]
            _FORKED = {}  # the workers have their copy

    def _drawn(self, key: tuple[str, str]) -> list[tuple[str, str]]:
        """The drawings of `key` as (label, SVG) (`_svg`)."""
        work = self._work.get(key, [])
        futures: list[Future[str] | None] = [*self._futures.get(key, [])] or [None] * len(work)
        return [(label, self._svg(key, n, future)) for n, ((label, _, _), future) in enumerate(zip(work, futures, strict=True))]

    def _svg(self, key: tuple[str, str], n: int, future: Future[str] | None) -> str:
        """Drawing `n` of `key`: drawn here while this process waited for another (`_help`), drawn now when no worker
        has taken it (its task cancelled), else a worker's, this process drawing what no worker has taken yet while it
        waits for it, so it draws whenever it would otherwise wait."""
        if (key, n) in self._here:
            return self._here.pop((key, n))
        if future is None or future.cancel():
            return self._draw_here(key, n)
        while not future.done() and self._help():
            pass
        while True:
            try:
                return future.result(timeout=POLL_SECONDS)
            except BrokenProcessPool:  # a worker died (the out-of-memory killer, a signal): drawn here, the report still whole
                return self._draw_here(key, n)
            except TimeoutError:
                if self._broken():  # ... and the pool never said so to this drawing's future
                    return self._draw_here(key, n)

    def _broken(self) -> bool:
        """Whether the pool broke (a worker died): it then takes no new task. Asked while waiting, because the pool's
        thread may leave a drawing's future unset: Python 3.11's pool, once a worker dies, sets each pending future's
        exception in turn and stops at the first future this process had cancelled (`InvalidStateError`), so a
        drawing queued after it would be waited for forever."""
        assert self._pool is not None  # a drawing has a future only from the pool
        try:
            self._pool.submit(int).cancel()
        except BrokenProcessPool:
            return True
        return False

    def _help(self) -> bool:
        """Draw here the last queued drawing that no worker has taken yet (the report asks for the first ones first),
        kept until the report asks for it; False when the workers have taken every one."""
        for key, futures in reversed(self._futures.items()):
            for n in range(len(futures) - 1, -1, -1):
                if not futures[n].cancelled() and futures[n].cancel():
                    self._here[key, n] = self._draw_here(key, n)
                    return True
        return False

    def _draw_here(self, key: tuple[str, str], n: int) -> str:
        _, figure, args = self._work[key][n]
        return _drawing(figure, args)

    def timelines(self, scenario: str) -> list[str]:
        """The scenario's timelines as SVG strings, one per profile."""
        return [svg for _, svg in self._drawn(("timeline", scenario))]

    def overview(self, profile: str) -> dict[str, str]:
        """The profile's overview figures that have something to show, by their report title (`OVERVIEW`)."""
        return dict(self._drawn(("overview", profile)))

    def close(self) -> None:
        """End the worker processes (drawings not collected yet are abandoned)."""
        if self._pool is not None:
            try:
                self._pool.shutdown(wait=True, cancel_futures=True)
            finally:
                self._pool = None
                self._restore_hook()

    def __enter__(self) -> Drawings:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
