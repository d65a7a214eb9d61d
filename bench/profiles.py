"""Model profiles: limits, overflow rule, tokenizer, cache policy and prices of the simulated model.

`-p` takes any chat model of litellm's bundled model map (read as a file: no import of litellm, no
network): `openai/gpt-5`, `anthropic/claude-sonnet-4-5`, `deepseek/deepseek-chat`, ... Its limits,
prices and cache rules come from the map; the provider family decides the rest:

- **OpenAI GPT-5 family** models have an input limit (`max_input_tokens`, 272,000 for GPT-5) and
  an output limit (`max_output_tokens`); their context is the sum (400,000 for GPT-5, as
  models.dev lists it and OpenCode reads it). OpenAI refuses a request whose **input** exceeds
  the input limit, whatever `max_tokens` asks (overflow rule `input`).
- **Claude 4.5 and newer** (Sonnet 4.5, Opus 4.5, Haiku 4.5 and later, on any provider) refuse only a request
  whose **input** is over the context window (rule `input`): one whose input + `max_tokens` pass it is accepted
  and its answer stops at the window (`stop_reason` `model_context_window_exceeded`; Anthropic's
  context-windows guide, "Context window overflow behavior"). The recorded Pi sessions show it: 58 accepted
  requests on claude-sonnet-4-5 and claude-opus-4-5 whose input and Pi's 32,000 `max_tokens` passed 200,000.
- **Every other model** (Claude before 4.5, older OpenAI models such as gpt-4o whose map entry gives the
  whole context as `max_input_tokens`, OpenAI-compatible servers such as vLLM and DeepSeek) has
  one context that the input and the requested `max_tokens` share: a request with **input +
  max_tokens** over it is refused (rule `input+output`).
- Prompt caching follows the model for Claude and Gemini (`model_family`): Claude models
  (Anthropic, Vertex AI, Bedrock) cache at breakpoints with 1.25× writes (Claude 1, 2 and
  Instant, which predate prompt caching, not at all) and refuse an overflow with Anthropic's
  message; Gemini 2.5+ from the model's minimum (the map's `prompt_cache_min_tokens`, else 2,048,
  4,096 for 3.x). Other models cache as the API serving them does: OpenAI's (and Azure OpenAI's)
  automatically from gpt-4o on (gpt-4-turbo, gpt-3.5 not at all), with writes billed only where
  the map prices a write premium; GPT-5.6 and later at the one breakpoint OpenAI places in each request
  (`IMPLICIT_READS`, `OPENAI_BREAKPOINT_CACHE`), wherever they are served with OpenAI's rules; DeepSeek's and Mistral's by their own
  documented rules (64-token units, `DEEPSEEK_CACHE`, `MISTRAL_CACHE`); Fireworks' with half-price
  hits where the map prices none, as litellm bills them (`FIREWORKS_DEFAULT_CACHE`); any other
  OpenAI-compatible API with OpenAI's rules standing in if the map prices its cache hits, else
  not at all.
- Prices: the map's per-token prices, with its tiers applied per request by its input tokens as
  litellm does (`Prices.at`): `*_above_<N>k_tokens` thresholds (for xAI's models from N itself), or
  the `tiered_pricing` table of input ranges some entries have instead. A price the map gives as 0 is
  free; one it does not give at all is unknown: a model without an input or output price (Bedrock's
  commitment entries, Snowflake's, GitHub Copilot's, ...) is **unpriced** (`Prices.missing`), and its
  requests cost NaN dollars, not $0. A cached-input price the map gives as 0 is a free hit; where it
  gives none (`Prices.cached_input` None), the family's discount stands in (`metrics/cost.py`), or,
  for an API the map only flags as caching, the input price (litellm's rule). Claude and Gemini
  served by a third party (DeepInfra, GMI, OCI, ... : not Anthropic, Google or Bedrock) follow that
  API's billing, not the family's discount: litellm bills a cache hit or write the map does not
  price there at the input price, so such a model caches only where the map says the API caches
  (hits at the input price), and writes what Anthropic's rules write at the input price.
- Tokenizer: o200k_base for OpenAI's GPT-4o and later, else cl100k_base (for Anthropic and
  DeepSeek an approximation: the offline tokenizers are the two tiktoken encodings).

`MODEL@WINDOW` (`openai/gpt-5@64k`) is the same model with its input window shrunk to WINDOW and
its context and output limits scaled by the same factor, for studying compaction on short
sessions; the description states the factor. The short names are aliases (`gpt-5` =
`openai/gpt-5`, `claude-sonnet` = `anthropic/claude-sonnet-4-5`, `claude-opus` =
`anthropic/claude-opus-4-5`), and the study windows `1m`, `128k`, `64k`, `32k` keep GPT-5's
tokenizer, caching and prices with that window and the `input+output` rule (a window served the
way vLLM serves one), which is what this project's earlier results used. Such a model is not in
litellm's map (`in_model_map`): an agent that asks litellm for its limits (OpenHands) finds none.
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any, cast

from compaction_bench.errors import BenchError, closest, did_you_mean
from compaction_bench.off_peak import PRICE_KEYS, OffPeak


class ProfileError(BenchError, LookupError):
    """An unknown profile name."""


#: A read is the whole common prefix with an earlier request, in whole `block`s (OpenAI before GPT-5.6, Gemini,
#: DeepSeek, Mistral).
PREFIX_READS = "prefix"
#: A read ends only at a breakpoint the agent marked in an earlier request (`caching.CacheMarks`), one found by the
#: lookback from a breakpoint of the new request (`caching.ANTHROPIC_LOOKBACK_BLOCKS`): Anthropic's `cache_control`.
MARKED_READS = "marked"
#: A read ends only at the breakpoint the provider itself placed in an earlier request, at the end of its newest
#: system, user or tool message, with no lookback limit: GPT-5.6 and later (`OPENAI_BREAKPOINT_CACHE`).
IMPLICIT_READS = "implicit"


@dataclass(frozen=True)
class CachePolicy:
    """A provider's prompt-caching rules (docs/specs/evaluation.md §7).

    OpenAI: automatic for prompts of at least `min_prefix` (1,024) tokens, hits in `block`
    (128)-token increments; cache hits at the family's discount where the map has no cached price
    (`read_multiplier`), and writes only for models the map prices a write premium for (GPT-5.6 and
    later: `write_multiplier` > 0); GPT-5.6 and later hit only at breakpoints OpenAI places, token-exact,
    for 30 minutes (`OPENAI_BREAKPOINT_CACHE`). Anthropic: a hit ends at a cache breakpoint (message boundaries of
    earlier requests, at most `breakpoints` per request) of at least `min_prefix` tokens, writes
    cost `write_multiplier` × the input price. `ttl_seconds` expires entries when timestamps are
    recorded. Gemini (2.5 and later): implicit hits from the model's minimum prefix, token-exact
    (`block` 1), no write fee; how long an implicit entry lives is not documented (§7 gives the
    explicit cache's default, 1 hour, which stands in). DeepSeek and Mistral: like OpenAI with 64-token units from 64 tokens
    (`DEEPSEEK_CACHE`, `MISTRAL_CACHE`). `none`: no caching (OpenAI models before gpt-4o, Gemini
    before 2.5, APIs that bill no cache hits). Claude and Gemini cache by the model's family
    (`model_family`: Claude on Vertex AI or Bedrock caches like Anthropic), other models by the API
    serving them (`_cache_policy`). `reads` says where a read may end (`PREFIX_READS`, `MARKED_READS`,
    `IMPLICIT_READS`; `caching.cache_outcome` applies them).
    """

    provider: str = "openai"
    min_prefix: int = 1024
    block: int = 128
    breakpoints: int = 4
    ttl_seconds: int = 600
    read_multiplier: float = 0.1
    write_multiplier: float = 0.0
    reads: str = PREFIX_READS


OPENAI_CACHE = CachePolicy()
ANTHROPIC_CACHE = CachePolicy(
    provider="anthropic", min_prefix=1024, block=1, breakpoints=4, ttl_seconds=300, read_multiplier=0.1, write_multiplier=1.25,
    reads=MARKED_READS,
)
#: GPT-5.6 and later (OpenAI's API reference for `prompt_cache_options`, as async-openai 0.42.0's `PromptCacheOptionsParam`
#: and openai-client-base 0.16.0 republish it: "Supported for gpt-5.6 and later models. By default, OpenAI automatically
#: chooses one implicit cache breakpoint … For cache matching, OpenAI considers up to the latest 80 breakpoints in the
#: conversation, without a content-block lookback limit … The `ttl` defaults to `30m`", the minimum lifetime). The
#: implicit breakpoint is "at the end of the newest eligible message" and "a cached prefix is matched exactly at a
#: breakpoint, without falling back to a shorter unmarked prefix" (langchain4j's `OpenAiOfficialPromptCacheOptions`);
#: system, user and tool-result messages can carry one, assistant output cannot (its
#: `OpenAiOfficialPromptCacheBreakpoint`); "the boundary is not rounded to a token block" (Azure's
#: `PromptCacheBreakpointConfig`): `block` 1. No source changes the 1,024-token minimum, which stays. Writes cost
#: the map's write price (1.25× the input price, OpenAI's prompt-caching guide), where the map prices one.
OPENAI_BREAKPOINT_CACHE = CachePolicy(block=1, ttl_seconds=30 * 60, reads=IMPLICIT_READS)
#: The first OpenAI model version whose caching is `OPENAI_BREAKPOINT_CACHE`'s (GPT-5.6; GPT-6 and its successors too).
OPENAI_BREAKPOINT_VERSION = (5, 6)
#: An OpenAI model's version in a map key, wherever the model's name starts in it: `gpt-5.6-sol`, `us.openai.gpt-5.6-sol`
#: (Bedrock), `databricks-gpt-5-6-sol`, `gpt-6-luna`; a minor version is one or two digits (`gpt-5-2025-08-07` is 5).
_OPENAI_VERSION = re.compile(r"(?:^|[./-])gpt-(\d+)(?:[.-](\d{1,2})(?!\d))?")
#: Gemini 2.5 and later: implicit caching from the model's minimum prefix, no 128-token steps, no
#: write fee; cached input at the map's price (0.25×, the launch's 75% discount, where it has none).
GEMINI_CACHE = CachePolicy(provider="gemini", min_prefix=2048, block=1, ttl_seconds=3600, read_multiplier=0.25)
#: No prompt caching (OpenAI models before gpt-4o, Gemini before 2.5, providers that bill no cache
#: hits): no prefix is ever long enough.
NO_CACHE = CachePolicy(provider="none", min_prefix=2**62, block=1, read_multiplier=1.0)
#: DeepSeek's API: context caching on disk, on for every request (https://api-docs.deepseek.com/guides/kv_cache).
#: The storage unit is 64 tokens and a prefix under 64 tokens is not cached (the guide's earlier text,
#: and the launch note https://api-docs.deepseek.com/news/news0802), so a hit is the shared prefix in
#: whole 64-token units. A hit is billed at the cache-hit input price (the map's
#: `cache_read_input_token_cost`; 0.1× where it has none, the 2024 launch's hit/miss ratio), a miss at
#: the normal input price, with no write fee. Unused entries are cleared "within a few hours to a few
#: days": 3 hours here, the short end. Not modelled: the current guide's rule that a hit must match a
#: whole persisted unit (request ends, detected common prefixes, fixed intervals); this takes any
#: shared prefix as found, as the older guide described it.
DEEPSEEK_CACHE = CachePolicy(provider="deepseek", min_prefix=64, block=64, ttl_seconds=3 * 3600, read_multiplier=0.1)
#: Mistral's API (https://docs.mistral.ai/studio-api/conversations/advanced/prompt-caching): prefix
#: caching in 64-token cache blocks (`cached_tokens` is a multiple of 64; a prompt under 64 tokens never
#: hits), cached tokens billed at 10% of the input price, no write fee. How long an entry lives is not
#: documented: OpenAI's 10 minutes stand in. (The same page says `prompt_cache_key` raises the chance
#: of a hit without guaranteeing one; the simulation assumes the hit.)
MISTRAL_CACHE = CachePolicy(provider="mistral", min_prefix=64, block=64, ttl_seconds=600, read_multiplier=0.1)
#: Fireworks' serverless models the map gives no cached price: litellm bills their cached prompt tokens at half
#: the input price (`FIREWORKS_AI_DEFAULT_CACHE_READ_RATE_RATIO`, from https://docs.fireworks.ai/guides/prompt-caching);
#: how Fireworks matches prefixes is not recorded here, so OpenAI's rules stand in.
FIREWORKS_DEFAULT_CACHE = replace(OPENAI_CACHE, read_multiplier=0.5)
#: The APIs that cache with OpenAI's own rules (Azure OpenAI serves OpenAI's models).
OPENAI_APIS = ("openai", "azure", "text-completion-openai")
#: The Azure APIs that serve OpenAI's models beside others (Azure OpenAI: Mistral Large and a model router; Azure AI
#: Foundry: Llama, Phi, Grok, DeepSeek, …): only OpenAI's models (`OPENAI_MODEL_NAMES`) cache by OpenAI's rules there;
#: the others as their map entries say.
AZURE_APIS = ("azure", "azure_ai")
#: How OpenAI's models are named (after a deployment path and `ft:`, `_openai_model_name`).
OPENAI_MODEL_NAMES = ("gpt", "o1", "o3", "o4", "chatgpt", "chat-latest", "computer-use", "codex")
#: OpenAI-compatible APIs with documented rules of their own, by litellm's provider name (the API's,
#: not the model's: a DeepSeek or Mistral model served elsewhere caches as that server does).
PROVIDER_CACHES = {"deepseek": DEEPSEEK_CACHE, "mistral": MISTRAL_CACHE, "codestral": MISTRAL_CACHE}


@dataclass(frozen=True)
class PriceTier:
    """Other prices for requests with more input tokens, in one of litellm's two forms.

    `upto` None: a threshold tier (the map's `*_above_<N>k_tokens` keys), for requests whose input is
    over `above` tokens; None prices are not tiered (the price below the tier holds).

    `upto` set: a row of the entry's `tiered_pricing` table, for requests of `above` < input ≤ `upto`
    tokens (litellm's `range: [above, upto]`). A row replaces every price of the request (cached reads and
    cache writes the row does not name cost its input price, output its model's flat output price: the
    row is stored with these filled in); `input` None: a row litellm does not price from (the flat and
    threshold prices hold)."""

    above: int
    input: float | None = None
    output: float | None = None
    cached_input: float | None = None
    cache_write: float | None = None
    upto: int | None = None


@dataclass(frozen=True)
class Prices:
    """Dollars per token; `tiers`: other prices for requests with more input tokens (`at`);
    `inclusive_thresholds`: a threshold tier already applies to a request of exactly its threshold (xAI's
    rule, which litellm applies to the `xai` provider's entries), not only above it. `cached_input` None:
    the map states no cached-input price (the cache policy's multiplier of the input price stands in),
    0.0: a free hit. `missing`: the prices the map does not state that every request needs (`unpriced`).
    A profile stored by an older version is read into these terms by `stored_profile`."""

    input: float = 0.0
    output: float = 0.0
    cached_input: float | None = None
    cache_write: float = 0.0
    tiers: tuple[PriceTier, ...] = ()
    inclusive_thresholds: bool = False
    missing: tuple[str, ...] = ()
    #: other prices while the request's time is in one of these windows (`compaction_bench.off_peak`)
    off_peak: OffPeak | None = None

    @property
    def unpriced(self) -> bool:
        """Whether a request's dollars are unknown: the map does not state a price it needs (`missing`
        names them, "input" or "output"); `input`/`output` then hold 0.0, which is no price."""
        return bool(self.missing)

    def at(self, input_tokens: int, when: datetime | None = None) -> Prices:
        """The flat prices of a request of `input_tokens` (cached and written tokens included) sent at `when`, as
        litellm bills it (`litellm_core_utils/llm_cost_calc/utils.py`, `_get_token_base_cost`): the row
        of a `tiered_pricing` table the request falls in, if it has one (`row`), prices the whole
        request; else every threshold tier whose threshold the input exceeds (strictly, or reaches with
        `inclusive_thresholds`), lowest first, replaces the prices it names (input, output, cached reads and
        cache writes alike). Prices without tiers (most models) are their own flat prices. Then, at a time in
        one of the `off_peak` windows, the prices that block names replace these (a request without a time pays
        the standard ones)."""
        prices = self._tiered(input_tokens)
        off_peak = self.off_peak
        if off_peak is None or when is None or not off_peak.applies(when):
            return prices
        return replace(prices, **{f: getattr(off_peak, f) for f in PRICE_KEYS if getattr(off_peak, f) is not None})

    def _tiered(self, input_tokens: int) -> Prices:
        """`at` without the off-peak prices."""
        if not self.tiers and not self.inclusive_thresholds:
            return self
        row = self.row(input_tokens)
        if row is not None:
            return Prices(input=cast(float, row.input), output=row.output or 0.0, cached_input=row.cached_input or 0.0,
                          cache_write=row.cache_write or 0.0)
        prices = replace(self, tiers=(), inclusive_thresholds=False)
        for tier in sorted((t for t in self.tiers if t.upto is None), key=lambda t: t.above):
            if input_tokens > tier.above or (self.inclusive_thresholds and input_tokens == tier.above):
                prices = replace(
                    prices,
                    input=prices.input if tier.input is None else tier.input,
                    output=prices.output if tier.output is None else tier.output,
                    cached_input=prices.cached_input if tier.cached_input is None else tier.cached_input,
                    cache_write=prices.cache_write if tier.cache_write is None else tier.cache_write,
                )
        return prices

    def row(self, input_tokens: int) -> PriceTier | None:
        """The `tiered_pricing` row that prices a request of `input_tokens`, chosen as litellm's
        `select_tier_for_input` chooses it: none for an input of 0 or less; else the first row, by
        range start, with start < input ≤ end; else (a request beyond every range, or in a gap) the
        row that starts last. None also when that row has no input price (litellm then bills the
        flat prices)."""
        rows = sorted((t for t in self.tiers if t.upto is not None), key=lambda t: t.above)
        if not rows or input_tokens <= 0:
            return None
        chosen = next((t for t in rows if t.above < input_tokens <= cast(int, t.upto)), rows[-1])
        return chosen if chosen.input is not None else None


#: The map's keys of tiered prices (litellm/litellm_core_utils/llm_cost_calc/utils.py reads the same;
#: keys with a service-tier suffix, `_batches`, `_flex`, `_priority`, ... are other offers).
TIER_KEY = re.compile(r"(input_cost_per_token|output_cost_per_token|cache_read_input_token_cost|cache_creation_input_token_cost)"
                      r"_above_(\d+)(k?)_tokens")
TIER_FIELDS = {"input_cost_per_token": "input", "output_cost_per_token": "output",
               "cache_read_input_token_cost": "cached_input", "cache_creation_input_token_cost": "cache_write"}


def price_tiers(entry: dict[str, Any]) -> tuple[PriceTier, ...]:
    """The tiered prices of a map entry, by threshold."""
    found: dict[int, dict[str, float]] = {}
    for key, value in entry.items():
        match = TIER_KEY.fullmatch(key)
        if match is None or not isinstance(value, int | float):
            continue
        above = int(match.group(2)) * (1000 if match.group(3) else 1)
        found.setdefault(above, {})[TIER_FIELDS[match.group(1)]] = float(value)
    return tuple(
        PriceTier(above, input=fields.get("input"), output=fields.get("output"), cached_input=fields.get("cached_input"),
                  cache_write=fields.get("cache_write"))
        for above, fields in sorted(found.items())
    )


def _rate(value: Any) -> float:
    """A per-token price as litellm coerces one (`tiered_pricing._coerce_cost_per_token`): a number, a
    numeric string (a YAML config's "4e-07"), else 0."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return 0.0
    return float(value) if isinstance(value, int | float) else 0.0


def _bound(value: Any) -> float | None:
    """One end of a `tiered_pricing` range, as pydantic reads litellm's `tuple[float, float]`."""
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def table_tiers(entry: dict[str, Any]) -> tuple[PriceTier, ...]:
    """The rows of a map entry's `tiered_pricing` list (the Dashscope/Qwen, Volcengine and OpenCode Go
    entries use it instead of `_above_` keys), in the map's order.

    Each row is `{"range": [start, end], "input_cost_per_token": ..., "output_cost_per_token": ...,
    "cache_read_input_token_cost": ..., "cache_creation_input_token_cost": ...}`. litellm
    (`llm_cost_calc/utils.py`, `_get_tiered_base_costs`) bills all of a request at the one row it falls
    in: cached reads and cache writes the row does not price at the row's input price, output the row
    does not price at the entry's own output price; a row without `input_cost_per_token` is not used,
    nor one whose range is not two numbers. Token counts are integers, so the bounds are kept as the
    integers below them (start < n and n ≤ end hold for the same n)."""
    table = entry.get("tiered_pricing")
    if not isinstance(table, list):
        return ()
    flat_output = _rate(entry.get("output_cost_per_token"))
    rows: list[PriceTier] = []
    for row in table:
        if not isinstance(row, dict):
            continue
        bounds = row.get("range")
        if not isinstance(bounds, list | tuple) or len(bounds) != 2:
            continue
        start, end = _bound(bounds[0]), _bound(bounds[1])
        if start is None or end is None or not (math.isfinite(start) and math.isfinite(end)):
            continue
        priced = "input_cost_per_token" in row
        input_rate = _rate(row.get("input_cost_per_token"))

        def rate(key: str, row: dict[str, Any] = row, input_rate: float = input_rate) -> float:
            return _rate(row[key]) if row.get(key) is not None else input_rate

        rows.append(PriceTier(
            above=math.floor(start), upto=math.floor(end),
            input=input_rate if priced else None,
            output=_rate(row.get("output_cost_per_token")) if "output_cost_per_token" in row else flat_output,
            cached_input=rate("cache_read_input_token_cost"),
            cache_write=rate("cache_creation_input_token_cost"),
        ))
    return tuple(rows)


def entry_prices(entry: dict[str, Any]) -> Prices:
    """The prices of a map entry, tiers of both kinds included (`price_tiers`, `table_tiers`). A price the
    entry states, 0 included, is kept; a cached-input price it does not state is None; an input or output
    price it does not state, with no `tiered_pricing` row to price requests instead, is `missing`."""
    tiers = price_tiers(entry) + table_tiers(entry)
    tabled = any(tier.upto is not None and tier.input is not None for tier in tiers)
    cached = entry.get("cache_read_input_token_cost")
    return Prices(
        input=float(entry.get("input_cost_per_token") or 0.0),
        output=float(entry.get("output_cost_per_token") or 0.0),
        cached_input=None if cached is None else _rate(cached),
        cache_write=float(entry.get("cache_creation_input_token_cost") or 0.0),
        tiers=tiers,
        inclusive_thresholds=entry.get("litellm_provider") == "xai",
        off_peak=OffPeak.of(entry.get("off_peak_pricing")),
        missing=() if tabled else tuple(name for name in ("input", "output") if entry.get(f"{name}_cost_per_token") is None),
    )


@lru_cache(maxsize=256)
def stated_prices(model_id: str) -> bool | None:
    """Whether litellm's map states the input and output prices of `model_id` (a summarizer or answerer model):
    None where the map has no chat entry for it. litellm bills a call to a model whose entry states none at
    $0 (`cost_per_token` gives 0.0), which is no price."""
    found = _map_entry(model_id)
    return None if found is None else not entry_prices(found[1]).unpriced


@dataclass(frozen=True)
class ModelProfile:
    """A simulated model. `context_window` is what the agent may fill with input (the input limit
    for OpenAI models, the shared context for Anthropic); `context_limit` is the model's whole
    context when it differs (OpenAI: input + output limits; None = `context_window`), `input_limit`
    the separate input limit (models.dev `limit.input`), `overflow` the rule that refuses a request.
    `in_model_map` is False for a profile that stands for a model litellm's map does not describe (the study
    windows: a model of that window on a server of its own), so an agent that reads the model's limits from
    litellm finds none."""

    name: str
    model: str
    provider: str
    context_window: int
    max_output: int
    tokenizer: str
    cache: CachePolicy
    prices: Prices
    image_tokens: int = 765
    description: str = ""
    overflow: str = "input+output"
    context_limit: int | None = None
    input_limit: int | None = None
    in_model_map: bool = True

    def with_window(self, name: str, window: int, description: str) -> ModelProfile:
        return replace(self, name=name, context_window=window, description=description)

    def overflows(self, input_tokens: int, max_output: int) -> bool:
        """Whether the provider refuses a request of `input_tokens` asking for `max_output` tokens."""
        limit = self.context_window if self.overflow == "input" else self.context_limit or self.context_window
        return self.overflow_count(input_tokens, max_output) > limit

    def overflow_count(self, input_tokens: int, max_output: int) -> int:
        """What the overflow rule compares with the limit, as the provider's error reports it: the input alone under
        rule `input`, else the input and the requested `max_tokens`."""
        return input_tokens if self.overflow == "input" else input_tokens + max_output

    def overflow_text(self) -> str:
        """The overflow rule in words, with its numbers."""
        if self.overflow == "input":
            return f"input > {self.context_window:,}"
        return f"input + max_tokens > {self.context_limit or self.context_window:,}"

    def to_dict(self) -> dict[str, Any]:
        """The profile as JSON data (as the run manifest stores it: sequences are lists)."""
        from dataclasses import asdict

        out = asdict(self)
        out["prices"]["tiers"] = [dict(tier) for tier in out["prices"]["tiers"]]
        out["prices"]["missing"] = list(out["prices"]["missing"])
        out["prices"]["off_peak"] = self.prices.off_peak.to_dict() if self.prices.off_peak is not None else None
        return out


def stored_profile(data: Mapping[str, Any]) -> dict[str, Any]:
    """A manifest's stored profile (`ModelProfile.to_dict`) in today's terms: one stored before `Prices.missing`
    existed gets its prices read by that version's rule (`_stored_cached_price`), so the run rescores with the
    dollars it had and two runs' definitions compare alike; one stored before `in_model_map` existed gets it by its
    name (a study window and its shrunk copies stand for a model the map does not describe); one stored before
    off-peak prices were read has none; one stored before `CachePolicy.reads` existed read at breakpoints on Anthropic
    and anywhere in the common prefix elsewhere (GPT-5.6 included: its runs were made so)."""
    out = dict(data)
    out.setdefault("in_model_map", str(out.get("name") or "").partition("@")[0] not in STUDY_WINDOWS)
    cache = dict(out.get("cache") or {})
    cache.setdefault("reads", MARKED_READS if cache.get("provider") == "anthropic" else PREFIX_READS)
    out["cache"] = cache
    prices = dict(out.get("prices") or {})
    if prices.get("missing") is None:
        prices["cached_input"] = _stored_cached_price(prices.get("cached_input"))
    prices["missing"] = list(prices.get("missing") or ())
    prices.setdefault("off_peak", None)  # stored before off-peak prices were read: none
    out["prices"] = prices
    return out


def profile_from_dict(data: Mapping[str, Any]) -> ModelProfile:
    """A profile as a run recorded it (`manifest["profiles"][name]`, `ModelProfile.to_dict`), older runs' included
    (`stored_profile`)."""
    data = stored_profile(data)
    stored = data["prices"]
    off_peak = OffPeak.from_dict(stored["off_peak"]) if stored.get("off_peak") else None
    prices = Prices(**{**stored, "tiers": tuple(PriceTier(**tier) for tier in stored.get("tiers", ())), "missing": tuple(stored["missing"]),
                       "off_peak": off_peak})
    return ModelProfile(**{**data, "cache": CachePolicy(**data["cache"]), "prices": prices})


def _stored_cached_price(value: float | None) -> float | None:
    """The cached-input price of a profile stored before `Prices.missing` existed. Such a profile said 0.0 for a
    price the map did not state and let the cache policy's multiplier stand in (set to 0 for a hit the map
    priced at $0), so its 0.0 reads as None: every hit is priced as it was when the run was made."""
    return None if value == 0.0 else value


@lru_cache(maxsize=1)
def bundled_cost_map() -> dict[str, Any]:
    """litellm's local model cost map, read from its package folder."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return {}
    path = Path(spec.submodule_search_locations[0]) / "model_prices_and_context_window_backup.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}


def _map_entry(model_id: str) -> tuple[str, dict[str, Any]] | None:
    """(bare model name, entry) of a litellm model id, `provider/name` or a bare name."""
    table = bundled_cost_map()
    provider, slash, bare = model_id.partition("/")
    candidates = [model_id] + ([bare] if slash else [])
    for key in candidates:
        entry = table.get(key)
        if isinstance(entry, dict) and entry.get("mode") == "chat" and entry.get("max_input_tokens"):
            if slash and entry.get("litellm_provider") not in (provider, None) and key == bare:
                continue
            return (bare if slash else model_id), entry
    return None


#: Where OpenAI's own models are served under OpenAI's API rules (the input limit of GPT-5 models). Not the APIs
#: that cache with OpenAI's rules (`OPENAI_APIS`): Azure AI Foundry (`azure_ai`) serves Llama, Mistral, Grok and
#: others too, whose caching its map entries describe.
OPENAI_LIMIT_APIS = ("openai", "azure", "azure_ai")
#: OpenAI models counted with o200k_base whoever serves them (GPT-4o and later).
O200K_MODELS = ("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4")


def _tokenizer(provider: str, bare: str) -> str:
    """o200k_base for OpenAI's GPT-4o and later, by the model's name without a deployment path (Azure's
    `eu/gpt-5`) and whoever serves it (Azure AI, Databricks); OpenAI's API's other models but GPT-4 and
    GPT-3.5 too; cl100k_base otherwise."""
    name = _openai_model_name(bare)
    if provider in ("openai", "azure") and not name.startswith(("gpt-4-", "gpt-3.5")) and name != "gpt-4":
        return "o200k_base"
    return "o200k_base" if name.startswith(O200K_MODELS) else "cl100k_base"


def model_family(provider: str, bare: str) -> str:
    """Whose API rules a model follows, whatever provider serves it: `anthropic` for Claude models
    (Anthropic, Vertex AI, Bedrock), `gemini` for Gemini models, else `openai` (OpenAI and the
    OpenAI-compatible servers)."""
    name = bare.lower()
    if "claude" in name or provider == "anthropic":
        return "anthropic"
    if "gemini" in name:
        return "gemini"
    return "openai"


def _openai_model_name(bare: str) -> str:
    """The OpenAI model a map key names: without a deployment path (`eu/gpt-4o`, `global-standard/gpt-4o-mini`
    on Azure) or a fine-tune's `ft:` mark (`ft:gpt-3.5-turbo` is gpt-3.5-turbo)."""
    return bare.lower().rpartition("/")[2].removeprefix("ft:")


#: The gpt-4o snapshot OpenAI's prompt caching never covered: its list at launch read "gpt-4o (excludes
#: gpt-4o-2024-05-13)" (mirrored at portkey.ai/docs/…/prompt-caching-openai), and the map prices it no hit.
OPENAI_UNCACHED_SNAPSHOTS = ("gpt-4o-2024-05-13",)


def _openai_model(bare: str) -> bool:
    """Whether a map key names one of OpenAI's API models (`OPENAI_MODEL_NAMES`), not an open-weight gpt-oss that
    another API serves."""
    name = _openai_model_name(bare)
    return name.startswith(OPENAI_MODEL_NAMES) and not name.startswith("gpt-oss")


def _openai_caches(bare: str, entry: dict[str, Any]) -> bool:
    """OpenAI's automatic caching applies to gpt-4o and newer (evaluation.md §7), not gpt-4 / gpt-3.5 nor the first
    gpt-4o snapshot (`OPENAI_UNCACHED_SNAPSHOTS`), nor a model whose map entry says it does not cache
    (`supports_prompt_caching: false`: gpt-audio, computer-use-preview) and prices no hit."""
    name = _openai_model_name(bare)
    older = name.startswith(("gpt-3.5", "gpt-35")) or (name.startswith("gpt-4") and not name.startswith(("gpt-4o", "gpt-4.1", "gpt-4.5")))
    says_not = entry.get("supports_prompt_caching") is False and not _prices_cache_reads(entry)
    return not (older or says_not or name in OPENAI_UNCACHED_SNAPSHOTS)


def _cache_policy(provider: str, bare: str, entry: dict[str, Any] | None = None) -> CachePolicy:
    """The prompt-cache rules of a model (evaluation.md §7), decided by the model's family (`_family_cache`),
    except for Claude and Gemini served by a third party whose map entry prices no cache hit: those follow
    litellm's billing of that API (hits and writes at the input price, caching only where the map says the
    API caches). The minimum cacheable prefix is the map's `prompt_cache_min_tokens` where it has one (an
    integer or a float such as 6144.0), else the spec's values by the model's name."""
    family = model_family(provider, bare)
    policy = _family_cache(family, provider, bare, entry)
    if family == "openai":
        return _breakpoint_rules(policy, bare, entry or {})
    if _family_api(family, provider) or policy.provider == "none":
        return policy
    # a third party serving Claude or Gemini: litellm bills a cache hit or write the map does not price there
    # at the input price, so the family's discount (and Anthropic's write premium) is not what the API charges
    stated = entry or {}
    if not _prices_cache_reads(stated):
        if not _bills_cache_reads(stated):
            return NO_CACHE
        policy = replace(policy, read_multiplier=1.0)
    if policy.provider == "anthropic" and stated.get("cache_creation_input_token_cost") is None:
        policy = replace(policy, write_multiplier=1.0)
    return policy


#: The APIs of a family's own maker, or of the clouds that sell its models at its maker's cache prices.
FAMILY_APIS = {"anthropic": ("anthropic", "vertex_ai", "bedrock"), "gemini": ("gemini", "vertex_ai")}


def _family_api(family: str, provider: str) -> bool:
    """Whether `provider` (litellm's name: `vertex_ai-anthropic_models`, `bedrock_converse`, ...) is one of the
    family's own APIs (`FAMILY_APIS`)."""
    return provider.startswith(FAMILY_APIS.get(family, ()))


def _family_cache(family: str, provider: str, bare: str, entry: dict[str, Any] | None) -> CachePolicy:
    """The cache rules of a model by its family (Claude, Gemini), else by the API serving it (`_cache_policy`)."""
    name = bare.lower().replace(".", "-")  # `claude-haiku-4.5` (a gateway's spelling) is `claude-haiku-4-5`
    minimum = _map_minimum(entry or {})
    if family == "anthropic":
        if any(tag in name for tag in ("claude-instant", "claude-v1", "claude-v2", "claude-2")):
            return NO_CACHE  # prompt caching came with the Claude 3 models
        if minimum is None and any(tag in name for tag in ("opus-4-5", "opus-4-6", "haiku-4-5")):
            minimum = 4096
        elif minimum is None and any(tag in name for tag in ("3-5-haiku", "3-haiku", "haiku-3")):
            minimum = 2048
        return replace(ANTHROPIC_CACHE, min_prefix=minimum) if minimum is not None else ANTHROPIC_CACHE
    if family == "gemini":
        # implicit caching is on for 2.5 and later: a minimum in the map says the model has it (a name without
        # a version, `gemini-flash-latest`), else the version in the name does (`gemini-2.5-…`, `…-gemini-2-5-…`)
        # or the map's price for a hit does (`gemini-flash-lite-latest`, `gemini-robotics-er-2-preview`: no version
        # of that form, so the larger of the spec's minimums)
        match = re.search(r"gemini-(\d+)(?:-(\d+)(?![\d]))?", name)
        version = (int(match.group(1)), int(match.group(2) or 0)) if match else (0, 0)
        if minimum is None and version < (2, 5) and not (match is None and _prices_cache_reads(entry or {})):
            return NO_CACHE
        if minimum is None:
            minimum = 2048 if (2, 5) <= version < (3, 0) else 4096  # the spec's later values: 2.5 Flash/Pro 2,048, 3.x 4,096
        return replace(GEMINI_CACHE, min_prefix=minimum)
    if (provider in OPENAI_APIS and provider not in AZURE_APIS) or (provider in AZURE_APIS and _openai_model(bare)):
        return _openai_policy(bare, entry or {}) if _openai_caches(bare, entry or {}) else NO_CACHE
    documented = PROVIDER_CACHES.get(provider)
    if documented is not None:
        return documented
    # Any other OpenAI-compatible API: whether it bills cache hits at all is what the map knows. One
    # that does keeps OpenAI's rules as a stand-in (its own are not recorded here); one that does not
    # caches nothing (litellm would bill its cached tokens at the input price anyway). One the map says
    # caches (`supports_prompt_caching`) without pricing a hit has its hits billed at the input price, as
    # litellm bills them: its discount is not known. (An OpenAI model of GPT-5.6 or later caches at its
    # breakpoints there too: `_cache_policy`.)
    if provider == "fireworks_ai" and not _prices_cache_reads(entry or {}):
        return FIREWORKS_DEFAULT_CACHE
    if not _bills_cache_reads(entry or {}):
        return NO_CACHE
    return _write_premium(OPENAI_CACHE if _prices_cache_reads(entry or {}) else replace(OPENAI_CACHE, read_multiplier=1.0), entry or {})


def _openai_read_multiplier(bare: str) -> float:
    """What a cache hit costs in input prices by OpenAI model family (evaluation.md §7: GPT-5 90% off, GPT-4.1
    75% off, GPT-4o and the o-series 50% off); used only where the map gives the model no cached-input price."""
    name = _openai_model_name(bare)
    if name.startswith(("gpt-4o", "o1", "o3", "o4")):
        return 0.5
    if name.startswith(("gpt-4.1", "gpt-4-1")):
        return 0.25
    return 0.1


def _openai_policy(bare: str, entry: dict[str, Any]) -> CachePolicy:
    """OpenAI's rules for a model that caches. A model whose map entry prices cache writes above its input price
    (GPT-5.6 and later: a write premium, evaluation.md §7) writes what it newly caches (`caching.cache_outcome`);
    the others write nothing and pay no write fee. (GPT-5.6 and later read at breakpoints: `_breakpoint_rules`.)"""
    return _write_premium(replace(OPENAI_CACHE, read_multiplier=_openai_read_multiplier(bare)), entry)


def _breakpoint_rules(policy: CachePolicy, bare: str, entry: dict[str, Any]) -> CachePolicy:
    """`policy` with GPT-5.6's rules (`OPENAI_BREAKPOINT_CACHE`: reads only at the breakpoint OpenAI places, token-exact,
    30 minutes) for an OpenAI model of GPT-5.6 or later, by its name (`OPENAI_BREAKPOINT_VERSION`) or by the map's
    `supports_prompt_cache_breakpoint`, that caches by OpenAI's rules on whatever API serves it (their prices, minimum
    and write premium stay); any other policy unchanged."""
    if policy.provider != "openai":
        return policy
    found = _OPENAI_VERSION.search(_openai_model_name(bare))
    version = (int(found.group(1)), int(found.group(2) or 0)) if found else (0, 0)
    if version < OPENAI_BREAKPOINT_VERSION and entry.get("supports_prompt_cache_breakpoint") is not True:
        return policy
    rules = OPENAI_BREAKPOINT_CACHE
    return replace(policy, block=rules.block, ttl_seconds=rules.ttl_seconds, reads=rules.reads)


def _write_premium(policy: CachePolicy, entry: dict[str, Any]) -> CachePolicy:
    """`policy` writing what a request newly caches at the map's write price where that is above the input price (a
    write premium, as GPT-5.6 and later have wherever they are served, and some Qwen and MiniMax entries); unchanged
    where the map prices writes at or below the input price, or not at all."""
    written, plain = _rate(entry.get("cache_creation_input_token_cost")), _rate(entry.get("input_cost_per_token"))
    return replace(policy, write_multiplier=written / plain) if plain > 0 and written > plain else policy


def _map_minimum(entry: dict[str, Any]) -> int | None:
    """The map's `prompt_cache_min_tokens` of an entry, or None where it has no usable one."""
    value = entry.get("prompt_cache_min_tokens")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 1 or value != int(value):
        return None
    return int(value)


def _bills_cache_reads(entry: dict[str, Any]) -> bool:
    """Whether a map entry bills cache hits: a cached-input price (`_prices_cache_reads`) or `supports_prompt_caching`."""
    return entry.get("supports_prompt_caching") is True or _prices_cache_reads(entry)


def _prices_cache_reads(entry: dict[str, Any]) -> bool:
    """Whether a map entry gives a cached-input price, flat or in a `tiered_pricing` row."""
    if entry.get("cache_read_input_token_cost") is not None:
        return True
    table = entry.get("tiered_pricing")
    return isinstance(table, list) and any(isinstance(row, dict) and row.get("cache_read_input_token_cost") is not None for row in table)


def model_profile(model_id: str) -> ModelProfile:
    """The profile of any chat model in litellm's bundled map (rules in the module docstring)."""
    found = _map_entry(model_id)
    if found is None:
        raise ProfileError(
            f"unknown profile {model_id!r}{_profile_guess(model_id)}; known: {', '.join(PROFILES)}, or any chat model in litellm's bundled model map "
            "(e.g. openai/gpt-5, anthropic/claude-sonnet-4-5, deepseek/deepseek-chat), optionally MODEL@WINDOW"
        )
    bare, entry = found
    provider = str(entry.get("litellm_provider") or model_id.partition("/")[0])
    max_input = int(entry["max_input_tokens"])
    max_output = int(entry.get("max_output_tokens") or entry.get("max_tokens") or 0) or 4096
    prices = entry_prices(entry)
    cache = _cache_policy(provider, bare, entry)
    shared = ModelProfile(
        name=model_id, model=bare, provider=provider, context_window=max_input, max_output=max_output,
        tokenizer=_tokenizer(provider, bare), cache=cache, prices=prices,
        image_tokens=1_600 if model_family(provider, bare) == "anthropic" else 765, overflow="input+output",
        description=f"{bare}: {max_input:,}-token context shared by input and max_tokens (refused when input + max_tokens exceed it)",
    )
    if provider in OPENAI_LIMIT_APIS and _openai_model_name(bare).startswith("gpt-5"):
        return replace(
            shared, overflow="input", context_limit=max_input + max_output, input_limit=max_input,
            description=f"{bare}: {max_input:,} input + {max_output:,} output = {max_input + max_output:,} context; "
            "OpenAI refuses input over the input limit",
        )
    if model_family(provider, bare) == "anthropic" and stops_at_window(bare):
        return replace(
            shared, overflow="input",
            description=f"{bare}: {max_input:,}-token context; refused only when the input is over it (an answer that "
            "would pass it stops there)",
        )
    return shared


#: The first Claude version that accepts a request whose input + max_tokens pass the context window and stops the
#: answer at the window (stop reason `model_context_window_exceeded`); earlier ones refuse it with a validation
#: error. Anthropic's context-windows guide, "Context window overflow behavior": "Claude 4.5 models and newer";
#: both SDKs added the stop reason on 2025-09-29, the day Claude Sonnet 4.5 came out.
CLAUDE_STOPS_AT_WINDOW = (4, 5)
#: A Claude model's version in a map key: `claude-3-7-sonnet-…` (version first) or `claude-sonnet-4-5-…`,
#: `claude-opus-4-…` (family first). A minor version is one or two digits: `-20250514` after it is a date.
_CLAUDE_VERSION = re.compile(
    r"claude-(?:(\d+)(?:[-.](\d{1,2}))?-([a-z]+)|([a-z]+)-(\d+)(?:[-.](\d{1,2}))?)(?!\d)"
)
#: The Claude models named without a version of that form that predate it: Claude 1, 2 and Instant.
_CLAUDE_LEGACY = re.compile(r"claude-(?:v\d|instant|[12](?![\d]))")
#: The first version of each Claude family that keeps the thinking blocks of earlier assistant turns in the
#: context by default; earlier ones drop them server-side, as `clear_thinking_20251015` with `keep` one turn
#: would (docs/specs/anthropic-context-management.md §3, CE-2: "Claude Opus 4.5 and later and Sonnet 4.6 and
#: later" keep them; Opus 4.1 and earlier, Sonnet 4.5 and earlier and "all Haiku models through 4.5" do not).
#: A later Haiku, or a family not named here, is taken to keep them, as every model newer than those does.
CLAUDE_KEEPS_THINKING = {"opus": (4, 5), "sonnet": (4, 6), "haiku": (4, 6)}


def claude_version(bare: str) -> tuple[str, tuple[int, int]] | None:
    """A Claude model's family and `(major, minor)` version from its map key (`_CLAUDE_VERSION`): `("sonnet", (4, 5))`
    for `claude-sonnet-4-5-20250929`, `("sonnet", (3, 7))` for `claude-3-7-sonnet-latest`; None when the name has
    no version of that form (Claude 1, 2, Instant, or a newer model named without one)."""
    found = _CLAUDE_VERSION.search(bare.lower())
    if found is None:
        return None
    if found.group(1):
        major, minor, family = found.group(1), found.group(2), found.group(3)
    else:
        family, major, minor = found.group(4), found.group(5), found.group(6)
    return family, (int(major), int(minor or 0))


def stops_at_window(bare: str) -> bool:
    """Whether a Claude model (a map key, any provider's) is 4.5 or newer (`CLAUDE_STOPS_AT_WINDOW`): only the input
    can overflow its window. A name without a version is a newer model (`claude-mythos-preview`) unless it is one of
    Claude 1, 2 or Instant."""
    version = claude_version(bare)
    if version is None:
        return _CLAUDE_LEGACY.search(bare.lower()) is None
    return version[1] >= CLAUDE_STOPS_AT_WINDOW


def strips_earlier_thinking(profile: ModelProfile) -> bool:
    """Whether the profile's model drops the thinking blocks of earlier assistant turns from a request unless the
    request says to keep them (`CLAUDE_KEEPS_THINKING`): a Claude model, on any provider, older than its family's
    first that keeps them. Dropped, they take no room in the window and bill nothing; the current turn's (after the
    last real user message) stay (docs/specs/anthropic-context-management.md §3)."""
    if profile.cache.provider != "anthropic":
        return False
    version = claude_version(profile.model)
    if version is None:
        return _CLAUDE_LEGACY.search(profile.model.lower()) is not None
    family, number = version
    first = CLAUDE_KEEPS_THINKING.get(family)
    return first is not None and number < first


def _profile_guess(model_id: str) -> str:
    """`did_you_mean` for an unknown profile: a `provider/name` among that provider's chat models of the map (by the
    name: the shared provider would make any two ids of it look alike), else among the built-in profiles, their
    models and the map's chat models."""
    chat = [(str(entry.get("litellm_provider")), key.rpartition("/")[2])
            for key, entry in bundled_cost_map().items() if isinstance(entry, dict) and entry.get("mode") == "chat"]
    provider, slash, bare = model_id.partition("/")
    if slash:
        guess = closest(bare, {name for owner, name in chat if owner == provider})
        return "" if guess is None else f" (did you mean {provider + '/' + guess!r}?)"
    return did_you_mean(model_id, [*PROFILES, *ALIASES.values(), *(f"{owner}/{name}" for owner, name in chat)])


def parse_window(text: str) -> int:
    """`64k`, `1m`, `200000` or `200_000` as a token count."""
    raw = text.strip().lower().replace("_", "").replace(",", "")
    scale = {"k": 1_000, "m": 1_000_000}.get(raw[-1:], 1)
    try:
        value = int(float(raw[:-1] if scale > 1 else raw) * scale)
    except (ValueError, OverflowError):  # OverflowError: a number past float's range
        raise ProfileError(f"window {text!r}: expected a token count such as 64k, 1m or 200000") from None
    if value < 1_000:
        raise ProfileError(f"window {text!r}: at least 1,000 tokens")
    return value


def windowed(base: ModelProfile, window: int, name: str) -> ModelProfile:
    """`MODEL@WINDOW`: the input window set to `window`, context and output limits scaled alike. A
    window above the model's own is refused: limits and prices past it are ones the API does not offer."""
    if window > base.context_window:
        raise ProfileError(
            f"profile {name!r}: {window:,} tokens is more than {base.model}'s own {base.context_window:,}-token window; "
            "MODEL@WINDOW only shrinks a window"
        )
    factor = window / base.context_window
    scale = (lambda n: None if n is None else max(1, round(n * factor)))  # noqa: E731
    max_output = max(1, round(base.max_output * factor))
    return replace(
        base, name=name, context_window=window, max_output=max_output, context_limit=scale(base.context_limit),
        input_limit=scale(base.input_limit),
        description=f"{base.model} shrunk to a {window:,}-token window: every limit × {factor:.4f} of the real model's "
        f"({base.context_window:,} window, {base.max_output:,} output); prices, tokenizer and caching unchanged",
    )


#: The study windows: GPT-5's tokenizer, caching and prices with a window of this size on a server of its own.
STUDY_WINDOWS = {"1m": 1_000_000, "128k": 128_000, "64k": 64_000, "32k": 32_000}


def _builtin() -> dict[str, ModelProfile]:
    gpt5 = replace(model_profile("openai/gpt-5"), name="gpt-5")
    claude = replace(model_profile("anthropic/claude-sonnet-4-5"), name="claude-sonnet")
    claude_opus = replace(model_profile("anthropic/claude-opus-4-5"), name="claude-opus")
    profiles = [gpt5, claude, claude_opus]
    study = replace(gpt5, overflow="input+output", context_limit=None, input_limit=None, in_model_map=False)
    for name, window in STUDY_WINDOWS.items():
        profiles.append(
            study.with_window(
                name, window, f"GPT-5 tokenizer, caching and prices with a {window:,}-token window shared by input and max_tokens"
            )
        )
    return {p.name: p for p in profiles}


PROFILES: dict[str, ModelProfile] = _builtin()
#: What each short name stands for (`bench list profiles`).
ALIASES = {"gpt-5": "openai/gpt-5", "claude-sonnet": "anthropic/claude-sonnet-4-5", "claude-opus": "anthropic/claude-opus-4-5"}
DEFAULT_PROFILE = "64k"


@lru_cache(maxsize=256)
def _resolve(name: str) -> ModelProfile:
    """A built-in profile, a map model (whose id may hold an `@`: Vertex AI's `claude-sonnet-4-5@20250929`), or
    either with `@WINDOW` after it."""
    if name in PROFILES:
        return PROFILES[name]
    base, at, window = name.rpartition("@")
    if at and base and _map_entry(name) is None:
        return windowed(_resolve(base), parse_window(window), name)
    return model_profile(name)


def get_profile(name: str | ModelProfile) -> ModelProfile:
    """A short name, any litellm chat model id, or either with `@WINDOW`."""
    if isinstance(name, ModelProfile):
        return name
    return _resolve(name)
