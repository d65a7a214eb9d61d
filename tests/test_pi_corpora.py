"""The Pi importer and strategies on the two real Pi sessions of the shared corpora (docs/specs/pi.md §8).

Expected counts and recorded numbers are read from the raw JSONL files inside the tests.
"""

from __future__ import annotations

import json
from functools import cache

import pytest

from compaction_bench.fidelity import fidelity_rows, fidelity_table
from compaction_bench.importing import load_transcript
from compaction_bench.replay import replay
from tests.conftest import CORPORA
from tests.pi_builders import tool_pair_problems

pytestmark = pytest.mark.corpora

FOLDER = CORPORA / "pi-session-jsonl" / "badlogic__pi-mono"
SESSIONS = ("before-compaction.jsonl", "large-session.jsonl")


@cache
def raw_lines(name: str) -> tuple[dict, ...]:
    return tuple(json.loads(line) for line in (FOLDER / name).read_text(encoding="utf-8").splitlines() if line.strip())


@pytest.mark.parametrize("name", SESSIONS)
def test_import_counts_match_the_raw_file(name):
    raw = raw_lines(name)
    t = load_transcript(FOLDER / name)
    roles = [line["message"]["role"] for line in raw if line.get("type") == "message"]
    assert len(t.real_user_messages()) == roles.count("user")
    assert len([i for i in t.items if i.kind == "tool_result"]) == roles.count("toolResult")
    assert len(t.steps()) == roles.count("assistant")
    assert len([i for i in t.items if i.meta.get("role") == "bashExecution"]) == roles.count("bashExecution")
    raw_compactions = [(n, line) for n, line in enumerate(raw) if line.get("type") == "compaction"]
    markers = t.markers("compaction")
    assert len(markers) == len(raw_compactions)
    for marker, (_, line) in zip(markers, raw_compactions, strict=True):
        assert marker.meta["tokensBefore"] == line["tokensBefore"]
        kept = t.by_id[marker.meta["firstKeptEntryId"]]
        # the legacy index points at a file line (header = 0); the migrated id names the same message
        assert kept.text == "".join(b["text"] for b in raw[line["firstKeptEntryIndex"]]["message"]["content"] if b["type"] == "text")
    assert t.meta["problems"] == ()


@pytest.mark.parametrize("strategy", ["pi", "pi-2026-03", "pi-2025-12"])
@pytest.mark.parametrize("name", SESSIONS)
def test_replay_at_64k_completes_without_orphan_tool_pairs(name, strategy):
    t = load_transcript(FOLDER / name)
    result = replay(t, strategy, profile="64k")
    assert result.compactions, "a 64k window forces compactions on these sessions"
    for request in result.requests:
        if request.kind != "final":
            assert tool_pair_problems(request.messages) == [], (request.index, request.kind)
    assert result.final.messages


def test_fidelity_against_the_recorded_compactions():
    raw = raw_lines("before-compaction.jsonl")
    recorded = [line["tokensBefore"] for line in raw if line.get("type") == "compaction"]
    rows = fidelity_rows(FOLDER / "before-compaction.jsonl")
    for strategy in ("pi", "pi-2026-03"):
        mine = [r for r in rows if r.strategy == strategy]
        assert [r.recorded_tokens_before for r in mine] == recorded
        # usage-based tokensBefore: the recorded numbers come back exactly
        assert [r.tokens_before for r in mine] == recorded
        # 200k window - 16,384 reserve = 183,616: the first (manual) compaction was under it
        assert [r.trigger.split(" (")[0] for r in mine] == ["does not fire → manual", "fires"]
        # the relation each decision states holds (the threshold shown is the smallest count that fires)
        for row in mine:
            count, sign, threshold = row.trigger.split(" (")[1].rstrip(")").split(" ")
            assert (int(count.replace(",", "")) >= int(threshold.replace(",", ""))) == (sign == "≥"), row.trigger
    table = fidelity_table(FOLDER / "before-compaction.jsonl", strategies=("pi-2026-03",))
    assert table.count("\n") == 1 + len(recorded) and table.startswith("| recorded compaction |")
