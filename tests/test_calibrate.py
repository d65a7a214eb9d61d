"""`bench calibrate`: the real recorded summaries and the offline summarizer, on the same spans."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from compaction_bench.calibrate import calibrate, spans
from compaction_bench.importing import load_transcript
from compaction_bench.transcript import Item, Transcript
from tests.conftest import CORPORA

BENCH = str(Path(sys.executable).with_name("bench"))


def test_a_pi_span_ends_where_the_recording_kept_entries_verbatim():
    items = [Item(f"e{n}", "user" if n % 2 == 0 else "assistant", f"message {n}", turn=n // 2, response=None if n % 2 == 0 else n)
             for n in range(6)]
    marker = Item("c1", "marker", "## Goal\n- message 0", meta={"event": "compaction", "firstKeptEntryId": "e4"})
    transcript = Transcript("pi", (*items, marker), source={"format": "pi"})
    ((span, summary),) = spans(transcript)
    assert [i.id for i in span] == ["e0", "e1", "e2", "e3"] and summary.startswith("## Goal")


@pytest.mark.corpora
def test_calibrate_runs_on_the_recorded_compactions():
    pi = CORPORA / "pi-session-jsonl/badlogic__pi-mono/before-compaction.jsonl"
    rows = calibrate([pi])
    assert len(rows) == len(load_transcript(pi).markers("compaction")) == 2
    for row in rows:
        assert row.probes > 0 and row.span_items > 0 and row.real_tokens > 0 and row.offline_tokens > 0
        assert 0 <= row.both_kept <= min(row.real_kept, row.offline_kept) <= row.probes
    out = subprocess.run([BENCH, "calibrate", str(pi)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("before-compaction.jsonl") == 2 and "| all | 2 |" in out.stdout


def test_calibrate_without_recorded_compactions_is_a_usage_error(tmp_path):
    path = tmp_path / "plain.json"
    path.write_text('[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]', encoding="utf-8")
    out = subprocess.run([BENCH, "calibrate", str(path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "no recorded compaction" in out.stderr
    assert "plain.json: format openai-messages is not calibrated" in out.stderr  # and why this file gave none


@pytest.mark.corpora
def test_fidelity_cache_counts_the_requests_after_the_recordings_compaction():
    # b566e56e: 227 distinct main-chain responses, 49 of them before its first compact_boundary (line 241).
    path = CORPORA / "claude-code-jsonl/Smartagent-so__Personal_AI_Infrastructure/b566e56e-94a7-425e-a662-d701321e27ce.jsonl"
    out = subprocess.run([BENCH, "fidelity", "cache", str(path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    header, _, row = out.stdout.splitlines()[:3]
    columns = [c.strip() for c in header.strip("|").split("|")]
    values = dict(zip(columns, (c.strip() for c in row.strip("|").split("|")), strict=True))
    assert (values["requests"], values["not compared (after the recording's compaction)"]) == ("49", "178")
