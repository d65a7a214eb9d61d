"""Aider's recorded usage: `input` is the whole prompt whichever way Aider's "Tokens:" line reported it.

Aider's "sent" has meant three things (`scenarios/aider.tokens_usage`): the API's `prompt_tokens` beside `N cached`
(August 2024: DeepSeek's holds the hits, Anthropic's did not), the whole prompt beside `cache write` / `cache hit`
(v0.51.0 on), and, in lines its development wrote in between, the prompt without them. Aider's own chat history sent
the same one-word request ("hi", same model, same files) under each of these rules, so the right answer is known
apart from the rules: the same prompt has the same size."""

from __future__ import annotations

import pytest

from compaction_bench.importing import load_transcripts
from compaction_bench.scenarios.aider import tokens_usage
from compaction_bench.transcript import Transcript, Usage
from tests.conftest import corpus_files


def first_cache_usage(session: Transcript) -> Usage:
    return next(i.usage for i in session.items if i.usage and (i.usage.cached_input or i.usage.cache_write))


@pytest.fixture(scope="module")
def sessions() -> dict[str, Transcript]:
    (path,) = corpus_files("aider-chat-history-md")
    return {t.id: t for t in load_transcripts(path)}


@pytest.mark.corpora
def test_deepseek_sent_the_same_prompt_under_both_reporting_rules(sessions):
    """`21,539 sent, 320 cached` and `21,523 sent, 13,952 cache hit`: the same "hi" to deepseek-coder, whose
    `prompt_tokens` holds its cache hits (before, the second read 35,475)."""
    cached, hit = first_cache_usage(sessions["chat-history:875"]), first_cache_usage(sessions["chat-history:889"])
    assert (cached.input, cached.cached_input) == (21_539, 320)
    assert (hit.input, hit.cached_input) == (21_523, 13_952)


@pytest.mark.corpora
def test_claude_sent_the_same_prompt_under_every_reporting_rule(sessions):
    """claude-3-haiku got the same "hi" logged as `194 sent, 9,474 cached` (sent without the hits), as
    `194 sent, 9,474 cache write` (a development line, sent without them) and, with a smaller repo map, as
    `202 sent, 2,728 cache hit` (development) and `2,930 sent, 2,728 cache hit` (v0.51.0: sent is whole)."""
    assert first_cache_usage(sessions["chat-history:816"]).input == 9_668
    assert first_cache_usage(sessions["chat-history:890"]).input == 9_668
    assert first_cache_usage(sessions["chat-history:895"]).input == 2_930
    released = first_cache_usage(sessions["chat-history:909"])
    assert (released.input, released.cached_input) == (2_930, 2_728)  # before, 5,658


@pytest.mark.corpora
def test_the_model_id_is_the_model_without_aiders_prompt_caching_mark(sessions):
    assert sessions["chat-history:816"].model == "anthropic/claude-3-haiku-20240307"  # the banner says `...0307⚡`
    assert not any("⚡" in (t.model or "") for t in sessions.values())


def test_the_rules_on_lines_written_by_hand():
    assert tokens_usage("1,000 sent, 4,000 cached, 10 received", "claude-3-5-sonnet-20240620").input == 5_000
    assert tokens_usage("5,000 sent, 4,000 cached, 10 received", "deepseek/deepseek-chat").input == 5_000
    write_and_hit = tokens_usage("15k sent, 13k cache write, 1.6k cache hit, 133 received")
    assert (write_and_hit.input, write_and_hit.cache_write, write_and_hit.cached_input) == (15_000, 13_000, 1_600)
    assert tokens_usage("194 sent, 9,474 cache write, 7 received").input == 9_668
    assert tokens_usage("1,234 sent, 56 received").input == 1_234
