"""Where cells run: in this process, in a pool of worker processes, or on a Ray cluster.

Every executor takes the same work (a function and a list of argument tuples) and yields
`(index, result or exception)` as cells finish, so the runner records each cell the moment it is
done and one failing cell never loses the others. Ray (`--executor ray`, optional extra `ray`)
sends cells to a cluster (`--address`, or a local one); workers share the LLM response cache
when they share its folder.

Stopping: worker processes never outlive the run. Each worker asks the kernel for SIGKILL when
its parent dies (Linux `prctl(PR_SET_PDEATHSIG)`) and also watches its parent id once a second
(any POSIX system), so a main process killed with SIGKILL leaves no worker behind. Ctrl-C is the
main process's alone (workers ignore SIGINT), and SIGTERM is turned into the same
`KeyboardInterrupt` while cells run: the pool is cancelled and its workers terminated at once,
and the cells finished so far stay recorded (`--resume` redoes the rest).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from typing import Any

EXECUTORS = ("local", "ray")
#: linux/prctl.h
PR_SET_PDEATHSIG = 1
#: How often a worker checks that its parent is alive (the fallback where prctl is unavailable).
PARENT_POLL_SECONDS = 1.0

Outcome = tuple[int, Any]


def _watch_parent(parent: int) -> None:
    while True:
        time.sleep(PARENT_POLL_SECONDS)
        if os.getppid() != parent:
            os._exit(1)


def _worker_init(parent: int) -> None:
    """Runs first in each worker process: die with the parent, leave Ctrl-C to the parent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))
        except (OSError, AttributeError):
            pass  # the polling thread below still ends the worker
    if os.getppid() != parent:  # the parent died before the request above took effect
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent,), name="parent-watch", daemon=True).start()


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """While cells run in the main thread, SIGTERM raises `KeyboardInterrupt` (a clean stop, like Ctrl-C)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"stopped by signal {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_inline(function: Callable[..., Any], work: Sequence[tuple[Any, ...]]) -> Iterator[Outcome]:
    with _sigterm_interrupts():
        for index, args in enumerate(work):
            try:
                outcome = function(*args)
            except Exception as exc:  # reported per cell by the runner
                outcome = exc
            yield index, outcome


def _stop(pool: ProcessPoolExecutor) -> None:
    """Cancel what has not started and end the workers now (an interrupted or abandoned run)."""
    # The pool keeps its worker processes in a private dict; shutdown(wait=False) alone would let them finish their cells.
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(timeout=5)
        if process.is_alive():
            process.kill()


def run_processes(function: Callable[..., Any], work: Sequence[tuple[Any, ...]], workers: int) -> Iterator[Outcome]:
    pool = ProcessPoolExecutor(max_workers=workers, initializer=_worker_init, initargs=(os.getpid(),))
    completed = False
    try:
        with _sigterm_interrupts():
            futures = {pool.submit(function, *args): index for index, args in enumerate(work)}
            for future in as_completed(futures):
                try:
                    outcome = future.result()
                except Exception as exc:
                    outcome = exc
                yield futures[future], outcome
        completed = True
    finally:
        if completed:
            pool.shutdown(wait=True)
        else:  # Ctrl-C, SIGTERM, or the consumer stopped: no worker may go on
            _stop(pool)


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
