"""Cache policies of models against the documented minimum cacheable prefix (docs/specs/evaluation.md §7).

They failed while `_cache_policy` (bench/profiles.py) read the minimum from the model's name alone: dotted
names missed the tags, newer models got the default, a float minimum was refused, and Gemini names without a
dotted version cached nothing.

- Anthropic: 4,096 tokens for Opus 4.5/4.6 and Haiku 4.5, 2,048 for Haiku 3/3.5, 1,024 for the
  others (anthropics/anthropic-sdk-python#1194); litellm's map carries the same per model as
  `prompt_cache_min_tokens`.
- Gemini: implicit caching from 2.5 on, from the model's minimum (the map's
  `prompt_cache_min_tokens`).
"""

from __future__ import annotations

import pytest

from compaction_bench.profiles import bundled_cost_map, get_profile
from compaction_bench.provider import SimulatedProvider
from compaction_bench.request import Message, Request


def test_a_dotted_claude_haiku_4_5_needs_4096_tokens_to_read():
    """Claude Haiku 4.5 served by the Vercel AI gateway, named with a dot: a 2,000-token system prompt sent
    twice is under its 4,096-token minimum, so the second request reads nothing and, being under the
    minimum itself, writes nothing. (Now: the 1,024-token default applies, and it reads the prompt.)"""
    model = "vercel_ai_gateway/anthropic/claude-haiku-4.5"
    assert bundled_cost_map()[model].get("prompt_cache_min_tokens") == 4096
    provider = SimulatedProvider(get_profile(model))
    system = Message("system", "policy " * 2000)
    assert 1024 < provider.message_tokens(system) < 4096
    provider.send(Request((system, Message("user", "first"))))
    second = provider.send(Request((system, Message("user", "second"))))
    assert (second.cached_tokens, second.cache.cache_write_tokens) == (0, 0)


@pytest.mark.parametrize(
    ("model", "provider", "minimum"),
    [
        ("vercel_ai_gateway/anthropic/claude-opus-4.5", "anthropic", 4096),  # dotted name: the tags miss it
        ("claude-opus-4-7", "anthropic", 2048),  # no tag for 4.7: 1,024 by default
        ("vertex_ai/gemini-4-argon", "gemini", 6144),  # the map's 6144.0 is a float: 4,096 by default
        ("gemini/gemini-flash-latest", "gemini", 4096),  # no version in the name: no caching at all
        ("databricks/databricks-gemini-2-5-flash", "gemini", 2048),  # no minimum in the map; "2-5" is 2.5: 2,048
    ],
)
def test_the_minimum_cacheable_prefix_is_the_maps(model, provider, minimum):
    stated = bundled_cost_map()[model].get("prompt_cache_min_tokens")
    assert stated is None or float(stated) == minimum  # where the map states none, the spec's value by the version
    policy = get_profile(model).cache
    assert (policy.provider, policy.min_prefix) == (provider, minimum)
