"""Dollars: requests priced with the profile's prices, cached-token prices and cache writes included.

Prices come from the profile (litellm's bundled cost map, `compaction_bench.profiles`). Where the map has no
cached-input or cache-write price, the cache policy's multipliers of the input price stand in
(docs/specs/evaluation.md §7: reads 0.1× for Claude and GPT-5, 0.25× for GPT-4.1 and Gemini, 0.5× for
GPT-4o and the o-series; Anthropic 5-minute writes 1.25×); a cached-input price the map gives as $0 is a
free hit. The map's cache-write price is Anthropic's
5-minute one: a policy whose entries live longer (the 1-hour cache) writes at 2× the input price instead.
Anthropic's policy writes tokens, and OpenAI's for the models the map prices a write premium for (GPT-5.6
and later, from the read to their implicit breakpoint; a few others in whole blocks), at the map's write price; no
other policy does (`caching.cache_outcome`). Summary requests
are priced like any other request (upstream agents summarize with the session's model); when the
summarizer is a real model litellm can price, its own cost of that call replaces it ($0 for a model
the map lists as free; a model it cannot price is priced here, at the profile's prices).

A profile whose model has no input or output price in the map (`Prices.unpriced`) prices every request at
NaN: its dollars are unknown, not $0, and sums over them stay unknown. Every table shows such a figure
the same way, by `format_dollars`: the word `UNPRICED` where the value is NaN or None, else the number in the
table's own format.

Tiered prices (the map's `*_above_<N>k_tokens`, e.g. GPT-5.4 above 272k input tokens, Gemini 2.5 Pro
and Claude on Vertex above 200k) apply per request by its input tokens, as litellm bills them
(`Prices.at`): every price of a request over the threshold, output and cached tokens included. Off-peak
prices (the map's `off_peak_pricing`, DeepSeek V4's) replace them at the request's recorded time when it falls
in one of their windows (`compaction_bench.off_peak`); a request without a recorded time pays the standard ones.
"""

from __future__ import annotations

import math
import numbers
from datetime import datetime
from typing import SupportsFloat, cast

import pandas as pd

from compaction_bench.profiles import ModelProfile

#: Anthropic's default cache lifetime; its writes cost 1.25× the input price (the map's cache-write price).
ANTHROPIC_5M_TTL = 300
#: What a write to Anthropic's 1-hour cache costs, in input prices (evaluation.md §7).
ANTHROPIC_1H_WRITE_MULTIPLIER = 2.0
#: What tables and reports show for dollars that are not known (a model without a price in the map).
UNPRICED = "unpriced"
#: Columns of dollars: summed with an unknown part they stay unknown (`aggregate.combine`).
DOLLAR_COLUMNS = ("cost_usd", "summarizer_cost_usd", "llm_cost_usd")


def dollars_unknown(value: object) -> bool:
    """True for a dollar figure that is not known: None, NaN (what an unpriced model's requests cost) or
    pandas' NA (a nullable column's missing value)."""
    return value is None or value is pd.NA or (isinstance(value, numbers.Real) and math.isnan(value))


def format_dollars(value: object, fmt: str | None = None) -> str:
    """A dollar figure for a table, or `UNPRICED` where it is unknown (`dollars_unknown`), never a $0 or a "nan":
    in `fmt` (a `str.format` pattern, e.g. "{:.4g}") where one is given, else in cents from $1 up and to three
    significant digits below (a cheap model's $0.0176 and $0.0213 both read "0.02" in cents)."""
    if dollars_unknown(value):
        return UNPRICED
    if fmt is not None:
        return fmt.format(value)
    number = float(cast(SupportsFloat, value))
    if number == 0 or abs(number) >= 1:
        return f"{number:,.2f}"
    return f"{number:.{2 - math.floor(math.log10(abs(number)))}f}"


def cached_input_price(profile: ModelProfile, input_tokens: int = 0, when: datetime | None = None) -> float:
    """Dollars per cached input token of a request of `input_tokens` sent at `when`: the map's price ($0 a free hit),
    or the policy's multiplier of the input price where the map states none; NaN for an unpriced model."""
    if profile.prices.unpriced:
        return math.nan
    prices = profile.prices.at(input_tokens, when)
    return prices.cached_input if prices.cached_input is not None else prices.input * profile.cache.read_multiplier


def cache_write_price(profile: ModelProfile, input_tokens: int = 0, when: datetime | None = None) -> float:
    """Dollars per written (cache creation) token of a request of `input_tokens` sent at `when`: the map's price
    (Anthropic's 5-minute write), or the policy's multiplier of the input price; 2× the input price for a 1-hour
    cache."""
    prices = profile.prices.at(input_tokens, when)
    if profile.cache.provider == "anthropic" and profile.cache.ttl_seconds > ANTHROPIC_5M_TTL:
        return prices.input * ANTHROPIC_1H_WRITE_MULTIPLIER
    return prices.cache_write or prices.input * (profile.cache.write_multiplier or 1.0)


def request_cost(
    profile: ModelProfile, *, input_tokens: int, cached_tokens: int, cache_write_tokens: int, output_tokens: int,
    when: datetime | None = None,
) -> float:
    """Dollars of one request sent at `when` (its recorded time; None: the standard prices): `input_tokens`
    includes the cached and the written tokens, and picks the price tier; NaN for a model the map gives no price
    (`Prices.unpriced`)."""
    if profile.prices.unpriced:
        return math.nan
    prices = profile.prices.at(input_tokens, when)
    uncached = max(input_tokens - cached_tokens - cache_write_tokens, 0)
    return (
        uncached * prices.input
        + cached_tokens * cached_input_price(profile, input_tokens, when)
        + cache_write_tokens * cache_write_price(profile, input_tokens, when)
        + output_tokens * prices.output
    )
