"""Dollars of whole sessions worked out by hand, and the price and cache rules the audit of the cost model fixed.

Each session is three requests to the simulated provider with recorded timestamps; the token counts are the
provider's (the profile's tokenizer plus message framing), the prices are the spec's (docs/specs/evaluation.md
§7) checked against litellm's bundled map, and each request's dollars are computed here from the rule:

- uncached input × input price + cached × cached price + written × write price + output × output price;
- Anthropic (claude-sonnet-4-5: $3 input, $0.30 read, $3.75 5-minute write, $15 output per million): a read ends
  at an earlier request's breakpoint, the rest of the request is written, and an entry unused for more than
  300 s is gone;
- OpenAI (gpt-5: $1.25 input, $0.125 cached, $10 output): the common prefix from 1,024 tokens in 128-token steps,
  no write fee, entries gone after 600 s unused;
- GPT-5.6 and later bill cache writes above the input price (gpt-5.6: $4 input, $5 write, $0.40 cached): what a
  request newly caches (from the part it read to its implicit breakpoint, the end of its newest system, user or tool
  message, token-exact) is billed at the write price; a read ends only at an earlier request's breakpoint.
"""

from __future__ import annotations

import pytest

from compaction_bench.metrics.cost import cached_input_price, request_cost
from compaction_bench.profiles import bundled_cost_map, get_profile
from compaction_bench.provider import MESSAGE_OVERHEAD, SimulatedProvider
from compaction_bench.request import Message, Request

M = 1e-6  # dollars per token of a $1-per-million price
S = Message("system", "rules " * 1500)  # about 1,500 tokens: over 1,024
A = Message("user", "alpha " * 300)
B = Message("assistant", "beta " * 200)
C = Message("user", "gamma " * 100)
OUT = 100  # output tokens of every request


def _at(seconds: int) -> str:
    minutes, second = divmod(seconds, 60)
    return f"2025-01-01T00:{minutes:02d}:{second:02d}Z"


def _floor(tokens: int, block: int = 128) -> int:
    return tokens // block * block


def _dollars(profile, outcome) -> float:
    return request_cost(profile, input_tokens=outcome.true_tokens, cached_tokens=outcome.cached_tokens,
                        cache_write_tokens=outcome.cache.cache_write_tokens, output_tokens=OUT)


def test_anthropic_session_of_three_requests_by_hand():
    """t=0 R1 = (S, A): nothing cached, all of it written. t=60 R2 = (S, A, B): reads R1's entry at the end of A
    (a breakpoint of R1, 60 s old), writes B. t=361 R3 = (S, A, B, C): R2 was last used 301 s before, R1 361 s:
    both gone, so R3 reads nothing and writes all of itself."""
    profile = get_profile("anthropic/claude-sonnet-4-5")
    prices = profile.prices
    assert (prices.input, prices.cached_input, prices.cache_write, prices.output) == pytest.approx((3 * M, 0.3 * M, 3.75 * M, 15 * M))
    provider = SimulatedProvider(profile)
    s, a, b, c = (provider.message_tokens(m) for m in (S, A, B, C))
    r1 = provider.send(Request((S, A)), output_tokens=OUT, timestamp=_at(0))
    r2 = provider.send(Request((S, A, B)), output_tokens=OUT, timestamp=_at(60))
    r3 = provider.send(Request((S, A, B, C)), output_tokens=OUT, timestamp=_at(361))
    assert [(r.cached_tokens, r.cache.cache_write_tokens) for r in (r1, r2, r3)] == [(0, s + a), (s + a, b), (0, s + a + b + c)]
    by_hand = [
        (s + a) * 3.75 * M + OUT * 15 * M,
        (s + a) * 0.3 * M + b * 3.75 * M + OUT * 15 * M,
        (s + a + b + c) * 3.75 * M + OUT * 15 * M,
    ]
    assert [_dollars(profile, r) for r in (r1, r2, r3)] == pytest.approx(by_hand, rel=1e-12)


def test_openai_session_of_three_requests_by_hand():
    """t=0 R1 = (S, A): nothing cached. t=500 R2 = (S, A, B): the prefix S + A floored to 128 tokens. t=1000
    R3 = (S, C): R2 was used 500 s before (alive under 600 s); C and A are both user messages, so the prefix is S
    plus C's framing (their texts share no token), floored to 128."""
    profile = get_profile("openai/gpt-5")
    prices = profile.prices
    assert (prices.input, prices.cached_input, prices.output) == pytest.approx((1.25 * M, 0.125 * M, 10 * M))
    provider = SimulatedProvider(profile)
    s, a, b, c = (provider.message_tokens(m) for m in (S, A, B, C))
    r1 = provider.send(Request((S, A)), output_tokens=OUT, timestamp=_at(0))
    r2 = provider.send(Request((S, A, B)), output_tokens=OUT, timestamp=_at(500))
    r3 = provider.send(Request((S, C)), output_tokens=OUT, timestamp=_at(1000))
    cached = [0, _floor(s + a), _floor(s + MESSAGE_OVERHEAD)]
    assert [r.cached_tokens for r in (r1, r2, r3)] == cached
    assert [r.cache.cache_write_tokens for r in (r1, r2, r3)] == [0, 0, 0]
    totals = [s + a, s + a + b, s + c]
    by_hand = [(t - k) * 1.25 * M + k * 0.125 * M + OUT * 10 * M for t, k in zip(totals, cached, strict=True)]
    assert [_dollars(profile, r) for r in (r1, r2, r3)] == pytest.approx(by_hand, rel=1e-12)


def test_gpt_5_6_bills_what_a_request_newly_caches_at_its_write_price():
    """gpt-5.6 in the map: $4 input, $5 cache write (1.25×: the write premium of GPT-5.6 and later), $0.40 cached.
    OpenAI places one breakpoint per request, at the end of its newest system, user or tool message, and reads only
    at an earlier one, token-exact (the forty-third pass; before it, 128-token blocks of any common prefix).
    R1 = (S, A) writes all of itself (its breakpoint ends A); R2 = (S, A, B, C) reads R1's s + a and writes B and C;
    R3 = (S, A, B) ends with an assistant message, which carries no breakpoint: R2's breakpoint (the end of C) is past
    what it shares, so it reads R1's s + a, writes nothing, and pays B as plain input. Before the audit no OpenAI
    request wrote anything, so a rewrite of the prefix cost $4 a million tokens here instead of $5."""
    entry = bundled_cost_map()["gpt-5.6"]
    assert (entry["input_cost_per_token"], entry["cache_creation_input_token_cost"], entry["cache_read_input_token_cost"]) == pytest.approx(
        (4 * M, 5 * M, 0.4 * M), rel=1e-12)
    profile = get_profile("openai/gpt-5.6")
    provider = SimulatedProvider(profile)
    s, a, b, c = (provider.message_tokens(m) for m in (S, A, B, C))
    r1 = provider.send(Request((S, A)), output_tokens=OUT)
    r2 = provider.send(Request((S, A, B, C)), output_tokens=OUT)
    r3 = provider.send(Request((S, A, B)), output_tokens=OUT)
    assert [(r.cached_tokens, r.cache.cache_write_tokens) for r in (r1, r2, r3)] == [(0, s + a), (s + a, b + c), (s + a, 0)]
    outputs = OUT * entry["output_cost_per_token"]
    by_hand = [
        (s + a) * 5 * M + outputs,
        (s + a) * 0.4 * M + (b + c) * 5 * M + outputs,
        (s + a) * 0.4 * M + b * 4 * M + outputs,
    ]
    assert [_dollars(profile, r) for r in (r1, r2, r3)] == pytest.approx(by_hand, rel=1e-12)


def test_only_a_write_premium_makes_an_openai_model_write():
    """gpt-5 has no write price in the map (writes are free): it writes nothing. Azure's EU gpt-4o entry lists a
    cache-creation price below its input price, which is no premium: it writes nothing either."""
    for model in ("openai/gpt-5", "azure/eu/gpt-4o"):
        provider = SimulatedProvider(get_profile(model))
        provider.send(Request((S, A)))
        assert provider.send(Request((S, A, B))).cache.cache_write_tokens == 0, model
    entry = bundled_cost_map()["azure/eu/gpt-4o"]
    assert 0 < entry["cache_creation_input_token_cost"] < entry["input_cost_per_token"]


@pytest.mark.parametrize(("model", "share"), [
    ("azure/global-standard/gpt-4o-mini", 0.5),  # GPT-4o: 50% off, an Azure deployment path in front of the model's name
    ("ft:gpt-4o-2024-11-20", 0.5),  # a fine-tuned GPT-4o (fine-tuned models cache too): 50% off
])
def test_an_openai_cache_hit_the_map_does_not_price_costs_the_familys_share(model, share):
    """Where the map has no cached-input price, the spec's discount of the model's family stands in (§7: GPT-5
    90%, GPT-4.1 75%, GPT-4o and o-series 50%); before the audit every OpenAI model got 90% off."""
    entry = bundled_cost_map()[model]
    assert entry.get("cache_read_input_token_cost") is None
    profile = get_profile(model)
    assert cached_input_price(profile) == pytest.approx(share * entry["input_cost_per_token"], rel=1e-12)


@pytest.mark.parametrize("model", ["anthropic.claude-v2:1", "anthropic.claude-instant-v1", "ft:gpt-3.5-turbo", "ft:gpt-4-0613"])
def test_models_that_predate_prompt_caching_cache_nothing(model):
    """Claude 1, 2 and Instant predate Anthropic's prompt caching; a fine-tuned gpt-3.5 or gpt-4 is still a model
    before gpt-4o (§7: caching applies to gpt-4o and newer). A repeated 1,500-token prefix reads nothing and
    writes nothing, so every token is billed at the input price."""
    profile = get_profile(model)
    provider = SimulatedProvider(profile)
    provider.send(Request((S, A)))
    second = provider.send(Request((S, A, B)))
    assert (second.cached_tokens, second.cache.cache_write_tokens) == (0, 0)
    assert _dollars(profile, second) == pytest.approx(second.true_tokens * profile.prices.input + OUT * profile.prices.output)


@pytest.mark.parametrize("model", [
    "azure_ai/Llama-3.3-70B-Instruct",  # Azure AI Foundry serves more than OpenAI's models: this entry prices no hit
    "azure_ai/grok-4",
    "azure/mistral-large-2402",  # on Azure OpenAI's API, but not an OpenAI model
    "gpt-4o-2024-05-13",  # OpenAI's caching list at launch: "gpt-4o (excludes gpt-4o-2024-05-13)"
    "gpt-audio",  # `supports_prompt_caching: false` in the map, and no cached price
    "computer-use-preview",
])
def test_models_whose_map_entry_or_maker_says_they_do_not_cache_read_nothing(model):
    """These got OpenAI's rules with a 90% or 50% discount on hits (the outside audit: `none` on Llama 3.3 70B cost
    $0.08 where litellm's prices make it $0.55, and ranked cheaper than a strategy that costs half of it). A repeated
    1,500-token prefix now reads nothing, and a request costs what litellm bills for it."""
    from compaction_bench.llm import _litellm

    profile = get_profile(model)
    provider = SimulatedProvider(profile)
    provider.send(Request((S, A)))
    second = provider.send(Request((S, A, B)))
    assert (second.cached_tokens, second.cache.cache_write_tokens) == (0, 0)
    litellm = _litellm()
    usage = litellm.Usage(prompt_tokens=second.true_tokens, completion_tokens=OUT, total_tokens=second.true_tokens + OUT)
    assert _dollars(profile, second) == pytest.approx(sum(litellm.cost_per_token(model=model, usage_object=usage)), rel=1e-9)


# (model, input, cached, written, output): requests priced against litellm's own cost of the same usage.
AGAINST_LITELLM = [
    ("openai/gpt-5.6", 100_000, 60_000, 39_936, 2_000),
    ("openai/gpt-5.6", 300_000, 200_000, 99_968, 2_000),  # above 272k: input, output, reads and writes tiered
    ("anthropic/claude-opus-4-5", 50_000, 30_000, 20_000, 1_000),
    ("gemini/gemini-2.5-pro", 250_000, 200_000, 0, 1_000),
]


@pytest.mark.parametrize(("model", "inputs", "cached", "written", "output"), AGAINST_LITELLM)
def test_write_premium_and_tiers_are_priced_as_litellm_prices_them(model, inputs, cached, written, output):
    from compaction_bench.llm import _litellm

    litellm = _litellm()  # the bundled map only (LITELLM_LOCAL_MODEL_COST_MAP): no network
    usage = litellm.Usage(prompt_tokens=inputs, completion_tokens=output, total_tokens=inputs + output,
                          prompt_tokens_details={"cached_tokens": cached, "cache_write_tokens": written},
                          cache_creation_input_tokens=written, cache_read_input_tokens=cached)
    expected = sum(litellm.cost_per_token(model=model, usage_object=usage))
    ours = request_cost(get_profile(model), input_tokens=inputs, cached_tokens=cached, cache_write_tokens=written, output_tokens=output)
    assert ours == pytest.approx(expected, rel=1e-9)


# Models whose dollars disagreed with litellm's own cost of the same usage before the audit (ours → litellm's):
# - xai/grok-4.3 at exactly 200,000 input tokens: $0.25025 → $0.5005 (xAI bills the higher tier from the threshold);
# - coralbricks/glm-5.3, whose map entry prices cached reads at $0: cached tokens billed at 0.1× input instead of free;
# - kyma/glm-5.3, flagged `supports_prompt_caching` without a cached price: a 90% discount litellm does not give;
# - Fireworks models without a cached price: no caching at all, where litellm bills hits at half the input price.
MATCHING_LITELLM = [
    ("xai/grok-4.3", 200_000, 0, 1_000),
    ("xai/grok-4.3", 199_999, 50_000, 1_000),
    ("coralbricks/glm-5.3", 10_000, 5_000, 100),
    ("kyma/glm-5.3", 10_000, 5_000, 100),
    ("fireworks_ai/accounts/fireworks/models/deepseek-r1", 50_000, 20_000, 1_000),
]


@pytest.mark.parametrize(("model", "inputs", "cached", "output"), MATCHING_LITELLM)
def test_edge_prices_match_litellms_cost(model, inputs, cached, output):
    from compaction_bench.llm import _litellm

    litellm = _litellm()
    usage = litellm.Usage(prompt_tokens=inputs, completion_tokens=output, total_tokens=inputs + output,
                          prompt_tokens_details={"cached_tokens": cached}, cache_read_input_tokens=cached)
    expected = sum(litellm.cost_per_token(model=model, usage_object=usage))
    ours = request_cost(get_profile(model), input_tokens=inputs, cached_tokens=cached, cache_write_tokens=0, output_tokens=output)
    assert ours == pytest.approx(expected, rel=1e-9)


def test_fireworks_models_cache_and_bill_hits_at_half_price():
    """A Fireworks model the map gives no cached price: the simulated provider now reads a repeated prefix (OpenAI's
    rules standing in), and a hit costs half the input price, as litellm bills it."""
    model = "fireworks_ai/accounts/fireworks/models/deepseek-r1"
    assert bundled_cost_map()[model].get("cache_read_input_token_cost") is None
    profile = get_profile(model)
    provider = SimulatedProvider(profile)
    s, a = provider.message_tokens(S), provider.message_tokens(A)
    provider.send(Request((S, A)))
    assert provider.send(Request((S, A, B))).cached_tokens == _floor(s + a)
    assert cached_input_price(profile) == pytest.approx(0.5 * profile.prices.input, rel=1e-12)


@pytest.mark.parametrize("model", ["gemini/gemini-flash-lite-latest", "gemini/gemini-robotics-er-2-preview"])
def test_a_gemini_model_named_without_a_version_caches_where_the_map_prices_its_hits(model):
    """Implicit caching came with Gemini 2.5; a name without a version ("-latest", a robotics model) said nothing,
    so these cached nothing while the map prices their hits (litellm billed a hit at the cached price, the replay
    at the input price). The minimum is the larger of the spec's two (4,096), the version being unknown."""
    entry = bundled_cost_map()[model]
    profile = get_profile(model)
    assert entry["cache_read_input_token_cost"] < entry["input_cost_per_token"]
    assert (profile.cache.provider, profile.cache.min_prefix) == ("gemini", 4096)
    assert cached_input_price(profile) == pytest.approx(entry["cache_read_input_token_cost"], rel=1e-12)


@pytest.mark.parametrize(("model", "block"), [("azure_ai/gpt-6-astra", 1), ("coralbricks/glm-5.3-fast", 128)])
def test_a_write_premium_in_the_map_is_paid_wherever_the_model_is_served(model, block):
    """The map prices these models' cache writes above their input price. OpenAI's own models on Azure AI Foundry lost
    OpenAI's rules, write premium included, when Foundry's other models stopped getting them (the audit of that
    change: `azure_ai/gpt-6-astra` wrote nothing where `openai/gpt-6-astra` wrote 32,640 tokens); an API the map only
    prices (here GLM) never paid its premium. A request's newly cached tokens are billed at the map's write price:
    GPT-6's up to its breakpoint at the end of A, token-exact (GPT-5.6 and later), GLM's whole 128-token blocks."""
    entry = bundled_cost_map()[model]
    profile = get_profile(model)
    assert profile.cache.write_multiplier == pytest.approx(entry["cache_creation_input_token_cost"] / entry["input_cost_per_token"])
    provider = SimulatedProvider(profile)
    first = provider.send(Request((S, A)))
    assert first.cache.cache_write_tokens == _floor(first.true_tokens, block)


def test_gpt_oss_served_by_azure_ai_is_not_one_of_openais_api_models():
    """An open-weight model another API serves: its map entry prices no hit and says nothing of caching, so it reads
    nothing (OpenAI's rules would give it GPT-5's 90% off)."""
    profile = get_profile("azure_ai/gpt-oss-120b")
    provider = SimulatedProvider(profile)
    provider.send(Request((S, A)))
    assert provider.send(Request((S, A, B))).cached_tokens == 0
