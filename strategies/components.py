"""Rules several of the issue-15 strategies share (Claude Code, Anthropic context management,
Gemini CLI, OpenHands, Aider, the hybrid), so no strategy owns another's rule:

- `usage_context_tokens`: the Anthropic-style context count of one response's usage
  (input + cache creation + cache read + output; the importers fold the cache fields into `input`),
  used by Claude Code (docs/specs/claude-code.md §2.2) and Anthropic's client-side compaction
  (docs/specs/anthropic-context-management.md §5);
- `js_round`, `chars_div4`: JavaScript's `Math.round(len / 4)` estimate;
- `keep_last_steps_start`: the pair-safe start of the verbatim tail that holds the newest N model
  responses (hybrid, evaluation.md §2);
- `masking_cutoff`: the oldest step whose tool outputs observation masking keeps (observation-masking and the
  hybrid, evaluation.md §2);
- `observation_lines`: the line count of a masked tool output's placeholder (the same two), as SWE-agent counts it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from compaction_bench.strategies.history import pair_safe_units
from compaction_bench.tokens import utf16_len
from compaction_bench.transcript import Item, Usage


def usage_context_tokens(usage: Usage) -> int:
    """`input + cache_creation + cache_read + output` of one response (claude-code.md §2.2 step 3)."""
    return usage.input + usage.output


def js_round(value: float) -> int:
    """JavaScript `Math.round`: halves round up (towards +infinity)."""
    return math.floor(value + 0.5)


def chars_div4(text: str) -> int:
    """`Math.round(text.length / 4)` (UTF-16 code units, as JavaScript counts them: a lone surrogate is one)."""
    return js_round(utf16_len(text) / 4)


def keep_last_steps_start(items: Sequence[Item], keep_steps: int) -> int:
    """Index into `items` where a verbatim tail holding the newest `keep_steps` model responses starts,
    at a pair-safe unit boundary (never between a call and its result). `len(items)` for no tail."""
    if keep_steps <= 0:
        return len(items)
    units = pair_safe_units(items)
    start = len(items)
    responses: set[int] = set()
    for unit in reversed(units):
        unit_responses = {i.response for i in unit if i.is_model_output and i.response is not None}
        if len(responses | unit_responses) > keep_steps:
            break
        responses |= unit_responses
        start -= len(unit)
    return start


def masking_cutoff(output_steps: Sequence[int], keep: int) -> int:
    """Observation masking's line (evaluation.md §2, SWE-agent's `LastNObservations`): the outputs of the newest
    `keep` steps that produced any stay, older ones are masked, so this returns the oldest kept step of
    `output_steps` (each step that produced an output, ascending, once); 0, masking nothing, while there are fewer.
    A step of several parallel outputs counts once; a step of none (an answer without a tool call) does not count,
    as SWE-agent has one observation per step."""
    return output_steps[-keep] if 0 < keep <= len(output_steps) else 0


def observation_lines(text: str) -> int:
    """The line count a masked output's placeholder shows: SWE-agent's `len(content.splitlines())`
    (`_get_content_stats`, which `LastNObservations` calls for each output it elides:
    sweagent/agent/history_processors.py@3ea751c087f32b16e039a2233dd6eefecef325d5 L23-28, L171-172), so an
    empty output has 0 lines and a final newline ends a line rather than starting one ("a\nb\n" is 2).
    Python's `splitlines` also splits at \r, \r\n and the other Unicode line boundaries, as there."""
    return len(text.splitlines())
