"""Audit of `bench calibrate`: each recorded summary is compared on the span its summarizer was given,
every session counts once, and the conclusion carries an interval over sessions."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from compaction_bench.calibrate import Calibration, spans
from compaction_bench.importing import load_transcript
from compaction_bench.transcript import Item, Transcript
from tests.conftest import CORPORA

BENCH = str(Path(sys.executable).with_name("bench"))
PI = CORPORA / "pi-session-jsonl/badlogic__pi-mono/before-compaction.jsonl"


def _pi_session(stamp: str) -> Transcript:
    """e0..e3, compaction c1 keeping e2 on, e4..e7, compaction c2 keeping e6 on; both at `stamp`."""
    def message(n: int) -> Item:
        return Item(f"e{n}", "user" if n % 2 == 0 else "assistant", f"message {n}", turn=n // 2, response=None if n % 2 == 0 else n)

    def compaction(name: str, kept: str) -> Item:
        return Item(name, "marker", f"summary {name}", timestamp=stamp, meta={"event": "compaction", "firstKeptEntryId": kept})

    items = (*map(message, range(4)), compaction("c1", "e2"), *map(message, range(4, 8)), compaction("c2", "e6"))
    return Transcript("pi", items, source={"format": "pi"})


def test_a_pi_compaction_before_the_fix_did_not_summarize_the_previous_kept_tail():
    # docs/specs/pi.md §3: until eeace797 (2026-03-27) the boundary starts after the previous
    # compaction entry, so e2 and e3 (kept by c1) were never given to c2's summarizer.
    (first, _), (second, _) = spans(_pi_session("2025-12-08T23:22:54.411Z"))
    assert [i.id for i in first] == ["e0", "e1"]
    assert [i.id for i in second] == ["e4", "e5"]


def test_a_pi_compaction_after_the_fix_summarizes_the_previous_kept_tail():
    (first, _), (second, _) = spans(_pi_session("2026-04-02T10:00:00.000Z"))
    assert [i.id for i in first] == ["e0", "e1"]
    assert [i.id for i in second] == ["e2", "e3", "e4", "e5"]


def test_a_compaction_without_summary_text_still_ends_the_next_span():
    # A Codex remote compaction (`compacted` with replacement_history, empty message): the next local
    # compaction summarizes only what came after it.
    items = (
        Item("u0", "user", "first task", turn=0), Item("a0", "assistant", "done", turn=0, response=0),
        Item("r", "marker", "", meta={"event": "compaction", "replacement_items": 3}),
        Item("u1", "user", "second task", turn=1), Item("a1", "assistant", "done too", turn=1, response=1),
        Item("s", "marker", "Summary: the second task is done.", meta={"event": "compaction"}),
    )
    ((span, summary),) = spans(Transcript("codex", items, source={"format": "codex"}))
    assert [i.id for i in span] == ["u1", "a1"] and summary.startswith("Summary")


@pytest.mark.corpora
def test_the_recorded_second_pi_summary_is_compared_on_the_entries_after_the_first_compaction():
    # The raw v1 file: compaction entries on lines 360 and 629; the second keeps from line 552 on
    # (firstKeptEntryIndex). Its summarizer (December 2025) got the message entries of lines 361..551.
    raw = PI.read_text(encoding="utf-8").splitlines()
    compactions = [n for n, line in enumerate(raw, start=1) if json.loads(line).get("type") == "compaction"]
    assert compactions == [360, 629]
    summarized = {n for n in range(361, 552) if json.loads(raw[n - 1]).get("type") == "message"}
    (_, _), (second, _) = spans(load_transcript(PI))
    # An entry's first item carries its file line; the others, its entry id.
    lines = {i.meta["entry"]: i.meta["line"] for i in second if "line" in i.meta}
    assert set(lines.values()) == summarized and {i.meta["entry"] for i in second} == set(lines)


def _row(session: str, probes: int, real: int, offline: int, both: int) -> Calibration:
    return Calibration("f", session, 0, 10, probes, 100, 100, real, offline, both)


def test_the_difference_is_said_only_with_its_interval_and_enough_sessions():
    """A session is one unit (one summary's facts move together): the sign-flip test flips each session's facts together,
    so a claim needs six sessions that differ, all one way, at the least (2 × 0.5^6 = 0.031), however many facts."""
    from compaction_bench.calibrate import difference

    # Six sessions, ten facts each: the offline summary alone keeps 6 of each, the real one alone none.
    # Mean +36/60 = +60%; the exact two-sided sign-flip p of six sessions all one way is 2 * 0.5**6.
    six = [_row(name, 10, 2, 8, 2) for name in "abcdef"]
    line = difference(six)
    assert "+60.0%" in line and f"p = {2 * 0.5 ** 6:.3f} over the 6 session(s) that differ" in line and "6 session(s), 6 compaction(s), 60 facts" in line
    assert line.endswith("the offline summarizer keeps more of the spans' facts than the real summaries.")
    # Two such sessions: twelve facts all one way, p = 2 * 0.5**2 = 0.5 over the sessions (it read 2 * 0.5**12 over the facts)
    two = difference(six[:2])
    assert f"p = {2 * 0.5 ** 2:.3f} over the 2 session(s) that differ" in two and two.endswith("no detectable difference.")
    # The same facts from one session: its facts are not independent, no verdict.
    assert "no verdict" in difference([_row("a", 10, 2, 8, 2), _row("a", 10, 1, 7, 1)])
    # Five of six sessions differ: p = 2 * 0.5**5 = 0.0625, no claim.
    assert difference([*six[:5], _row("f", 10, 1, 1, 1)]).endswith("no detectable difference.")
    # Fewer than six sessions: the interval describes them, not sessions like them (six: no such label)
    assert "] (over 2 sessions, fewer than 6: it describes these sessions, not sessions like them) (bootstrap" in two
    assert "fewer than 6" not in line


@pytest.mark.corpora
def test_each_session_counts_once_and_sessions_without_a_row_are_named(tmp_path):
    same = subprocess.run([BENCH, "calibrate", str(PI), str(PI)], capture_output=True, text=True, timeout=300)
    assert same.returncode == 2 and "given twice" in same.stderr
    copy = tmp_path / "copy" / "before-compaction.jsonl"
    copy.parent.mkdir()
    shutil.copyfile(PI, copy)
    plain = tmp_path / "plain.json"
    plain.write_text('[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]', encoding="utf-8")
    out = subprocess.run([BENCH, "calibrate", str(PI), str(copy), str(plain)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    # The file records two compactions (lines 360 and 629): two rows, not four.
    assert "| all | 2 |" in out.stdout and "1 session(s), 2 compaction(s)" in out.stdout
    assert "copy/before-compaction.jsonl: the same session as badlogic__pi-mono/before-compaction.jsonl" in out.stdout
    assert f"{tmp_path.name}/plain.json: format openai-messages is not calibrated" in out.stdout
