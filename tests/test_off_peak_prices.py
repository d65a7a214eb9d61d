"""Off-peak prices (the map's `off_peak_pricing`, DeepSeek V4's): a request at a time in one of the windows pays the
block's prices. The right answers are litellm's own `cost_per_token` at the same pinned time, and hand-built windows."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from compaction_bench.metrics.cost import request_cost
from compaction_bench.off_peak import OffPeak
from compaction_bench.profiles import bundled_cost_map, get_profile
from compaction_bench.transcript import parse_timestamp

#: the map's chat models with off-peak prices, by their provider-qualified keys (litellm prices a bare key of them
#: only with the provider named)
OFF_PEAK_MODELS = sorted(k for k, e in bundled_cost_map().items()
                         if isinstance(e, dict) and e.get("mode") == "chat" and e.get("off_peak_pricing") and "/" in k)
TIMES = [
    datetime(2026, 12, 2, 2, 0, tzinfo=UTC),  # a Wednesday, 02:00: between the weekday windows
    datetime(2026, 12, 2, 12, 0, tzinfo=UTC),  # Wednesday noon: in 10:00-00:00
    datetime(2026, 12, 5, 2, 0, tzinfo=UTC),  # a Saturday: the whole day
    datetime(2026, 11, 30, 1, 0, tzinfo=UTC),  # a Monday, 01:00: the end of 00:00-01:00 is not in it
    datetime(2026, 11, 30, 4, 0, tzinfo=UTC),  # Monday 04:00: the start of 04:00-06:00 is
]


def test_the_map_still_has_off_peak_models():
    assert len(OFF_PEAK_MODELS) >= 6 and "deepseek/deepseek-v4-flash" in OFF_PEAK_MODELS


@pytest.mark.parametrize("model", OFF_PEAK_MODELS)
@pytest.mark.parametrize("when", TIMES, ids=lambda t: t.strftime("%a-%H%M"))
def test_a_request_costs_what_litellm_bills_at_its_time(model, when):
    """100,000 input tokens (79,872 of them cached) and 1,000 output tokens, priced as litellm prices them with its
    billing clock pinned to the request's time (the audit: $0.00772 where litellm bills $0.00386 off-peak)."""
    from litellm._internal_context import pinned_billing_time

    from compaction_bench.llm import _litellm

    litellm = _litellm()
    usage = litellm.Usage(prompt_tokens=100_000, completion_tokens=1_000, total_tokens=101_000,
                          prompt_tokens_details={"cached_tokens": 79_872}, cache_read_input_token_cost=79_872)
    with pinned_billing_time(when):
        expected = sum(litellm.cost_per_token(model=model, usage_object=usage))
    ours = request_cost(get_profile(model), input_tokens=100_000, cached_tokens=79_872, cache_write_tokens=0, output_tokens=1_000, when=when)
    assert ours == pytest.approx(expected, rel=1e-9)


def test_a_request_without_a_time_pays_the_standard_prices():
    profile = get_profile("deepseek/deepseek-v4-flash")
    standard = request_cost(profile, input_tokens=10_000, cached_tokens=0, cache_write_tokens=0, output_tokens=0)
    assert standard == pytest.approx(10_000 * bundled_cost_map()["deepseek/deepseek-v4-flash"]["input_cost_per_token"])
    assert parse_timestamp(None) is None and parse_timestamp("not a time") is None
    assert parse_timestamp("2026-12-05T02:00:00.000Z") == datetime(2026, 12, 5, 2, 0, tzinfo=UTC)


def test_windows_wrap_past_midnight_and_a_window_that_ends_where_it_starts_is_the_whole_day():
    block = OffPeak.of({"input_cost_per_token": 1.0, "hours_utc": ["22:00-02:00"],
                        "windows": [{"hours_utc": "09:00-09:00", "weekdays": ["sat", "Sunday"]}, {"hours_utc": "bad", "weekdays": [1]}]})
    assert block is not None and len(block.windows) == 2  # the malformed window is left out, as litellm ignores it
    assert block.applies(datetime(2026, 12, 2, 23, 30)) and block.applies(datetime(2026, 12, 3, 1, 59, tzinfo=UTC))
    assert not block.applies(datetime(2026, 12, 3, 2, 0, tzinfo=UTC))  # the end is not in the window
    assert block.applies(datetime(2026, 12, 5, 14, 0, tzinfo=UTC)) and not block.applies(datetime(2026, 12, 4, 14, 0, tzinfo=UTC))
    assert OffPeak.of({"hours_utc": "00:00-01:00"}) is None  # no price: nothing to replace
    assert OffPeak.from_dict(block.to_dict()) == block
