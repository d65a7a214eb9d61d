"""Robustness of every registered importer against damaged input (hypothesis, bounded).

Each importer gets a small valid seed in its own format (the head of a corpus file, or a
hand-written sample), then the seed truncated, its lines reordered, a line replaced with random
bytes, a line cut in half, U+2028 put inside a JSON string, invalid UTF-8 inserted, the lines
wrapped in a JSON array, or nothing at all. The importer must either return transcripts (with
the damage listed in `meta["problems"]` where the damage is invalid UTF-8) or raise
`TranscriptError` / `ImportFailure` naming the file; any other exception, or a hang, fails.

A second, seeded campaign (issue 17) mutates real recorded sessions of every corpus format: cut,
a line deleted or duplicated, invalid UTF-8, a BOM, U+2028, NUL, values of the wrong type, a 5 MB
line, 10,000-level nesting, a 5,000-digit integer, `Infinity`, a lone surrogate, a `.zst` that is
not zstd, a zstd bomb and a valid multi-frame `.zst`; each mutant is imported auto-detected and
forced, in a child process whose peak RSS must stay under 1 GiB, each in under 30 s, and only
`BenchError`s naming the file may come out.
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
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compaction_bench.importing import formats
from compaction_bench.transcript import Item, Transcript, TranscriptError
from tests.conftest import CORPORA, own_peak_rss_kb

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


# --------------------------------------------------------------------------- seeded mutator over real sessions
#: Real recorded sessions (corpora/MANIFEST.md), cut to a few dozen lines or runs so that each mutant
#: imports in well under a second, and the format each is.
CORPUS_SEEDS: dict[str, tuple[str, str, Callable[[], bytes]]] = {
    "claude-code": ("claude-code", ".jsonl", lambda: head_lines(
        "claude-code-jsonl/d-kimuson__claude-code-viewer/1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl", 40)),
    "codex": ("codex", ".jsonl", lambda: head_lines(
        "codex-rollout-jsonl/MoonLadderStudios__MoonMind/rollout-2025-11-13T18-21-11-019a802a-aab1-7c31-9831-d2510c7a74a2.jsonl", 40)),
    "pi": ("pi", ".jsonl", lambda: head_lines("pi-session-jsonl/badlogic__pi-mono/large-session.jsonl", 40)),
    "aider": ("aider", ".md", lambda: head_lines("aider-chat-history-md/Aider-AI__aider/chat-history.md", 150)),
    "mini-swe-agent": ("mini-swe-agent", ".traj.json", lambda: (CORPORA / "mini-swe-agent-traj/SWE-agent__mini-swe-agent/github_issue.traj.json").read_bytes()),
    "swe-agent": ("swe-agent", ".traj", lambda: (CORPORA / "swe-agent-traj/SWE-agent__SWE-agent/function_calling_simple.traj").read_bytes()),
    "openhands-events": ("openhands", ".json", lambda: (CORPORA / "openhands-events/All-Hands-AI__OpenHands/wrong_initial_state.json").read_bytes()),
    "openhands-output": ("openhands", ".jsonl", lambda: head_lines("openhands-events/All-Hands-AI__OpenHands/resolver_mock_output.jsonl", 2)),
    "tau-bench": ("openai-messages", ".json", lambda: json.dumps(
        json.loads((CORPORA / "tau-bench-traj/sierra-research__tau-bench/gpt-4o-airline.json").read_bytes())[:2], indent=1).encode()),
    "canonical": ("canonical", ".jsonl", canonical_seed),
    "opencode": ("opencode", ".json", opencode_seed),
    "openai-messages": ("openai-messages", ".jsonl", SEEDS["openai-messages"][1]),
}

#: Raw JSON text put where a value was (the value is replaced by a marker string, then the marker by this).
HOSTILE_VALUES = {
    "deep_nesting": "[" * 10_000 + "]" * 10_000,
    "huge_int": "9" * 5_000,
    "infinity": "Infinity",
    "lone_surrogate": '"text \\udc80 here"',
}
MUTATIONS = (
    "truncate", "delete", "duplicate", "bad_utf8", "bom", "u2028", "nul", "wrong_types", "huge_line",
    "deep_nesting", "huge_int", "infinity", "lone_surrogate", "non_zstd", "zstd_bomb", "zstd_frames",
)
MARKER = "\u0000FUZZ\u0000"
#: Each input must finish within this many seconds; the whole campaign (a child process) stays under 1 GiB.
INPUT_SECONDS = 30
MAX_RSS_BYTES = 1 << 30
BOMB_BOUND = 32 << 20


def _value_paths(value: object, path: tuple = (), out: list | None = None) -> list[tuple]:
    out = [] if out is None else out
    if len(out) < 5_000:
        if isinstance(value, dict):
            for key, item in value.items():
                out.append((*path, key))
                _value_paths(item, (*path, key), out)
        elif isinstance(value, list):
            for index, item in enumerate(value):
                out.append((*path, index))
                _value_paths(item, (*path, index), out)
    return out


def _replace_values(data: bytes, rnd: random.Random, make: Callable[[object], object], times: int) -> bytes | None:
    """Parse one JSON unit of `data` (a JSONL line, else the whole document), replace `times` random
    values with `make(old)`, write it back; None when the seed holds no JSON."""
    text = data.decode("utf-8")
    units: list[tuple[int, int]] = []
    try:
        json.loads(text)
        units = [(0, len(text))]
    except ValueError:
        start = 0
        for line in text.split("\n"):
            if line.strip().startswith(("{", "[")):
                units.append((start, start + len(line)))
            start += len(line) + 1
    if not units:
        return None
    begin, end = rnd.choice(units)
    try:
        doc = json.loads(text[begin:end])
    except ValueError:
        return None
    for _ in range(times):
        paths = _value_paths(doc)
        if not paths:
            break
        *parents, last = rnd.choice(paths)
        holder = doc
        for key in parents:
            holder = holder[key]
        holder[last] = make(holder[last])
    return (text[:begin] + json.dumps(doc, ensure_ascii=False) + text[end:]).encode("utf-8")


def _other_type(old: object, rnd: random.Random) -> object:
    choices = [7, -1.5, "text", None, True, [], {}, [1, "two"], {"k": "v"}]
    return rnd.choice([c for c in choices if type(c) is not type(old)])


def mutate(data: bytes, kind: str, rnd: random.Random) -> tuple[str, bytes]:
    """The mutant of a seed: (suffix override or "", bytes)."""
    lines = lines_of(data)
    n = rnd.randrange(len(lines))
    if kind == "truncate":
        return "", data[: rnd.randrange(1, len(data))]
    if kind == "delete":
        del lines[n]
        return "", b"\n".join(lines) + b"\n"
    if kind == "duplicate":
        lines.insert(n, lines[n])
        return "", b"\n".join(lines) + b"\n"
    if kind in ("bad_utf8", "u2028", "nul"):
        insert = {"bad_utf8": b"\xff\xfe\xc3", "u2028": "\u2028".encode(), "nul": b"\x00"}[kind]
        at = rnd.choice(string_starts(data))
        return "", data[:at] + insert + data[at:]
    if kind == "bom":
        return "", b"\xef\xbb\xbf" + data
    if kind == "wrong_types":
        return "", _replace_values(data, rnd, lambda old: _other_type(old, rnd), 3) or data.replace(b"\n", b"\n7\n", 1)
    if kind == "huge_line":
        huge = json.dumps({"role": "user", "type": "user", "content": "x" * (5 << 20)}).encode()
        lines.insert(n, huge)
        return "", b"\n".join(lines) + b"\n"
    if kind in HOSTILE_VALUES:
        raw = HOSTILE_VALUES[kind]
        mutated = _replace_values(data, rnd, lambda old: MARKER, 1)
        if mutated is None:  # not JSON (Aider's Markdown): the raw text goes into a line
            lines.insert(n, raw.encode())
            return "", b"\n".join(lines) + b"\n"
        return "", mutated.replace(json.dumps(MARKER).encode(), raw.encode(), 1)
    if kind == "non_zstd":
        return ".zst", rnd.choice([b"", b"\x28\xb5\x2f\xfd" + bytes(rnd.randrange(256) for _ in range(64)), data[:200]])
    if kind == "zstd_bomb":
        compressor = zstandard.ZstdCompressor().compressobj()
        body = compressor.compress(lines[0] + b"\n")
        for _ in range(2 * BOMB_BOUND >> 20):
            body += compressor.compress(b"\n" * (1 << 20))
        return ".zst", body + compressor.flush()
    assert kind == "zstd_frames"
    compressor = zstandard.ZstdCompressor()
    frames = [b"\n".join(lines[i : i + 5]) + b"\n" for i in range(0, len(lines), 5)]
    return ".zst", b"".join(compressor.compress(frame) for frame in frames)


def fuzz_one(path: Path, fmt: str | None) -> tuple[str, str]:
    """("ok" | "refused" | "bug" | "hang", detail) of one import, auto-detected (fmt None) or forced."""
    from compaction_bench.errors import BenchError
    from compaction_bench.importing import load_transcripts

    try:
        with time_limit(INPUT_SECONDS):
            transcripts = load_transcripts(path, format=fmt or "auto")
            for transcript in transcripts:  # what `bench import` writes must be writable
                transcript.dumps().encode("utf-8")
        return "ok", f"{len(transcripts)} transcript(s), {sum(len(t.items) for t in transcripts)} items"
    except TimeoutError as exc:
        return "hang", str(exc)
    except BenchError as exc:
        return ("refused", str(exc)) if str(path) in str(exc) else ("bug", f"error does not name the file: {exc}")
    except Exception as exc:  # the defect this campaign looks for
        return "bug", f"{type(exc).__name__}: {exc}"[:500]


def campaign(directory: str, seed: int = 17) -> dict[str, object]:
    """Every mutation of every corpus seed, imported auto-detected and forced; run in a child process
    so that its peak RSS (`own_peak_rss_kb`) is the campaign's own."""
    import os
    import time

    os.environ["COMPACTION_BENCH_MAX_DECOMPRESSED_BYTES"] = str(BOMB_BOUND)
    records = []
    for name, (fmt, suffix, make) in CORPUS_SEEDS.items():
        data = make()
        for kind in MUTATIONS:
            rnd = random.Random(f"{seed}:{name}:{kind}")
            extra, mutant = mutate(data, kind, rnd)
            path = Path(directory) / f"{name}-{kind}{suffix}{extra}"
            path.write_bytes(mutant)
            for forced in (None, fmt):
                started = time.monotonic()
                outcome, detail = fuzz_one(path, forced)
                if kind == "zstd_frames" and forced:  # valid input: every frame read, as the plain seed imports
                    plain = path.with_name(f"{name}-plain{suffix}")
                    plain.write_bytes(data)
                    expected = fuzz_one(plain, forced)
                    if (outcome, detail) != expected:
                        outcome, detail = "bug", f"multi-frame zstd gave {outcome}: {detail}; the plain file {expected}"
                records.append({"seed": name, "kind": kind, "forced": forced, "outcome": outcome, "detail": detail,
                                "seconds": round(time.monotonic() - started, 3)})
            path.unlink()
    return {"records": records, "peak_rss_bytes": own_peak_rss_kb() * 1024}


def test_seeded_mutants_of_real_sessions_never_crash_hang_or_blow_up(tmp_path: Path):
    import subprocess
    import sys

    from tests.conftest import REPO

    code = "import json, sys; from tests.test_importers_fuzz import campaign; print(json.dumps(campaign(sys.argv[1])))"
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    records = result["records"]
    assert len(records) == len(CORPUS_SEEDS) * len(MUTATIONS) * 2
    bad = [r for r in records if r["outcome"] in ("bug", "hang")]
    assert not bad, "\n".join(f"{r['seed']} {r['kind']} forced={r['forced']}: {r['outcome']}: {r['detail']}" for r in bad[:20])
    assert max(r["seconds"] for r in records) < INPUT_SECONDS
    assert result["peak_rss_bytes"] < MAX_RSS_BYTES, f"peak RSS {result['peak_rss_bytes'] / 2**20:.0f} MiB"
    # The campaign exercised both sides: most mutants import (damage listed as problems), some are refused.
    outcomes = {r["outcome"] for r in records}
    assert outcomes == {"ok", "refused"}
    # A valid multi-frame zstd file imports exactly as its plain seed does (every frame read).
    frames = [r for r in records if r["kind"] == "zstd_frames" and r["forced"] is not None]
    assert all(r["outcome"] == "ok" for r in frames), frames
    # A decompression bomb is refused by the bound, never decompressed into memory.
    bombs = [r for r in records if r["kind"] == "zstd_bomb"]
    assert all(r["outcome"] == "refused" for r in bombs), bombs
