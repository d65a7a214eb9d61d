"""Claude before 4.5 counts `max_tokens` against its window: a request whose input fits but whose input and
`max_tokens` do not is refused with its own error, and Claude Code's API call retries itself with a lower `max_tokens`
(docs/specs/claude-code.md §13; 2.0.57 `TS2` and `M60`, 2.1.112 `JbK` and `$A7`). The right answers follow from the
rule: limit − input − 1,000, if at least 3,000."""

from __future__ import annotations

import pytest

from compaction_bench.profiles import get_profile
from compaction_bench.provider import overflow_error
from compaction_bench.replay import replay
from compaction_bench.strategies.claude_code import lowered_max_tokens
from tests.pi_builders import Session

SONNET_4 = "anthropic.claude-sonnet-4-20250514-v1:0"  # Bedrock's Claude Sonnet 4: 200,000 tokens, input + max_tokens


def test_anthropic_names_which_limit_a_request_is_over():
    """The input alone over the window is "prompt is too long" with the input's count; the input within it but not
    with `max_tokens` is the other error, with both numbers (the audit: it read "prompt is too long: 205005 tokens"
    for a 185,005-token prompt). A Claude 4.5 model only refuses the input."""
    old, new = get_profile(SONNET_4), get_profile("claude-sonnet")
    both = overflow_error(old, 185_005, 20_000)
    assert both.message == ("input length and `max_tokens` exceed context limit: 185005 + 20000 > 200000, "
                            "decrease input length or `max_tokens` and try again")
    assert overflow_error(old, 205_000, 20_000).message == "prompt is too long: 205000 tokens > 200000 maximum"
    assert overflow_error(new, 250_000, 64_000).message == "prompt is too long: 250000 tokens > 200000 maximum"
    assert both.is_overflow and overflow_error(old, 205_000, 20_000).is_overflow


@pytest.mark.parametrize(
    ("message", "lowered"),
    [
        ("input length and `max_tokens` exceed context limit: 185005 + 20000 > 200000, decrease …", 13_995),
        ("input length and `max_tokens` exceed context limit: 196000 + 32000 > 200000", 3_000),  # the floor itself
        ("input length and `max_tokens` exceed context limit: 196001 + 32000 > 200000", None),  # 2,999 left: gives up
        ("prompt is too long: 205000 tokens > 200000 maximum", None),
    ],
)
def test_the_lowered_max_tokens_is_what_the_limit_leaves_after_a_margin(message, lowered):
    assert lowered_max_tokens(message) == lowered


def _growing_session() -> Session:
    """One user turn of tool calls whose results add about 9,000 tokens each, up to past 200,000."""
    s = Session()
    s.user("Read every log and report what failed.")
    for n in range(26):
        s.assistant(f"reading log {n}", calls=[(f"c{n}", "Bash", {"command": f"cat log{n}"})])
        s.result(f"c{n}", f"log {n}: " + " ".join(f"line{n}-{k} ok" for k in range(3_000)), name="Bash")
    s.assistant("Done.")
    return s


@pytest.mark.parametrize("strategy", ["claude-code", "claude-code-2.1"])
def test_claude_code_retries_a_turn_with_the_max_tokens_the_limit_leaves(strategy):
    """With auto-compact and microcompact off the context grows past 200,000. Each turn request refused because input + max_tokens is
    over the limit is sent again at once with the same messages and max_tokens = 200,000 − input − 1,000, which fits;
    where less than 3,000 would be left, and where the input alone is over, there is no retry."""
    options = {"auto_compact": False, "disable_microcompact": True}
    if strategy == "claude-code-2.1":
        options["blocking_limit_override"] = 10**6  # its own limit refuses such a request before it is sent
    result = replay(_growing_session().transcript(), strategy, profile=SONNET_4, options=options)
    turns = [r for r in result.requests if r.kind == "turn"]
    retried = 0
    for first, then in zip(turns, turns[1:], strict=False):
        if not first.overflow or first.attempt != 0:
            continue
        left = 200_000 - first.true_tokens - 1_000
        if first.error["message"].startswith("input length") and left >= 3_000:
            assert then.step == first.step and then.attempt == 1 and tuple(then.messages) == tuple(first.messages)
            assert then.meta["max_tokens_override"] == left and not then.overflow
            retried += 1
        else:
            assert then.step != first.step  # no retry: the step's call failed
    assert retried >= 2
    assert any(r.overflow and r.error["message"].startswith("prompt is too long") for r in turns)


def test_a_summary_call_is_retried_the_same_way():
    """The summary goes through the same API call: at a 100,000-token window (Sonnet 4 shrunk) a summary asking for
    50,000 tokens over a 55,000-token context is refused for input + max_tokens, sent again with 100,000 − input −
    1,000, and the compaction goes on."""
    result = replay(_growing_session().transcript(), "claude-code", profile=f"{SONNET_4}@100k",
                    options={"summary_max_output": 50_000, "disable_microcompact": True})
    summaries = [r for r in result.requests if r.kind == "summary"]
    first, then = summaries[0], summaries[1]
    assert first.overflow and first.error["message"].startswith(f"input length and `max_tokens` exceed context limit: {first.true_tokens} + 50000")
    assert then.meta["max_tokens_override"] == 100_000 - first.true_tokens - 1_000 and not then.overflow
    assert tuple(then.messages) == tuple(first.messages)
    assert result.compactions and result.compactions[0].summary


def test_a_final_context_the_retry_would_serve_is_no_overflow():
    """The final context is probed, not sent: where Claude Code's call would retry it with a lower `max_tokens` and be
    served, it is no overflow (it was, and `claude-code` read as unable to serve the window, its final probes absent)."""
    s = _growing_session()
    s.items = s.items[: 1 + 3 * 11]  # the user request and 11 tool steps (text, call and result each): about 187,000 tokens, input + 32,000 over
    result = replay(s.transcript(), "claude-code", profile=SONNET_4, options={"auto_compact": False, "disable_microcompact": True})
    final = result.requests[-1]
    assert final.kind == "final" and 200_000 - final.true_tokens - 1_000 >= 3_000 and final.true_tokens + 32_000 > 200_000
    assert not final.overflow
