"""`bench fidelity` after the fourth outside audit: figures that a prefix the transcript never recorded cannot move,
counts of simulated usage said as such, Pi's trigger decision where it had nothing to summarise, and `fidelity pi` on
a session model without a built-in profile. Every session here is built by hand in the test's folder."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from compaction_bench.fidelity import claude_code_fidelity_rows, claude_code_fidelity_table, fidelity_rows, recorded_agreement
from compaction_bench.profiles import bundled_cost_map, get_profile
from compaction_bench.provider import SimulatedProvider
from compaction_bench.transcript import Transcript
from tests.conftest import assert_user_error, bench_cli
from tests.test_metrics_cache import replayed_tokens, two_recorded_requests

#: Pi's `compaction.reserveTokens` default (docs/specs/pi.md §2.1); its trigger is `contextTokens > window − it` (§2.2).
PI_RESERVE = 16_384


# --------------------------------------------------------------------------- fidelity cache
def _with_cached_prefix(transcript: Transcript, tokens: int) -> Transcript:
    """The transcript as a provider would have recorded it had the agent sent `tokens` more of system prompt, cached
    on every request: each recorded usage with `tokens` more input, all of them cached."""
    items = [
        replace(i, usage=replace(i.usage, input=i.usage.input + tokens, cached_input=i.usage.cached_input + tokens, total=0))
        if i.usage is not None else i
        for i in transcript.items
    ]
    return transcript.with_items(items)


def test_the_cache_agreement_does_not_move_with_an_always_cached_unrecorded_prefix():
    """The figure compared was |modelled cached / modelled input − recorded cached / recorded input|: the recorded side
    holds the system prompt and tool schemas the transcript does not, almost always cached, so a larger prompt read
    as a larger error (the audit: 351b5d6c 0.235, 0.024 with its median prefix taken off). The uncached input is
    what no always-cached prefix is in: recorded input − cached against modelled input − cached, by hand here."""
    items = two_recorded_requests()
    first, second = replayed_tokens(SimulatedProvider(get_profile("gpt-5")))  # the replayed messages of each request
    cached = first // 128 * 128  # OpenAI: the second request extends the first, cached in 128-token steps
    misses = [abs((3000 - 0) - (first - 0)), abs((3100 - 2560) - (second - cached))]
    expected = {
        "recorded_uncached_tokens": 3000 + 540,
        "modelled_uncached_tokens": first + second - cached,
        "uncached_error_share": pytest.approx(sum(misses) / (first + second)),
        "uncached_error_median": pytest.approx((misses[0] / first + misses[1] / second) / 2),
    }
    moved = []
    for prefix in (0, 20_000, 60_000):
        got = recorded_agreement(_with_cached_prefix(Transcript("hand", items), prefix), "gpt-5")
        assert {key: got[key] for key in expected} == expected, prefix
        moved.append(got["mae_share"])
    assert moved[0] < moved[1] < moved[2]  # the old figure grew with the prompt alone


def _cc_line(uuid: str, parent: str | None, kind: str, second: int, **fields) -> dict:
    return {"parentUuid": parent, "isSidechain": False, "userType": "external", "cwd": "/repo", "sessionId": "s1", "version": "2.0.57",
            "type": kind, "uuid": uuid, "timestamp": f"2025-12-01T00:{second // 60:02d}:{second % 60:02d}.000Z", **fields}


def _cc_reply(uuid: str, parent: str, second: int, text: str, fresh: int, cache_read: int, output: int = 10) -> dict:
    usage = {"input_tokens": fresh, "cache_creation_input_tokens": 0, "cache_read_input_tokens": cache_read, "output_tokens": output}
    message = {"id": f"m{second}", "role": "assistant", "model": "claude-opus-4-5-20251101", "content": [{"type": "text", "text": text}], "usage": usage}
    return _cc_line(uuid, parent, "assistant", second, message=message)


def _write(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def _cache_table(path: Path) -> dict[str, str]:
    proc = bench_cli("fidelity", "cache", str(path), "--profile", "claude-opus")
    assert proc.returncode == 0, proc.stderr
    header, _, row = proc.stdout.splitlines()[:3]
    columns = [c.strip() for c in header.strip("|").split("|")]
    return dict(zip(columns, (c.strip() for c in row.strip("|").split("|")), strict=True))


def test_fidelity_cache_prints_no_column_the_unrecorded_prefix_moves_unlabelled(tmp_path):
    """The same Claude Code session twice, the second recording 40,000 more tokens of system prompt read from the cache
    on every request: the uncached columns read the same; the recorded hit rate, which moves, says that it holds it."""
    text = "A paragraph of the project's notes that the agent reads again. " * 300
    def session(prefix: int) -> list[dict]:
        return [
            _cc_line("u1", None, "user", 1, message={"role": "user", "content": text}),
            _cc_reply("u2", "u1", 2, "Read it.", 4_000, prefix),
            _cc_line("u3", "u2", "user", 3, message={"role": "user", "content": "Now summarise the notes."}),
            _cc_reply("u4", "u3", 4, "Done.", 200, 3_900 + prefix),
        ]
    plain = _cache_table(_write(tmp_path / "plain.jsonl", session(0)))
    prefixed = _cache_table(_write(tmp_path / "prefixed.jsonl", session(40_000)))
    assert not [c for c in plain if c.startswith("MAE")]
    uncached = [c for c in plain if "uncached" in c]
    assert len(uncached) == 4
    assert [plain[c] for c in uncached] == [prefixed[c] for c in uncached]
    assert plain["recorded uncached tokens"] == "4,200"  # 4,000 + 200 fresh input tokens, recorded
    hit = "recorded hit rate (the unrecorded prefix included)"
    assert plain[hit] != prefixed[hit]


# --------------------------------------------------------------------------- fidelity claude-code
SUMMARY = "This session is being continued from a previous conversation that ran out of context. The conversation is summarized below:\nSummary:\nx."


def _boundary(uuid: str, parent: str, second: int, pre_tokens: int) -> dict:
    return _cc_line(uuid, None, "system", second, subtype="compact_boundary", content="Conversation compacted", isMeta=False, level="info",
                    logicalParentUuid=parent, compactMetadata={"trigger": "auto", "preTokens": pre_tokens})


def _two_boundaries(tmp_path: Path) -> Path:
    """Two automatic boundaries; the first at 126,010 tokens, under 2.0.57's threshold with the output unset (200,000 −
    32,000 − 13,000 = 155,000, docs/specs/claude-code.md §2.1), so the replay does not compact there."""
    return _write(tmp_path / "two.jsonl", [
        _cc_line("u1", None, "user", 1, message={"role": "user", "content": "Please refactor the parser."}),
        _cc_reply("u2", "u1", 2, "Working on it.", 100_000, 0, 500),
        _cc_line("u3", "u2", "user", 3, message={"role": "user", "content": "Now add tests."}),
        _cc_reply("u4", "u3", 4, "Tests added.", 126_000, 0),
        _boundary("u5", "u4", 5, 126_010),
        _cc_line("u6", "u5", "user", 6, isCompactSummary=True, isVisibleInTranscriptOnly=True, message={"role": "user", "content": SUMMARY}),
        _cc_line("u7", "u6", "user", 7, message={"role": "user", "content": "Go on with the tests."}),
        _cc_reply("u8", "u7", 8, "Going on.", 130_000, 0),
        _boundary("u9", "u8", 9, 130_010),
        _cc_line("u10", "u9", "user", 10, isCompactSummary=True, isVisibleInTranscriptOnly=True, message={"role": "user", "content": SUMMARY}),
        _cc_line("u11", "u10", "user", 11, message={"role": "user", "content": "And the docs."}),
        _cc_reply("u12", "u11", 12, "Docs written.", 20_000, 0),
    ])


def test_a_count_of_simulated_usage_is_said_as_such_and_its_gap_withheld(tmp_path):
    """After a boundary the replay did not compact at, its context is not the recording's and the engine feeds simulated
    usage (bench/replay.py): the second boundary's count is then the provider model's count of the replayed messages,
    without the agent's system prompt, and its 'preTokens − count' read as a gap of 130,000 tokens."""
    first, second = claude_code_fidelity_rows(_two_boundaries(tmp_path))
    # the first count reads the last recorded response: in + cache + out (§2.2), 126,000 + 10
    assert (first.count, first.count_source, first.gap) == (126_010, "recorded", 0)
    assert second.count_source == "simulated" and second.count is not None and second.count < 10_000
    assert second.gap is None
    table = claude_code_fidelity_table([first, second]).splitlines()
    assert "usage the count reads" in table[0]
    assert "| recorded | 0 |" in table[2]
    assert "| simulated (the replay left the recording) | withheld (simulated usage) |" in table[3]


def test_fidelity_claude_code_notes_the_rows_on_simulated_usage(tmp_path):
    proc = bench_cli("fidelity", "claude-code", str(_two_boundaries(tmp_path)))
    assert proc.returncode == 0, proc.stderr
    assert "withheld (simulated usage)" in proc.stdout
    (note,) = [line for line in proc.stderr.splitlines() if line.strip()]
    assert note.startswith("note: 1 of 2 rows count on simulated usage")


# --------------------------------------------------------------------------- fidelity pi
def _pi_message(entry: str, parent: str | None, second: int, role: str, text: str, model: str, provider: str, total: int | None = None) -> dict:
    message: dict = {"role": role, "content": [{"type": "text", "text": text}], "timestamp": 1767261600000 + second * 1000}
    if total is not None:
        usage = {"input": 10, "output": 50, "cacheRead": total - 60, "cacheWrite": 0, "totalTokens": total,
                 "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}}
        message |= {"api": "openai-responses" if provider == "openai" else "anthropic-messages", "provider": provider, "model": model,
                    "usage": usage, "stopReason": "stop"}
    return {"type": "message", "id": entry, "parentId": parent, "timestamp": f"2026-01-01T10:00:{second:02d}.000Z", "message": message}


def _pi_session(tmp_path: Path, model: str, provider: str, tokens: int) -> Path:
    """A Pi v3 session of a few short messages (far under the 20,000 tokens Pi keeps, docs/specs/pi.md §2.1, §3.3: no
    cut leaves anything before it to summarise) whose last answer reported `tokens`, then the agent's compaction."""
    lines = [
        {"type": "session", "version": 3, "id": "0b6c0000-0000-0000-0000-000000000000", "timestamp": "2026-01-01T10:00:00.000Z",
         "cwd": "/proj", "provider": provider, "modelId": model},
        _pi_message("a1", None, 1, "user", "fix the bug " * 100, model, provider),
        _pi_message("a2", "a1", 2, "assistant", "done " * 80, model, provider, 120_000),
        _pi_message("a3", "a2", 3, "user", "and the other one " * 60, model, provider),
        _pi_message("a4", "a3", 4, "assistant", "done " * 60, model, provider, tokens),
        {"type": "compaction", "id": "c1", "parentId": "a4", "timestamp": "2026-01-01T10:00:05.000Z", "firstKeptEntryId": "a3",
         "tokensBefore": tokens, "summary": "The user asked for two fixes.", "details": {"readFiles": [], "modifiedFiles": []}},
        _pi_message("a5", "c1", 6, "user", "thanks", model, provider),
        _pi_message("a6", "a5", 7, "assistant", "welcome", model, provider, 30_000),
    ]
    return _write(tmp_path / "session.jsonl", lines)


@pytest.mark.parametrize(("tokens", "decision"), [
    (190_000, "fires (190,000 ≥ 183,617)"),
    (150_000, "does not fire → manual (150,000 < 183,617)"),
])
def test_pi_keeps_its_trigger_decision_where_it_had_nothing_to_summarise(tmp_path, tokens, decision):
    """`pi`'s prepareCompaction gives nothing when no message precedes the cut (LATER), so it made no compaction at the
    recorded one and the row read "not replayed", its trigger decision dropped. The threshold is 200,000 − 16,384 + 1."""
    assert 200_000 - PI_RESERVE + 1 == 183_617
    rows = {r.strategy: r for r in fidelity_rows(_pi_session(tmp_path, "claude-sonnet-4-5", "anthropic", tokens))}
    assert rows["pi"].trigger == f"{decision} → not compacted (nothing to summarise)"
    assert (rows["pi"].tokens_before, rows["pi"].cut, rows["pi"].kept) == (None, "—", None)
    assert rows["pi"].recorded_cut == "`a3` (user, line 4)"
    assert rows["pi-2026-03"].trigger == decision  # BASE summarises an empty history and compacts


def test_fidelity_pi_takes_a_profile_and_names_the_option_where_the_model_has_none(tmp_path):
    """`claude-opus-4-1` is no built-in profile's model and litellm's map has no entry of that name: the error said
    "pass profile=...", an option the command did not have."""
    path = _pi_session(tmp_path, "claude-opus-4-1", "anthropic", 190_000)
    assert_user_error(bench_cli("fidelity", "pi", str(path)), "'claude-opus-4-1'", "--profile")
    proc = bench_cli("fidelity", "pi", str(path), "--profile", "claude-opus")
    assert proc.returncode == 0, proc.stderr
    assert "fires (190,000 ≥ 183,617)" in proc.stdout  # Opus 4.5's 200,000-token window


def test_fidelity_pi_reads_the_window_of_a_model_from_litellms_map(tmp_path):
    window = bundled_cost_map()["gpt-4.1"]["max_input_tokens"]
    proc = bench_cli("fidelity", "pi", str(_pi_session(tmp_path, "gpt-4.1", "openai", 190_000)))
    assert proc.returncode == 0, proc.stderr
    assert f"does not fire → manual (190,000 < {window - PI_RESERVE + 1:,})" in proc.stdout
