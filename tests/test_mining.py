"""Probe mining: the probes of a hand-built session are worked out by hand; on the real corpora every
mined answer is verbatim in the recorded file and at least 70% of the probes need no model."""

from __future__ import annotations

import json

import pytest

from compaction_bench.importing import load_transcripts
from compaction_bench.probes import Probe
from compaction_bench.scenarios.mining import mine_probes
from compaction_bench.transcript import Item, Transcript
from tests.conftest import corpus_files

TRACEBACK = """============ FAILURES ============
Traceback (most recent call last):
  File "tests/test_fees.py", line 12, in test_fee
    apply_fees(entry)
TypeError: apply_fees() missing 1 required keyword-only argument: 'rate_table'
Exit code: 1"""

PATCH = "*** Begin Patch\n*** Update File: ledger/fees.py\n@@\n-x\n+y\n*** Add File: ledger/rates.py\n+z\n*** End Patch"


def session() -> Transcript:
    def call(n: int, name: str, args: dict | str, response: int, turn: int) -> Item:
        text = args if isinstance(args, str) else json.dumps(args)
        return Item(f"call{n}", "tool_call", call_id=f"c{n}", tool_name=name, arguments=text, response=response, turn=turn)

    def result(n: int, text: str, turn: int, error: bool = False) -> Item:
        return Item(f"out{n}", "tool_result", text, call_id=f"c{n}", turn=turn, is_error=error)

    items = [
        Item("sys", "system", "You are a coding agent."),
        Item("u0", "user", "Fix the fee calculation. Never push to the main branch. Thanks!", turn=0),
        call(1, "Read", {"file_path": "ledger/fees.py"}, 0, 0),
        result(1, "def apply_fees(entry, *, rate_table): ...", 0),
        call(2, "Bash", {"command": "pytest -x tests/test_fees.py", "description": "Run the fee tests"}, 1, 0),
        result(2, TRACEBACK, 0, error=True),
        Item("a0", "assistant", "I'll pass the rate table explicitly next. We keep the keyword argument because callers rely on it.", response=2, turn=0),
        call(3, "apply_patch", {"input": PATCH}, 2, 0),
        result(3, "Done!", 0),
        call(4, "Edit", {"file_path": "ledger/cli.py", "old_string": "a", "new_string": "b"}, 3, 0),
        result(4, "ok", 0),
        Item("u1", "user", "Now update the docs.", turn=1),
        call(5, "Read", {"file_path": "docs/fees.md"}, 4, 1),
        result(5, "# Fees", 1),
    ]
    return Transcript("mine", tuple(items))


def by_kind(probes: list[Probe]) -> dict[str, list[Probe]]:
    out: dict[str, list[Probe]] = {}
    for p in probes:
        out.setdefault(p.kind, []).append(p)
    return out


def test_mined_probes_by_hand():
    probes = by_kind(mine_probes(session()))
    artifacts = {(p.question.split(" while")[0], p.answer, p.source) for p in probes["artifact"]}
    assert artifacts == {
        ("Which files were modified", ("ledger/fees.py", "ledger/rates.py", "ledger/cli.py"), "call4"),
        ("Which files were read", ("ledger/fees.py",), "call1"),
        ("Which files were read", ("docs/fees.md",), "call5"),
    }
    assert all(p.match == "set" for p in probes["artifact"])
    (error,) = probes["error"]
    assert error.answer == "TypeError: apply_fees() missing 1 required keyword-only argument: 'rate_table'"
    assert error.source == "out2" and error.match == "contains"
    assert "pytest -x tests/test_fees.py" in error.question
    (constraint,) = probes["constraint"]
    assert (constraint.answer, constraint.source) == ("Never push to the main branch.", "u0")
    recalls = {(p.answer, p.match, p.source) for p in probes["recall"]}
    assert recalls == {("1", "number", "out2"), ("pytest -x tests/test_fees.py", "contains", "call2")}
    exit_probe = next(p for p in probes["recall"] if p.match == "number")
    assert exit_probe.meta["evidence"] == ["pytest -x tests/test_fees.py"]
    # 7 deterministic probes allow int(7 × 0.3 / 0.7) = 3 judged ones; there are 2 candidates.
    assert {p.answer for p in probes["continuation"]} == {"I'll pass the rate table explicitly next."}
    assert {p.answer for p in probes["decision"]} == {"We keep the keyword argument because callers rely on it."}
    assert all(p.match == "judge" for p in probes["continuation"] + probes["decision"])


def test_mining_is_deterministic_and_ids_are_unique():
    first, second = mine_probes(session()), mine_probes(session())
    assert [p.to_dict() for p in first] == [p.to_dict() for p in second]
    assert len({p.id for p in first}) == len(first)


def _verbatim(probe: Probe, transcript: Transcript) -> bool:
    text = "\n".join(f"{i.text}\n{i.arguments or ''}" for i in transcript.items)
    answers = probe.answer if isinstance(probe.answer, tuple) else (probe.answer,)
    return all(a in text for a in answers) and all(e in text for e in probe.meta.get("evidence", ()))


def _escaped(text: str) -> set[str]:
    once = {json.dumps(text, ensure_ascii=ascii)[1:-1] for ascii in (True, False)}
    return once | {json.dumps(e, ensure_ascii=ascii)[1:-1] for e in once for ascii in (True, False)}


@pytest.mark.corpora
def test_mined_probes_on_the_real_corpora():
    files = [p for fmt in ("claude-code-jsonl", "codex-rollout-jsonl", "pi-session-jsonl", "mini-swe-agent-traj") for p in corpus_files(fmt)]
    total = deterministic = 0
    for path in files:
        for transcript in load_transcripts(path):
            probes = mine_probes(transcript)
            raw = path.read_text(encoding="utf-8")
            for p in probes:
                assert _verbatim(p, transcript), (path.name, p.id)
                source = transcript.by_id[p.source]
                # the source item is where the answer is (for a set: where its last member is)
                last = p.answer[-1] if isinstance(p.answer, tuple) else p.answer
                if p.match != "number":
                    assert last in source.text or last in (source.arguments or ""), (path.name, p.id)
                # and the fact is in the recorded file itself (JSON-escaped once, or twice where a tool
                # output is a JSON document inside a JSON string, as Codex records them)
                assert last in raw or any(e in raw for e in _escaped(last)), (path.name, p.id)
            total += len(probes)
            deterministic += sum(1 for p in probes if p.match != "judge")
            assert sum(1 for p in probes if p.match != "judge") >= 0.7 * len(probes), path.name
    assert total > 100 and deterministic / total >= 0.7
