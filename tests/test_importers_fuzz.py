"""Robustness of every registered importer against damaged input (hypothesis, bounded).

Each importer gets a small valid seed in its own format (the head of a corpus file, or a
hand-written sample), then the seed truncated, its lines reordered, a line replaced with random
bytes, a line cut in half, U+2028 put inside a JSON string, invalid UTF-8 inserted, the lines
wrapped in a JSON array, or nothing at all. The importer must either return transcripts (with
the damage listed in `meta["problems"]` where the damage is invalid UTF-8) or raise
`TranscriptError` / `ImportFailure` naming the file; any other exception, or a hang, fails.
"""

from __future__ import annotations

import json
import random
import re
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compaction_bench.importing import formats
from compaction_bench.transcript import Item, Transcript, TranscriptError
from tests.conftest import CORPORA

pytestmark = pytest.mark.corpora

CHAT = [
    {"role": "system", "content": "You are a careful assistant."},
    {"role": "user", "content": "List the files, then read setup.py"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"ls\"}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "setup.py\nREADME.md"},
    {"role": "assistant", "content": "Done: two files."},
]


def head_lines(relative: str, n: int) -> bytes:
    return b"\n".join((CORPORA / relative).read_bytes().split(b"\n")[:n]) + b"\n"


def canonical_seed() -> bytes:
    items = [
        Item(id="u0", kind="user", text="please say hi", turn=0),
        Item(id="a0", kind="assistant", text="hello there", response=0, turn=0),
    ]
    return Transcript(id="seed", items=tuple(items), source={"format": "seed"}).dumps().encode()


def opencode_seed() -> bytes:
    """An `opencode export` document (docs/specs/opencode.md §7.3) written by hand."""
    step = {"type": "step-finish", "tokens": {"input": 900, "output": 40, "reasoning": 0, "cache": {"read": 0, "write": 0}}}
    messages = [
        {"info": {"id": "msg_1", "role": "user", "time": {"created": 1}}, "parts": [{"id": "prt_1", "type": "text", "text": "run the tests please"}]},
        {
            "info": {"id": "msg_2", "role": "assistant", "modelID": "claude-x", "time": {"created": 2}},
            "parts": [
                {"id": "prt_2", "type": "step-start"},
                {"id": "prt_3", "type": "text", "text": "I will run them now"},
                {"id": "prt_4", "type": "tool", "callID": "call_1", "tool": "bash", "state": {"status": "completed", "input": {"command": "pytest -q"}, "output": "3 passed in 0.1s"}},
                {"id": "prt_5", **step},
            ],
        },
    ]
    return json.dumps({"info": {"id": "ses_1", "title": "fuzz seed"}, "messages": messages}, indent=1).encode()


SEEDS: dict[str, tuple[str, Callable[[], bytes]]] = {
    "opencode": (".json", opencode_seed),
    "canonical": (".jsonl", canonical_seed),
    "claude-code": (".jsonl", lambda: head_lines("claude-code-jsonl/d-kimuson__claude-code-viewer/1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl", 12)),
    "codex": (".jsonl", lambda: head_lines("codex-rollout-jsonl/MoonLadderStudios__MoonMind/rollout-2025-11-13T18-21-11-019a802a-aab1-7c31-9831-d2510c7a74a2.jsonl", 20)),
    "pi": (".jsonl", lambda: head_lines("pi-session-jsonl/badlogic__pi-mono/large-session.jsonl", 15)),
    "mini-swe-agent": (".traj.json", lambda: (CORPORA / "mini-swe-agent-traj/SWE-agent__mini-swe-agent/github_issue.traj.json").read_bytes()),
    "swe-agent": (".traj", lambda: (CORPORA / "swe-agent-traj/SWE-agent__SWE-agent/function_calling_simple.traj").read_bytes()),
    "openhands": (".json", lambda: (CORPORA / "openhands-events/All-Hands-AI__OpenHands/basic_interactions.json").read_bytes()),
    "aider": (".md", lambda: head_lines("aider-chat-history-md/Aider-AI__aider/chat-history.md", 120)),
    "openai-messages": (".jsonl", lambda: "\n".join(json.dumps(m) for m in CHAT).encode() + b"\n"),
    "hf-dataset": (".jsonl", lambda: json.dumps({"messages": CHAT}).encode() + b"\n" + json.dumps({"messages": CHAT[:2]}).encode() + b"\n"),
}
#: The seed of a format with no dedicated sample here: a generic JSON chat (still foreign input).
FALLBACK = (".json", lambda: json.dumps(CHAT, indent=1).encode())


def seed_of(fmt: str) -> tuple[str, bytes]:
    suffix, make = SEEDS.get(fmt, FALLBACK)
    return suffix, make()


# --------------------------------------------------------------------------- damage
def lines_of(data: bytes) -> list[bytes]:
    return data.rstrip(b"\n").split(b"\n")


def string_starts(data: bytes) -> list[int]:
    """Offsets just inside JSON string values of prose (values with a space, not enum-like values
    such as a role), or line starts for non-JSON text."""
    found = [m.end() for m in re.finditer(rb':\s?"(?=[^"\\\n]{0,200} )', data)]
    return found or [m.start() for m in re.finditer(rb"^[A-Za-z]", data, re.M)] or [0]


def damage(data: bytes, kind: str, rnd: random.Random, junk: bytes) -> bytes:
    lines = lines_of(data)
    n = rnd.randrange(len(lines))
    if kind == "truncate":
        return data[: rnd.randrange(len(data))]
    if kind == "reorder":
        rnd.shuffle(lines)
        return b"\n".join(lines) + b"\n"
    if kind == "corrupt":
        lines[n] = junk
        return b"\n".join(lines) + b"\n"
    if kind == "cut_line":
        lines[n] = lines[n][: len(lines[n]) // 2]
        return b"\n".join(lines) + b"\n"
    if kind == "u2028":
        at = rnd.choice(string_starts(data))
        return data[:at] + "\u2028".encode() + data[at:]
    if kind == "bad_utf8":
        at = rnd.choice(string_starts(data))
        return data[:at] + b"\xff\xfe" + data[at:]
    if kind == "json_array":
        return b"[" + b",\n".join(lines) + b"]\n"
    assert kind == "empty"
    return b""


KINDS = ("truncate", "reorder", "corrupt", "cut_line", "u2028", "bad_utf8", "json_array", "empty")


@contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    def hang(signum, frame):
        raise TimeoutError(f"import did not finish within {seconds}s")

    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def run_import(fmt: str, path: Path) -> list[Transcript] | TranscriptError:
    cls = formats()[fmt]
    with time_limit(20):
        try:
            return cls().load(path)
        except TranscriptError as exc:
            return exc


IMPORTERS = sorted(formats())


def test_every_declared_importer_is_registered():
    declared = {"canonical", "codex", "pi", "opencode", "claude-code", "mini-swe-agent", "swe-agent", "openhands", "aider", "openai-messages", "hf-dataset"}
    assert declared <= set(IMPORTERS)


@pytest.mark.parametrize("fmt", IMPORTERS)
def test_seed_imports_cleanly(fmt: str, tmp_path: Path):
    if fmt not in SEEDS:
        pytest.fail(f"no fuzz seed for importer {fmt!r}: add one to SEEDS")
    suffix, data = seed_of(fmt)
    path = tmp_path / f"seed{suffix}"
    path.write_bytes(data)
    result = run_import(fmt, path)
    assert isinstance(result, list) and result, result
    assert not any(t.meta.get("problems") for t in result)


def check_damaged(fmt: str, kind: str, seed: int, junk: bytes, directory: Path) -> None:
    suffix, data = seed_of(fmt)
    path = directory / f"damaged-{kind}-{seed}{suffix}"
    path.write_bytes(damage(data, kind, random.Random(seed), junk.replace(b"\n", b" ")))
    result = run_import(fmt, path)
    if isinstance(result, TranscriptError):
        assert str(path) in str(result), f"the failure does not name the file: {result}"
        assert kind != "u2028", f"U+2028 inside a JSON string is valid input: {result}"
        return
    assert isinstance(result, list) and all(isinstance(t, Transcript) for t in result)
    if kind == "bad_utf8":
        assert any(p for t in result for p in t.meta.get("problems", ())), "invalid UTF-8 imported without a problem in meta"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("fmt", IMPORTERS)
def test_each_kind_of_damage(fmt: str, kind: str, tmp_path: Path):
    check_damaged(fmt, kind, 0, b"\x00garbage{\"", tmp_path)


@pytest.mark.parametrize("fmt", IMPORTERS)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(KINDS), seed=st.integers(0, 2**16), junk=st.binary(min_size=1, max_size=40))
def test_random_damage(fmt: str, kind: str, seed: int, junk: bytes, tmp_path: Path):
    check_damaged(fmt, kind, seed, junk, tmp_path)
