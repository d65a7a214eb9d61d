"""Pi's overflow detection per version (docs/specs/pi.md §5.1); recovery is replayed in test_pi_strategy.py."""

from __future__ import annotations

import pytest

from compaction_bench.strategies.pi_compaction import BASE, LATER, is_context_overflow
from compaction_bench.strategies.pi_session_tree import PiMessage
from compaction_bench.transcript import Usage

WINDOW = 200_000


def error(text: str) -> PiMessage:
    return PiMessage(role="assistant", stop_reason="error", error_message=text, usage=Usage())


def verdicts(message: PiMessage) -> tuple[bool, bool]:
    return tuple(is_context_overflow(message, WINDOW, rules, length_ratio=0.99) for rules in (BASE, LATER))  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("prompt is too long: 210000 tokens > 200000 maximum", (True, True)),  # Anthropic
        ("Your input exceeds the context window of this model.", (True, True)),  # OpenAI
        ("This model's maximum context length is 128000 tokens", (True, True)),  # OpenRouter
        ("Error: CONTEXT_LENGTH_EXCEEDED", (True, True)),  # generic, case-insensitive
        ("413 status code (no body)", (True, True)),  # Cerebras
        ("429 Too Many Requests", (False, False)),  # never overflow
        ("request_too_large", (False, True)),  # Anthropic 413, LATER pattern
        ("prompt too long; exceeded max context length", (False, True)),  # Ollama, LATER
        ("Throttling error: too many tokens in flight", (True, False)),  # LATER exclusion list vetoes
        ("rate limit reached: token limit exceeded", (True, False)),
    ],
)
def test_error_patterns_per_version(text, expected):
    assert verdicts(error(text)) == expected


def test_silent_overflow_counts_input_and_cache_reads_not_writes():
    # canonical input = Pi input + cacheRead + cacheWrite; Pi compares input + cacheRead
    over = PiMessage(role="assistant", stop_reason="stop", usage=Usage(input=200_500, cached_input=150_000, cache_write=100, output=10))
    under = PiMessage(role="assistant", stop_reason="stop", usage=Usage(input=200_050, cached_input=150_000, cache_write=100, output=10))
    assert verdicts(over) == (True, True)
    assert verdicts(under) == (False, False)


def test_length_with_zero_output_only_later():
    near = PiMessage(role="assistant", stop_reason="length", usage=Usage(input=198_000, output=0))
    short = PiMessage(role="assistant", stop_reason="length", usage=Usage(input=197_999, output=0))
    produced = PiMessage(role="assistant", stop_reason="length", usage=Usage(input=199_000, output=5))
    assert verdicts(near) == (False, True)  # 198,000 >= 0.99 * 200,000
    assert verdicts(short) == (False, False)
    assert verdicts(produced) == (False, False)
