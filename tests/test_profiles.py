"""Real models as profiles: limits from litellm's bundled map, the overflow rule per provider family,
`MODEL@WINDOW`, and OpenCode's usable window and V2 threshold for GPT-5's real limits.

Independent facts used as the right answers: models.dev lists GPT-5 with context 400,000, input
272,000 and output 128,000, and Claude Sonnet 4.5 with a 200,000 context and 64,000 output; OpenAI
documents GPT-5's limits the same way.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from compaction_bench.profiles import ProfileError, get_profile
from compaction_bench.provider import SimulatedProvider
from compaction_bench.replay import replay
from compaction_bench.request import Message, Request
from compaction_bench.runner import run as run_benchmark
from tests.test_opencode_helpers import Session

GPT5_CONTEXT, GPT5_INPUT, GPT5_OUTPUT = 400_000, 272_000, 128_000


def test_real_models_carry_their_limits_prices_and_rule():
    gpt5 = get_profile("openai/gpt-5")
    assert (gpt5.context_window, gpt5.input_limit, gpt5.context_limit, gpt5.max_output) == (GPT5_INPUT, GPT5_INPUT, GPT5_CONTEXT, GPT5_OUTPUT)
    assert gpt5.overflow == "input" and gpt5.tokenizer == "o200k_base" and gpt5.cache.provider == "openai"
    assert gpt5.prices.input == pytest.approx(1.25e-6) and gpt5.prices.cached_input == pytest.approx(0.125e-6)
    sonnet = get_profile("anthropic/claude-sonnet-4-5")
    assert (sonnet.context_window, sonnet.max_output, sonnet.overflow, sonnet.input_limit) == (200_000, 64_000, "input+output", None)
    assert sonnet.cache.provider == "anthropic" and sonnet.prices.cache_write == pytest.approx(3.75e-6)
    deepseek = get_profile("deepseek/deepseek-chat")
    assert deepseek.overflow == "input+output" and deepseek.provider == "deepseek" and deepseek.max_output > 0
    # The short names are aliases of the real models.
    assert replace(get_profile("gpt-5"), name="openai/gpt-5") == gpt5
    assert replace(get_profile("claude-sonnet"), name="anthropic/claude-sonnet-4-5") == sonnet
    with pytest.raises(ProfileError, match="unknown profile 'openai/no-such-model'; known: gpt-5"):
        get_profile("openai/no-such-model")


def test_model_at_window_scales_every_limit_and_says_so():
    small = get_profile("openai/gpt-5@64k")
    factor = 64_000 / GPT5_INPUT
    assert small.context_window == 64_000 and small.input_limit == 64_000
    assert small.max_output == round(GPT5_OUTPUT * factor) and small.context_limit == round(GPT5_CONTEXT * factor)
    assert small.overflow == "input" and small.prices == get_profile("openai/gpt-5").prices
    assert "0.2353" in small.description and "64,000" in small.description
    with pytest.raises(ProfileError, match="window 'lots'"):
        get_profile("openai/gpt-5@lots")


def test_the_simulated_provider_applies_each_family_rule():
    request = Request((Message("user", "word " * 500),), max_output_tokens=10_000)
    tokens = SimulatedProvider(get_profile("64k")).count(request.messages)
    openai = replace(get_profile("openai/gpt-5"), context_window=tokens)  # input exactly at the input limit
    anthropic = replace(get_profile("anthropic/claude-sonnet-4-5"), context_window=tokens + 9_999)
    assert not SimulatedProvider(openai).send(request).overflow  # OpenAI ignores max_tokens for the limit
    refused = SimulatedProvider(anthropic).send(request)  # input + 10,000 > input + 9,999
    assert refused.overflow and refused.error is not None and refused.error.message.startswith("prompt is too long")
    assert SimulatedProvider(replace(openai, context_window=tokens - 1)).send(request).overflow


def test_opencode_uses_gpt5s_real_limits():
    """docs/specs/opencode.md §1.1: with limit.input, usable = input - min(20,000, min(output, 32,000));
    §6.6: V2 threshold = context - max(output, 20,000)."""
    usable = GPT5_INPUT - min(20_000, min(GPT5_OUTPUT, 32_000))
    threshold = GPT5_CONTEXT - max(GPT5_OUTPUT, 20_000)
    assert (usable, threshold) == (252_000, 272_000)  # the numbers the issue states
    session = Session().user("u0", "hello").say("a0", "hi").transcript()
    v1 = replay(session, "opencode-v1", profile="openai/gpt-5")
    # (with no tool definitions: V2 reports its threshold net of them, README "Strategies")
    v2 = replay(session, "opencode-v2", profile="openai/gpt-5", options={"tools_json_chars": 2})
    assert {r.threshold for r in v1.requests if r.kind == "turn"} == {usable}
    assert {r.threshold for r in v2.requests if r.kind == "turn"} == {threshold}


def test_the_manifest_records_the_profile_limits(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps([{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]), encoding="utf-8")
    root = run_benchmark([path], ["opencode-v1", "opencode-v2"], ["openai/gpt-5"], out=tmp_path / "runs", jobs=1, progress=False,
                         report=False, probes=None)
    limits = json.loads((root / "manifest.json").read_text())["profiles"]["openai/gpt-5"]
    assert (limits["context_window"], limits["input_limit"], limits["context_limit"], limits["max_output"], limits["overflow"]) == (
        GPT5_INPUT, GPT5_INPUT, GPT5_CONTEXT, GPT5_OUTPUT, "input")
