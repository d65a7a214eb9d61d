"""A model without a price in litellm's map is unpriced (unknown dollars), not free; Claude and Gemini served by a
third party bill cache hits and writes as litellm bills them; a run manifest stored before these rules reads as before.

The right answers come from outside the code under test: hand-built map entries (one with no price, one pricing
everything at $0), litellm's own `cost_per_token` over the bundled map (no network), and an old-format profile
written here by hand with the cost worked out from the rule it was priced by.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from compaction_bench.metrics.aggregate import combine
from compaction_bench.metrics.cost import UNPRICED, cached_input_price, format_dollars, request_cost
from compaction_bench.profiles import (
    FAMILY_APIS,
    bundled_cost_map,
    entry_prices,
    get_profile,
    model_family,
    profile_from_dict,
    stated_prices,
)
from compaction_bench.reports.leaderboard import leaderboard
from tests.conftest import bench_cli

M = 1e-6

#: A map entry in the shape of Bedrock's commitment entries: limits, no per-token price at all.
NO_PRICE = {"litellm_provider": "bedrock", "mode": "chat", "max_input_tokens": 100_000, "max_output_tokens": 8_191,
            "input_cost_per_second": 0.011, "cost_per_second": 0.011}
#: A map entry listing a model as free: every price stated, and $0.
FREE = {"litellm_provider": "ollama", "mode": "chat", "max_input_tokens": 32_768, "input_cost_per_token": 0.0,
        "output_cost_per_token": 0.0, "cache_read_input_token_cost": 0.0}


def test_a_map_entry_without_prices_is_unpriced_and_a_zero_price_is_free():
    missing = entry_prices(NO_PRICE)
    assert missing.unpriced and missing.missing == ("input", "output")
    assert missing.cached_input is None  # not stated
    free = entry_prices(FREE)
    assert not free.unpriced and free.cached_input == 0.0
    only_output = entry_prices({"input_cost_per_token": 1 * M})
    assert only_output.missing == ("output",)


def test_an_unpriced_model_costs_nan_per_request_and_in_every_sum():
    model = "bedrock/us-east-1/1-month-commitment/anthropic.claude-v2:1"
    entry = bundled_cost_map()[model]
    assert "input_cost_per_token" not in entry and "output_cost_per_token" not in entry
    profile = get_profile(f"{model}@32k")
    assert profile.prices.unpriced
    assert math.isnan(request_cost(profile, input_tokens=10_000, cached_tokens=0, cache_write_tokens=0, output_tokens=100))
    assert math.isnan(cached_input_price(profile))
    # a priced model's cell and an unpriced one's, summed over scenarios: unknown, not the priced part alone
    frame = pd.DataFrame({"cost_usd": [0.25, float("nan")], "compactions": [1.0, float("nan")]})
    assert math.isnan(combine(frame, "cost_usd", "sum"))
    assert combine(frame, "compactions", "sum") == 1.0  # counts keep pandas' rule: a missing count is not unknown


def test_the_bundled_map_has_79_usable_chat_models_without_a_price():
    """Counted from the map by the rule itself (no input or output price, no `tiered_pricing` row, a context limit)."""
    table = bundled_cost_map()

    def usable_unpriced(entry: dict) -> bool:
        rows = entry.get("tiered_pricing") or []
        priced_rows = any(isinstance(r, dict) and "input_cost_per_token" in r for r in rows)
        lacks = entry.get("input_cost_per_token") is None or entry.get("output_cost_per_token") is None
        return entry.get("mode") == "chat" and bool(entry.get("max_input_tokens")) and lacks and not priced_rows

    names = [k for k, e in table.items() if isinstance(e, dict) and usable_unpriced(e)]
    assert len(names) == 79
    assert all(get_profile(name).prices.unpriced for name in names if "/" in name)


def test_a_summarizer_model_without_a_price_is_told_apart_from_a_free_one():
    """litellm's own cost of a call to an unpriced model is $0, which is no price: `stated_prices` says so."""
    from compaction_bench.llm import _litellm

    litellm = _litellm()
    assert sum(litellm.cost_per_token(model="snowflake/mistral-large", prompt_tokens=1000, completion_tokens=100)) == 0.0
    assert stated_prices("snowflake/mistral-large") is False
    assert stated_prices("openai/gpt-5") is True
    assert stated_prices("no-such-provider/no-such-model") is None


def test_one_rule_shows_dollars_unpriced_where_unknown_and_in_the_table_format_where_known():
    """Every table (leaderboard, report, gate, compare, `bench compare`) shows dollars by this rule."""
    for unknown in (None, float("nan"), np.float64("nan"), pd.NA):
        assert format_dollars(unknown) == UNPRICED == "unpriced"
        assert format_dollars(unknown, "{:,.0f}") == UNPRICED
    assert format_dollars(0.0) == "0.00"  # a free model's dollars are known: $0, never unpriced
    assert format_dollars(np.float64(14.6149)) == "14.61"
    # below $1, three significant digits: $0.0176 and $0.0213 (a cheap model's runs) both read "0.02" in cents
    assert [format_dollars(v) for v in (0.0176, 0.0213, 0.5, 0.00004)] == ["0.0176", "0.0213", "0.500", "0.0000400"]
    assert format_dollars(1234.5, "{:,.0f}") == "1,234" and format_dollars(0.0226812, "{:.4g}") == "0.02268"
    assert format_dollars(-0.5, "{:+.4g}") == "-0.5"
    priced_and_not = pd.DataFrame({"cost_usd": [0.25, float("nan")]})
    assert format_dollars(combine(priced_and_not, "cost_usd", "sum")) == UNPRICED  # a sum with an unknown part


def test_the_leaderboard_shows_unpriced_not_zero_dollars():
    summary = pd.DataFrame({
        "scenario": ["s", "s"], "strategy": ["a", "b"], "profile": ["p", "p"], "retention": [0.9, 0.8],
        "paired_probes": [3, 3], "cost_usd": [float("nan"), 0.5],
    })
    header, rows = leaderboard(summary)
    shown = {row[0]: row[header.index("cost $")] for row in rows}
    assert shown == {"a": UNPRICED, "b": "0.500"}


# Claude and Gemini served by a third party (not the family's own API: Anthropic, Google, Vertex AI, Bedrock), priced
# against litellm's own cost of the same usage: hits, writes and both. 47 of the 144 such entries differed before
# (hits at the family's 0.1x/0.25x, writes at 1.25x where litellm bills the input price).
THIRD_PARTY = [
    ("deepinfra/anthropic/claude-4-sonnet", 12_000, 0),
    ("gmi/anthropic/claude-sonnet-4.5", 12_000, 0),
    ("oci/google.gemini-2.5-pro", 12_000, 0),
    ("deepinfra/google/gemini-2.5-flash", 12_000, 0),
    ("snowflake/claude-sonnet-4-5", 0, 8_000),
    ("snowflake/claude-sonnet-4-5", 6_000, 6_000),
    ("kyma/claude-sonnet-4-6", 6_000, 6_000),
    ("deepinfra/anthropic/claude-3-7-sonnet-latest", 0, 8_000),
]


@pytest.mark.parametrize(("model", "cached", "written"), THIRD_PARTY)
def test_third_party_claude_and_gemini_cost_what_litellm_bills(model, cached, written):
    from compaction_bench.llm import _litellm

    litellm = _litellm()
    entry = bundled_cost_map()[model]
    family = model_family(str(entry["litellm_provider"]), model.partition("/")[2])
    assert family in ("anthropic", "gemini") and not str(entry["litellm_provider"]).startswith(FAMILY_APIS[family])
    usage = litellm.Usage(prompt_tokens=20_000, completion_tokens=500, total_tokens=20_500,
                          prompt_tokens_details={"cached_tokens": cached, "cache_write_tokens": written},
                          cache_creation_input_tokens=written, cache_read_input_tokens=cached)
    expected = sum(litellm.cost_per_token(model=model, usage_object=usage))
    ours = request_cost(get_profile(model), input_tokens=20_000, cached_tokens=cached, cache_write_tokens=written, output_tokens=500)
    assert ours == pytest.approx(expected, rel=1e-9)


def test_a_third_party_the_map_does_not_say_caches_reads_nothing():
    """DeepInfra's Claude: no cached price and no `supports_prompt_caching`, so no hit (litellm would bill it in full)."""
    entry = bundled_cost_map()["deepinfra/anthropic/claude-4-sonnet"]
    assert entry.get("cache_read_input_token_cost") is None and not entry.get("supports_prompt_caching")
    assert get_profile("deepinfra/anthropic/claude-4-sonnet").cache.provider == "none"


def test_claude_on_anthropic_keeps_its_discount():
    profile = get_profile("anthropic/claude-sonnet-4-5")
    assert cached_input_price(profile) == pytest.approx(0.3 * M) and profile.cache.write_multiplier == 1.25


def _old_profile(cached_input: float, read_multiplier: float) -> dict:
    """A profile as a run manifest stored it before unknown prices were told apart (no `missing`, cached 0.0)."""
    return {
        "name": "old", "model": "m", "provider": "openai", "context_window": 64_000, "max_output": 8_000, "tokenizer": "o200k_base",
        "cache": {"provider": "openai", "min_prefix": 1024, "block": 128, "breakpoints": 4, "ttl_seconds": 600,
                  "read_multiplier": read_multiplier, "write_multiplier": 0.0},
        "prices": {"input": 2 * M, "output": 8 * M, "cached_input": cached_input, "cache_write": 0.0, "tiers": [],
                   "inclusive_thresholds": False},
        "image_tokens": 765, "description": "", "overflow": "input+output", "context_limit": None, "input_limit": None,
    }


@pytest.mark.parametrize(("read_multiplier", "hit_price"), [(0.1, 0.2 * M), (0.0, 0.0)])
def test_an_old_manifest_profile_prices_hits_as_it_did(read_multiplier, hit_price):
    """Read by `bench score`'s reader. Old rule: a hit cost `cached_input or input × read_multiplier`: 0.1 → $0.20 per million; 0 (the map's free hit) → $0."""
    profile = profile_from_dict(_old_profile(0.0, read_multiplier))
    assert not profile.prices.unpriced and profile.prices.cached_input is None
    assert cached_input_price(profile) == pytest.approx(hit_price, abs=1e-15)
    dollars = request_cost(profile, input_tokens=10_000, cached_tokens=4_000, cache_write_tokens=0, output_tokens=100)
    assert dollars == pytest.approx(6_000 * 2 * M + 4_000 * hit_price + 100 * 8 * M)


def test_a_stored_profile_reads_back_the_same():
    for name in ("snowflake/mistral-large@32k", "coralbricks/glm-5.3", "64k"):
        profile = get_profile(name)
        again = profile_from_dict(json.loads(json.dumps(profile.to_dict())))
        assert again == profile


@pytest.fixture(scope="module")
def unpriced_run(tmp_path_factory):
    """One short synthetic session replayed on an unpriced model (Snowflake's Mistral Large, no price in the map) and
    on the priced 32k study window."""
    from compaction_bench.metrics.retention import source_position
    from compaction_bench.runner import Case, run
    from compaction_bench.scenarios.synthetic import default_suite

    scenario = default_suite()[0]
    transcript = scenario.transcript.with_items(scenario.transcript.items[:120])
    case = Case(scenario.name, transcript, tuple(p for p in scenario.probes if source_position(scenario.transcript, p) < 120))
    return run(cases=[case], strategies=["truncate"], profiles=["snowflake/mistral-large@32k", "32k"], out=tmp_path_factory.mktemp("runs"),
               run_id="unpriced", jobs=1, report=False, progress=False, answerer="")


def test_a_run_on_an_unpriced_model_stores_unknown_dollars(unpriced_run):
    from compaction_bench.store import load_run

    tables = load_run(unpriced_run)
    requests, summary = tables["requests"], tables["summary"].set_index("profile")
    unpriced = requests[requests["profile"] == "snowflake/mistral-large@32k"]
    billed = ~unpriced["overflow"].astype(bool) & (unpriced["kind"] != "final")  # a final context is probed, never sent
    assert billed.any() and unpriced.loc[billed, "cost_usd"].isna().all()
    assert (unpriced.loc[~billed, "cost_usd"] == 0).all()  # what is never sent costs nothing, priced or not
    assert math.isnan(summary.loc["snowflake/mistral-large@32k", "cost_usd"])
    assert summary.loc["32k", "cost_usd"] > 0
    manifest = json.loads((unpriced_run / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["profiles"]["snowflake/mistral-large@32k"]["prices"]["missing"] == ["input", "output"]
    assert profile_from_dict(manifest["profiles"]["snowflake/mistral-large@32k"]).prices.unpriced


def test_gate_and_compare_cannot_compare_an_unpriced_cost(unpriced_run):
    from compaction_bench.reports.compare import render_compare
    from compaction_bench.reports.gate import Rule, gate

    result = gate(unpriced_run, unpriced_run, [Rule.parse("cost:0")])
    rows = result.table.set_index("profile")
    assert rows.loc["snowflake/mistral-large@32k", "status"] == "untested" and rows.loc["32k", "status"] == "ok"
    text = result.markdown()
    assert "| unpriced | unpriced | cannot compare |" in text and "so the costs cannot be compared" in text
    assert "unpriced → unpriced (cannot compare)" in render_compare(unpriced_run, unpriced_run)


def test_bench_compare_prints_unpriced_not_nan(unpriced_run):
    proc = bench_cli("compare", str(unpriced_run), str(unpriced_run))
    assert proc.returncode == 0, proc.stderr
    rows = {(cells[2], cells[3]): cells[4:7] for line in proc.stdout.splitlines() if len(cells := [c.strip() for c in line.split("│")]) == 8}
    assert rows[("snowflake/mistral-large@32k", "cost")] == [UNPRICED, UNPRICED, "cannot compare"]
    assert rows[("32k", "cost")][2] == "+0" and float(rows[("32k", "cost")][0]) > 0
    assert rows[("32k", "summarized_source")] == ["–", "–", "–"]  # truncate summarizes nothing: missing, not unknown
    assert "nan" not in proc.stdout


@pytest.mark.parametrize(("model", "unknown"), [("snowflake/mistral-large", True), ("openai/gpt-4o-mini", False)])
def test_a_summarizer_call_litellm_bills_at_0_is_unknown_when_the_map_states_no_price(model, unknown, tmp_path, openai_server, monkeypatch):
    """litellm's `completion_cost` gives $0.00 for a model whose map entry states no price (Snowflake's Mistral Large):
    that call's dollars are unknown. A priced model's call is priced at its map prices on the tokens it reported
    (`measure._call_dollars`), whatever litellm said."""
    from dataclasses import replace

    import compaction_bench as bench
    from compaction_bench.llm import CallSettings, LLMClient
    from compaction_bench.metrics.measure import measure_cell
    from tests.test_cache_model_refused_summary import two_turn_session
    from tests.test_cache_model_summarizer_model import SESSION_MODEL, _SummarizesOnce

    monkeypatch.setenv("OPENAI_API_KEY", "local-key")
    client = LLMClient("openai/local-summarizer", CallSettings(api_base=openai_server.base_url, max_retries=0, cache_dir=str(tmp_path)))
    result = bench.replay(two_turn_session("unpriced-summarizer"), _SummarizesOnce, profile=SESSION_MODEL, summarizer=client)
    summary = next(r for r in result.requests if r.kind == "summary")
    assert summary.llm_call is not None
    summary.llm_call = replace(summary.llm_call, model=model, cost=0.0)  # what litellm reported for that model's call
    rows = measure_cell(result, [], answerer=None).requests
    (row,) = [r for r in rows if r["kind"] == "summary"]
    assert math.isnan(row["cost_usd"]) is unknown
    assert unknown or row["cost_usd"] > 0
    assert all(r["cost_usd"] > 0 for r in rows if r["kind"] == "turn")  # the session's own requests are priced (gpt-4o)


def test_a_run_names_its_unpriced_profile_and_summarizer_before_any_work(caplog):
    from compaction_bench.runner import RunConfig, validate

    with caplog.at_level("WARNING", logger="compaction_bench.runner"):
        validate(RunConfig(strategies=("truncate",), profiles=("snowflake/mistral-large@32k", "32k"), summarizer="snowflake/mistral-7b"))
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        f"warning: profile snowflake/mistral-large@32k: litellm's model map states no price for mistral-large; its dollars are reported as {UNPRICED}",
        f"warning: summarizer snowflake/mistral-7b: litellm's model map states no price for it; its calls' dollars are reported as {UNPRICED}",
    ]
    caplog.clear()
    with caplog.at_level("WARNING", logger="compaction_bench.runner"):
        validate(RunConfig(strategies=("truncate",), profiles=("32k",), summarizer="openai/gpt-4o-mini"))
    assert not caplog.records
