"""`bench calibrate`, audit s41: the span a recorded summary is charged for leaves out what the agent kept verbatim.

Every session is built by hand; the right spans come from the agents' rules, not from the code:
- Pi (docs/specs/pi.md §3): a compaction keeps the entries from `firstKeptEntryId` on, and any `message`
  entry but a tool result is a valid cut point (§3.2), an assistant one too; its span runs from the boundary
  (§3.1: after the previous compaction before Pi's fix of 2026-03-27, from the previous first kept entry
  after it) to that entry. An id that is no entry of the path gives no span.
- Codex (docs/specs/codex.md §2.2, §7.2-§7.3): a local compaction keeps the real user messages its
  `replacement_history` records, or, for a line without one, the newest within 20,000 tokens of
  ceil(UTF-8 bytes / 4), the one crossing the budget cut in the middle (§9: the first floor(B/2) and the
  last B - floor(B/2) bytes around "…N tokens truncated…", N = ceil(removed bytes / 4)).
- Claude Code (docs/specs/claude-code.md §8.5): a summary that says "Recent messages are preserved
  verbatim." has a preserved segment after it, which the transcript does not delimit.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compaction_bench.calibrate import CalibrationError, calibrate, compactions, spans
from compaction_bench.importing import load_transcript
from compaction_bench.scenarios.mining import mine_probes
from compaction_bench.transcript import Item, Transcript

# --------------------------------------------------------------------------- Pi


def _pi_entry(eid: str, parent: str | None, stamp: str, **fields: object) -> dict[str, object]:
    return {"id": eid, "parentId": parent, "timestamp": stamp, **fields}


def _pi_message(role: str, *blocks: dict[str, object], **extra: object) -> dict[str, object]:
    return {"type": "message", "message": {"role": role, "content": list(blocks), **extra}}


def _text(text: str) -> dict[str, object]:
    return {"type": "text", "text": text}


def _write_pi(tmp_path: Path, stamp: str, first_kept: str = "e4", second_kept: str = "e8") -> Path:
    """e1 user, e2 assistant (text and a read call), e3 its tool result, e4 assistant, e5 user, e6 assistant,
    c1 compaction keeping from `first_kept`, e7 user, e8 assistant, c2 compaction keeping from `second_kept`."""
    bodies = [
        ("e1", _pi_message("user", _text("Port the selector to the new theme API."))),
        ("e2", _pi_message("assistant", _text("Reading the theme first."),
                           {"type": "toolCall", "id": "call1", "name": "read", "arguments": {"path": "theme.ts"}})),
        ("e3", _pi_message("toolResult", _text("export const theme = {};"), toolCallId="call1", toolName="read")),
        ("e4", _pi_message("assistant", _text("The theme exports one object."))),
        ("e5", _pi_message("user", _text("Now port the model selector."))),
        ("e6", _pi_message("assistant", _text("Porting the model selector."))),
        ("c1", {"type": "compaction", "summary": "## Goal\nPort the selectors.", "firstKeptEntryId": first_kept, "tokensBefore": 1000}),
        ("e7", _pi_message("user", _text("Add a test for it."))),
        ("e8", _pi_message("assistant", _text("Added the test."))),
        ("c2", {"type": "compaction", "summary": "## Goal\nTest the selector.", "firstKeptEntryId": second_kept, "tokensBefore": 1200}),
    ]
    lines: list[dict[str, object]] = [{"type": "session", "version": 3, "id": "pi-s41", "timestamp": stamp, "cwd": "/repo"}]
    parent = None
    for eid, body in bodies:
        lines.append(_pi_entry(eid, parent, stamp, **body))
        parent = eid
    path = tmp_path / "pi-s41.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def _entries(items: list[Item]) -> list[str]:
    """The Pi entries of a span, in order (an assistant entry's items all carry its id in meta["entry"])."""
    return list(dict.fromkeys(str(i.meta["entry"]) for i in items))


def test_a_pi_compaction_that_kept_from_an_assistant_entry_ends_its_span_there(tmp_path):
    # Before the fix: c1 summarized e1..e3 and kept e4 on; c2 summarized from after c1 (e7) and kept e8 on.
    t = load_transcript(_write_pi(tmp_path, "2025-12-08T23:22:54.411Z"))
    assert [i.id for i in t.items if i.meta.get("entry") == "e4"] == ["e4.0"]  # the reader's ids: the entry id is no item id
    (first, _), (second, _) = spans(t)
    assert _entries(first) == ["e1", "e2", "e3"]
    assert _entries(second) == ["e7"]


def test_after_pis_fix_the_next_span_starts_at_the_assistant_entry_the_previous_compaction_kept(tmp_path):
    # From 2026-03-27 c2's boundary starts at c1's first kept entry, e4: c2 summarized e4..e7.
    t = load_transcript(_write_pi(tmp_path, "2026-04-02T10:00:00.000Z"))
    (first, _), (second, _) = spans(t)
    assert _entries(first) == ["e1", "e2", "e3"]
    assert _entries(second) == ["e4", "e5", "e6", "e7"]


def test_a_pi_first_kept_entry_that_is_not_on_the_path_is_a_named_problem_not_a_longer_span(tmp_path):
    path = _write_pi(tmp_path, "2026-04-02T10:00:00.000Z", first_kept="e404")
    t = load_transcript(path)
    found = compactions(t)
    # c1's span is unknown: no row, its problem named. c2 starts after c1 (Pi's fallback when the previous
    # first kept entry is not found, §3.1) and keeps e8 on.
    assert [c.number for c in found] == [1] and _entries(found[0].items) == ["e7"]
    assert found.problems == ["compaction 0: compaction entry c1: firstKeptEntryId 'e404' is no entry of the session's path; no row"]
    with pytest.raises(CalibrationError, match="e404"):
        spans(t)
    rows = calibrate([path])
    assert [r.compaction for r in rows] == [1]
    assert any("pi-s41.jsonl: compaction 0: compaction entry c1: firstKeptEntryId 'e404'" in note for note in rows.notes)


def test_a_pi_first_kept_entry_after_the_compaction_is_a_problem(tmp_path):
    # c1 cannot keep from e7: Pi appends the compaction entry after the entries it cuts (§3.3 step 6, §4.5).
    found = compactions(load_transcript(_write_pi(tmp_path, "2025-12-08T23:22:54.411Z", first_kept="e7")))
    assert found.problems == ["compaction 0: compaction entry c1: firstKeptEntryId 'e7' is not between the span's start and "
                              "the compaction (Pi cuts there); no row"]


# --------------------------------------------------------------------------- Codex

CONSTRAINTS = "You must never use port 8080; always use port 5173 for the dev server. Do not modify package-lock.json under any circumstances."


def _user(text: str) -> tuple[str, dict[str, object]]:
    return "response_item", {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def _assistant(text: str) -> tuple[str, dict[str, object]]:
    return "response_item", {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}


def _codex_session(*users: str) -> list[tuple[str, dict[str, object]]]:
    """The session's own lines, then each user message with a reply; the summary request's work follows."""
    lines: list[tuple[str, dict[str, object]]] = [
        ("session_meta", {"id": "019a0000-0000-7000-8000-0000000000s4", "cwd": "/repo", "originator": "codex_cli_rs", "cli_version": "0.60.0"}),
        ("turn_context", {"model": "gpt-5-codex", "cwd": "/repo", "approval_policy": "never", "sandbox_policy": {"mode": "workspace-write"}}),
        _user("<environment_context>\n  <cwd>/repo</cwd>\n</environment_context>"),
    ]
    for n, text in enumerate(users):
        lines += [_user(text), _assistant(f"Working on request {n + 1}.")]
    lines += [
        ("response_item", {"type": "function_call", "name": "shell", "call_id": "c1", "arguments": json.dumps({"command": ["npm", "run", "dev"]})}),
        ("response_item", {"type": "function_call_output", "call_id": "c1",
                           "output": json.dumps({"output": "Error: listen EADDRINUSE: address already in use :::8080\n", "metadata": {"exit_code": 1}})}),
        _assistant("The dev server failed because port 8080 is in use; vite.config.ts now sets port 5173."),
    ]
    return lines


def _write_codex(tmp_path: Path, lines: list[tuple[str, dict[str, object]]]) -> Path:
    path = tmp_path / "rollout-2025-11-20T10-00-00-019a0000-0000-7000-8000-0000000000s4.jsonl"
    stamps = (f"2025-11-20T10:00:{n:02d}.000Z" for n in range(60))
    path.write_text("".join(json.dumps({"timestamp": next(stamps), "type": t, "payload": p}) + "\n" for t, p in lines), encoding="utf-8")
    return path


SUMMARY = "The dev server failed with EADDRINUSE on 8080; vite.config.ts was edited to use 5173."


def _compacted(history: list[str] | None) -> tuple[str, dict[str, object]]:
    payload: dict[str, object] = {"message": SUMMARY}
    if history is not None:
        payload["replacement_history"] = [_user(text)[1] for text in history]
    return "compacted", payload


def _facts_of(transcript: Transcript, span: list[Item], item_id: str) -> int:
    """The graded facts (not judged) mined from the span that come from one item."""
    part = transcript.with_items(span)
    return sum(1 for p in mine_probes(part) if p.match != "judge" and p.source == item_id)


def test_the_facts_of_a_user_message_codex_kept_in_its_replacement_history_are_not_charged_to_the_summary(tmp_path):
    # The replacement history keeps the only real user message (and the summary behind the summary prefix).
    history = [CONSTRAINTS, "A different model worked on this task and left this summary.\n" + SUMMARY]
    path = _write_codex(tmp_path, [*_codex_session(CONSTRAINTS), _compacted(history), _user("Now run the tests.")])
    t = load_transcript(path)
    ((span, _),) = spans(t)
    (user,) = [i for i in span if i.kind == "user" and not i.synthetic]
    facts = _facts_of(t, span, user.id)
    assert facts >= 2  # the message's constraints are facts to keep: the test would not test anything otherwise
    (row,) = calibrate([path])
    assert row.verbatim == facts
    assert row.probes == sum(1 for p in mine_probes(t.with_items(span)) if p.match != "judge") - facts


def test_a_user_message_the_replacement_history_did_not_keep_stays_charged(tmp_path):
    # Two real user messages; the recorded history kept only the newer one (as Codex's budget could).
    older, newer = CONSTRAINTS, "Also never commit the .env file."
    path = _write_codex(tmp_path, [*_codex_session(older, newer), _compacted([newer, SUMMARY])])
    t = load_transcript(path)
    ((compaction,),) = [compactions(t)]
    users = [i for i in compaction.items if i.kind == "user" and not i.synthetic]
    assert [u.text for u in users] == [older, newer]
    assert dict(compaction.kept) == {users[1].id: newer}


def test_a_replacement_history_that_does_not_match_the_span_is_a_named_problem(tmp_path):
    path = _write_codex(tmp_path, [*_codex_session(CONSTRAINTS), _compacted(["Something the user never typed.", SUMMARY])])
    found = compactions(load_transcript(path))
    assert not found and len(found.problems) == 1
    assert found.problems[0].startswith("compaction 0: the compaction's replacement_history keeps user message 1 of 1 as 'Something")
    rows = calibrate([path])
    assert not rows and rows.notes == [f"{tmp_path.name}/{path.name}: {found.problems[0]}"]


def _cut(text: str, budget_bytes: int) -> str:
    """Codex's middle truncation of an ASCII text to `budget_bytes` (spec §9), written out."""
    head, tail = text[: budget_bytes // 2], text[len(text) - (budget_bytes - budget_bytes // 2):]
    return f"{head}…{-(-(len(text) - budget_bytes) // 4)} tokens truncated…{tail}"


def test_a_legacy_compaction_keeps_the_newest_user_messages_within_20k_tokens_the_crossing_one_cut(tmp_path):
    # No replacement_history (a legacy line, spec §7.3 step 4): the rule. The newest message (7 tokens) is kept
    # whole, the one before it (98,908 bytes: 24,727 tokens) crosses the 19,993 tokens left and is cut to its first
    # and last 39,986 bytes, the oldest is not kept.
    oldest = "Never deploy on Fridays."
    filler = "Some context here. " * 2600
    long = (f"You must never use port 8080.\n\n{filler}\n\nAlways run the linter before committing.\n\n{filler}"
            "\n\nDo not touch package-lock.json.")
    newest = "Now fix the failing test."
    path = _write_codex(tmp_path, [*_codex_session(oldest, long, newest), _compacted(None)])
    t = load_transcript(path)
    ((compaction,),) = [compactions(t)]
    users = {i.text: i.id for i in compaction.items if i.kind == "user" and not i.synthetic}
    assert (len(long.encode()), 20_000 - -(-len(newest) // 4)) == (98_908, 19_993)
    assert dict(compaction.kept) == {users[long]: _cut(long, 19_993 * 4), users[newest]: newest}
    kept = compaction.kept[users[long]]
    assert "port 8080" in kept and "package-lock.json" in kept and "linter" not in kept  # the middle was cut
    # Of the cut message's three constraints, the two its kept head and tail hold are left out; the linter one,
    # cut, stays the summary's to keep, as does the oldest message's.
    from_long = {p.answer for p in mine_probes(t.with_items(compaction.items)) if p.match != "judge" and p.source == users[long]}
    assert from_long == {"You must never use port 8080.", "Always run the linter before committing.", "Do not touch package-lock.json."}
    (row,) = calibrate([path])
    assert row.verbatim == 2 + _facts_of(t, compaction.items, users[newest])
    assert _facts_of(t, compaction.items, users[oldest]) >= 1


# --------------------------------------------------------------------------- Claude Code


def test_a_claude_code_summary_followed_by_messages_kept_verbatim_is_a_problem():
    items = (
        Item("u0", "user", "Fix the login bug.", turn=0), Item("a0", "assistant", "Fixed it in auth.py.", turn=0, response=0),
        Item("b", "marker", "Conversation compacted", meta={"event": "compaction", "trigger": "auto"}),
        Item("s", "marker", "This session is being continued from a previous conversation that ran out of context. The summary "
             "below covers the earlier portion of the conversation.\n\nSummary:\n1. The login bug.\n\nRecent messages are preserved verbatim.",
             meta={"event": "compaction-summary"}),
    )
    t = Transcript("cc", items, source={"format": "claude-code"})
    found = compactions(t)
    assert not found and found.problems == ["compaction 0: summary s says recent messages are kept verbatim after it (a preservedSegment), "
                                            "which the transcript does not delimit; no row"]
    with pytest.raises(CalibrationError, match="preservedSegment"):
        spans(t)
