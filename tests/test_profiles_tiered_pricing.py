"""litellm's `tiered_pricing` tables: a profile prices a request the way litellm's own cost code does.

Some entries of litellm's bundled map (Dashscope/Qwen, Volcengine, OpenCode Go) give their prices as a
`tiered_pricing` list of input ranges instead of `*_above_<N>k_tokens` keys. The right answers are
litellm's: its `cost_per_token` on the same usage, and the numbers written in the map's rows.
"""

from __future__ import annotations

import json

import pytest

from compaction_bench.metrics.cost import request_cost
from compaction_bench.profiles import bundled_cost_map, get_profile


def _tabled_chat_models() -> list[str]:
    return sorted(k for k, v in bundled_cost_map().items()
                  if isinstance(v, dict) and v.get("mode") == "chat" and v.get("max_input_tokens") and "tiered_pricing" in v)


def _litellm_cost(model: str, inputs: int, cached: int, written: int, output: int) -> float:
    from compaction_bench.llm import _litellm

    litellm = _litellm()  # the bundled map only: no network
    usage = litellm.Usage(prompt_tokens=inputs, completion_tokens=output, total_tokens=inputs + output,
                          prompt_tokens_details={"cached_tokens": cached}, cache_creation_input_tokens=written,
                          cache_read_input_tokens=cached)
    return float(sum(litellm.cost_per_token(model=model, usage_object=usage)))


# (input, cached, written, output): inside ranges, at range ends, just past them, beyond the last range.
USAGES = [(1, 0, 0, 10), (1_000, 0, 0, 100), (32_000, 0, 0, 100), (32_001, 10_000, 0, 100), (128_000, 64_000, 1_000, 100),
          (128_001, 0, 0, 5), (256_000, 0, 0, 1), (256_001, 100_000, 0, 7), (999_999, 5, 0, 9), (2_000_000, 0, 0, 3)]


def test_the_installed_map_uses_tiered_pricing_for_chat_models():
    models = _tabled_chat_models()
    assert len(models) >= 10 and any(m.startswith("dashscope/") for m in models)


@pytest.mark.parametrize("model", _tabled_chat_models())
def test_a_tiered_pricing_table_prices_requests_as_litellm_does(model):
    profile = get_profile(model)
    for inputs, cached, written, output in USAGES:
        ours = request_cost(profile, input_tokens=inputs, cached_tokens=cached, cache_write_tokens=written, output_tokens=output)
        assert ours == pytest.approx(_litellm_cost(model, inputs, cached, written, output), rel=1e-9, abs=1e-15), (inputs, cached)


def test_the_rows_come_from_the_map():
    """dashscope/qwen3-max: 0–32k, 32k–128k, 128k–252k, no flat prices; a request is priced whole by its row."""
    entry = bundled_cost_map()["dashscope/qwen3-max"]
    rows = entry["tiered_pricing"]
    assert "input_cost_per_token" not in entry  # the table is all there is
    prices = get_profile("dashscope/qwen3-max").prices
    assert prices.at(32_000).input == rows[0]["input_cost_per_token"] and prices.at(32_000).output == rows[0]["output_cost_per_token"]
    assert prices.at(32_001).input == rows[1]["input_cost_per_token"] and prices.at(32_001).output == rows[1]["output_cost_per_token"]
    assert prices.at(300_000).input == rows[-1]["input_cost_per_token"]  # beyond every range: the last row
    assert prices.at(32_001).cached_input == rows[1]["input_cost_per_token"]  # no cached price in the row: its input price
    assert prices.at(0).input == 0.0  # no row for an empty request: the (absent) flat price


def test_a_tabled_profile_survives_the_run_manifest():
    from compaction_bench.profiles import profile_from_dict

    tabled = get_profile("dashscope/qwen3-coder-plus")
    again = profile_from_dict(json.loads(json.dumps(tabled.to_dict())))
    assert again == tabled
    assert again.prices.at(200_000) == tabled.prices.at(200_000) != tabled.prices.at(1_000)
