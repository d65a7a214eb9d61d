"""The hand-labelled development set (tests/data/probes) and mining recall on it.

Every labelled answer and `source_text` is checked against the recorded transcript; the set's shape
(files, formats, kinds, positions) is checked; then the miner's recall is computed against it, printed
by kind, and held to ≥ 60% overall and ≥ 40% per kind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from compaction_bench.importing import load_transcripts
from compaction_bench.probes import KINDS, Probe, answer_after_source, load_probes, source_index
from compaction_bench.scenarios.mining import mine_probes
from compaction_bench.scenarios.probe_eval import MiningEval, asks_for, evaluate, markdown_table
from tests.conftest import CORPORA

DEV = Path(__file__).parent / "data" / "probes"
INDEX = yaml.safe_load((DEV / "index.yaml").read_text(encoding="utf-8"))
RESERVED = (
    "Monotoba__OpenPrintKit/rollout-2025-10-31T19-02-58-",
    "MoonLadderStudios__MoonMind/rollout-2025-11-12T17-48-11-",
    "large-session.jsonl",
    "d-kimuson__claude-code-viewer/fe5e1c67-",
    "deepseek_chat_test_1-100__django__django-13265.traj.json",
)

pytestmark = pytest.mark.corpora


def _labelled(entry: dict) -> tuple[list[Probe], object]:
    transcript = load_transcripts(CORPORA / entry["transcript"])[0]
    return load_probes(DEV / entry["labels"]), transcript


def test_the_development_set_has_the_promised_shape():
    assert len(INDEX) >= 8
    assert len({e["transcript"].split("/")[0] for e in INDEX}) >= 4  # formats
    assert not [e for e in INDEX for r in RESERVED if r in e["transcript"]]
    for entry in INDEX:
        probes, transcript = _labelled(entry)
        assert 15 <= len(probes) <= 22, entry["labels"]
        kinds = {p.kind for p in probes}
        # agent-dee347d2 is a subagent none of whose tool calls failed: it has no error to label
        assert kinds == set(KINDS) - ({"error"} if "agent-dee347d2" in entry["labels"] else set()), entry["labels"]
        thirds = {min(2, 3 * source_index(transcript, p) // len(transcript.items)) for p in probes}
        assert thirds == {0, 1, 2}, entry["labels"]  # early, middle and late facts


@pytest.mark.parametrize("entry", INDEX, ids=[e["labels"] for e in INDEX])
def test_every_labelled_answer_is_verbatim_in_the_transcript_at_or_after_its_source(entry):
    probes, transcript = _labelled(entry)
    raw = (CORPORA / entry["transcript"]).read_text(encoding="utf-8")
    for probe in probes:
        assert probe.source_text and source_index(transcript, probe) is not None, probe.id
        assert answer_after_source(transcript, probe) is None, probe.id
        # and in the recorded file itself (JSON-escaped once, or twice where a tool output is a JSON
        # document inside a JSON string, as Codex records them)
        for text in (probe.source_text, probe.answer):
            once = {json.dumps(text, ensure_ascii=a)[1:-1] for a in (True, False)}
            twice = {json.dumps(e, ensure_ascii=a)[1:-1] for e in once for a in (True, False)}
            assert text in raw or any(e in raw for e in once | twice), (probe.id, text)


def test_mining_recall_on_the_development_set():
    total = MiningEval()
    for entry in INDEX:
        probes, transcript = _labelled(entry)
        mined = mine_probes(transcript)
        result = evaluate(transcript, probes, mined)
        print(f"{entry['labels']}: recall {result.recall():.0%}, {len(mined)} mined, missed {', '.join(result.missed) or '–'}")
        total.add(result)
    print(markdown_table(total))
    assert total.recall() >= 0.6
    assert all(total.recall(kind) >= 0.4 for kind in KINDS), total.to_dict()["recall_by_kind"]
    assert total.located == total.mined  # every mined answer is where its probe says


def test_asks_for_compares_normalized_answers_both_ways():
    labelled = Probe("l", "recall", "Q?", "15.5.2", source_text="x")
    line = Probe("m", "recall", "Q?", "Next.js: 15.5.2 (upgraded)", source_text="x")
    assert asks_for([line], labelled)  # the mined line needs the labelled fact
    assert asks_for([Probe("m", "recall", "Q?", "no module named PYTEST", source_text="x")],
                    Probe("l", "error", "Q?", "/usr/bin/python: No module named pytest", source_text="x"))
    assert not asks_for([Probe("m", "recall", "Q?", "15", source_text="x")], labelled)  # too small a part
    assert asks_for([Probe("m", "artifact", "Q?", ["a.py", "b/c.py"], match="set", source_text="x")],
                    Probe("l", "artifact", "Q?", "b/c.py", source_text="x"))


def test_eval_cli_prints_json_for_ci():
    entry = next(e for e in INDEX if e["labels"].startswith("swe-"))
    proc = subprocess.run(
        [sys.executable, "-m", "compaction_bench.cli", "probes", "eval", "--labelled", str(DEV / entry["labels"]),
         str(CORPORA / entry["transcript"]), "--json"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert sum(data["labelled_by_kind"].values()) == len(load_probes(DEV / entry["labels"]))
    assert data["located"] == data["mined"] and 0 <= data["recall"] <= 1
