"""Test set-up: offline environment, a socket blocker, and the path of the shared corpora."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

REPO = Path(__file__).resolve().parent.parent
CORPORA = Path(os.environ.get("COMPACTION_BENCH_CORPORA", REPO.parent / "shared" / "corpora"))


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
