"""Where cells run: in this process, in a pool of worker processes, or on a Ray cluster.

Every executor takes the same work (a function, a `shared` value and a list of argument tuples),
calls `function(shared, *args)` for each tuple and yields `(index, result or exception)` as cells
finish, so the runner records each cell the moment it is done and one failing cell never loses the
others. `shared` (the run's scenarios and settings) reaches each worker once, not with every task:
on Linux worker processes are forked after `warm()` ran in this process, so they start with its
imports, tokenizers and `shared` already in memory (elsewhere each worker receives `shared` once
when it starts); a Ray cluster gets it once through its object store.
Work is handed out one task at a time as workers free up, highest `Priority` first, evaluated at
that moment (so a priority that learns from finished cells steers the rest).

Ray (`--executor ray`, optional extra `ray`) sends cells to a cluster (`--address`, or a local one
started here); the function's results travel back to this process, which writes them, so workers
need no access to the run folder.

Stopping: worker processes never outlive the run. Each worker asks the kernel for SIGKILL when
its parent dies (Linux `prctl(PR_SET_PDEATHSIG)`) and also watches its parent id once a second
(any POSIX system), so a main process killed with SIGKILL leaves no worker behind. Ctrl-C is the
main process's alone (workers ignore SIGINT, and SIGTERM ends a worker at once), and SIGTERM to the
main process is turned into the same `KeyboardInterrupt` (`Terminated`) while cells run: the pool is cancelled and
its workers terminated at once, and the cells finished so far stay recorded (`--resume` redoes the rest).
With Ray the driver's handler replaces Ray's own (which printed a crash report and exited with 15),
and the local cluster started here is shut down.

A worker process that dies (SIGKILL, the kernel's out-of-memory killer, a crash) breaks Python's
process pool: every task in flight then fails with `BrokenProcessPool`, and the pool takes no more
work. The task whose worker died is reported as failed (`WorkerDied`, naming the signal); the other
tasks that were in flight with it go out again in a new pool, and the remaining work continues
there. A task is sent again as often as another task's worker is found dead beside it (every such
break fails the task that killed its worker, so this ends), but only once when the pool cannot tell
which worker died (then every task that had started is reported, none is retried forever). A
task's exception that cannot travel back to this process as itself (one that does not pickle) comes
back as a `TaskError` with its type, message and traceback, instead of breaking the pool.
"""

from __future__ import annotations

import ctypes
import heapq
import multiprocessing
import os
import pickle
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Generator, Hashable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Any, Protocol

EXECUTORS = ("local", "ray")
#: linux/prctl.h
PR_SET_PDEATHSIG = 1
#: How often a worker checks that its parent is alive (the fallback where prctl is unavailable).
PARENT_POLL_SECONDS = 1.0

Outcome = tuple[int, Any]
Outcomes = Generator[Outcome, None, None]


class WorkerDied(RuntimeError):
    """The worker process running a task ended abruptly (a signal such as SIGKILL, or an exit), so the task has no result."""


class TaskError(RuntimeError):
    """A task's exception that could not be sent back from its worker process as itself (it does not
    pickle): its type and message; the traceback (`__cause__` where it was caught) holds the original's."""


class RemoteTraceback(Exception):
    """The traceback text of an exception raised in another process, attached as its `__cause__`."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return self.text


class ClusterUnreachable(ConnectionError):
    """`--executor ray --address` could not connect to the cluster (a user error: the address or its authentication)."""


def _watch_parent(parent: int) -> None:
    while True:
        time.sleep(PARENT_POLL_SECONDS)
        if os.getppid() != parent:
            os._exit(1)


#: The run's shared value in a worker process (set by `_worker_init`).
_shared: Any = None
#: Per task index, the id of the worker process that started it (0: not started); shared with the parent.
_started: Any = None


def bind_to_parent(parent: int) -> None:
    """Run first in a worker process forked or spawned by `parent`: end with it, leave Ctrl-C to it.

    Every pool of worker processes the package starts (the cells', the report's drawings) uses it
    as its initializer, so no worker outlives a run killed with SIGKILL."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Forked while the parent turns SIGTERM into KeyboardInterrupt: a worker ends at once and quietly instead.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))
        except (OSError, AttributeError):
            pass  # the polling thread below still ends the worker
    if os.getppid() != parent:  # the parent died before the request above took effect
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent,), name="parent-watch", daemon=True).start()


def _worker_init(parent: int, shared: Any, started: Any = None) -> None:
    """Runs first in each cell worker process: keep `shared` (and the parent's table of which process
    started which task), end with the parent (`bind_to_parent`)."""
    global _shared, _started
    _shared, _started = shared, started
    bind_to_parent(parent)


def _sendable(exc: Exception) -> bool:
    """Whether `exc` comes back from a worker process as itself (pickles and unpickles)."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return False
    return True


def _call_with_shared(function: Callable[..., Any], index: int, *args: Any) -> Any:
    if _started is not None:
        _started[index] = os.getpid()
    try:
        return function(_shared, *args)
    except Exception as exc:
        if _sendable(exc):
            raise
        # Unpickling it in the parent would fail there and break the whole pool ("terminated abruptly").
        raise TaskError(f"{type(exc).__qualname__}: {exc}") from exc


class Priority(Protocol):
    """The order work is handed out in: each task belongs to a `group` and has a fixed `weight`; its
    priority is `weight(index) * rate(group)`, where a group's `rate` may change as tasks finish.
    The highest priority goes first, then the higher weight, then the lower index."""

    def group(self, index: int) -> Hashable: ...

    def weight(self, index: int) -> float: ...

    def rate(self, group: Hashable) -> float: ...


class _Queue:
    """Indices of the work not handed out yet; `take()` gives the one of highest `Priority` now (in
    index order without one).

    Within a group the order never changes (one rate scales every weight), so each group is a heap by
    weight and a take compares only the groups' heads: time per take grows with the number of groups,
    not with the number of tasks."""

    def __init__(self, size: int, priority: Priority | None) -> None:
        self.priority = priority
        self._left = size
        self._next = 0  # without a priority: the next index
        self._heaps: dict[Hashable, list[tuple[float, int]]] = {}
        if priority is not None:
            for index in range(size):
                self._heaps.setdefault(priority.group(index), []).append((-priority.weight(index), index))
            for heap in self._heaps.values():
                heapq.heapify(heap)

    def __bool__(self) -> bool:
        return self._left > 0

    def take(self) -> int:
        if self._left <= 0:
            raise IndexError("no work left")
        self._left -= 1
        if self.priority is None:
            self._next += 1
            return self._next - 1
        rate = self.priority.rate
        best = max(
            (group for group, heap in self._heaps.items() if heap),
            key=lambda group: (-self._heaps[group][0][0] * rate(group), -self._heaps[group][0][0], -self._heaps[group][0][1]),
        )
        return heapq.heappop(self._heaps[best])[1]


class Terminated(KeyboardInterrupt):
    """SIGTERM reached the main process while cells ran: handled everywhere as Ctrl-C is.

    A class of its own rather than `KeyboardInterrupt` itself: when a plain `KeyboardInterrupt` ends
    code run from a string (`exec`, as a dataclass or named tuple definition does), CPython marks
    the process to end by SIGINT even if the exception is caught later, and `python -m
    compaction_bench.cli` then exits -2 instead of the 130 `main` chose. It compares the exact class."""


@contextmanager
def sigterm_interrupts() -> Iterator[Callable[[], None]]:
    """While the block runs in the main thread (a whole run, `runner.run`, or its cells), SIGTERM raises
    `Terminated` (a clean stop, like Ctrl-C). Nested uses restore the outer handler.

    Yields a check that raises `Terminated` again once SIGTERM has come: the executors call it
    between cells, so a stop is not lost when the handler's exception was raised inside a finalizer
    (`__del__`, a weakref callback), where Python prints and drops it."""
    received: list[int] = []

    def check() -> None:
        if received:
            raise Terminated(f"stopped by signal {signal.Signals(received[0]).name}")

    if threading.current_thread() is not threading.main_thread():
        yield check
        return

    def interrupt(signum: int, frame: Any) -> None:
        received.append(signum)
        check()

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield check
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_inline(function: Callable[..., Any], shared: Any, work: Sequence[tuple[Any, ...]], queue: _Queue) -> Outcomes:
    with sigterm_interrupts() as stop_if_terminated:
        while queue:
            stop_if_terminated()
            index = queue.take()
            try:
                outcome = function(shared, *work[index])
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


def _exit_code(process: Any, timeout: float = 5.0) -> int | None:
    """A worker's exit code once it has ended (None: not known). The pool's own thread terminates and
    reaps the other workers of a broken pool while this one reads them: a worker ended by that SIGTERM
    but not yet reaped has no exit code, and would read as the one that died."""
    if process is None:
        return None
    deadline = time.monotonic() + timeout
    while process.exitcode is None and time.monotonic() < deadline:
        process.join(timeout=0.05)
    return process.exitcode


def _death(process: Any, pid: int) -> str:
    """How worker `pid` ended, from its `multiprocessing.Process` (None: not known)."""
    code = getattr(process, "exitcode", None)
    if code is None:
        return f"the worker process running it (pid {pid}) ended abruptly"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        oom = " (the kernel's out-of-memory killer sends it too)" if -code == signal.SIGKILL else ""
        return f"the worker process running it (pid {pid}) was killed by {name}{oom}"
    return f"the worker process running it (pid {pid}) exited with status {code}"


def run_processes(
    function: Callable[..., Any], shared: Any, work: Sequence[tuple[Any, ...]], queue: _Queue, workers: int
) -> Outcomes:
    # Linux forks (workers start with what `warm` loaded); elsewhere the platform's default start method.
    context = multiprocessing.get_context("fork") if sys.platform.startswith("linux") else multiprocessing.get_context()
    started = context.RawArray("q", len(work))  # which worker process started each task (see `_call_with_shared`)
    again: list[int] = []  # tasks to hand out before the queue: in flight when another task's worker died
    retried: set[int] = set()
    unstarted_breaks = 0  # pools that broke before any task in flight had started (e.g. in a worker's start)
    with sigterm_interrupts() as stop_if_terminated:
        while queue or again:
            pool = ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_worker_init,
                                       initargs=(os.getpid(), shared, started))
            processes: dict[int, Any] = {}  # pid -> Process, to read how a worker ended
            broken: list[int] = []
            why = ""
            completed = False
            try:
                running: dict[Future[Any], int] = {}

                def submit(pool: ProcessPoolExecutor = pool, running: dict[Future[Any], int] = running,
                           processes: dict[int, Any] = processes) -> bool:
                    index = again.pop(0) if again else queue.take()
                    started[index] = 0
                    try:
                        future = pool.submit(_call_with_shared, function, index, *work[index])
                    except BrokenProcessPool:  # a worker died since the last result
                        again.insert(0, index)
                        return False
                    running[future] = index
                    processes.update(getattr(pool, "_processes", None) or {})
                    return True

                while (queue or again) and len(running) < workers + 1 and submit():  # one queued behind the busy workers
                    pass
                while running:
                    finished, _ = wait(running, return_when=FIRST_COMPLETED)
                    stop_if_terminated()
                    for future in finished:
                        index = running.pop(future)
                        try:
                            outcome = future.result()
                        except BrokenProcessPool as exc:
                            broken.append(index)
                            why = why or str(exc.__cause__ or exc).strip()
                            continue
                        except Exception as exc:
                            outcome = exc
                        yield index, outcome
                        stop_if_terminated()
                        if (queue or again) and not broken:
                            submit()
                completed = not broken
            finally:
                if completed:
                    pool.shutdown(wait=True)
                else:  # Ctrl-C, SIGTERM, the consumer stopped, or a worker died: no worker may go on
                    _stop(pool)
            if not broken:
                continue
            # Which task's worker died? The pool ended the other workers with SIGTERM; the dead one ended otherwise.
            suspects = {index: started[index] for index in broken if started[index]}
            culprits = [i for i, pid in suspects.items() if _exit_code(processes.get(pid)) != -signal.SIGTERM]
            told = bool(culprits)
            unstarted_breaks = 0 if suspects else unstarted_breaks + 1
            if not told:  # not told apart: every started task is reported, none is retried forever
                culprits = list(suspects) if suspects or unstarted_breaks < 3 else list(broken)
            for index in sorted(broken):
                # An innocent task goes out again each time another task's worker is found dead beside it (each such
                # break fails that task, so this ends); when the dead worker cannot be told apart, only once.
                if index in culprits or (index in retried and not told):
                    pid = suspects.get(index, 0)
                    death = _death(processes.get(pid), pid) if told else f"the process pool broke while it ran ({why or 'no cause given'})"
                    yield index, WorkerDied(death)
                    stop_if_terminated()
                else:
                    if index in suspects:
                        retried.add(index)
                    again.append(index)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _task_failure(exc: Exception) -> Exception:
    """What a failed Ray task raised, with the worker's traceback as its `__cause__` (Ray sends the
    exception back without one: errors.log would show only its last line)."""
    cause = getattr(exc, "cause", None)
    if not isinstance(cause, Exception):
        return exc
    text = getattr(exc, "traceback_str", None) or str(exc)
    cause.__cause__ = RemoteTraceback(_ANSI.sub("", str(text)))
    return cause


def _connect_error(address: str, exc: BaseException) -> ClusterUnreachable:
    """The error for a cluster `ray.init` could not join, with what to check (its authentication when it said so)."""
    chain, seen = [], set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        chain.append(str(link))
        link = link.__cause__ or link.__context__
    text = " ".join(chain)
    message = f"--address {address}: cannot connect to the Ray cluster ({str(exc).strip() or type(exc).__name__})"
    if "auth" in text.lower():
        message += (
            "; the cluster uses token authentication: run with RAY_AUTH_MODE=token and the cluster's token in "
            "~/.ray/auth_token, RAY_AUTH_TOKEN_PATH or RAY_AUTH_TOKEN (see the README, \"Running on a Ray cluster\")"
        )
    return ClusterUnreachable(message)


#: Seconds a cluster address is given to accept a connection before Ray is asked to join it (`check_reachable`).
CONNECT_TIMEOUT = 10.0


def _host_port(address: str) -> tuple[str, int] | None:
    """The host and port of a cluster address (`HOST:PORT`, `[IPv6]:PORT`, `ray://HOST:PORT`); None for a form Ray
    resolves itself (`auto`, `local`, an address without a port)."""
    host, colon, port = address.removeprefix("ray://").rpartition(":")
    if not colon or not host or not port.isdigit():
        return None
    return host.removeprefix("[").removesuffix("]"), int(port)


def check_reachable(address: str, given_as: str = "--address") -> None:
    """Refuse at once an address where nothing accepts a connection: `ray.init` retries such an address for
    minutes (a closed port, a head that is down, a mistyped host) instead of failing. `runner.run` calls it before
    the run's folder is made, so `run_ray` does not connect a second time; `given_as` is where the address came from."""
    where = _host_port(address)
    if where is None:
        return
    try:
        socket.create_connection(where, timeout=CONNECT_TIMEOUT).close()
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise ClusterUnreachable(
            f"{given_as} {address}: nothing accepts a connection at {where[0]}:{where[1]} ({reason}); start the cluster's head "
            "there (`ray start --head`) or check the address"
        ) from None


def run_ray(
    function: Callable[..., Any], shared: Any, work: Sequence[tuple[Any, ...]], queue: _Queue, workers: int, address: str | None
) -> Outcomes:
    try:
        import ray
    except ImportError:
        raise RuntimeError("--executor ray needs Ray: pip install 'compaction-bench[ray]'") from None
    started_here = not ray.is_initialized()
    if started_here:
        if not address:  # a private local cluster; a cluster at an address keeps its own authentication (`_connect_error`)
            os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        try:
            ray.init(
                address=address,
                num_cpus=None if address else workers,
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
                # Workers inherit the driver's environment: offline switches and the cache folder.
                runtime_env={"env_vars": {k: v for k, v in os.environ.items() if k.startswith(("LITELLM_", "HF_", "COMPACTION_BENCH_"))}},
            )
        except (ConnectionError, RuntimeError) as exc:
            if not address:
                raise
            raise _connect_error(address, exc) from None
    try:
        with sigterm_interrupts() as stop_if_terminated:  # replaces Ray's own SIGTERM handler in the driver
            remote = ray.remote(function)
            shared_ref = ray.put(shared)  # sent to the cluster once; each node fetches it once
            slots = workers if not address else max(workers, int(ray.cluster_resources().get("CPU", workers)))
            pending: dict[Any, int] = {}

            def submit() -> None:
                index = queue.take()
                pending[remote.remote(shared_ref, *work[index])] = index

            while queue and len(pending) < slots + 1:
                submit()
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                stop_if_terminated()
                for ref in done:
                    index = pending.pop(ref)
                    try:
                        outcome = ray.get(ref)
                    except Exception as exc:
                        outcome = _task_failure(exc)
                    yield index, outcome
                    stop_if_terminated()
                    if queue:
                        submit()
    finally:
        if started_here:
            ray.shutdown()


def execute(
    function: Callable[..., Any],
    work: Sequence[tuple[Any, ...]],
    *,
    shared: Any = None,
    executor: str = "local",
    jobs: int = 0,
    address: str | None = None,
    priority: Priority | None = None,
    warm: Callable[[], None] | None = None,
) -> Outcomes:
    """Run `function(shared, *args)` for every tuple of `work`, highest `priority` first; yield results as they finish.

    `warm()` runs once in this process before local workers start (they inherit what it loaded).
    `jobs` is the number of local workers (0: one per CPU), or for Ray the number of CPUs of the
    local cluster started here (ignored with an `address`: the cluster's CPUs are used).
    Close the generator (`contextlib.closing`) to stop the workers at once when the results are no
    longer wanted.
    """
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; expected one of {', '.join(EXECUTORS)}")
    workers = max(jobs if jobs > 0 else min(len(work), os.cpu_count() or 1), 1)
    queue = _Queue(len(work), priority)
    if executor == "ray":
        return run_ray(function, shared, work, queue, workers, address)
    if warm is not None:
        warm()
    if workers <= 1 or len(work) <= 1:
        return run_inline(function, shared, work, queue)
    return run_processes(function, shared, work, queue, min(workers, len(work)))
