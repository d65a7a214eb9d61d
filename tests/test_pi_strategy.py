"""The `pi` and `pi-2026-03` strategies replayed on hand-built sessions (docs/specs/pi.md §2–§5).

Recorded usage at every step (`usage="recorded-always"`) sets Pi's contextTokens exactly; sizes in characters give the
chars/4 estimates of the cut walk, so every expected layout is worked out by hand in comments.
Window 10,000 and reserve 2,000 give the threshold 8,000.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from compaction_bench.replay import replay
from compaction_bench.strategies.pi_compaction import NO_PRIOR_HISTORY, SPLIT_TURN_SEPARATOR
from compaction_bench.strategies.pi_session_tree import COMPACTION_SUMMARY_PREFIX
from tests.pi_builders import RecordingSummarizer, Session, small_profile, tool_pair_problems

BOTH = ("pi", "pi-2026-03")
OPTS = {"reserve_tokens": 2000, "keep_recent_tokens": 30}
WINDOW = small_profile(10_000)


def run(session: Session, strategy: str, profile=WINDOW, usage: str = "recorded-always", summarizer=None, **options):
    return replay(
        session.transcript(),
        strategy,
        profile=profile,
        usage=usage,
        options={**OPTS, **options},
        summarizer=summarizer or RecordingSummarizer(),
    )


def summary_requests(result):
    return [r for r in result.requests if r.kind == "summary"]


def one_turn_tool_loop(s: Session, final_total: int = 9000) -> None:
    s.assistant(calls=[("c1", "read", {"path": "a.py"})], total=100)
    s.result("c1", "x" * 400)  # 100 tokens
    s.assistant(calls=[("c2", "edit", {"path": "a.py"})], total=200)  # "edit" + args = 19 chars: 5
    s.result("c2", "y" * 40, name="edit")  # 10
    s.assistant("done", total=final_total)  # 1


@pytest.mark.parametrize("strategy", BOTH)
def test_split_turn_at_boundary_gives_no_prior_history(strategy):
    s = Session()
    s.user("please fix the parser")
    one_turn_tool_loop(s)
    result = run(s, strategy)
    # 9,000 > 8,000 after the run. Walk: 1 + 10 + 5 + 100 crosses 30 at the first tool result;
    # the next valid cut is the second assistant: a split turn whose start is the first entry.
    (compaction,) = result.compactions
    assert compaction.trigger == "threshold"
    assert compaction.details["isSplitTurn"] and compaction.details["firstKeptRole"] == "assistant"
    (request,) = summary_requests(result)  # only the prefix summary is asked for, with 0.5 * 2000
    assert request.messages[1].content.startswith("<conversation>\n[User]: please fix the parser")
    assert "## Original Request" in request.messages[1].content
    prefix = compaction.llm_calls[0].text
    assert compaction.summary == NO_PRIOR_HISTORY + SPLIT_TURN_SEPARATOR + prefix + "\n\n<read-files>\na.py\n</read-files>"


def two_turn_session() -> Session:
    """A short first turn, then a tool loop whose end triggers a split-turn compaction."""
    s = Session()
    s.user("first request about the lexer")
    s.assistant("lexer done", total=50)
    s.user("please fix the parser")
    one_turn_tool_loop(s)
    return s


@pytest.mark.parametrize("strategy", BOTH)
def test_split_turn_merges_history_and_prefix_summaries(strategy):
    s = two_turn_session()
    summarizer = RecordingSummarizer()
    result = run(s, strategy, summarizer=summarizer)
    (compaction,) = result.compactions
    history_request, prefix_request = summary_requests(result)
    assert "## Critical Context" in history_request.messages[1].content  # six-section prompt
    assert "[User]: first request about the lexer" in history_request.messages[1].content
    assert "please fix the parser" not in history_request.messages[1].content
    assert "[User]: please fix the parser" in prefix_request.messages[1].content
    assert summarizer.max_tokens == [1600, 1000]  # floor(0.8 * 2000), floor(0.5 * 2000)
    history, prefix = (c.text for c in compaction.llm_calls)
    assert compaction.summary.startswith(history + SPLIT_TURN_SEPARATOR + prefix)


@pytest.mark.parametrize(("strategy", "expected"), [("pi", 1200), ("pi-2026-03", 1600)])
def test_summary_output_limit_per_version(strategy, expected):
    s = two_turn_session()
    summarizer = RecordingSummarizer()
    run(s, strategy, profile=small_profile(10_000, max_output=1200), summarizer=summarizer)
    assert summarizer.max_tokens[0] == expected


def file_session(timestamps: bool = True) -> Session:
    s = Session(timestamps)
    s.user("start")
    s.assistant(calls=[("c1", "read", {"path": "Z.py"}), ("c2", "read", {"path": "b.py"})], total=100)
    s.result("c1", "z")
    s.result("c2", "b")
    s.assistant(calls=[("c3", "edit", {"path": "b.py"}), ("c4", "write", {"path": "c.py"})], total=150)
    s.result("c3", "ok", name="edit")
    s.result("c4", "ok", name="write")
    s.assistant("edited", total=200)
    s.user("q" * 400)  # 100 tokens: the walk crosses here, a clean cut at a user message
    s.assistant("ok", total=9000)  # compaction 1
    s.user("next")
    s.assistant(calls=[("c5", "read", {"path": "a.py"})], total=300)
    s.result("c5", "a")
    s.assistant("read it", total=400)
    s.user("w" * 400)
    s.assistant("ok", total=9500)  # compaction 2
    return s


@pytest.mark.parametrize("strategy", BOTH)
def test_file_lists_sorted_and_carried_through_a_second_compaction(strategy):
    result = run(file_session(), strategy)
    first, second = result.compactions
    assert not first.details["isSplitTurn"] and first.details["firstKeptRole"] == "user"
    # read b.py was modified later, so only Z.py stays in the read list
    assert first.details["readFiles"] == ["Z.py"] and first.details["modifiedFiles"] == ["b.py", "c.py"]
    assert first.summary.endswith("<read-files>\nZ.py\n</read-files>\n\n<modified-files>\nb.py\nc.py\n</modified-files>")
    # the second summarizes the read of a.py and inherits the first one's lists; "Z" sorts before "a"
    assert second.details["readFiles"] == ["Z.py", "a.py"] and second.details["modifiedFiles"] == ["b.py", "c.py"]
    assert second.summary.endswith("<read-files>\nZ.py\na.py\n</read-files>\n\n<modified-files>\nb.py\nc.py\n</modified-files>")
    # the second history request is an update of the first summary
    update = summary_requests(result)[-1].messages[1].content
    assert "<previous-summary>\n" + first.summary + "\n</previous-summary>" in update


class EmptySummarizer(RecordingSummarizer):
    """Every summary comes back empty."""

    def complete(self, messages, *, max_tokens=None, **kw):
        result = super().complete(messages, max_tokens=max_tokens, **kw)
        return replace(result, text="")


@pytest.mark.parametrize("strategy", BOTH)
def test_an_empty_previous_summary_gets_the_initial_prompt_and_no_previous_summary_block(strategy):
    """`generateSummary` (compaction.ts@83378aad L532, L544): `previousSummary ? UPDATE… : …` and
    `if (previousSummary)`; "" is falsy in JS, so the second request is a first summary's."""
    s = Session()
    s.user("start")
    s.assistant("begun", total=100)
    s.user("q" * 400)  # 100 tokens: the walk crosses here, a clean cut at a user message
    s.assistant("ok", total=9000)  # compaction 1 (no tool calls: no file lists, the summary is "")
    s.user("next")
    s.assistant("going on", total=300)
    s.user("w" * 400)
    s.assistant("ok", total=9500)  # compaction 2
    result = run(s, strategy, summarizer=EmptySummarizer())
    first, second = result.compactions
    assert first.summary == "" and not first.details["isSplitTurn"] and not second.details["isSplitTurn"]
    text = summary_requests(result)[-1].messages[1].content
    assert "<previous-summary>" not in text and "[User]: next" in text
    assert "Write a structured checkpoint" in text and "NEW messages only" not in text


@pytest.mark.parametrize("strategy", BOTH)
def test_transcripts_without_timestamps_still_trigger(strategy):
    """Entry times come from a monotonic clock when the transcript has none."""
    assert [c.trigger for c in run(file_session(timestamps=False), strategy).compactions] == ["threshold", "threshold"]


@pytest.mark.parametrize("strategy", BOTH)
def test_staleness_guard_ignores_usage_from_before_the_compaction(strategy):
    s = Session()
    s.user("please fix the parser")
    s.assistant("a" * 200, total=9000)  # 50 tokens: crossing at itself, kept after the compaction
    s.user("thanks")  # pre-prompt check sees the same assistant: stale, no second compaction
    s.assistant("b", total=300)
    s.user("m" * 400)  # 100 tokens: a later cut lands here, with something before it to summarize
    result = run(s, strategy)
    assert len(result.compactions) == 1
    # a fresh assistant over the threshold does compact again
    s.assistant("c", total=9100)
    assert len(run(s, strategy).compactions) == 2


@pytest.mark.parametrize("strategy", BOTH)
def test_provider_overflow_compacts_and_retries_once(strategy):
    s = Session()
    s.user("go")
    s.assistant(calls=[("c1", "read", {"path": "a.py"})])
    s.result("c1", "hello " * 1000)
    s.assistant(calls=[("c2", "read", {"path": "b.py"})])
    s.result("c2", "hello " * 2000)  # the next request needs ~3,000 tokens > 2,800
    s.assistant("done")
    result = run(s, strategy, profile=small_profile(2_800), usage="simulated", reserve_tokens=500, keep_recent_tokens=50)
    (compaction,) = result.compactions
    assert compaction.trigger == "overflow"
    turns = [r for r in result.requests if r.kind == "turn"]
    assert [(r.step, r.overflow, r.attempt) for r in turns] == [(0, False, 0), (1, False, 0), (2, True, 0), (2, False, 1)]
    assert compaction.after[0].content.startswith(COMPACTION_SUMMARY_PREFIX)
    for request in result.requests:
        assert tool_pair_problems(request.messages) == [] or request.kind == "final"


def test_overflow_recovery_is_attempted_once_per_turn():
    s = Session()
    s.user("hello " * 3000)  # alone larger than the window
    s.assistant("done")
    kw = {"profile": small_profile(2_800), "usage": "simulated", "reserve_tokens": 500, "keep_recent_tokens": 50}
    base = run(s, "pi-2026-03", **kw)
    # BASE summarizes an empty range (the user message is kept), retries once, then gives up
    assert [c.trigger for c in base.compactions] == ["overflow"]
    assert [r.overflow for r in base.requests if r.kind == "turn"] == [True, True]
    later = run(s, "pi", **kw)
    # LATER: nothing to compact (both lists empty) → no compaction, no retry
    assert later.compactions == []
    assert [r.overflow for r in later.requests if r.kind == "turn"] == [True]


@pytest.mark.parametrize("strategy", BOTH)
def test_silent_overflow_compacts_without_retry(strategy):
    s = Session()
    s.user("go")
    s.assistant("a" * 200, total=12_000)  # stop with input > window
    result = run(s, strategy)
    assert [c.trigger for c in result.compactions] == ["overflow"]
    assert len([r for r in result.requests if r.kind == "turn"]) == 1


@pytest.mark.parametrize(("strategy", "trigger"), [("pi", "overflow"), ("pi-2026-03", "threshold")])
def test_length_stop_with_no_output_is_overflow_only_later(strategy, trigger):
    s = Session()
    s.user("earlier request")
    s.assistant("earlier answer", total=100)
    s.user("g" * 400)  # the cut lands here; the earlier turn is summarized
    s.assistant("", total=9_950, stopReason="length")  # input >= 0.99 * 10,000, no output
    assert [c.trigger for c in run(s, strategy).compactions] == [trigger]


def test_no_version_checks_the_threshold_between_tool_calls():
    """§2.3 and issue #8833: the threshold is checked after an agent run, not between its tool calls; LATER
    (ee24a9ec, July 2026) had no such check either (upstream still had none at 0.84.1, earendil-works/pi#7821).
    The run crosses the 8,000 threshold at its first call (9,000) and compacts only after its last answer."""
    s = Session()
    s.user("earlier request")
    s.assistant("earlier answer", total=100)
    s.user("g" * 400)
    s.assistant(calls=[("c1", "read", {"path": "a.py"})], total=9000)
    s.result("c1", "x" * 40)
    s.assistant("done", total=9100)
    for strategy in ("pi", "pi-2026-03"):
        (compaction,) = run(s, strategy).compactions
        assert compaction.step == 2 and compaction.details["contextTokens"] == 9100, strategy  # after the run


def test_2608_previous_kept_tail_lost_only_at_base():
    s = Session()
    s.user("u" * 400)
    s.assistant("a", total=100)
    s.user("q" * 200)  # 50
    s.assistant("r" * 200, total=9000)  # 50: the walk crosses 30 here → kept [assistant]; split
    s.user("s" * 400)  # 100: the second walk crosses here
    s.assistant("t", total=9500)
    for strategy, lost in (("pi", False), ("pi-2026-03", True)):
        first, second = run(s, strategy).compactions
        kept_by_first = set(first.kept_ids)
        assert kept_by_first, "the first compaction keeps a tail"
        if lost:
            assert kept_by_first <= set(second.dropped_ids)
        else:
            assert kept_by_first <= set(second.summarized_ids) | set(second.kept_ids)
            assert not kept_by_first & set(second.dropped_ids)


@pytest.mark.parametrize("strategy", BOTH)
def test_request_reports_estimate_and_threshold(strategy):
    s = Session()
    s.user("go")
    s.assistant("x", total=500)
    s.user("abcdefgh")  # 2 tokens after the last usage
    s.assistant("y", total=600)
    result = run(s, strategy)
    second = [r for r in result.requests if r.kind == "turn"][1]
    assert second.threshold == 8001  # `contextTokens > 8,000` (§2.2): 8,001 is the smallest that compacts
    assert second.estimate_tokens == 500 + 2


@pytest.mark.parametrize("strategy", [*BOTH, "pi-2025-12"])
def test_gpt5_is_read_with_its_400k_context_window(strategy):
    """Pi's threshold is `model.contextWindow - reserveTokens` (§2.1), and pi-ai gives GPT-5 a 400,000-token
    contextWindow (models.dev's `limit.context`), not the 272,000-token input limit that is the profile's
    window: 383,616. A session at 260,000 tokens does not compact; the provider refuses above 272,000. The first
    request follows no check (no assistant to check yet), so it reports no threshold (`Request.threshold`)."""
    s = Session()
    s.user("first")
    s.assistant("one", total=100_000)
    s.user("second")
    s.assistant("two", total=260_000)
    s.user("third")
    s.assistant("three", total=262_000)
    result = run(s, strategy, profile="gpt-5", reserve_tokens=16_384, keep_recent_tokens=20_000)
    assert not result.compactions
    assert [r.threshold for r in result.requests if r.kind == "turn"] == [None, 400_000 - 16_384 + 1, 400_000 - 16_384 + 1]
