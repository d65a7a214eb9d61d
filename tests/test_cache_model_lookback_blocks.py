"""Anthropic's cache lookback is measured in content blocks, not messages.

The rule, from Anthropic's prompt-caching guide ("How automatic prefix checking works", "When to use
multiple breakpoints"): from each explicit `cache_control` breakpoint, the system checks for cache hits
at earlier content block boundaries, up to about 20 blocks back; an entry further back than that is not
found unless another breakpoint lies near it. A block is one element of a message's `content` (or of
the `system` array): an assistant turn of text and N `tool_use` blocks is N + 1 blocks, and the N
`tool_result` blocks answering it are N more.

The hand-built sequence is an agent step of parallel tool calls, the case where the two counts part:

- R1 = (S, U): the system prompt S and a long user message U. It writes entries at its breakpoints, the
  end of S (the system prompt's end) and the end of U (its last message).
- The model answers with one assistant message A: a line of text and N parallel reads. R2 = (S, U, A,
  T1..TN) adds A and the N results. Its breakpoints: the end of S, and the ends of its last three
  messages T(N-2), T(N-1), TN.
- R2 extends R1, so R1's entry at the end of U lies inside the common prefix. It is read only if the
  lookback from one of R2's breakpoints reaches it. The nearest is the end of T(N-2); between the end of
  U and it lie A's N + 1 blocks and N - 2 result blocks: 2N - 1 blocks, in 1 + (N - 2) = N - 1 messages.

With N = 12: 23 blocks (beyond the 20), 11 messages (within 20). Right answer: the entry at the end of U
is not found; the entry at the end of S is (at R2's own breakpoint there, distance 0), so R2 reads
tok(S) and writes the rest. Counting messages instead read tok(S) + tok(U).
With N = 4: 7 blocks, 3 messages: both counts find it, R2 reads tok(S) + tok(U).
"""

from __future__ import annotations

import pytest

from compaction_bench.caching import ANTHROPIC_LOOKBACK_BLOCKS, blocks_of, cache_outcome, within_lookback
from compaction_bench.profiles import get_profile
from compaction_bench.provider import SimulatedProvider
from compaction_bench.request import Message, Request, ToolCall
from compaction_bench.transcript import Attachment

S = Message("system", "rules " * 1500)  # about 1,500 tokens: above Sonnet 4.5's 1,024-token minimum on its own
U = Message("user", "Read every module and tell me what each does. " * 120)


def _step(calls: int) -> tuple[Message, ...]:
    """One assistant message with text and `calls` parallel reads, then one tool result per read."""
    reads = tuple(ToolCall(f"read_{n}", "read", f'{{"path": "src/module_{n}.py"}}') for n in range(calls))
    answer = Message("assistant", "Reading the modules.", tool_calls=reads)
    results = tuple(Message("tool", f"def f{n}():\n    return {n}\n" * 4, tool_call_id=f"read_{n}", name="read") for n in range(calls))
    return (answer, *results)


def test_block_counts_follow_anthropics_wire_layout():
    """Text plus N tool_use blocks is N + 1; a tool result, a reasoning item, a compaction item are one block each;
    an image attachment is an image block; a call-only assistant message is its calls; nothing is less than one."""
    answer = _step(12)[0]
    assert blocks_of(answer) == 13
    assert blocks_of(Message("assistant", tool_calls=answer.tool_calls[:3])) == 3
    assert blocks_of(Message("tool", "out", tool_call_id="read_0")) == 1
    assert blocks_of(Message("reasoning", "")) == blocks_of(Message("compaction", "x")) == 1
    assert blocks_of(Message("user", "look", attachments=(Attachment("image/png", "shot.png", 10),))) == 2
    assert blocks_of(Message("user", "")) == blocks_of(S) == 1


def test_the_lookback_from_a_breakpoint_counts_the_blocks_between():
    """The rule on token boundaries alone (`cache_outcome`): R1 = (S, U) with ends 1,500 and 3,000 tokens; R2 adds
    13 messages (A and 12 results) whose block counts are 13 and 1 each. R2's breakpoints: message 0 (S) and
    messages 12, 13, 14. From message 12 back to the end of U (message 1): 13 + 10 = 23 blocks, so only the
    entry at the end of S (1,500) is read; with one block per message (no layout given) it is 11 messages away
    and the entry at the end of U (3,000) is read."""
    previous = [1500, 3000]
    current = previous + [3200 + 50 * k for k in range(13)]
    blocks = [1, 1, 13] + [1] * 12
    kw = dict(prefix_tokens=3000, total_tokens=current[-1], previous_boundaries=previous, previous_system=1,
              current_boundaries=current, current_system=1)
    by_blocks = cache_outcome(get_profile("claude-sonnet").cache, current_blocks=blocks, **kw)
    assert (by_blocks.cached_tokens, by_blocks.cache_write_tokens) == (1500, current[-1] - 1500)
    assert cache_outcome(get_profile("claude-sonnet").cache, **kw).cached_tokens == 3000
    # the window: the breakpoint's own block and the 19 before it
    assert within_lookback(0, [19], [1] * 20) and not within_lookback(0, [20], [1] * 21)
    assert ANTHROPIC_LOOKBACK_BLOCKS == 20


@pytest.mark.parametrize(("calls", "reads_user_message"), [(12, False), (4, True)])
def test_a_step_of_parallel_tool_calls_moves_the_breakpoints_past_the_previous_entry(calls, reads_user_message):
    """claude-sonnet, R1 = (S, U) then R2 = (S, U, A, T1..TN) (module docstring). N = 12: 23 blocks from the end of
    U to R2's nearest breakpoint, R2 reads tok(S) and writes everything after it. N = 4: 7 blocks, R2 reads
    tok(S) + tok(U) and writes the step. (Before: messages were counted, 11 of them for N = 12, and tok(S) +
    tok(U) was read in both cases.)"""
    provider = SimulatedProvider(get_profile("claude-sonnet"))
    tok = provider.message_tokens
    first = provider.send(Request((S, U)))
    assert first.cached_tokens == 0 and first.cache.cache_write_tokens == tok(S) + tok(U)
    second = provider.send(Request((S, U, *_step(calls))))
    read = tok(S) + tok(U) if reads_user_message else tok(S)
    assert second.cache.prefix_tokens == tok(S) + tok(U)
    assert (second.cached_tokens, second.cache.cache_write_tokens) == (read, second.true_tokens - read)
