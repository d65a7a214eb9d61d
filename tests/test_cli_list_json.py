"""`bench list strategies|profiles|formats --json`: one JSON array on stdout and nothing else, one object per
row with the table's fields as plain values (counts as integers, prices in dollars per million tokens, an
unknown price as null), checked against the registry, the profiles and the importers themselves, and against
prices known from the providers' price lists (GPT-5: $1.25 in, $0.125 cached, $10 out per million tokens)."""

from __future__ import annotations

import json

import pytest

from compaction_bench.importing import formats
from compaction_bench.profiles import ALIASES, PROFILES
from compaction_bench.registry import strategies
from compaction_bench.strategy import StrategyInfo
from tests.conftest import bench_cli

#: A Bedrock commitment entry of litellm's map: limits, no per-token price.
UNPRICED_MODEL = "bedrock/us-east-1/1-month-commitment/anthropic.claude-v2:1@32k"


def _refuse_nan(constant: str) -> None:
    raise AssertionError(f"{constant} is not JSON")


def listed(*args: str) -> list[dict]:
    """The parsed stdout of `bench list ARGS --json`: the whole of it is one strict JSON array."""
    proc = bench_cli("list", *args, "--json")
    assert proc.returncode == 0, proc.stderr
    records = json.loads(proc.stdout, parse_constant=_refuse_nan)
    assert isinstance(records, list) and all(isinstance(r, dict) for r in records)
    return records


def test_strategies_are_the_registry_with_their_option_defaults():
    records = listed("strategies")
    assert [r["id"] for r in records] == list(strategies())
    for record in records:
        info = StrategyInfo.of(strategies()[record["id"]])
        assert record == {"id": record["id"], "what": info.description, "spec": info.spec, "options": dict(info.options)}
    by_id = {r["id"]: r for r in records}
    assert by_id["none"]["options"] == {} and by_id["none"]["spec"] == "baseline"
    assert by_id["truncate"]["options"] == {"trigger_ratio": 0.9, "target_ratio": 0.6}


def test_a_strategy_named_lists_each_option_with_what_it_accepts():
    """`bench list strategies ID`: the words a choice option takes were only in the error after a wrong guess, and
    the one-line table cut option names and defaults short ("truncation_mode='toke…'")."""
    (record,) = listed("strategies", "codex-local")
    rows = {row["option"]: row for row in record["option_details"]}
    assert list(rows) == list(record["options"])  # every option, in the class's order
    assert rows["truncation_mode"]["accepts"] == "tokens | bytes" and rows["truncation_mode"]["default"] == "tokens"
    assert rows["auto_compact_percent"]["accepts"] == "in (0, 100] (a percentage)"
    assert rows["summary_template"]["accepts"].startswith("a shipped prompt template's name")
    assert "4N bytes in bytes mode" in rows["tool_output_token_limit"]["meaning"]  # the `#:` comment above the field
    shown = bench_cli("list", "strategies", "observation-masking", env={"COLUMNS": "100"})
    assert shown.returncode == 0 and "a pattern of {lines}" in shown.stdout and "…" not in shown.stdout
    wide = bench_cli("list", "strategies")
    assert wide.returncode == 0 and "…" not in wide.stdout  # folded onto more lines, never cut


def test_profiles_give_numbers_as_numbers_and_known_prices():
    records = listed("profiles")
    assert [r["name"] for r in records] == list(PROFILES)
    by_name = {r["name"]: r for r in records}
    assert by_name["gpt-5"]["alias_of"] == ALIASES["gpt-5"] == "openai/gpt-5"
    assert by_name["64k"]["alias_of"] is None
    gpt5 = by_name["gpt-5"]
    assert (gpt5["window"], gpt5["context"], gpt5["input_limit"], gpt5["max_output"]) == (272_000, 400_000, 272_000, 128_000)
    assert gpt5["overflow_when"] == "input > 272,000" and gpt5["tokenizer"] == "o200k_base"
    assert gpt5["cache"] == {"provider": "openai", "min_prefix": 1024, "block": 128, "reads": "prefix", "breakpoints": None, "ttl_seconds": 600}
    small = by_name["64k"]
    assert (small["window"], small["input_limit"]) == (64_000, None)
    for record in (gpt5, small):
        assert (record["usd_per_mtok_in"], record["usd_per_mtok_cached"], record["usd_per_mtok_out"]) == (1.25, 0.125, 10.0)
    assert all(type(r["window"]) is int and type(r["max_output"]) is int for r in records)


@pytest.mark.parametrize(("model", "prices", "cache"), [
    (UNPRICED_MODEL, (None, None, None), None),  # no price in the map: unknown, not $0
    ("bedrock/anthropic.claude-v2:1", (8.0, None, 24.0), None),  # Claude 2: $8 / $24, no prompt cache, so no cached price
])
def test_an_unknown_or_inapplicable_price_is_null(model, prices, cache):
    record = listed("profiles", model)[-1]
    assert record["name"] == model
    assert (record["usd_per_mtok_in"], record["usd_per_mtok_cached"], record["usd_per_mtok_out"]) == prices
    assert record["cache"] is cache


def test_formats_are_the_importers_with_their_file_names():
    records = listed("formats")
    assert [r["format"] for r in records] == sorted(formats())
    for record in records:
        cls = formats()[record["format"]]
        assert record == {"format": record["format"], "description": cls.description, "file_names": list(cls.suffixes)}
    assert {r["format"]: r["file_names"] for r in records}["codex"] == [".jsonl", ".jsonl.zst"]


def test_the_help_names_the_option():
    for what in ("strategies", "profiles", "formats"):
        proc = bench_cli("list", what, "--help")
        assert proc.returncode == 0 and "--json" in proc.stdout and "JSON array" in proc.stdout


def test_gate_help_names_every_metric_a_rule_may_use():
    """`--fail-on` listed no metric, and its example used `presence`, an alias its own error's list left out."""
    from compaction_bench.reports.gate import ALIASES, METRICS

    shown = " ".join(bench_cli("gate", "--help", env={"COLUMNS": "400"}).stdout.split())
    named = shown.split("Metrics:", 1)[1]
    for metric in (*METRICS, *ALIASES):
        assert metric in named, metric


def test_profiles_say_where_cache_reads_end_and_how_long_entries_live():
    # Anthropic: reads end at breakpoints the agent marks, at most 4 per request, 5-minute entries (evaluation.md §7);
    # GPT-5.6: only at the breakpoint OpenAI places, 30 minutes at least (OpenAI's `prompt_cache_options` reference)
    by_name = {r["name"]: r for r in listed("profiles", "gpt-5.6")}
    assert by_name["claude-sonnet"]["cache"] == {"provider": "anthropic", "min_prefix": 1024, "block": 1, "reads": "marked",
                                                     "breakpoints": 4, "ttl_seconds": 300}
    assert (by_name["gpt-5.6"]["cache"]["reads"], by_name["gpt-5.6"]["cache"]["ttl_seconds"]) == ("implicit", 1800)
    table = bench_cli("list", "profiles", "gpt-5.6")
    assert table.returncode == 0, table.stderr
    row = next(line for line in table.stdout.splitlines() if line.startswith("│ gpt-5.6 "))
    number = row.split("[")[1].split("]")[0]
    assert f"[{number}] cache reads end only at the breakpoint the provider places; an entry lives 30 min" in table.stdout
