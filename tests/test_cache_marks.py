"""Where an agent places Anthropic cache breakpoints: Aider marks none unless run with `--cache-prompts`.

Aider@5dc9490b: `args.py` L233-237 (`--cache-prompts`, default False), `base_coder.py` L426-427 and L1333-1337 (the
headers are added only with it), `chat_chunks.py` L28-41 (the system/examples, repo-map/read-only and chat-file
blocks are marked, never `cur`; the chat-file block comes right after `done`, L16-26, so its mark caches `done` too).
Anthropic caches only at blocks a request marks (evaluation.md §7), so without marks every input token is billed at
the input price.
"""

from __future__ import annotations

from dataclasses import replace

import litellm

from compaction_bench.caching import CacheMarks, breakpoints, cache_outcome
from compaction_bench.metrics.measure import measure_cell
from compaction_bench.profiles import ANTHROPIC_CACHE, get_profile
from compaction_bench.provider import SimulatedProvider
from compaction_bench.replay import replay
from compaction_bench.request import Message, Request
from compaction_bench.transcript import Item, Transcript

CLAUDE = "anthropic/claude-sonnet-4-5"
SYSTEM_TEXT = "rules " * 1500  # over every Claude model's 1,024-token minimum: cacheable when marked

ITEMS = (
    Item("sys", "system", SYSTEM_TEXT),
    Item("u0", "user", "alpha " * 300, turn=0),
    Item("a0", "assistant", "first answer", response=0, turn=0),
    Item("u1", "user", "beta " * 300, turn=1),
    Item("a1", "assistant", "second answer", response=1, turn=1),
)


def _turn_rows(strategy: str, profile: str = CLAUDE, **options: object) -> list[dict]:
    result = replay(Transcript("hand", ITEMS), strategy, profile=profile, options=options)
    return [row for row in measure_cell(result, [], answerer=None).requests if row["kind"] == "turn"]


def test_placements_mark_the_system_prompt_and_tail_the_system_prompt_alone_or_nothing():
    ends = list(range(100, 1100, 100))
    assert breakpoints(ends, 1, 4, CacheMarks.SYSTEM_AND_TAIL) == [0, 7, 8, 9]
    assert breakpoints(ends, 1, 4, CacheMarks.SYSTEM_AND_PREFIX) == [0]
    assert breakpoints(ends, 0, 4, CacheMarks.SYSTEM_AND_PREFIX) == []
    assert breakpoints(ends, 1, 4, CacheMarks.NONE) == []
    assert breakpoints(ends, 1, 4, CacheMarks.SYSTEM_AND_PREFIX, prefix_messages=6) == [0, 5]
    assert breakpoints(ends, 0, 4, CacheMarks.SYSTEM_AND_PREFIX, prefix_messages=6) == [5]
    assert breakpoints(ends, 1, 4, CacheMarks.SYSTEM_AND_PREFIX, prefix_messages=1) == [0]


def test_a_request_marking_only_its_system_prompt_reads_and_writes_only_that():
    ends = [1500, 1800, 2100]  # a 1,500-token system prompt, then two messages
    first = cache_outcome(ANTHROPIC_CACHE, prefix_tokens=0, total_tokens=2100, previous_boundaries=[],
                          current_boundaries=ends, current_system=1, placement=CacheMarks.SYSTEM_AND_PREFIX)
    assert (first.cached_tokens, first.cache_write_tokens) == (0, 1500)
    second = cache_outcome(ANTHROPIC_CACHE, prefix_tokens=2000, total_tokens=2400, previous_boundaries=ends, previous_system=1,
                           current_boundaries=[*ends, 2400], current_system=1, placement=CacheMarks.SYSTEM_AND_PREFIX)
    assert (second.cached_tokens, second.cache_write_tokens) == (1500, 0)  # the 1,800 boundary carried no mark
    unmarked = cache_outcome(ANTHROPIC_CACHE, prefix_tokens=2000, total_tokens=2400, previous_boundaries=ends, previous_system=1,
                             current_boundaries=[*ends, 2400], current_system=1, placement=CacheMarks.NONE)
    assert (unmarked.cached_tokens, unmarked.cache_write_tokens) == (0, 0)


def test_aider_on_claude_reads_and_writes_no_cache_and_pays_the_input_price_for_every_token():
    prices = litellm.model_cost["claude-sonnet-4-5"]  # the map entry the profile prices from
    rows = _turn_rows("aider")
    assert len(rows) == 2
    for row in rows:
        assert (row["cached_tokens"], row["cache_write_tokens"]) == (0, 0)
        expected = row["true_tokens"] * prices["input_cost_per_token"] + row["output_tokens"] * prices["output_cost_per_token"]
        assert abs(row["cost_usd"] - expected) < 1e-12
    # the same requests from an agent that marks the system prompt and the tail read the first request's whole entry
    marked = _turn_rows("none")
    assert marked[1]["cached_tokens"] == marked[0]["true_tokens"] > 0


def test_aider_with_cache_prompts_caches_its_system_prompt_while_its_history_is_empty():
    # no edit: nothing moves to `done`, so the mark after it stands at the system prompt's end
    system_tokens = SimulatedProvider(get_profile(CLAUDE)).count([Message("system", SYSTEM_TEXT)])
    first, second = _turn_rows("aider", cache_prompts=True)
    assert (first["cached_tokens"], first["cache_write_tokens"]) == (0, system_tokens)
    assert (second["cached_tokens"], second["cache_write_tokens"]) == (system_tokens, 0)


def _edited_session(system: bool) -> Transcript:
    """Three turns; the first one's edit is applied and committed, so it moves to `done` before the second request."""
    return Transcript("edited", (
        *((Item("sys", "system", SYSTEM_TEXT),) if system else ()),
        Item("u0", "user", "alpha " * 1500, turn=0),
        Item("a0", "assistant", "first answer", response=0, turn=0),
        Item("out0", "marker", "Applied edit to m.py\nCommit abc1234 feat: one", turn=0, meta={"event": "aider-output"}),
        Item("u1", "user", "beta " * 300, turn=1),
        Item("a1", "assistant", "second answer", response=1, turn=1),
        Item("u2", "user", "gamma " * 300, turn=2),
        Item("a2", "assistant", "third answer", response=2, turn=2),
    ))


def test_aider_with_cache_prompts_marks_the_end_of_its_history_as_upstream_s_chat_files_mark_does():
    """The second request writes up to `done`'s end (the mark after it) and reads the system prompt the first one
    wrote; the third reads all of `done`. Without a system item (the Aider corpus) `done` alone is cached."""
    provider = SimulatedProvider(get_profile(CLAUDE))
    for system in (True, False):
        result = replay(_edited_session(system), "aider", profile=CLAUDE, options={"cache_prompts": True})
        turns = [r for r in result.requests if r.kind == "turn"]
        rows = [row for row in measure_cell(result, [], answerer=None).requests if row["kind"] == "turn"]
        # `done`: the messages before the second turn's user message, system prompt included
        done_end = next(n for n, m in enumerate(turns[1].messages) if m.content.startswith("beta"))
        assert done_end >= (3 if system else 2)  # the first turn (and the commit message Aider appends) moved to `done`
        history = provider.count(list(turns[1].messages[:done_end]))
        system_tokens = provider.count([Message("system", SYSTEM_TEXT)]) if system else 0
        assert (rows[1]["cached_tokens"], rows[1]["cache_write_tokens"]) == (system_tokens, history - system_tokens)
        assert rows[2]["cached_tokens"] == history


def test_aider_on_an_openai_model_is_cached_automatically_as_before():
    rows = _turn_rows("aider", profile="gpt-5")
    assert rows[1]["cached_tokens"] == rows[0]["true_tokens"] // 128 * 128  # OpenAI: the common prefix in 128-token steps


def test_a_request_without_cache_control_reads_and_writes_nothing_and_leaves_no_entry():
    provider = SimulatedProvider(get_profile(CLAUDE))
    system, question = Message("system", SYSTEM_TEXT), Message("user", "alpha " * 300)
    first = provider.send(Request([system, question]))
    assert first.cache.cache_write_tokens == first.true_tokens
    summary = Request([system, question, Message("user", "summarize " * 1500)], kind="summary", cache_control=False)
    unmarked = provider.send(summary)
    assert (unmarked.cache.cached_tokens, unmarked.cache.cache_write_tokens) == (0, 0)  # it shares the whole first request
    marked_twin = SimulatedProvider(get_profile(CLAUDE))
    marked_twin.send(Request([system, question]))
    assert marked_twin.send(replace(summary, cache_control=True)).cache.cached_tokens == first.true_tokens
    # the next turn reads the first request's entry: the summary left none that could have pushed it out or been read
    after = provider.send(Request([system, question, Message("assistant", "answer"), Message("user", "next")]))
    assert after.cache.cached_tokens == first.true_tokens
    # on an automatic cache the flag changes nothing
    openai = SimulatedProvider(get_profile("gpt-5"))
    opened = openai.send(Request([system, question]))
    assert openai.send(summary).cache.cached_tokens == opened.true_tokens // 128 * 128


def test_on_gpt_5_6_a_request_without_cache_control_is_explicit_mode_without_a_breakpoint():
    """pi-ai sends `prompt_cache_options: {mode: "explicit"}` for `cacheRetention: "none"` on models that bill cache
    writes: no implicit breakpoint, so nothing is read or written (the API reference: "Without any breakpoint,
    nothing is cached")."""
    provider = SimulatedProvider(get_profile("openai/gpt-5.6"))
    system, question = Message("system", SYSTEM_TEXT), Message("user", "alpha " * 300)
    first = provider.send(Request([system, question]))
    summary = Request([system, question, Message("user", "summarize " * 1500)], kind="summary", cache_control=False)
    unmarked = provider.send(summary)
    assert (unmarked.cache.cached_tokens, unmarked.cache.cache_write_tokens) == (0, 0)
    after = provider.send(Request([system, question, Message("assistant", "answer"), Message("user", "next")]))
    assert after.cache.cached_tokens == first.true_tokens  # the implicit breakpoint at the first request's end
