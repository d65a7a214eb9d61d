"""GPT-5.6 and later cache at breakpoints, with hand-worked answers (the cost audit's finding 2, forty-third pass).

OpenAI's API reference for `prompt_cache_options` (async-openai 0.42.0 `PromptCacheOptionsParam`, openai-client-base
0.16.0; langchain4j's `OpenAiOfficialPromptCacheOptions` and `OpenAiOfficialPromptCacheBreakpoint`; Azure's
`PromptCacheBreakpointConfig`): by default OpenAI places one implicit breakpoint per request, at the end of the newest
eligible message (a system, user or tool-result message: assistant output cannot carry one); a cached prefix is
matched exactly at a breakpoint, without falling back to a shorter unmarked prefix, and "the boundary is not rounded
to a token block"; up to the latest 80 breakpoints of the conversation are considered, with no content-block lookback
limit; the TTL is 30 minutes, the minimum lifetime. Writes cost the map's write price (gpt-5.6: $4 input, $5 write,
$0.40 cached per million). Before the fix GPT-5.6 read any common prefix with a kept request floored to 128 tokens,
wrote whole 128-token blocks, and lost an entry after 10 minutes.

The messages' token counts (o200k_base, plus 4 tokens of framing per message) are the inputs of the arithmetic:
S = 1,505 ("rules " × 1,500: 1,501 + 4), U0 = U0' = U1 = 305, A0 = 6 ("first answer": 2 + 4), T = 1,007, X = 10.
U0' is U0 with its last 50 words changed, so (S, U0) and (S, U0', …) share 1,759 tokens (S, U0's framing and 250 words).
"""

from __future__ import annotations

import pytest

from compaction_bench.caching import CacheMarks
from compaction_bench.metrics.cost import request_cost
from compaction_bench.profiles import get_profile, profile_from_dict
from compaction_bench.provider import SimulatedProvider
from compaction_bench.request import Message, Request, ToolCall

M = 1e-6  # dollars per token of a $1-per-million price
S = Message("system", "rules " * 1500)
U0 = Message("user", "alpha " * 300)
U0_EDITED = Message("user", "alpha " * 250 + "beta " * 50)  # the same first 250 words, then an in-place edit
A0 = Message("assistant", "first answer")
U1 = Message("user", "beta " * 300)
CALL = Message("assistant", "", tool_calls=(ToolCall("call_1", "read", '{"path": "a.py"}'),))
T = Message("tool", "x = 1\n" * 200, tool_call_id="call_1")
X = Message("user", "summary of the work so far")
GPT_5_6 = "openai/gpt-5.6"


def _at(seconds: int) -> str:
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    return f"2026-07-01T{hour:02d}:{minute:02d}:{second:02d}Z"


def _read_written(outcome) -> tuple[int, int]:
    return outcome.cached_tokens, outcome.cache.cache_write_tokens


def test_the_token_counts_the_hand_answers_use():
    provider = SimulatedProvider(get_profile(GPT_5_6))
    assert [provider.message_tokens(m) for m in (S, U0, U0_EDITED, A0, U1, T, X)] == [1505, 305, 305, 6, 305, 1007, 10]
    assert provider.common_prefix_tokens((S, U0), (S, U0_EDITED, A0, U1)) == 1759


@pytest.mark.parametrize("model", [GPT_5_6, "openai/gpt-5.6-sol", "gpt-6-sol", "azure/gpt-5.6-sol", "azure_ai/gpt-6-astra",
                                   "us.openai.gpt-5.6-sol", "databricks/databricks-gpt-5-6-sol"])
def test_gpt_5_6_and_later_read_at_breakpoints_token_exact_for_30_minutes_wherever_served(model):
    """The name rule (GPT-5.6 and later, after a deployment path or a cloud's prefix) and the documented numbers;
    the 1,024-token minimum stays (no source changes it), and so does the map's write premium (1.25×)."""
    cache = get_profile(model).cache
    assert (cache.provider, cache.reads, cache.block, cache.ttl_seconds, cache.min_prefix) == ("openai", "implicit", 1, 1800, 1024)
    assert cache.write_multiplier == pytest.approx(1.25, rel=1e-5)  # Databricks: $4.00001 and $5.00003 a million


@pytest.mark.parametrize(("model", "reads", "block", "ttl"), [
    ("openai/gpt-5.5", "prefix", 128, 600), ("openai/gpt-5", "prefix", 128, 600), ("64k", "prefix", 128, 600),
    ("coralbricks/glm-5.3", "prefix", 128, 600),  # a write premium, but not GPT-5.6: OpenAI's older rules stand in
    ("claude-sonnet", "marked", 1, 300), ("gemini/gemini-2.5-pro", "prefix", 1, 3600), ("deepseek/deepseek-chat", "prefix", 64, 10800),
])
def test_the_other_models_keep_their_rules(model, reads, block, ttl):
    cache = get_profile(model).cache
    assert (cache.reads, cache.block, cache.ttl_seconds) == (reads, block, ttl)


def test_an_in_place_edit_reads_nothing():
    """R1 = (S, U0) writes up to its breakpoint at the end of U0: 1,505 + 305 = 1,810 tokens (not 1,792, the
    128-token floor). R2 = (S, U0', A0, U1) shares 1,759 tokens with R1, but R1's only breakpoint (1,810) is not
    inside them, and there is no shorter unmarked prefix to fall back to: R2 reads 0 and writes all of itself up to
    U1, 1,505 + 305 + 6 + 305 = 2,121. (Before: 1,664 read, the 128-token floor of 1,759, and 384 written.)"""
    provider = SimulatedProvider(get_profile(GPT_5_6))
    assert _read_written(provider.send(Request((S, U0)), timestamp=_at(0))) == (0, 1810)
    second = provider.send(Request((S, U0_EDITED, A0, U1)), timestamp=_at(30))
    assert second.cache.prefix_tokens == 1759
    assert _read_written(second) == (0, 2121)


def test_a_15_minute_pause_still_reads_and_a_31_minute_one_does_not():
    """The entry lives 30 minutes at least (the documented minimum, modelled as its life): R2 = (S, U0, A0, U1) 15
    minutes after R1 reads R1's 1,810 tokens and writes A0 and U1, 311; at $0.40, $5 and $4 a million that is
    1,810 × 0.4 + 311 × 5 = 2,279 millionths of a dollar (nothing is left as plain input). 31 minutes after, R1's
    entry is gone: R2 writes all of itself, 2,121 tokens, $0.010605. (Before: the 10-minute TTL read 0 at 15
    minutes and wrote 2,048.)"""
    profile = get_profile(GPT_5_6)
    for pause, read, written, dollars in [(15 * 60, 1810, 311, 2279 * M), (30 * 60, 1810, 311, 2279 * M), (31 * 60, 0, 2121, 2121 * 5 * M)]:
        provider = SimulatedProvider(profile)
        provider.send(Request((S, U0)), timestamp=_at(0))
        second = provider.send(Request((S, U0, A0, U1)), timestamp=_at(pause))
        assert _read_written(second) == (read, written), pause
        cost = request_cost(profile, input_tokens=second.true_tokens, cached_tokens=read, cache_write_tokens=written, output_tokens=0)
        assert cost == pytest.approx(dollars, rel=1e-12), pause


def test_a_read_is_exact_at_the_previous_end_not_floored_to_128():
    """R2 = (S, U0, A0, U1) extends R1 = (S, U0): it reads R1's whole 1,810 tokens (the 128-token floor would be 1,792)
    and writes 6 + 305 = 311 (before: 2,048 − 1,792 = 256). An agent's Anthropic marks change nothing: OpenAI places
    this breakpoint itself (a request without `cache_control` is explicit mode without one: tests/test_cache_marks.py)."""
    for placement in CacheMarks:
        provider = SimulatedProvider(get_profile(GPT_5_6), placement=placement)
        provider.send(Request((S, U0)))
        assert _read_written(provider.send(Request((S, U0, A0, U1)))) == (1810, 311), placement


def test_the_breakpoint_ends_the_newest_system_user_or_tool_message():
    """R1 = (S, U0, A0) ends with an assistant message, which carries no breakpoint: it writes 1,810 (to U0's end) and
    A0's 6 tokens are plain input. R2 = (S, U0, CALL, T) reads those 1,810 and writes up to its tool result:
    18 + 1,007 = 1,025 (an assistant tool call of 18 tokens, then the result). R3 = R2 and one more assistant message
    reads R2's 2,835 and writes nothing."""
    provider = SimulatedProvider(get_profile(GPT_5_6))
    assert _read_written(provider.send(Request((S, U0, A0)))) == (0, 1810)
    assert provider.message_tokens(CALL) == 18
    assert _read_written(provider.send(Request((S, U0, CALL, T)))) == (1810, 1025)
    assert _read_written(provider.send(Request((S, U0, CALL, T, A0)))) == (2835, 0)


def test_a_read_at_an_older_request_s_breakpoint_among_the_latest_80():
    """A session of five turns, then a compaction that keeps S and U0 and replaces the rest with a summary X. Only the
    first request's breakpoint (the end of U0, 1,810) lies inside what the compacted request shares; four newer
    requests came after it, and OpenAI considers the latest 80 breakpoints: it reads 1,810 and writes X's 10.
    (With the two newest requests kept, as before, it read the 1,792-token floor of the shared prefix; read at
    breakpoints with only two kept, nothing.)"""
    provider = SimulatedProvider(get_profile(GPT_5_6))
    history: tuple[Message, ...] = (S, U0)
    provider.send(Request(history))
    for turn in range(4):
        history += (A0, Message("user", f"next step {turn} " * 40))
        provider.send(Request(history))
    assert _read_written(provider.send(Request((S, U0, X)))) == (1810, 10)


def test_writes_are_billed_only_where_the_map_prices_a_premium():
    """gpt-6-astra-law: the map prices a hit ($1 a million) but no write, so it caches at breakpoints and writes
    nothing billable, as OpenAI's models without a write price always did."""
    provider = SimulatedProvider(get_profile("gpt-6-astra-law"))
    assert _read_written(provider.send(Request((S, U0)))) == (0, 0)
    assert _read_written(provider.send(Request((S, U0, A0, U1)))) == (1810, 0)


def test_a_profile_stored_before_reads_existed_reads_as_its_run_did():
    """A run's manifest from before `CachePolicy.reads`: Anthropic read at breakpoints, every other policy (GPT-5.6's
    then included) anywhere in the common prefix."""
    for name, reads in [("claude-sonnet", "marked"), (GPT_5_6, "prefix"), ("64k", "prefix")]:
        stored = get_profile(name).to_dict()
        del stored["cache"]["reads"]
        assert profile_from_dict(stored).cache.reads == reads, name
