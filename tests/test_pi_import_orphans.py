"""Pi import: tool results without a call are reported in `meta["orphans"]`, and call/result pairings that
cannot be told apart in `meta["problems"]`, by the shared builder's rules (scenarios/builder.py), while the
items stay Pi's own (its turn numbering: entries before the first user message have no turn).

`meta["orphans"]` lists results without a call, for every importer; calls without a result are what
`Transcript.orphans()` adds (the corpus files have some: calls of an aborted or last response).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from compaction_bench.importing import load_transcript
from tests.conftest import corpus_files

USAGE = {"input": 10, "output": 5, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 15}


def entry(id_: str, parent: str | None, type_: str = "message", **fields) -> dict:
    return {"type": type_, "id": id_, "parentId": parent, "timestamp": "2026-01-01T10:00:00.000Z", **fields}


def call(call_id: str) -> dict:
    return {"type": "toolCall", "id": call_id, "name": "read", "arguments": {"path": "a.py"}}


def assistant(*blocks: dict) -> dict:
    return {"role": "assistant", "content": list(blocks), "usage": USAGE, "stopReason": "toolUse", "model": "claude-opus-4-5", "timestamp": 1}


def result(call_id: str) -> dict:
    return {"role": "toolResult", "toolCallId": call_id, "toolName": "read", "content": [{"type": "text", "text": "x"}], "isError": False, "timestamp": 1}


def session(tmp_path: Path) -> Path:
    lines = [
        {"type": "session", "version": 3, "id": "s", "timestamp": "2026-01-01T10:00:00.000Z", "cwd": "/p"},
        entry("m", None, "model_change", provider="anthropic", modelId="claude-opus-4-5"),
        entry("u1", "m", message={"role": "user", "content": "read a.py", "timestamp": 1}),
        entry("a1", "u1", message=assistant(call("c1"), call("c2"))),
        entry("r1", "a1", message=result("c1")),
        entry("r0", "r1", message=result("ghost")),  # no call has this id
        entry("u2", "r0", message={"role": "user", "content": "again", "timestamp": 1}),
        entry("a2", "u2", message=assistant(call("c4"))),
        entry("a3", "a2", message=assistant(call("c4"))),  # the same id while the first c4 is unanswered
        entry("r4", "a3", message=result("c4")),
        entry("r5", "r4", message=result("c4")),
    ]
    path = tmp_path / "orphans.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    return path


def test_orphans_and_pairing_problems_are_reported(tmp_path):
    path = session(tmp_path)
    t = load_transcript(path)
    assert list(t.meta["orphans"]) == ["r0"]
    assert list(t.meta["problems"]) == [
        f"{path}: tool call a3.0 repeats the call id 'c4' of a2.0, which is not answered yet; which result answers which call cannot be told"
    ]
    assert t.orphans() == {"calls_without_result": ["a1.1"], "results_without_call": ["r0"]}


def test_items_keep_pis_own_numbering(tmp_path):
    path = session(tmp_path)
    t = load_transcript(path)
    assert [(i.id, i.kind, i.turn, i.response) for i in t.items] == [
        ("m", "marker", None, None),  # before the first user message: no turn (the builder alone would say 0)
        ("u1", "user", 0, None),
        ("a1.0", "tool_call", 0, 0),
        ("a1.1", "tool_call", 0, 0),
        ("r1", "tool_result", 0, None),
        ("r0", "tool_result", 0, None),
        ("u2", "user", 1, None),
        ("a2.0", "tool_call", 1, 1),
        ("a3.0", "tool_call", 1, 2),
        ("r4", "tool_result", 1, None),
        ("r5", "tool_result", 1, None),
    ]
    assert t.source == {"format": "pi", "path": str(path), "session_id": "s", "provider": None}
    assert t.model == "claude-opus-4-5"


@pytest.mark.corpora
@pytest.mark.parametrize("path", corpus_files("pi-session-jsonl"), ids=lambda p: p.name)
def test_corpus_orphans_and_turns_match_the_raw_file(path: Path):
    """Both corpus files are one straight path (each entry's parent is the entry before it), so the raw
    file order is the imported order: results without an earlier call, calls never answered, and the turn
    of every entry (user messages seen before it, minus one) are read from the raw lines."""
    raw = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()][1:]
    # version 1 files have no ids: Pi numbers the entries and chains each to the one before (pi.md §1.1)
    ids = [e.get("id") or f"{n + 1:08x}" for n, e in enumerate(raw)]
    assert all(e.get("parentId", ids[n - 1] if n else None) == (ids[n - 1] if n else None) for n, e in enumerate(raw))
    called: set[str] = set()
    answered: set[str] = set()
    orphan_results, turns, users = [], {}, -1
    for entry_id, e in zip(ids, raw, strict=True):
        message = e.get("message") or {}
        if message.get("role") == "user":
            users += 1
        turns[entry_id] = users if users >= 0 else None
        if message.get("role") == "assistant":
            called.update(b["id"] for b in message.get("content") or () if b.get("type") == "toolCall")
        elif message.get("role") == "toolResult":
            answered.add(message["toolCallId"])
            if message["toolCallId"] not in called:
                orphan_results.append(entry_id)
    t = load_transcript(path)
    assert list(t.meta.get("orphans", ())) == orphan_results
    assert sorted(t.by_id[i].call_id for i in t.orphans()["calls_without_result"]) == sorted(called - answered)
    assert {i.meta["entry"]: i.turn for i in t.items} == turns
    assert Counter(i.kind for i in t.items)["tool_result"] == sum(1 for e in raw if (e.get("message") or {}).get("role") == "toolResult")
    assert list(t.meta["problems"]) == []
