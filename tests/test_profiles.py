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

from compaction_bench.profiles import ProfileError, get_profile, stored_profile
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
    # Claude 4.5 and newer refuse only input over the window; earlier Claude models input + max_tokens over it
    # (Anthropic's context-windows guide, "Context window overflow behavior").
    assert (sonnet.context_window, sonnet.max_output, sonnet.overflow, sonnet.input_limit) == (200_000, 64_000, "input", None)
    assert get_profile("anthropic.claude-sonnet-4-20250514-v1:0").overflow == "input+output"
    assert get_profile("anthropic.claude-opus-4-1-20250805-v1:0").overflow == "input+output"
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


def test_model_at_window_only_shrinks_and_refuses_numbers_past_any_window():
    """GPT-5's input window is 272,000 tokens: `@272k` is the model itself, one token more is a
    window the API does not offer (at GPT-5's prices and limits scaled up), and a window past float's
    range is a malformed count, not a traceback."""
    assert get_profile("openai/gpt-5@272k").context_window == GPT5_INPUT
    assert get_profile("32k@8000").context_window == 8_000
    for name in ("openai/gpt-5@272001", "openai/gpt-5@1m", "64k@65k", "claude-sonnet@99999999999999999999999k"):
        with pytest.raises(ProfileError, match="MODEL@WINDOW only shrinks a window"):
            get_profile(name)
    with pytest.raises(ProfileError, match="expected a token count"):
        get_profile("openai/gpt-5@" + "9" * 400)


def test_the_simulated_provider_applies_each_family_rule():
    request = Request((Message("user", "word " * 500),), max_output_tokens=10_000)
    tokens = SimulatedProvider(get_profile("64k")).count(request.messages)
    openai = replace(get_profile("openai/gpt-5"), context_window=tokens)  # input exactly at the input limit
    claude_4 = replace(get_profile("anthropic.claude-sonnet-4-20250514-v1:0"), context_window=tokens + 9_999)
    assert not SimulatedProvider(openai).send(request).overflow  # OpenAI ignores max_tokens for the limit
    refused = SimulatedProvider(claude_4).send(request)  # input + 10,000 > input + 9,999, the input alone within it
    assert refused.overflow and refused.error is not None and refused.error.is_overflow
    assert refused.error.message == (f"input length and `max_tokens` exceed context limit: {tokens} + 10000 > {tokens + 9_999}, "
                                     "decrease input length or `max_tokens` and try again")
    # Claude 4.5 accepts it (its answer would stop at the window), and refuses input over the window alone, whose
    # size alone its error reports (as the API's does: "prompt is too long: 208310 tokens > 200000 maximum" for a
    # prompt of 208,310 tokens, anthropics/claude-code#12186).
    claude_45 = replace(get_profile("anthropic/claude-sonnet-4-5"), context_window=tokens + 9_999)
    assert not SimulatedProvider(claude_45).send(request).overflow
    over = SimulatedProvider(replace(claude_45, context_window=tokens - 1)).send(request)
    assert over.overflow and over.error is not None and over.error.message == f"prompt is too long: {tokens} tokens > {tokens - 1} maximum"
    assert SimulatedProvider(replace(openai, context_window=tokens - 1)).send(request).overflow


def test_opencode_uses_gpt5s_real_limits():
    """docs/specs/opencode.md §1.1: with limit.input, usable = input - min(20,000, min(output, 32,000)); V2
    (upstream compaction.ts@031a4a9c L561-569, superseding §6.6): ceiling = min(input - 20,000, context -
    max(min(output, 32,000), 20,000)), compacting at `>=`."""
    usable = GPT5_INPUT - min(20_000, min(GPT5_OUTPUT, 32_000))
    ceiling = min(GPT5_INPUT - 20_000, GPT5_CONTEXT - max(min(GPT5_OUTPUT, 32_000), 20_000))
    assert (usable, ceiling) == (252_000, 252_000)
    session = Session().user("u0", "hello").say("a0", "hi").transcript()
    v1 = replay(session, "opencode-v1", profile="openai/gpt-5")
    # (with no tool definitions: V2 reports its threshold net of them, README "Strategies")
    v2 = replay(session, "opencode-v2", profile="openai/gpt-5", options={"tools_json_chars": 2})
    assert {r.threshold for r in v1.requests if r.kind == "turn"} == {usable}
    assert {r.threshold for r in v2.requests if r.kind == "turn"} == {ceiling}


def test_the_manifest_records_the_profile_limits(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps([{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]), encoding="utf-8")
    root = run_benchmark([path], ["opencode-v1", "opencode-v2"], ["openai/gpt-5"], out=tmp_path / "runs", jobs=1, progress=False,
                         report=False, probes=None)
    limits = json.loads((root / "manifest.json").read_text())["profiles"]["openai/gpt-5"]
    assert (limits["context_window"], limits["input_limit"], limits["context_limit"], limits["max_output"], limits["overflow"]) == (
        GPT5_INPUT, GPT5_INPUT, GPT5_CONTEXT, GPT5_OUTPUT, "input")


# Requests (model, input, cached, written, output), priced against litellm's own cost of the same usage.
PRICED = [
    ("openai/gpt-5.4", 300_000, 0, 0, 1_000),  # above 272k: every price tiered
    ("openai/gpt-5.4", 300_000, 200_000, 0, 1_000),
    ("openai/gpt-5.4", 272_000, 100_000, 0, 1_000),  # at the threshold: not above it
    ("openai/gpt-5.4", 100_000, 50_000, 0, 1_000),
    ("gemini/gemini-2.5-pro", 300_000, 0, 0, 1_000),
    ("gemini/gemini-2.5-pro", 300_000, 100_000, 0, 2_000),
    ("vertex_ai/claude-sonnet-4-5", 210_000, 50_000, 20_000, 1_000),  # cached reads and writes tiered too
    ("vertex_ai/claude-sonnet-4-5", 150_000, 50_000, 20_000, 1_000),
    ("anthropic/claude-sonnet-4-5", 150_000, 50_000, 20_000, 1_000),
    ("openai/gpt-5", 250_000, 100_000, 0, 5_000),
]


@pytest.mark.parametrize(("model", "inputs", "cached", "written", "output"), PRICED)
def test_request_prices_follow_litellms_tiers(model, inputs, cached, written, output):
    """The map's `*_above_<N>k_tokens` prices apply to the whole request once its input is over N
    (audit: gpt-5.4 at 300k input was billed $0.765 instead of litellm's $1.5225)."""
    from compaction_bench.llm import _litellm
    from compaction_bench.metrics.cost import request_cost

    litellm = _litellm()  # the bundled map only (LITELLM_LOCAL_MODEL_COST_MAP): no network
    usage = litellm.Usage(prompt_tokens=inputs, completion_tokens=output, total_tokens=inputs + output,
                          prompt_tokens_details={"cached_tokens": cached}, cache_creation_input_tokens=written,
                          cache_read_input_tokens=cached)
    expected = sum(litellm.cost_per_token(model=model, usage_object=usage))
    ours = request_cost(get_profile(model), input_tokens=inputs, cached_tokens=cached, cache_write_tokens=written, output_tokens=output)
    assert ours == pytest.approx(expected, rel=1e-9)


def test_price_tiers_are_read_from_the_map():
    tiers = get_profile("openai/gpt-5.4").prices.tiers
    assert [(t.above, t.input, t.output, t.cached_input) for t in tiers] == [(272_000, 5e-6, 2.25e-5, 5e-7)]
    assert get_profile("openai/gpt-5.4").prices.at(300_000).input == 5e-6
    assert get_profile("openai/gpt-5.4").prices.at(272_000).input == get_profile("openai/gpt-5.4").prices.input
    assert get_profile("anthropic/claude-sonnet-4-5").prices.tiers == ()  # `_above_1hr` is a cache lifetime, not a tier


def test_the_cache_family_is_the_models_not_the_providers():
    """evaluation.md §7: Claude caches at breakpoints with 1.25× writes on any provider; OpenAI caches
    from gpt-4o on; Gemini 2.5+ from the model's minimum, token-exact."""
    vertex = get_profile("vertex_ai/claude-sonnet-4-5")
    assert vertex.provider == "vertex_ai-anthropic_models"
    assert (vertex.cache.provider, vertex.cache.min_prefix, vertex.cache.block, vertex.cache.write_multiplier) == ("anthropic", 1024, 1, 1.25)
    assert vertex.image_tokens == 1_600
    for old in ("openai/gpt-4-turbo", "openai/gpt-3.5-turbo"):
        policy = get_profile(old).cache
        assert policy.provider == "none" and policy.read_multiplier == 1.0, old
    for new in ("openai/gpt-4o", "openai/gpt-4.1", "openai/o3", "openai/gpt-5"):
        assert get_profile(new).cache.provider == "openai", new
    pro = get_profile("gemini/gemini-2.5-pro").cache
    assert (pro.provider, pro.min_prefix, pro.block, pro.write_multiplier) == ("gemini", 2048, 1, 0.0)
    from compaction_bench.profiles import _cache_policy

    assert _cache_policy("gemini", "gemini-2.0-flash").provider == "none"  # implicit caching starts at 2.5 (no 2.0 in the map)
    assert _cache_policy("gemini", "gemini-3-pro-preview").min_prefix == 4096


def _two_requests(profile, words: int = 3_000):
    shared = Message("user", "context " * words)
    first = Request((shared, Message("user", "one")), max_output_tokens=100)
    second = Request((shared, Message("user", "one"), Message("assistant", "ok"), Message("user", "two")), max_output_tokens=100)
    provider = SimulatedProvider(profile)
    return provider.send(first), provider.send(second)


def test_the_simulated_provider_caches_by_the_models_family():
    first, second = _two_requests(get_profile("vertex_ai/claude-sonnet-4-5"))
    assert first.cache.cache_write_tokens > 0 and second.cache.cached_tokens > 0  # Anthropic writes and reads
    assert second.cache.cached_tokens % 128 != 0 or second.cache.cache_write_tokens > 0
    old_first, old_second = _two_requests(get_profile("openai/gpt-4-turbo"))
    assert old_second.cache.cached_tokens == 0 and old_second.cache.cache_write_tokens == 0
    _, gemini = _two_requests(get_profile("gemini/gemini-2.5-pro"))
    assert gemini.cache.cached_tokens > 0 and gemini.cache.cached_tokens == gemini.cache.prefix_tokens  # no 128-token steps
    _, short = _two_requests(get_profile("gemini/gemini-2.5-pro"), words=1_500)  # a prefix under the 2,048 minimum
    assert 1_024 < short.cache.prefix_tokens < 2_048 and short.cache.cached_tokens == 0
    small = replace(get_profile("vertex_ai/claude-sonnet-4-5"), context_window=10)
    refused = SimulatedProvider(small).send(Request((Message("user", "word " * 50),), max_output_tokens=10))
    assert refused.overflow and refused.error is not None and refused.error.message.startswith("prompt is too long")


def test_a_tiered_profile_survives_the_run_manifest():
    # `bench score` prices again from the manifest's profile: the tiers must come back as tiers.
    from compaction_bench.profiles import profile_from_dict

    tiered = next(get_profile(m) for m in ("openai/gpt-5.4", "gemini/gemini-2.5-pro") if get_profile(m).prices.tiers)
    again = profile_from_dict(json.loads(json.dumps(tiered.to_dict())))
    assert again == tiered and again.prices.at(300_000) == tiered.prices.at(300_000) != tiered.prices.at(1_000)


def test_gpt5_keeps_openai_rules_under_a_deployment_path_or_another_openai_api():
    """The README's GPT-5 rule (refused when the input exceeds 272,000; 400,000 context) and its o200k_base
    tokenizer went by the API name: Azure's regional `eu/` deployment got a 272,000 context shared with the output,
    and GPT-5 served by Azure AI was counted with cl100k_base."""
    for name in ("azure/gpt-5-2025-08-07", "azure/eu/gpt-5-2025-08-07", "azure_ai/gpt-5.4-mini", "openai/gpt-5.4-mini"):
        profile = get_profile(name)
        assert (profile.overflow, profile.context_limit, profile.tokenizer) == ("input", 400_000, "o200k_base"), name
        assert not profile.overflows(200_000, 128_000) and profile.overflows(272_001, 0), name


def test_a_profile_stored_before_in_model_map_reads_as_today():
    """A run made before `in_model_map` existed stored its profiles without it. Read back (`stored_profile`), a study
    window and its shrunk copies stand for a model litellm's map does not describe, as today, and a map model is in
    it: the definitions compare equal, so `compare` and `gate` take such a run as a baseline."""
    for name in ("64k", "32k@8000", "gpt-5", "claude-opus", "openai/gpt-5@64k"):
        today = get_profile(name).to_dict()
        before = {k: v for k, v in today.items() if k != "in_model_map"}
        assert stored_profile(before) == stored_profile(today), name


def test_a_map_model_whose_id_holds_an_at_sign_is_that_model():
    """Vertex AI names Claude versions with `@` (`vertex_ai/claude-sonnet-4-5@20250929` in litellm's map), which
    `MODEL@WINDOW` also uses: an id the map holds is that model (it was read as a 20,250,929-token window and
    refused); `@WINDOW` after it still shrinks it."""
    vertex = get_profile("vertex_ai/claude-sonnet-4-5@20250929")
    assert (vertex.model, vertex.context_window, vertex.overflow) == ("claude-sonnet-4-5@20250929", 200_000, "input")
    assert get_profile("vertex_ai/claude-sonnet-4-5@20250929@64k").context_window == 64_000
    assert get_profile("claude-sonnet@64k").context_window == 64_000
