"""Where cells run: in this process, in a pool of worker processes, or on a Ray cluster.

Every executor takes the same work (a function and a list of argument tuples) and yields
`(index, result or exception)` as cells finish, so the runner records each cell the moment it is
done and one failing cell never loses the others. Ray (`--executor ray`, optional extra `ray`)
sends cells to a cluster (`--address`, or a local one); workers share the LLM response cache
when they share its folder.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

EXECUTORS = ("local", "ray")

Outcome = tuple[int, Any]


def run_inline(function: Callable[..., Any], work: Sequence[tuple[Any, ...]]) -> Iterator[Outcome]:
    for index, args in enumerate(work):
        try:
            yield index, function(*args)
        except Exception as exc:  # reported per cell by the runner
            yield index, exc


def run_processes(function: Callable[..., Any], work: Sequence[tuple[Any, ...]], workers: int) -> Iterator[Outcome]:
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(function, *args): index for index, args in enumerate(work)}
        for future in as_completed(futures):
            try:
                yield futures[future], future.result()
            except Exception as exc:
                yield futures[future], exc


def run_ray(function: Callable[..., Any], work: Sequence[tuple[Any, ...]], workers: int, address: str | None) -> Iterator[Outcome]:
    try:
        import ray
    except ImportError:
        raise RuntimeError("--executor ray needs Ray: pip install 'compaction-bench[ray]'") from None
    started_here = not ray.is_initialized()
    if started_here:
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        ray.init(
            address=address,
            num_cpus=None if address else workers,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
            # Workers inherit the driver's environment: offline switches and the cache folder.
            runtime_env={"env_vars": {k: v for k, v in os.environ.items() if k.startswith(("LITELLM_", "HF_", "COMPACTION_BENCH_"))}},
        )
    try:
        remote = ray.remote(function)
        pending = {remote.remote(*args): index for index, args in enumerate(work)}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                index = pending.pop(ref)
                try:
                    yield index, ray.get(ref)
                except Exception as exc:
                    cause = getattr(exc, "cause", None)
                    yield index, cause if isinstance(cause, Exception) else exc
    finally:
        if started_here:
            ray.shutdown()


def execute(
    function: Callable[..., Any],
    work: Sequence[tuple[Any, ...]],
    *,
    executor: str = "local",
    jobs: int = 0,
    address: str | None = None,
) -> Iterator[Outcome]:
    """Run `function(*args)` for every tuple of `work`; yield results as they finish."""
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; expected one of {', '.join(EXECUTORS)}")
    workers = jobs if jobs > 0 else min(len(work), os.cpu_count() or 1)
    if executor == "ray":
        return run_ray(function, work, max(workers, 1), address)
    if workers <= 1:
        return run_inline(function, work)
    return run_processes(function, work, workers)
