"""OpenAI-compatible APIs other than OpenAI cache by their own documented rules, not OpenAI's.

Right answers from the providers' documentation and litellm's data:
- DeepSeek (https://api-docs.deepseek.com/guides/kv_cache, https://api-docs.deepseek.com/news/news0802):
  context caching on disk, 64-token storage unit, nothing under 64 tokens cached; hits at the cache-hit
  price the map lists.
- Mistral (https://docs.mistral.ai/studio-api/conversations/advanced/prompt-caching): 64-token cache
  blocks, no hit under 64 tokens, cached tokens billed at 10% of the input price.
- An API whose map entries price no cache hits bills cached tokens at the input price (litellm), so
  nothing it caches changes a cost.
"""

from __future__ import annotations

import pytest

from compaction_bench.caching import cache_outcome
from compaction_bench.metrics.cost import cached_input_price, request_cost
from compaction_bench.profiles import bundled_cost_map, get_profile
from compaction_bench.provider import SimulatedProvider
from compaction_bench.request import Message, Request


def _cached(policy, prefix: int) -> int:
    return cache_outcome(policy, prefix_tokens=prefix, total_tokens=prefix + 100, previous_boundaries=[prefix]).cached_tokens


@pytest.mark.parametrize("model", ["deepseek/deepseek-chat", "deepseek/deepseek-reasoner", "mistral/mistral-large-latest",
                                   "mistral/codestral-latest"])
def test_deepseek_and_mistral_cache_in_64_token_units_from_64_tokens(model):
    policy = get_profile(model).cache
    assert (policy.min_prefix, policy.block, policy.write_multiplier) == (64, 64, 0.0)
    assert _cached(policy, 63) == 0  # under one unit: not cached
    assert _cached(policy, 64) == 64
    assert _cached(policy, 1_000) == 960  # OpenAI's rules would cache nothing under 1,024 tokens
    assert _cached(policy, 5_100) == 5_056  # whole 64-token units (OpenAI's 128-token steps would give 4,992)
    assert _cached(policy, 5_055) == 4_992 and _cached(policy, 5_056) == 5_056


def test_deepseek_bills_hits_at_its_cache_hit_price():
    profile = get_profile("deepseek/deepseek-chat")
    entry = bundled_cost_map()["deepseek/deepseek-chat"]
    assert profile.cache.provider == "deepseek"
    assert cached_input_price(profile, 10_000) == entry["cache_read_input_token_cost"]
    from compaction_bench.llm import _litellm

    litellm = _litellm()
    usage = litellm.Usage(prompt_tokens=10_000, completion_tokens=500, total_tokens=10_500,
                          prompt_tokens_details={"cached_tokens": 9_984}, cache_read_input_tokens=9_984)
    expected = sum(litellm.cost_per_token(model="deepseek/deepseek-chat", usage_object=usage))
    ours = request_cost(profile, input_tokens=10_000, cached_tokens=9_984, cache_write_tokens=0, output_tokens=500)
    assert ours == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("model", ["mistral/mistral-large-latest", "mistral/mistral-small-latest"])
def test_mistral_bills_cached_tokens_at_a_tenth_of_input(model):
    profile = get_profile(model)
    assert profile.cache.provider == "mistral" and profile.cache.read_multiplier == 0.1
    assert cached_input_price(profile, 5_000) == pytest.approx(0.1 * profile.prices.input, rel=1e-9)


def test_the_simulated_provider_reads_deepseeks_units():
    shared = Message("user", "context " * 700)  # about 700 tokens: under OpenAI's 1,024 minimum
    first = Request((shared, Message("user", "one")), max_output_tokens=100)
    second = Request((shared, Message("user", "one"), Message("assistant", "ok"), Message("user", "two")), max_output_tokens=100)
    provider = SimulatedProvider(get_profile("deepseek/deepseek-chat"))
    provider.send(first)
    outcome = provider.send(second)
    assert 64 <= outcome.cache.prefix_tokens < 1_024
    assert outcome.cache.cached_tokens == outcome.cache.prefix_tokens // 64 * 64 > 0


def test_an_api_that_prices_no_cache_hits_caches_nothing():
    table = bundled_cost_map()
    model = next(
        key for key, entry in sorted(table.items())
        if isinstance(entry, dict) and entry.get("mode") == "chat" and entry.get("max_input_tokens") and "/" in key
        and entry.get("litellm_provider") == "perplexity" and entry.get("input_cost_per_token")
        and entry.get("cache_read_input_token_cost") is None and not entry.get("supports_prompt_caching")
    )
    profile = get_profile(model)
    assert profile.cache.provider == "none"
    from compaction_bench.llm import _litellm

    litellm = _litellm()
    cached = litellm.Usage(prompt_tokens=5_000, completion_tokens=10, total_tokens=5_010,
                           prompt_tokens_details={"cached_tokens": 4_096}, cache_read_input_tokens=4_096)
    plain = litellm.Usage(prompt_tokens=5_000, completion_tokens=10, total_tokens=5_010)
    # litellm bills this API's cached tokens as plain input: caching changes nothing it charges.
    assert sum(litellm.cost_per_token(model=model, usage_object=cached)) == pytest.approx(
        sum(litellm.cost_per_token(model=model, usage_object=plain)), rel=1e-12)
    assert request_cost(profile, input_tokens=5_000, cached_tokens=0, cache_write_tokens=0, output_tokens=10) == pytest.approx(
        sum(litellm.cost_per_token(model=model, usage_object=plain)), rel=1e-9)


def test_openai_models_keep_openais_rules():
    for model in ("openai/gpt-4o", "openai/gpt-5", "azure/gpt-4o"):
        policy = get_profile(model).cache
        assert (policy.provider, policy.min_prefix, policy.block) == ("openai", 1024, 128), model
