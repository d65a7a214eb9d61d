"""Model profiles: context window, max output, tokenizer, cache policy and prices.

Prices come from litellm's bundled cost map (read as a file: no import of litellm, no network).
Windowed profiles (`128k`, `64k`, `32k`, `1m`) reuse the GPT-5 tokenizer, cache rules and prices
with a different window, so short sessions compact many times.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from compaction_bench.errors import BenchError


class ProfileError(BenchError, LookupError):
    """An unknown profile name."""


@dataclass(frozen=True)
class CachePolicy:
    """A provider's prompt-caching rules (docs/specs/evaluation.md §7).

    OpenAI: automatic for prompts of at least `min_prefix` (1,024) tokens, hits in `block`
    (128)-token increments. Anthropic: a hit ends at a cache breakpoint (message boundaries of
    earlier requests, at most `breakpoints` per request) of at least `min_prefix` tokens, writes
    cost `write_multiplier` × the input price. `ttl_seconds` expires entries when timestamps are
    recorded.
    """

    provider: str = "openai"
    min_prefix: int = 1024
    block: int = 128
    breakpoints: int = 4
    ttl_seconds: int = 600
    read_multiplier: float = 0.1
    write_multiplier: float = 0.0


OPENAI_CACHE = CachePolicy()
ANTHROPIC_CACHE = CachePolicy(
    provider="anthropic", min_prefix=1024, block=1, breakpoints=4, ttl_seconds=300, read_multiplier=0.1, write_multiplier=1.25
)


@dataclass(frozen=True)
class Prices:
    """Dollars per token."""

    input: float = 0.0
    output: float = 0.0
    cached_input: float = 0.0
    cache_write: float = 0.0


@dataclass(frozen=True)
class ModelProfile:
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

    def with_window(self, name: str, window: int, description: str) -> ModelProfile:
        return replace(self, name=name, context_window=window, description=description)

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


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


def prices_for(model: str) -> Prices:
    info = bundled_cost_map().get(model) or {}
    base = float(info.get("input_cost_per_token") or 0.0)
    return Prices(
        input=base,
        output=float(info.get("output_cost_per_token") or 0.0),
        cached_input=float(info.get("cache_read_input_token_cost") or 0.0),
        cache_write=float(info.get("cache_creation_input_token_cost") or 0.0),
    )


def _builtin() -> dict[str, ModelProfile]:
    gpt5 = ModelProfile(
        name="gpt-5",
        model="gpt-5",
        provider="openai",
        context_window=272_000,
        max_output=128_000,
        tokenizer="o200k_base",
        cache=OPENAI_CACHE,
        prices=prices_for("gpt-5"),
        image_tokens=765,
        description="GPT-5 family as Codex sees it: 272k input window, o200k_base, OpenAI caching",
    )
    claude = ModelProfile(
        name="claude-sonnet",
        model="claude-sonnet-4-5",
        provider="anthropic",
        context_window=200_000,
        max_output=64_000,
        tokenizer="cl100k_base",
        cache=ANTHROPIC_CACHE,
        prices=prices_for("claude-sonnet-4-5"),
        image_tokens=1_600,
        description="Claude Sonnet 4.5: 200k window; counted with cl100k_base (an approximation), Anthropic caching",
    )
    claude_opus = replace(
        claude,
        name="claude-opus",
        model="claude-opus-4-5",
        cache=replace(ANTHROPIC_CACHE, min_prefix=4096),
        prices=prices_for("claude-opus-4-5"),
        description="Claude Opus 4.5: 200k window, 4,096-token cache minimum",
    )
    profiles = [gpt5, claude, claude_opus]
    for name, window in (("1m", 1_000_000), ("128k", 128_000), ("64k", 64_000), ("32k", 32_000)):
        profiles.append(
            gpt5.with_window(name, window, f"GPT-5 tokenizer, caching and prices with a {window:,}-token window")
        )
    return {p.name: p for p in profiles}


PROFILES: dict[str, ModelProfile] = _builtin()
DEFAULT_PROFILE = "64k"


def get_profile(name: str | ModelProfile) -> ModelProfile:
    if isinstance(name, ModelProfile):
        return name
    try:
        return PROFILES[name]
    except KeyError:
        raise ProfileError(f"unknown profile {name!r}; known: {', '.join(PROFILES)}") from None
