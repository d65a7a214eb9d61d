"""Run lifecycle: what a worker can do to a run (die, raise what does not pickle, fail on Ray) and how a run
reaches a Ray cluster. Each case was a reproduced defect; see the test's docstring."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import socket
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

import compaction_bench as bench
from compaction_bench import executors
from compaction_bench.executors import execute
from compaction_bench.runner import CellsFailed, RunError
from compaction_bench.store import load_run
from tests.conftest import write_tiny_session


def _suicidal(shared, n):
    if n == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return n * 10


def _dies_or_works(shared, kind):
    if kind == "dies":
        time.sleep(0.3)  # the long task beside it has started by then
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(1.5)
    return kind


def test_a_task_in_flight_beside_two_deaths_is_sent_again_each_time():
    """Two workers; the long task 1 runs beside task 0, whose worker dies, and again beside task 2, whose
    worker dies too. Each death is told apart (the killed worker's SIGKILL against the SIGTERM the pool sent
    the others), so task 1 is innocent both times and must finish. Before: a task was sent again only once,
    so task 1 failed as if its own worker had died (the flaky end-to-end test's third failed cell)."""
    work = [("dies",), ("works",), ("dies",)]
    outcomes = dict(executors.run_processes(_dies_or_works, None, work, executors._Queue(len(work), None), 2))
    assert outcomes[1] == "works"
    assert all(isinstance(outcomes[n], executors.WorkerDied) and "killed by SIGKILL" in str(outcomes[n]) for n in (0, 2))


class _TwoArguments(Exception):
    def __init__(self, path, reason):  # pickles, but cannot be rebuilt from its args (like atomic.WriteFailed)
        super().__init__(f"{path}: {reason}")


def _raises_unpicklable(shared, n):
    if n == 1:
        raise _TwoArguments("out/file", "disk full")
    return n


def test_a_worker_killed_by_sigkill_fails_its_task_only_and_the_others_finish():
    """Before: SIGKILL of one worker broke the pool; the run died with a `BrokenProcessPool` traceback
    raised from `submit`, naming no cell, and every cell in flight was lost."""
    outcomes = dict(execute(_suicidal, [(n,) for n in range(6)], jobs=2))
    assert sorted(outcomes) == list(range(6))
    assert isinstance(outcomes[2], executors.WorkerDied) and "killed by SIGKILL" in str(outcomes[2])
    assert {n: v for n, v in outcomes.items() if n != 2} == {n: n * 10 for n in range(6) if n != 2}


def test_an_exception_that_does_not_pickle_comes_back_without_breaking_the_pool():
    """Before: unpickling it in the parent failed, which broke the pool ("terminated abruptly") and the run."""
    outcomes = dict(execute(_raises_unpicklable, [(n,) for n in range(4)], jobs=2))
    assert {n: v for n, v in outcomes.items() if n != 1} == {0: 0, 2: 2, 3: 3}
    error = outcomes[1]
    assert isinstance(error, executors.TaskError) and str(error) == "_TwoArguments: out/file: disk full"
    # the original traceback travels as text: errors.log shows where it was raised
    assert "_raises_unpicklable" in str(error.__cause__) and "_TwoArguments" in str(error.__cause__)


KILLER = """
import os, signal
from pathlib import Path
from compaction_bench.strategies.baselines import NoCompaction

SWITCH = Path(__file__).with_name("kill-now")


class Killer(NoCompaction):
    def request(self):
        if SWITCH.exists():
            os.kill(os.getpid(), signal.SIGKILL)  # as the kernel's OOM killer would
        return super().request()
"""


def test_a_killed_worker_fails_its_cell_by_name_and_resume_gives_the_uninterrupted_tables(tmp_path):
    session = write_tiny_session(tmp_path)
    other = tmp_path / "other.jsonl"
    other.write_text(session.read_text().replace("Two files", "2 files"))  # another session (a copy would be one scenario)
    plugin = tmp_path / "killer.py"
    plugin.write_text(KILLER)
    spec = f"{plugin}:Killer"
    common = dict(strategies=["none", spec, "truncate"], profiles=["32k"], out=tmp_path / "runs", jobs=2, report=False, progress=False,
                  probes=str(tmp_path / "probes.yaml"))
    whole = load_run(bench.run([session, other], run_id="whole", **common))
    (tmp_path / "kill-now").write_text("")
    with pytest.raises(CellsFailed) as failed:
        bench.run([session, other], run_id="r", **common)
    message = str(failed.value)
    assert "2 of 6 cells failed" in message and "killer.py_Killer" in message and "WorkerDied" in message and "SIGKILL" in message
    log = (tmp_path / "runs" / "r" / "errors.log").read_text()
    assert log.count("killed by SIGKILL") == 2
    # the cells that ran beside the dead worker were handed out again: only the killer's cells are missing
    assert set(load_run(tmp_path / "runs" / "r")["requests"]["strategy"]) == {"none", "truncate"}
    (tmp_path / "kill-now").unlink()
    resumed = load_run(bench.run([session, other], run_id="r", resume=True, **common))
    for name in ("requests", "compactions", "probes", "summary"):
        pd.testing.assert_frame_equal(whole[name], resumed[name], check_exact=True, obj=name)


RAISER = """
from compaction_bench.strategies.baselines import NoCompaction


class Raiser(NoCompaction):
    def request(self):
        raise ZeroDivisionError("boom in the plug-in")
"""


@pytest.mark.slow
def test_a_cell_failing_on_ray_is_named_and_its_traceback_kept(tmp_path):
    """Before: Ray sends the exception back without its traceback, so errors.log held only
    `ZeroDivisionError: boom` and not where the strategy raised it."""
    session = write_tiny_session(tmp_path)
    (tmp_path / "raiser.py").write_text(RAISER)
    with pytest.raises(CellsFailed, match=r"1 of 2 cells failed \(first: tiny\.jsonl__.*raiser\.py_Raiser.*ZeroDivisionError: boom"):
        bench.run([session], strategies=["none", f"{tmp_path / 'raiser.py'}:Raiser"], profiles=["32k"], out=tmp_path / "runs", run_id="r",
                  executor="ray", jobs=1, report=False, progress=False, probes=str(tmp_path / "probes.yaml"))
    log = (tmp_path / "runs" / "r" / "errors.log").read_text()
    assert 'raise ZeroDivisionError("boom in the plug-in")' in log and "raiser.py" in log and "in request" in log
    assert "\x1b[" not in log


class _FakeRay:
    """Enough of `ray` for `run_ray` to start: `init` records the auth mode it sees and fails as Ray does."""

    def __init__(self, error: BaseException | None) -> None:
        self.error, self.seen = error, []

    def is_initialized(self) -> bool:
        return False

    def init(self, **kwargs):
        self.seen.append(os.environ.get("RAY_AUTH_MODE"))
        if self.error is not None:
            raise self.error

    def shutdown(self) -> None:
        pass


def test_a_cluster_address_keeps_its_authentication_and_a_refusal_says_what_to_set(monkeypatch):
    """Before: the driver set RAY_AUTH_MODE=disabled for every cluster it joined, so it could never join
    one started with `ray start --head` (Ray 2.59+ turns token authentication on when a token exists):
    20 s of retries, then "Failed to connect to Ray cluster at …" and nothing about why."""
    auth = RuntimeError("ray.exceptions.AuthenticationError: RPC error: InvalidAuthToken: Authentication token is missing")
    refused = ConnectionError("Failed to connect to Ray cluster at 10.0.0.5:6379")
    refused.__cause__ = auth
    fake = _FakeRay(refused)
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    with pytest.raises(executors.ClusterUnreachable) as caught:
        list(execute(_suicidal, [(0,)], executor="ray", address="10.0.0.5:6379"))
    assert fake.seen == [None] and "RAY_AUTH_MODE" not in os.environ
    assert "--address 10.0.0.5:6379: cannot connect" in str(caught.value) and "RAY_AUTH_MODE=token" in str(caught.value)
    assert isinstance(caught.value, OSError)  # the command line's user errors: one line, exit 2
    # A local cluster of its own (no address) still runs without authentication, as before.
    local = _FakeRay(RuntimeError("stop here"))
    monkeypatch.setitem(sys.modules, "ray", local)
    with pytest.raises(RuntimeError, match="stop here"):
        list(execute(_suicidal, [(0,)], executor="ray"))
    assert local.seen == ["disabled"]


@pytest.mark.parametrize("address", ["127.0.0.1:{closed}", "ray://127.0.0.1:{closed}", "[::1]:{closed}"])
def test_an_address_where_nothing_listens_is_refused_at_once_before_any_folder(tmp_path, address):
    """Before: `ray.init` retried a closed port for minutes (more than 300 s here), logging "Failed to get cluster ID
    from GCS server", and the run's folder was already made."""
    with socket.create_server(("127.0.0.1", 0)) as probe:
        closed = probe.getsockname()[1]  # a port nothing listens on once this socket is closed
    address = address.format(closed=closed)
    session = write_tiny_session(tmp_path)
    started = time.monotonic()
    with pytest.raises(executors.ClusterUnreachable, match=re.escape(f"--address {address}: nothing accepts a connection at ")):
        bench.run([session], strategies=["none"], profiles=["32k"], out=tmp_path / "runs", executor="ray", address=address, progress=False,
                  probes=str(tmp_path / "probes.yaml"))
    assert time.monotonic() - started < executors.CONNECT_TIMEOUT + 5 and not (tmp_path / "runs").exists()


def test_an_address_without_the_ray_executor_is_refused(tmp_path):
    """Before: `--address HOST:PORT` without `--executor ray` was ignored and every cell ran on this machine."""
    session = write_tiny_session(tmp_path)
    with pytest.raises(RunError, match="--address '10.0.0.5:6379' names a Ray cluster: pass --executor ray"):
        bench.run([session], strategies=["none"], profiles=["32k"], out=tmp_path / "runs", address="10.0.0.5:6379", progress=False)
    assert not (tmp_path / "runs").exists()


def test_ray_address_in_the_environment_is_the_cluster_and_a_missing_ray_is_refused_before_any_folder(tmp_path, monkeypatch):
    """RAY_ADDRESS (which a Ray Job's entry point has) made `ray.init` refuse the num_cpus a local cluster is given,
    a 50-line traceback after the run's folder was made; without Ray installed, a RuntimeError's traceback did too."""
    with socket.create_server(("127.0.0.1", 0)) as probe:
        closed = probe.getsockname()[1]
    session = write_tiny_session(tmp_path)
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{closed}")
    with pytest.raises(executors.ClusterUnreachable, match=re.escape(f"RAY_ADDRESS 127.0.0.1:{closed}: nothing accepts a connection at ")):
        bench.run([session], strategies=["none"], profiles=["32k"], out=tmp_path / "runs", executor="ray", progress=False,
                  probes=str(tmp_path / "probes.yaml"))
    assert not (tmp_path / "runs").exists()
    monkeypatch.delenv("RAY_ADDRESS")
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real_find_spec(name, *a))
    with pytest.raises(RunError, match=re.escape("--executor ray needs Ray: pip install 'compaction-bench[ray]'")):
        bench.run([session], strategies=["none"], profiles=["32k"], out=tmp_path / "runs", executor="ray", progress=False,
                  probes=str(tmp_path / "probes.yaml"))
    assert not (tmp_path / "runs").exists()


def test_the_run_folder_the_cells_write_into_is_absolute(tmp_path, monkeypatch):
    """With a relative `-o`, a Ray worker resolved the run folder from its own working folder (where `ray start`
    ran): a real model's responses went to another folder, and `cache export` of the run found none."""
    session = write_tiny_session(tmp_path)
    monkeypatch.chdir(tmp_path)
    root = bench.run([session], strategies=["none"], profiles=["32k"], out="runs", run_id="r", jobs=1, report=False, progress=False,
                     probes=str(tmp_path / "probes.yaml"))
    run_dir = json.loads((tmp_path / "runs" / "r" / "manifest.json").read_text())["config"]["run_dir"]
    assert Path(run_dir).is_absolute() and Path(run_dir) == (tmp_path / "runs" / "r").resolve() == Path(root).resolve()


def _killed_mining(*_args: object) -> list:
    os.kill(os.getpid(), signal.SIGKILL)
    return []


def test_a_mining_worker_that_dies_is_one_error_naming_the_session(tmp_path, monkeypatch):
    """A probe-mining worker killed ended the run in a WorkerDied traceback (exit 1); a cell's worker that dies is
    one line."""
    from compaction_bench import runner
    from compaction_bench.runner import Case, mined_probes
    from compaction_bench.scenarios.synthetic import generate

    scenario = generate("short-turns", seed=0, target_tokens=5_000)
    cases = [Case("first", scenario.transcript, ()), Case("second", scenario.transcript, ())]
    monkeypatch.setattr(runner, "PARALLEL_MINING_FROM", 0)  # mined in worker processes
    monkeypatch.setattr(runner, "_mine_task", _killed_mining)
    with pytest.raises(RunError, match=r"mining the probes of (first|second): "):
        mined_probes(cases, jobs=2)
