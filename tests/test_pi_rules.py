"""Pi rules an audit found missing (issue 14): transient-error retries (#1834), the same-model
condition of overflow recovery, empty branches, UTF-16 lengths, LATER's split-turn prefix
settings, and the commits the strategies name. Expected values are worked out by hand from the
upstream rules quoted in each test (docs/specs/pi.md §2.3, §4.1, §4.3, §5.2, §6, §10).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from compaction_bench.importing import load_transcript
from compaction_bench.registry import strategies
from compaction_bench.replay import replay
from compaction_bench.strategies.pi_branch import prepare_branch_summary
from compaction_bench.strategies.pi_compaction import TRUNCATION_NOTE, serialize_conversation
from compaction_bench.strategies.pi_session_tree import Entry, PiMessage
from compaction_bench.transcript import Item
from tests.pi_builders import RecordingSummarizer, Session, small_profile

BOTH = ("pi", "pi-2026-03")
OPTS = {"reserve_tokens": 2000, "keep_recent_tokens": 30}
WINDOW = small_profile(10_000)  # threshold 10,000 - 2,000 = 8,000


def run(session: Session, strategy: str, profile=WINDOW, summarizer=None, **options):
    return replay(session.transcript(), strategy, profile=profile, usage="recorded-always", options={**OPTS, **options}, summarizer=summarizer or RecordingSummarizer())


def transient_errors(n: int) -> Session:
    s = Session()
    s.user("first request")
    s.assistant("first answer", total=7_000)  # 7,000 <= 8,000: no compaction
    s.user("n" * 4_400)  # 1,100 estimated tokens: 7,000 + 1,100 = 8,100 > 8,000 on the error path
    for _ in range(n):
        s.assistant("", stopReason="error", errorMessage="503 service unavailable")
    return s


@pytest.mark.parametrize("strategy", BOTH)
def test_transient_error_skips_the_check_only_while_a_retry_is_scheduled(strategy):
    # three retries are scheduled (maxRetries = 3); the fourth error gives up and the error path
    # estimates 7,000 + 1,100 = 8,100 > 8,000
    assert run(transient_errors(3), strategy).compactions == []
    (compaction,) = run(transient_errors(4), strategy).compactions
    assert compaction.trigger == "threshold" and compaction.details["contextTokens"] == 8_100
    assert compaction.step == 4  # the fourth error: responses 0 (answer), 1, 2, 3, 4
    # with retries off the first error runs the error path at once
    (at_once,) = run(transient_errors(1), strategy, retry_enabled=False).compactions
    assert at_once.step == 1


def overflow_from(model: str) -> Session:
    s = Session()
    s.user("first request")
    s.assistant("first answer", total=100, provider="anthropic", model="m1")
    s.user("x" * 400)
    s.assistant("", stopReason="error", errorMessage="prompt is too long: 250000 tokens", provider="anthropic", model=model)
    return s


@pytest.mark.parametrize("strategy", BOTH)
def test_overflow_recovery_only_for_the_current_model(strategy):
    assert [c.trigger for c in run(overflow_from("m1"), strategy).compactions] == ["overflow"]
    # another model's overflow is not recovered; the error path estimate (100 + 100) is far under 8,000
    assert run(overflow_from("m2"), strategy).compactions == []


def test_branch_budget_of_zero_means_no_limit():
    messages = [Entry(f"e{n}", None, "message", float(n), message=PiMessage(role="user", texts=("u" * 400,))) for n in range(3)]
    unlimited = prepare_branch_summary(messages, budget=0, summary_ratio=0.9, image_chars=4800, user_images=True)
    assert len(unlimited.messages) == 3
    limited = prepare_branch_summary(messages, budget=150, summary_ratio=0.9, image_chars=4800, user_images=True)
    assert len(limited.messages) == 1  # 100 tokens each, newest first


def test_empty_branch_is_no_content_without_a_model_call(tmp_path: Path):
    def entry(id_, parent, type_="message", **fields):
        return {"type": type_, "id": id_, "parentId": parent, "timestamp": f"2026-01-01T10:00:{int(id_[1:]):02d}.000Z", **fields}

    def msg(role, **fields):
        return {"role": role, "timestamp": 1767261601000, **fields}

    usage = {"input": 10, "output": 5, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 15}
    lines = [
        {"type": "session", "version": 3, "id": "s", "timestamp": "2026-01-01T10:00:00.000Z", "cwd": "/p"},
        entry("e1", None, message=msg("user", content="start")),
        entry("e2", "e1", message=msg("assistant", content=[{"type": "text", "text": "started"}], usage=usage, stopReason="stop")),
        entry("e3", "e2", "model_change", provider="openai", modelId="gpt-5"),  # the abandoned branch: no message
        entry("e4", "e2", "branch_summary", fromId="e2", summary="recorded"),
        entry("e5", "e4", message=msg("user", content="go on")),
        entry("e6", "e5", message=msg("assistant", content=[{"type": "text", "text": "ok"}], usage=usage, stopReason="stop")),
    ]
    path = tmp_path / "tree.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    summarizer = RecordingSummarizer()
    result = replay(load_transcript(path, branch="tree"), "pi", profile=small_profile(200_000), summarizer=summarizer)
    (branch,) = result.compactions
    assert branch.summary == "No content to summarize" and summarizer.max_tokens == [] and branch.llm_calls == ()


def test_tool_result_truncation_counts_utf16_code_units():
    def serialized(text: str) -> str:
        return serialize_conversation([PiMessage(role="toolResult", texts=(text,), tool_call_id="t")], 2000)

    # 1,000 emoji are 2,000 UTF-16 units: not truncated; 1,001 are 2,002: two units over
    assert serialized("😀" * 1000) == "[Tool result]: " + "😀" * 1000
    assert serialized("😀" * 1001) == "[Tool result]: " + "😀" * 1000 + TRUNCATION_NOTE.format(n=2)
    # a pair cut in half keeps its high half, which goes out as U+FFFD
    assert serialized("a" * 1999 + "😀" + "b" * 10) == "[Tool result]: " + "a" * 1999 + "\ufffd" + TRUNCATION_NOTE.format(n=11)


@pytest.mark.parametrize(("strategy", "expected"), [("pi", [1600 + 2048, 1000 + 2048]), ("pi-2026-03", [1600 + 16384, 1000])])
def test_split_turn_prefix_reasons_like_the_history_request_only_later(strategy, expected):
    s = Session()
    level = Item(id="tl", kind="marker", meta={"event": "thinking_level_change", "entry": "tl", "thinkingLevel": "low"})
    s.items.append(level)
    s.user("first request about the lexer")
    s.assistant("lexer done", total=50)
    s.user("please fix the parser")
    s.assistant(calls=[("c1", "read", {"path": "a.py"})], total=100)
    s.result("c1", "x" * 400)
    s.assistant(calls=[("c2", "edit", {"path": "a.py"})], total=200)
    s.result("c2", "y" * 40, name="edit")
    s.assistant("done", total=39_000)  # > 40,000 - 2,000 (a window the 17,984-token BASE request fits in)
    summarizer = RecordingSummarizer()
    profile = replace(small_profile(40_000), provider="anthropic", max_output=64_000)
    (compaction,) = run(s, strategy, profile=profile, summarizer=summarizer).compactions
    assert compaction.details["isSplitTurn"]
    # budget thinking adds the level's budget (low 2,048; BASE always high 16,384) to maxTokens;
    # BASE sends the prefix request with no reasoning option, LATER as the history request
    assert summarizer.max_tokens == expected


@pytest.mark.parametrize(("level", "budget"), [(None, 8192), ("off", 0), ("high", 16384)])
def test_later_thinks_at_medium_until_the_session_sets_a_level(level, budget):
    """Pi's `DEFAULT_THINKING_LEVEL` is "medium" since a373dce7 (v0.50.2, 2026-01-29; "off" before), so a LATER session
    that records no `thinking_level_change` summarizes at medium: with `OPTS`' 2,000 reserve, maxTokens
    floor(0.8 × 2,000) = 1,600 plus the medium budget 8,192 on a budget-thinking provider (before: no budget, as at
    "off"); a recorded level replaces it."""
    s = Session()
    if level is not None:
        s.items.append(Item(id="tl", kind="marker", meta={"event": "thinking_level_change", "entry": "tl", "thinkingLevel": level}))
    s.user("please fix the parser")
    s.assistant("looking " * 12_000, total=100)
    s.user("go on")
    s.assistant("done " * 12_000, total=39_000)  # > 40,000 - 2,000
    summarizer = RecordingSummarizer()
    profile = replace(small_profile(40_000), provider="anthropic", max_output=64_000)
    (compaction,) = run(s, "pi", profile=profile, summarizer=summarizer).compactions
    # a split turn: the history request, then the turn prefix's, floor(0.5 × 2,000) = 1,000 plus the same budget
    assert compaction.details["isSplitTurn"] and summarizer.max_tokens == [1_600 + budget, 1_000 + budget]


@pytest.mark.parametrize(("strategy", "commit"), [("pi", "2efa728d"), ("pi-2026-03", "83378aad"), ("pi-2025-12", "83a6c269")])
def test_each_rule_set_names_the_commit_it_reproduces(strategy, commit):
    cls = strategies()[strategy]
    assert commit in cls.description and commit in cls.spec
