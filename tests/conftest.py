"""Test set-up: offline environment, a socket blocker, and the path of the shared corpora."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

REPO = Path(__file__).resolve().parent.parent
CORPORA = Path(os.environ.get("COMPACTION_BENCH_CORPORA", REPO.parent / "shared" / "corpora"))


#: The command line as a fresh process runs it.
BENCH = [sys.executable, "-m", "compaction_bench.cli"]


def own_peak_rss_kb() -> int:
    """This process image's peak resident memory in KiB (`VmHWM`). `resource`'s `ru_maxrss` is no measure of a child
    process: Linux keeps the replaced image's high-water mark across exec, so a child of a 1 GB test worker reads 1 GB
    whatever it does itself."""
    with open("/proc/self/status", encoding="ascii") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))


def bench_cli(*args: str, env: dict[str, str] | None = None, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """`bench ARGS` in a new process (`env` added to this one's environment), output captured."""
    return subprocess.run([*BENCH, *args], capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})}, **kwargs)


def assert_user_error(proc: subprocess.CompletedProcess[str], *fragments: str) -> str:
    """The process ended as a user error should: exit 2, no traceback, one `error: …` line holding
    every fragment; that line."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def write_tiny_session(folder: Path) -> Path:
    """A hand-built canonical session with one fact (the deploy key), and `probes.yaml` beside it asking for it."""
    from compaction_bench.transcript import Item, Transcript

    items = (
        Item("u0", "user", "Remember: the deploy key is ZEBRA-42. Now list the files.", turn=0),
        Item("c0", "tool_call", call_id="c0", tool_name="bash", arguments='{"command": "ls"}', response=0, turn=0),
        Item("r0", "tool_result", "setup.py\nREADME.md", call_id="c0", turn=0),
        Item("a0", "assistant", "Two files: setup.py and README.md.", response=1, turn=0),
    )
    path = Transcript("tiny", items).write(folder / "tiny.jsonl")
    (folder / "probes.yaml").write_text(
        "- id: key\n  kind: recall\n  question: What is the deploy key?\n  answer: ZEBRA-42\n  match: contains\n  source_text: ZEBRA-42\n"
    )
    return path


def assert_mined_probes_stay_in_their_sessions(sessions: list[Any]) -> None:
    """Probes mined from sessions of one file: every session gets some, their ids are unique (`check_unique` raised
    "duplicate probe id" when two sessions shared an id), and each is asked in the session it was mined from."""
    from compaction_bench.probes import assign_probes, check_unique
    from compaction_bench.scenarios.mining import mine_transcripts

    mined = mine_transcripts(sessions)
    assert {p.session for p in mined} == {t.id for t in sessions}
    check_unique(mined, origin="mined")
    asked, left_out = assign_probes(sessions, mined)
    assert not left_out and all(p.session == t.id for t, probes in zip(sessions, asked, strict=True) for p in probes)


def corpus_files(fmt: str | None = None) -> list[Path]:
    """Every transcript file of the shared corpora (of one format folder), sorted."""
    root = CORPORA / fmt if fmt else CORPORA
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name != "MANIFEST.md")


class NetworkBlocked(RuntimeError):
    pass


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to resolve or connect fails the test loudly."""

    def refuse(*args, **kwargs):
        raise NetworkBlocked(f"network access attempted: {args[:2]}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    yield


@pytest.fixture(autouse=True)
def _isolated_llm_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("COMPACTION_BENCH_CACHE", str(tmp_path_factory.getbasetemp() / "llm-cache"))


@pytest.fixture
def openai_server():
    """A local OpenAI-compatible server on 127.0.0.1 (tests/model_servers.py); `.base_url` is the api base."""
    from tests.model_servers import ModelServer

    server = ModelServer("openai")
    yield server
    server.close()


@pytest.fixture
def anthropic_server():
    """A local Anthropic-compatible server on 127.0.0.1 (tests/model_servers.py)."""
    from tests.model_servers import ModelServer

    server = ModelServer("anthropic")
    yield server
    server.close()


@pytest.fixture(scope="module")
def compacting_case():
    """A synthetic session that compacts at 32k (codex-local summarizes it), with its probes."""
    from compaction_bench.runner import Case
    from compaction_bench.scenarios.synthetic import generate

    scenario = generate("parallel-calls", seed=3, target_tokens=45_000)
    return Case("session", scenario.transcript, tuple(scenario.probes))


def run_once(case: Any, root: Path, run_id: str, **settings: Any) -> Path:
    """`bench.run` of one case: codex-local at 32k, one process, no report, no retries, unless `settings` say otherwise."""
    import compaction_bench as bench

    options = {"strategies": ["codex-local"], "profiles": ["32k"], "jobs": 1, "progress": False, "report": False, "max_retries": 0, **settings}
    return bench.run(cases=[case], out=root, run_id=run_id, **options)
