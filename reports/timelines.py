"""The scenario pages' context timelines, drawn while the rest of the report is built.

A timeline (`figures.context_timeline`: one panel per strategy) exists per scenario and profile,
and drawing them is most of a report's CPU time (seconds each for twenty strategies). They are
independent of each other and of the summary, so `Timelines` starts drawing them as soon as the
merged tables exist: with `jobs` > 1 in a pool of `jobs` − 1 worker processes, while this process,
the `jobs`-th, summarizes the run and builds the rest of the report (a worker per core starved that
work: the default run's summary took twice its CPU time in wall time with two workers beside it on
two cores); with `jobs` ≤ 1 each is drawn in this process when the report asks for it. The workers are forked (Linux only; elsewhere they are drawn in this
process): they start with the figures module loaded and never re-run the caller's main module,
and they are forked before the run starts its archive thread.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Iterable, Mapping
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

import pandas as pd

from compaction_bench.executors import bind_to_parent
from compaction_bench.reports import figures

#: The columns a timeline reads (all a worker process is sent).
REQUEST_COLUMNS = ["scenario", "profile", "strategy", "repeat", "kind", "request", "step", "true_tokens", "overflow"]
COMPACTION_COLUMNS = ["scenario", "profile", "strategy", "repeat", "trigger", "step", "tokens_before"]


def strategy_order(manifest: Mapping[str, Any], strategies: Iterable[str]) -> list[str]:
    """The report's order of `strategies`: the run's configured order, then any other in name order."""
    present = set(strategies)
    configured = [s for s in manifest.get("config", {}).get("strategies", []) if s in present]
    return configured + sorted(present - set(configured))


class Timelines:
    """Every scenario's timelines (one per profile, in the order its requests name the profiles),
    from the run's merged `requests` and `compactions` tables and its `manifest`."""

    def __init__(self, requests: pd.DataFrame, compactions: pd.DataFrame, manifest: Mapping[str, Any], jobs: int = 1) -> None:
        order = strategy_order(manifest, requests["strategy"].unique() if "strategy" in requests else [])
        requests = requests[[c for c in REQUEST_COLUMNS if c in requests.columns]]
        compactions = compactions[[c for c in COMPACTION_COLUMNS if c in compactions.columns]] if not compactions.empty else compactions
        marks = {key: frame for key, frame in compactions.groupby(["scenario", "profile"], sort=False)} if not compactions.empty else {}
        self._work: dict[str, list[tuple[Any, ...]]] = {}
        for scenario, own in requests.groupby("scenario", sort=False):
            for profile_key, frame in own.groupby("profile", sort=False):
                profile = str(profile_key)
                points = marks.get((scenario, profile_key), compactions.iloc[:0])
                # the window as the run recorded it, not as today's code defines the profile
                window = manifest.get("profiles", {}).get(profile, {}).get("context_window")
                self._work.setdefault(str(scenario), []).append((frame, points, window, f"{scenario} · {profile}", order))
        count = sum(len(w) for w in self._work.values())
        workers = min((jobs if jobs > 0 else os.cpu_count() or 1) - 1, count)
        self._pool: ProcessPoolExecutor | None = None
        self._futures: dict[str, list[Future[str]]] = {}
        if workers >= 1 and sys.platform.startswith("linux"):
            # A forking pool starts every worker at the first submit, before it starts its own thread.
            # Its workers end with this process even when it is killed (`bind_to_parent`), as the cells' do.
            self._pool = ProcessPoolExecutor(
                max_workers=workers, mp_context=multiprocessing.get_context("fork"), initializer=bind_to_parent, initargs=(os.getpid(),)
            )
            # Largest first: the scenario with the most requests is not left for last.
            for scenario, work in sorted(self._work.items(), key=lambda kv: -sum(len(w[0]) for w in kv[1])):
                self._futures[scenario] = [self._pool.submit(figures.context_timeline, *args) for args in work]

    def get(self, scenario: str) -> list[str]:
        """The scenario's timelines as SVG strings (waiting for them when they are being drawn)."""
        if scenario in self._futures:
            return [future.result() for future in self._futures[scenario]]
        return [figures.context_timeline(*args) for args in self._work.get(scenario, [])]

    def close(self) -> None:
        """End the worker processes (drawings not collected yet are abandoned)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> Timelines:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
