"""The Pi audit's findings (/tmp/audit_pi/REPORT.md F1–F6): `pi` follows upstream's newest rules read here,
earendil-works/pi@2efa728d (2026-07-27); `pi-2026-03` and `pi-2025-12` keep theirs.

Each expected value comes from upstream's own test or source, quoted at the test, or is worked out by hand
from chars/4 sizes and recorded usage (`usage="recorded-always"` sets Pi's contextTokens exactly).
"""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest

from compaction_bench.importing import load_transcript
from compaction_bench.metrics.accuracy import estimate_error
from compaction_bench.profiles import get_profile
from compaction_bench.replay import replay
from compaction_bench.strategies.pi_compaction import (
    BASE,
    LATER,
    CutPoint,
    find_cut_point,
    is_context_overflow,
    prepare_compaction,
)
from compaction_bench.strategies.pi_session_tree import Entry, PathIndex, PiMessage, entry_message, estimate_tokens
from compaction_bench.transcript import Usage
from tests.pi_builders import Entries, RecordingSummarizer, Session, small_profile
from tests.test_speed_pi import _random_entry

OPTS = {"reserve_tokens": 2000, "keep_recent_tokens": 30}
WINDOW = small_profile(10_000)  # threshold 10,000 - 2,000 = 8,000: `Request.threshold` 8,001
#: dense text: about one true token per character, a quarter of a token in Pi's chars/4 estimate
CJK = "".join(chr(0x4E00 + (n * 37) % 2000) for n in range(400))


def run(session: Session, strategy: str, profile=WINDOW, **options):
    return replay(session.transcript(), strategy, profile=profile, usage="recorded-always", options={**OPTS, **options}, summarizer=RecordingSummarizer())


def turns(result):
    return [r for r in result.requests if r.kind == "turn"]


def _index(rules=LATER) -> PathIndex:
    return PathIndex(image_chars=4800, user_images=rules.user_images, nonzero_usage=rules.nonzero_usage)


# ----------------------------------------------------------------------------- F1: a6f720e6's cut walk
def _custom_message(entries: Entries, content: str) -> Entry:
    return entries._add("custom_message", PiMessage(role="custom", texts=(content,)))


def test_upstream_should_budget_context_visible_custom_message_entries():
    """Upstream's own test, `compaction.test.ts@2efa728d` L358-375 ("should budget context-visible custom
    message entries", added by a6f720e6): user "hi", assistant "hello", a custom message of 4,000 "x", assistant
    "ok". Its expected values, verbatim: budget 1 keeps from index 3, a split turn starting at 2; budget 2 keeps
    from index 2, no split turn."""
    e = Entries()
    e._add("message", PiMessage(role="user", texts=("hi",)))
    e._add("message", PiMessage(role="assistant", texts=("hello",), stop_reason="stop"))
    _custom_message(e, "x" * 4000)
    e._add("message", PiMessage(role="assistant", texts=("ok",), stop_reason="stop"))
    tiny = find_cut_point(e.path, 0, 4, 1, index=_index(), context_visible=True)
    assert (tiny.first_kept_index, tiny.is_split_turn, tiny.turn_start_index) == (3, True, 2)
    fits = find_cut_point(e.path, 0, 4, 2, index=_index(), context_visible=True)
    assert (fits.first_kept_index, fits.is_split_turn, fits.turn_start_index) == (2, False, -1)


def test_the_previous_compactions_summary_counts_in_the_cut_walk():
    """user e0 (10 tokens), assistant e1 (10, kept by the compaction), compaction e2 whose summary is 400 chars
    (100), user e3 (10), assistant e4 (10); keepRecentTokens 50. LATER's boundary starts at e1 (the previous
    firstKeptEntryId). a6f720e6 walks e4 10, e3 20, e2's summary 120 >= 50: the first cut point at or after e2 is
    e3 (a compaction is none), the backward extension stops at the compaction, and a user message splits no
    turn: e1 is summarized and e3 kept. Counting messages only (ee24a9ec), the walk never reaches 50 (30), the cut
    falls back to e1, nothing is left to summarize and nothing compacts, so the kept tail and the nested
    summaries only grow (the audit's 32k overflows)."""
    e = Entries()
    e.user(40)
    kept = e.assistant(40)
    e.compaction(first_kept=kept.id, summary="s" * 400)
    e.user(40)
    e.assistant(40)
    index = _index()
    prep = prepare_compaction(e.path, LATER, keep_recent_tokens=50, index=index)
    assert prep is not None and prep.boundary_start == 1
    assert (prep.first_kept_id, prep.is_split_turn, prep.summarized_entries) == ("e3", False, ["e1"])
    assert prep.previous_summary == "s" * 400
    assert index.tail(3, context_visible=True) == 20


def test_an_empty_branch_summary_is_not_summarized():
    """`getMessageFromEntryForCompaction` is `sessionEntryToContextMessages(entry)[0]` since a6f720e6
    (`compaction.ts@2efa728d` L80-85) and a branch summary has a context message only when its summary is
    non-empty (`session-manager.ts@2efa728d` L401-403). user e0, empty branch summary e1, assistant e2, user e3,
    assistant e4, 10 tokens each message; keep 20 reaches 20 at e3: the history e0..e2 holds the user and the
    assistant only (BASE still summarizes the empty branch summary, as `getMessageFromEntry@83378aad` did)."""
    e = Entries.with_empty_branch_summary()
    later = prepare_compaction(e.path, LATER, keep_recent_tokens=20, index=_index())
    base = prepare_compaction(e.path, BASE, keep_recent_tokens=20, index=_index(BASE))
    assert later is not None and base is not None and later.first_kept_id == base.first_kept_id == "e3"
    assert [m.role for m in later.messages_to_summarize] == ["user", "assistant"] and later.summarized_entries == ["e0", "e2"]
    assert [m.role for m in base.messages_to_summarize] == ["user", "branchSummary", "assistant"]


def test_an_empty_branch_summary_is_no_cut_point_and_starts_no_turn():
    """`findCutPoint@2efa728d` by hand: user e0 (10), assistant e1 calling c1 (6), its result e2 (100), an empty
    branch summary e3, user e4 (10); keep 50. The walk: e4 10, e3 nothing, e2 110 >= 50. The first cut point at
    or after e2 is e4 (a tool result is none, an empty branch summary no longer is); the backward extension
    passes e3, which the context does not show, and stops at e2. e3 starts no turn (`isTurnStartEntry`: no
    context message), so the turn is split at e0. Before a6f720e6 e3 was the cut point and a turn start: a
    split turn starting at the cut itself."""
    e = Entries()
    e.user(40)
    e.assistant(8, [("c1", "read", {"path": "a"})])
    e.result("c1", 400)
    e._add("branch_summary", summary="", from_id="e0")
    e.user(40)
    cut = find_cut_point(e.path, 0, 5, 50, index=_index(), context_visible=True)
    assert (cut.first_kept_index, cut.is_split_turn, cut.turn_start_index) == (3, True, 0)
    old = find_cut_point(e.path, 0, 5, 50, index=_index(BASE))
    assert (old.first_kept_index, old.is_split_turn, old.turn_start_index) == (3, True, 3)


#: `isCutPointMessage` / `isTurnStartMessage` (`compaction.ts@2efa728d` L306-336), written out.
UPSTREAM_CUT_ROLES = {"user", "assistant", "bashExecution", "custom", "branchSummary", "compactionSummary"}
UPSTREAM_TURN_ROLES = {"user", "bashExecution", "custom", "branchSummary", "compactionSummary"}


def _upstream_cut_point(path: list[Entry], start: int, end: int, keep: int) -> CutPoint:
    """`findCutPoint@2efa728d` (L403-461) transcribed in upstream's order: the valid cut points listed first,
    then the walk over every entry's context messages (`entry_message` is `sessionEntryToContextMessages`)."""

    def visible(entry: Entry) -> PiMessage | None:
        return entry_message(entry)

    def starts_turn(entry: Entry) -> bool:
        message = visible(entry)
        return entry.type != "compaction" and message is not None and message.role in UPSTREAM_TURN_ROLES

    cuts = [i for i in range(start, end) if path[i].type != "compaction" and (m := visible(path[i])) is not None and m.role in UPSTREAM_CUT_ROLES]
    if not cuts:
        return CutPoint(start, -1, False)
    accumulated, cut = 0, cuts[0]
    for i in range(end - 1, start - 1, -1):
        message = visible(path[i])
        tokens = 0 if message is None else estimate_tokens(message, image_chars=4800, user_images=True)
        if tokens == 0:
            continue
        accumulated += tokens
        if accumulated >= keep:
            cut = next((c for c in cuts if c >= i), cut)
            break
    while cut > start and path[cut - 1].type != "compaction" and visible(path[cut - 1]) is None:
        cut -= 1
    if starts_turn(path[cut]):
        return CutPoint(cut, -1, False)
    turn_start = next((i for i in range(cut, start - 1, -1) if starts_turn(path[i])), -1)
    return CutPoint(cut, turn_start, turn_start != -1)


def test_the_cut_walk_equals_upstreams_listing_order_on_random_paths():
    """`find_cut_point` (read from the index's sums) and the summarized ranges against the transcription above
    and `getMessageFromEntryForCompaction` (`compaction.ts@2efa728d` L80-85), on random paths of every entry
    kind (empty and non-empty branch summaries, custom messages, compactions, settings, tool results)."""
    rng = random.Random(23)
    for _ in range(400):
        path: list[Entry] = []
        for n in range(rng.randint(1, 30)):
            path.append(_random_entry(rng, n, path))
        index = _index()
        start = rng.randint(0, len(path) - 1)
        keep = rng.randint(0, 120)
        assert find_cut_point(path, start, len(path), keep, index=index, context_visible=True) == _upstream_cut_point(path, start, len(path), keep)
        lo, hi = sorted((rng.randint(0, len(path)), rng.randint(0, len(path))))
        expected = [(m, e.id) for e in path[lo:hi] if e.type != "compaction" and (m := entry_message(e)) is not None]
        assert index.summarized(lo, hi, context_visible=True) == ([m for m, _ in expected], [i for _, i in expected])


# ----------------------------------------------------------------------------- F2: all-zero usage (cd95c274)
def aborted_with_zero_usage() -> Session:
    s = Session()
    s.user("first request")
    s.assistant("first answer", total=7_000)  # 7,000 <= 8,000
    s.user("n" * 4_400)  # 1,100 estimated tokens
    s.assistant("", total=0, stopReason="aborted")  # Pi records an all-zero usage on most aborted turns
    s.user("next")
    s.assistant("ok", total=100)
    return s


def test_an_all_zero_usage_takes_the_estimate_path_at_the_pre_prompt_check():
    """`_checkCompaction` since cd95c274 (in ee24a9ec; `agent-session.ts@2efa728d` L2016-2036): a usage of 0
    context tokens takes the estimate path, the last valid usage (7,000; `getAssistantUsage` skips the aborted
    all-zero one) plus chars/4 of what follows (1,100 + 0) = 8,100 > 8,000, so the check before "next" compacts.
    BASE reads contextTokens 0 and does not."""
    (compaction,) = run(aborted_with_zero_usage(), "pi").compactions
    assert compaction.trigger == "threshold" and compaction.details["contextTokens"] == 8_100
    assert compaction.next_request == turns(run(aborted_with_zero_usage(), "pi"))[2].index  # before "next" is answered
    assert run(aborted_with_zero_usage(), "pi-2026-03").compactions == []


# ----------------------------------------------------------------------------- F3: uncached summaries (9b3a2059)
CLAUDE = replace(get_profile("claude-sonnet"), name="claude-40k", context_window=40_000, context_limit=40_000)


def long_turn_session() -> Session:
    s = Session()
    s.user("please review the parser " + "p" * 8_000)  # ~2,000 estimated tokens: the summary request is cacheable
    s.assistant("reviewed " + "r" * 8_000, total=5_000)
    s.user("go on")
    s.assistant("done", total=39_000)  # > 40,000 - 2,000
    return s


@pytest.mark.parametrize(("strategy", "writes"), [("pi", False), ("pi-2026-03", True)])
def test_summary_requests_carry_no_cache_breakpoint_on_anthropic_only_at_the_newest_rules(strategy, writes):
    """`completeSummarization` (`compaction.ts@2efa728d` L570-575) sends every compaction and branch summary with
    `cacheRetention: "none"`, which on Anthropic sends no `cache_control` (`getCacheControl`,
    `anthropic-messages.ts@2efa728d` L59-67): the request reads and writes no cache. BASE used the session's retention: its summary
    request, over Anthropic's 1,024-token minimum, is written to the cache."""
    result = run(long_turn_session(), strategy, profile=CLAUDE)
    (summary,) = [r for r in result.requests if r.kind == "summary"]
    assert summary.true_tokens > 1_024
    assert (summary.cache_write_tokens > 0) is writes
    if not writes:
        assert summary.cached_tokens == 0


def tree_with_long_branch(tmp_path: Path) -> Path:
    usage = {"input": 10, "output": 5, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 15}

    def entry(id_, parent, type_="message", **fields):
        return {"type": type_, "id": id_, "parentId": parent, "timestamp": f"2026-01-01T10:00:{int(id_[1:]):02d}.000Z", **fields}

    def message(role, **fields):
        return {"role": role, "timestamp": 1767261601000, **fields}

    lines = [
        {"type": "session", "version": 3, "id": "t", "timestamp": "2026-01-01T10:00:00.000Z", "cwd": "/p"},
        entry("e1", None, message=message("user", content="start")),
        entry("e2", "e1", message=message("assistant", content=[{"type": "text", "text": "started"}], usage=usage, stopReason="stop")),
        entry("e3", "e2", message=message("user", content="try approach A " + "a" * 8_000)),
        entry("e4", "e3", message=message("assistant", content=[{"type": "text", "text": "A fails " + "f" * 8_000}], usage=usage, stopReason="stop")),
        entry("e5", "e2", "branch_summary", fromId="e2", summary="recorded"),
        entry("e6", "e5", message=message("user", content="try approach B")),
        entry("e7", "e6", message=message("assistant", content=[{"type": "text", "text": "B works"}], usage=usage, stopReason="stop")),
    ]
    path = tmp_path / "tree.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(("strategy", "writes"), [("pi", False), ("pi-2026-03", True)])
def test_branch_summary_requests_too(tmp_path, strategy, writes):
    """`generateBranchSummary` calls `completeSummarization` since 8e53e0e4 (`branch-summarization.ts@2efa728d`),
    so the abandoned branch's summary request goes out uncached too."""
    transcript = load_transcript(tree_with_long_branch(tmp_path), branch="tree")
    result = replay(transcript, strategy, profile=CLAUDE, summarizer=RecordingSummarizer())
    (summary,) = [r for r in result.requests if r.kind == "summary"]
    assert summary.true_tokens > 1_024 and (summary.cache_write_tokens > 0) is writes


# ----------------------------------------------------------------------------- F4: overflow and retry lists
@pytest.mark.parametrize(
    ("text", "later", "base"),
    [
        # `overflow.ts@ee24a9ec` L40, L45, L46: `[\d,]+`, `model'?s`, `tokens?`
        ("Prompt has 5,958,968 tokens, but the configured context size is 256,000 tokens", True, False),
        ("Requested token count exceeds the model's maximum context length of 131,072 tokens", True, False),
        ("The input (300000 tokens) is longer than the models context length (262144 tokens).", True, False),
        ("Input length 200000 exceeds the maximum allowed input length of 131,040 tokens.", True, False),
        # bbb91fa8 (`overflow.ts@2efa728d` L58), DashScope / Qwen
        ("<400> InternalError.Algo.InvalidParameter: Range of input length should be [1, 129024]", True, False),
        ("Throttling error: Too many tokens, please wait before trying again.", False, True),  # `NON_OVERFLOW_PATTERNS` veto
    ],
)
def test_overflow_patterns(text, later, base):
    message = PiMessage(role="assistant", stop_reason="error", error_message=text, usage=Usage())
    assert is_context_overflow(message, 200_000, LATER, length_ratio=0.99) is later
    assert is_context_overflow(message, 200_000, BASE, length_ratio=0.99) is base


def one_error(text: str) -> Session:
    s = Session()
    s.user("first request")
    s.assistant("first answer", total=7_000)
    s.user("n" * 4_400)  # the error path: 7,000 + 1,100 = 8,100 > 8,000
    s.assistant("", stopReason="error", errorMessage=text)
    return s


@pytest.mark.parametrize(
    ("text", "pi_retries", "base_retries"),
    [
        ("socket hang up", True, False),  # `retry.ts@ee24a9ec`: "socket hang up"
        ("Request timed out.", True, False),  # "timed? out"
        ("Provider returned error", True, False),  # "provider.?returned.?error" (#2264)
        ("getaddrinfo ENOTFOUND api.example.com", True, False),  # 33e40c3e
        ("429 insufficient_quota: You exceeded your current quota", False, True),  # the non-retryable list wins
    ],
)
def test_transient_errors_are_pi_ais_list(text, pi_retries, base_retries):
    """A retried error skips the compaction check (§2.3); one Pi does not retry runs it on the error path at
    once: 8,100 > 8,000 compacts at the error's step."""
    for strategy, retries in (("pi", pi_retries), ("pi-2026-03", base_retries)):
        compactions = run(one_error(text), strategy).compactions
        assert (compactions == []) is retries, strategy


# ----------------------------------------------------------------------------- F5: unknown entry types
def test_an_unknown_entry_type_stays_in_the_tree_as_an_inert_marker(tmp_path):
    """Upstream keeps every parsed entry (`parseSessionEntries`), walks `parentId` through it, and renders
    nothing for a type it does not know (`sessionEntryToContextMessages` returns []), so the message before a
    newer Pi's `context_edit` stays on the path."""
    usage = {"input": 10, "output": 5, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 15}

    def entry(id_, parent, type_="message", **fields):
        return {"type": type_, "id": id_, "parentId": parent, "timestamp": f"2026-01-01T10:00:0{id_[1]}.000Z", **fields}

    lines = [
        {"type": "session", "version": 3, "id": "s", "timestamp": "2026-01-01T10:00:00.000Z", "cwd": "/p"},
        entry("a1", None, message={"role": "user", "content": "remember: the port is 8443", "timestamp": 1}),
        entry("a2", "a1", message={"role": "assistant", "content": [{"type": "text", "text": "noted"}], "usage": usage, "stopReason": "stop", "timestamp": 2}),
        entry("a3", "a2", "context_edit", edits=[{"op": "noop"}]),
        entry("a4", "a3", message={"role": "user", "content": "which port?", "timestamp": 4}),
        entry("a5", "a4", message={"role": "assistant", "content": [{"type": "text", "text": "8443"}], "usage": usage, "stopReason": "stop", "timestamp": 5}),
    ]
    path = tmp_path / "newer.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    transcript = load_transcript(path)
    assert [(i.id, i.kind) for i in transcript.items] == [("a1", "user"), ("a2.0", "assistant"), ("a3", "marker"), ("a4", "user"), ("a5.0", "assistant")]
    marker = transcript.by_id["a3"]
    assert (marker.meta["event"], marker.meta["type"], marker.meta["parent"], marker.text) == ("unknown-entry", "context_edit", "a2", "")
    assert transcript.items[3].meta["parent"] == "a3"
    assert any("unknown entry type 'context_edit'; kept as a marker" in p for p in transcript.meta["problems"])
    assert not any("treated as a root" in p for p in transcript.meta["problems"])
    final = replay(transcript, "pi", profile=small_profile(200_000)).final
    assert {"a1", "a4"} <= set(final.item_ids()) and "a3" not in final.item_ids()


def test_a_v1_unknown_entry_gets_its_id_and_counts_in_a_legacy_index(tmp_path):
    """`migrateV1ToV2` (`session-manager.ts@2efa728d` L231-257) gives every entry an id and reads
    `firstKeptEntryIndex` in the file's entries, header at 0: index 3 is the assistant after the unknown entry."""
    lines = [
        {"type": "session", "id": "s", "timestamp": "2026-01-01T10:00:00.000Z", "cwd": "/p"},
        {"type": "message", "timestamp": "2026-01-01T10:00:01.000Z", "message": {"role": "user", "content": "hi", "timestamp": 1}},
        {"type": "usage", "timestamp": "2026-01-01T10:00:02.000Z", "tokens": 3},
        {"type": "message", "timestamp": "2026-01-01T10:00:03.000Z", "message": {"role": "assistant", "content": [{"type": "text", "text": "hello"}], "stopReason": "stop", "timestamp": 3}},
        {"type": "compaction", "timestamp": "2026-01-01T10:00:04.000Z", "summary": "S", "firstKeptEntryIndex": 3, "tokensBefore": 10},
    ]
    path = tmp_path / "v1.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    transcript = load_transcript(path)
    (compaction,) = transcript.markers("compaction")
    assert compaction.meta["firstKeptEntryId"] == "00000003" and transcript.by_id["00000003.0"].kind == "assistant"


# ----------------------------------------------------------------------------- F6: the threshold where a check ran
def tool_loop(result_text: str, total_before_result: int) -> Session:
    s = Session()
    s.user("please fix the parser")
    s.assistant(calls=[("c1", "read", {"path": "a.py"})], total=total_before_result)
    s.result("c1", result_text)
    s.assistant(calls=[("c2", "read", {"path": "b.py"})], total=total_before_result + 600)
    s.result("c2", "ok")
    s.assistant("done", total=total_before_result + 700)
    s.user("thanks")
    s.assistant("you are welcome", total=total_before_result + 800)
    return s


@pytest.mark.parametrize("strategy", ["pi", "pi-2026-03", "pi-2025-12"])
def test_a_request_inside_a_run_reports_no_threshold(strategy):
    """Pi checks before a prompt (with an assistant to check) and after a run, never between tool calls (§2.3;
    December 2025 checks after every assistant, but the running loop sends its own uncompacted messages): the
    first request follows no check, the two inside the run follow only tool results, and the first request
    after "thanks" is the one a check decided on (`Request.threshold`, `bench/request.py`)."""
    result = run(tool_loop("x" * 400, 100), strategy)
    assert [r.threshold for r in turns(result)] == [None, None, None, 8_001]


@pytest.mark.parametrize("strategy", ["pi", "pi-2026-03", "pi-2025-12"])
def test_an_under_counted_request_inside_a_run_is_no_missed_trigger(strategy):
    """The request after a dense tool result: Pi's estimate is the usage before it plus chars/4 (a quarter of its
    true tokens). With the limit one under its true count c, the true count would fire `> c - 1`, but no check
    runs there, so no estimate could have compacted it: no missed trigger (the integrity audit's F1)."""
    probe = turns(run(tool_loop(CJK, 1), strategy, reserve_tokens=5_000))[1]
    c = probe.true_tokens
    result = run(tool_loop(CJK, 1), strategy, reserve_tokens=10_000 - (c - 1))  # contextWindow - reserveTokens = c - 1
    mid = turns(result)[1]
    assert mid.true_tokens == c and mid.estimate_tokens is not None and mid.estimate_tokens < c
    assert mid.threshold is None and not estimate_error(mid).missed_trigger
