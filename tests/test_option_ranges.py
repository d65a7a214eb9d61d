"""Every number option of every built-in strategy has a range (declared on its field or given by a word
of its name) that holds its upstream default, a value outside it is refused when parsed, and a replay at
each end of it completes and its tables are written: no value a user may set fails the cells mid-run (an
`aider.window_divisor` of 0 was a ZeroDivisionError in every cell, a `gemini-cli.compression_threshold` of
1e300 an OverflowError as the tables were written)."""

from __future__ import annotations

import math
import typing
from dataclasses import Field

import pytest

from compaction_bench.metrics.measure import measure_cell
from compaction_bench.records import to_rows
from compaction_bench.registry import strategies
from compaction_bench.replay import replay
from compaction_bench.store import TABLES, CellKey, RunStore
from compaction_bench.strategy import MAX_NUMBER, OptionError, Range, check_value, option_range

#: A strategy's number options: (strategy, option, int or float, field).
NUMERIC: list[tuple[str, str, type, Field]] = []
for _name, _cls in strategies().items():
    _hints = typing.get_type_hints(_cls.Options)
    for _key, _spec in _cls.option_fields().items():
        _types = typing.get_args(_hints[_key]) or (_hints[_key],)
        if bool not in _types and (int in _types or float in _types):
            NUMERIC.append((_name, _key, float if float in _types else int, _spec))

#: The session replayed: screenshots, tool loops, about 80,000 tokens, so that every strategy compacts
#: with its defaults at 32,000 tokens (but `anthropic-compact`, whose trigger is at least 50,000 tokens).
SESSION = ("images", 80_000)
PROFILE = "claude-sonnet@32000"  # an Anthropic model: Pi's thinking budgets and Claude Code's caps apply
PROFILES = {"anthropic-compact": "claude-sonnet@64000"}
#: Options that bring the code an option range reads into the replay.
BASE_OPTIONS: dict[str, dict[str, typing.Any]] = {
    "anthropic-compact": {"trigger": 50_000, "pause_after_compaction": True},
    "anthropic-clear-tool-uses": {"trigger_value": 10_000},
    "opencode-v1": {"prune": True},
    "codex-token-budget": {"auto_compact_fallback_prompt": "The context window is full.", "auto_compact_fallback_buffer_tokens": 1_000,
                           "reminder_threshold_tokens": 2_000},
}


def range_ends(allowed: Range, kind: type) -> list[int | float]:
    """The smallest and the largest value `allowed` holds (an open end: the nearest value inside it; no
    end: 2**53 either way, the largest a number option may be)."""
    step = 1 if kind is int else 1e-6
    if allowed.low is None:
        low = -MAX_NUMBER
    else:
        low = allowed.low + step if allowed.low_open else allowed.low
    if allowed.high is None:
        high = MAX_NUMBER
    else:
        high = allowed.high - step if allowed.high_open else allowed.high
    return [kind(low), kind(high)]


def end_cases() -> list[typing.Any]:
    cases = []
    for name, key, kind, spec in NUMERIC:
        for value in range_ends(option_range(key, spec) or Range(), kind):  # no range: any number up to 2**53
            cases.append(pytest.param(name, key, value, id=f"{name}.{key}={value}"))
    return cases


def test_every_number_option_has_a_range_that_holds_its_default() -> None:
    unranged = [f"{name}.{key}" for name, key, _, spec in NUMERIC if option_range(key, spec) is None]
    assert not unranged, f"number options without a range: {', '.join(unranged)}"
    assert len(NUMERIC) > 150
    for name, key, kind, spec in NUMERIC:
        allowed = option_range(key, spec)
        assert allowed is not None and allowed.low is not None, (name, key, allowed)  # each is bounded below
        if spec.default is not None:  # None (unset) is no number: the check lets it through
            check_value(f"{name}.{key}", spec.default, allowed)
        for end in range_ends(allowed, kind):
            assert end in allowed and math.isfinite(end), (name, key, end)


@pytest.mark.parametrize("strategy, key, value", [
    ("openhands-v0", "keep_first", -1),
    ("openhands", "keep_first", -1),
    ("anthropic-clear-tool-uses", "keep_tool_uses", -1),
    ("anthropic-compact", "trigger", 49_999),
    ("gemini-cli", "compression_threshold", 2.0),
    ("gemini-cli", "compression_threshold", 0.0),
    ("aider", "window_divisor", 0),
    ("codex-local", "model_context_window", 0),
    ("claude-code", "autocompact_pct_override", 100.5),
    ("openhands", "minimum_progress", 1.0),
    ("observation-masking", "keep_last", -1),
])
def test_values_the_range_leaves_out_are_refused_when_parsed(strategy, key, value) -> None:
    with pytest.raises(OptionError, match=rf"option {strategy}\.{key}=.*: out of range; expected a value "):
        strategies()[strategy].parse_options({key: value})


@pytest.fixture(scope="module")
def session():
    """The session, which every strategy (but `none`) compacts with its defaults: the compaction paths run."""
    from compaction_bench.scenarios.synthetic import generate

    shape, tokens = SESSION
    transcript = generate(shape, seed=0, target_tokens=tokens).transcript
    for name in strategies():
        result = replay(transcript, name, profile=PROFILES.get(name, PROFILE), options=BASE_OPTIONS.get(name, {}))
        assert result.compactions or name == "none", name
    return transcript


@pytest.mark.parametrize("strategy, key, value", end_cases())
def test_a_replay_at_each_end_of_an_option_range_completes_and_its_tables_are_written(session, tmp_path, strategy, key, value) -> None:
    """The cell as a run makes it (`runner._run_cell`): the replay, its tables, the cell's file."""
    profile = PROFILES.get(strategy, PROFILE)
    options = {**BASE_OPTIONS.get(strategy, {}), key: value}
    try:
        strategies()[strategy].parse_options(options)
    except OptionError as refused:  # an end only the rule between two options refuses, with the other's default
        assert (strategy in ("openhands", "openhands-v0") and "keep_first must be less than max_size // 2" in str(refused)) or (
            (strategy, key, value) == ("codex-token-budget", "auto_compact_fallback_buffer_tokens", 0) and "needs a positive" in str(refused)
        ) or (strategy == "truncate" and "target_ratio must be less than trigger_ratio" in str(refused))  # session 42
        return
    result = replay(session, strategy, profile=profile, options=options)
    tables = measure_cell(result, [], answerer=None)
    cell = {name: getattr(tables, name) for name in TABLES} | {"replay": to_rows(result)}
    assert RunStore(tmp_path).write_cell(CellKey(session.id, strategy, profile, 0), cell).is_file()
    assert result.requests


@pytest.mark.parametrize("strategy, keep_first, max_size, allowed", [
    # the SDK's validate_keep_first_vs_max_size: max_size // 2 - keep_first - 1 > 0
    ("openhands", 38, 80, True), ("openhands", 39, 80, False), ("openhands", 0, 4, True), ("openhands", 0, 3, False),
    # V0's constructor refuses keep_first >= max_size // 2, and its condensation fails at max_size // 2 - 1 (openhands.md §5.1)
    ("openhands-v0", 58, 120, True), ("openhands-v0", 59, 120, False), ("openhands-v0", 60, 120, False),
    ("openhands-v0", 0, 4, True), ("openhands-v0", 0, 3, False),
])
def test_openhands_keep_first_and_max_size_follow_upstreams_rule_between_them(session, strategy, keep_first, max_size, allowed) -> None:
    """A pair that leaves no event from the tail to a condensation is refused when parsed (upstream refuses
    it, or in V0 fails at the first condensation); each pair allowed replays and condenses."""
    options = {"keep_first": keep_first, "max_size": max_size}
    if not allowed:
        with pytest.raises(OptionError, match=rf"options {strategy}\.keep_first={keep_first} and {strategy}\.max_size={max_size}: "):
            strategies()[strategy].parse_options(options)
        return
    result = replay(session, strategy, profile=PROFILE, options=options)
    assert result.compactions


@pytest.mark.parametrize("strategy, key, value, allowed", [
    ("codex-local", "auto_compact_token_limit_scope", "body-after-prefix", "total, body_after_prefix"),
    ("codex-remote-v2", "truncation_mode", "Tokens", "tokens, bytes"),
    ("anthropic-clear-tool-uses", "trigger_type", "tokens", "input_tokens, tool_uses"),
])
def test_a_word_option_refuses_a_word_its_rule_does_not_know(strategy, key, value, allowed) -> None:
    """`body-after-prefix` ran as `total` and `Tokens` as `bytes` (12,000 bytes where Codex keeps 48,000), each
    under the label the user gave: the code compares with one exact word and takes anything else for the other."""
    with pytest.raises(OptionError, match=rf"option {strategy}\.{key}: expected one of {allowed}, got '{value}'"):
        strategies()[strategy].parse_options({key: value})
    for word in allowed.split(", "):
        assert getattr(strategies()[strategy].parse_options({key: word}), key) == word


def test_a_token_budget_fallback_prompt_needs_a_positive_buffer() -> None:
    """codex.md §5.3 "Validation": Codex's config refuses a fallback prompt without a positive buffer (with 0 the
    window resets at the very check that would send the prompt, so it was never sent)."""
    parse = strategies()["codex-token-budget"].parse_options
    with pytest.raises(OptionError, match="needs a positive auto_compact_fallback_buffer_tokens"):
        parse({"auto_compact_fallback_prompt": "The window is full."})
    assert parse({"auto_compact_fallback_prompt": "The window is full.", "auto_compact_fallback_buffer_tokens": 500}).auto_compact_fallback_buffer_tokens == 500
