"""The token-accuracy columns checked against hand counts: the strategy's own rule worked out from its spec,
the true count worked out with tiktoken directly (the 64k profile's o200k_base, plus the provider's 4 tokens of
framing per message), never read from the strategy or the provider.

What is settled here: the estimate a request carries is the one its strategy holds for that same request
(Pi: last usage + chars/4 of what followed it, docs/specs/pi.md §2.3; Claude Code 2.0.57: the last usage alone,
docs/specs/claude-code.md §2.2), compared with the true count of exactly the messages sent; the final context,
which is probed and never sent, is left out of the error; a strategy that holds no estimate is left out of the
error rather than counted as exact.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from compaction_bench.metrics.accuracy import estimate_error
from compaction_bench.metrics.aggregate import combine, summarize
from compaction_bench.metrics.measure import measure_cell
from compaction_bench.provider import MESSAGE_OVERHEAD
from compaction_bench.replay import replay
from compaction_bench.tokens import get_encoding
from tests.pi_builders import Session

#: Greek prose: about one o200k token per two or three characters, so chars/4 under-counts it.
FIRST = "Διόρθωσε τον αναλυτή στο src/parse.py· τα τεστ αποτυγχάνουν σε εμφωλευμένες λίστες."
REPLY = "Θα διαβάσω πρώτα τον αναλυτή και μετά τα τεστ."
SECOND = "Ευχαριστώ. Τώρα πρόσθεσε ένα τεστ για κενές λίστες και για λίστες μέσα σε λεξικά."


def _session() -> Session:
    s = Session()
    s.user(FIRST)
    s.assistant(REPLY)
    s.user(SECOND)
    s.assistant("Έγινε.")
    return s


def _true(text: str) -> int:
    """The provider's count of one message holding `text`, worked out by hand."""
    return MESSAGE_OVERHEAD + len(get_encoding("o200k_base").encode(text))


def _turns(result):
    return [r for r in result.requests if r.kind == "turn"]


def test_hand_counts_are_the_true_counts_of_the_messages_sent():
    # The true count the estimate is compared with is the profile tokenizer's count of the request's own
    # messages: the first request holds FIRST; the second FIRST, REPLY and SECOND.
    result = replay(_session().transcript(), "none", profile="64k")
    first, second = _turns(result)
    assert first.true_tokens == _true(FIRST)
    assert second.true_tokens == _true(FIRST) + _true(REPLY) + _true(SECOND)
    assert first.estimate_tokens is None and estimate_error(first).ape is None


@pytest.mark.parametrize("strategy", ["pi", "pi-2026-03", "pi-2025-12"])
def test_pi_error_is_the_chars4_tail_against_its_true_count(strategy):
    # Pi §2.3/§2.5: no usage yet, every message by ceil(UTF-16 units / 4); then the last assistant's usage
    # (simulated: the true count of the request it answered plus its own output) plus ceil(len / 4) of the
    # messages after it. The usage part is exact, so the error is the tail's: ceil(len(SECOND)/4) − true(SECOND).
    # The second request is one the check before the second prompt decided on (a threshold: it has an error).
    first, second = _turns(replay(_session().transcript(), strategy, profile="64k"))
    assert first.estimate_tokens == math.ceil(len(FIRST) / 4)
    assert second.estimate_tokens == _true(FIRST) + _true(REPLY) + math.ceil(len(SECOND) / 4)
    assert second.threshold is not None
    error = estimate_error(second)
    assert error.signed == math.ceil(len(SECOND) / 4) - _true(SECOND) < 0  # chars/4 under-counts Greek
    assert error.ape == pytest.approx(abs(error.signed) / second.true_tokens)


def test_claude_code_base_error_is_the_whole_tail_it_does_not_estimate():
    # claude-code.md §2.2: `AK` is the last response's usage (input + cache + output) and nothing for what came
    # after it, "one step stale": the second request's error is minus the whole of SECOND's true count. Before
    # any response there is no usage: 0, a 100% error that is what it decided with.
    first, second = _turns(replay(_session().transcript(), "claude-code", profile="64k"))
    assert first.estimate_tokens == 0 and estimate_error(first).ape == 1.0
    assert second.estimate_tokens == _true(FIRST) + _true(REPLY)
    assert estimate_error(second).signed == -_true(SECOND)


@pytest.mark.parametrize("strategy", ["pi", "claude-code", "claude-code-2.1", "codex-local", "gemini-cli"])
def test_the_final_context_is_no_estimated_request(strategy):
    # The final context is probed, never sent. Claude Code, Pi and Codex hold the last response's usage of
    # it with nothing after it: its true count, an exact row the strategy never decided on. Gemini CLI holds
    # the prompt count of that response's request, which leaves the response out. Its row has no error, and
    # the cell's pooled error is over the sent requests alone.
    result = replay(_session().transcript(), strategy, profile="64k")
    final = result.requests[-1]
    assert final.kind == "final" and final.estimate_tokens is not None
    error = estimate_error(final)
    assert error.signed is None and error.ape is None and not error.missed_trigger
    rows = pd.DataFrame(measure_cell(result, [], answerer=None).requests).assign(scenario="s", strategy=strategy, profile="64k")
    (summary,) = summarize(rows, pd.DataFrame(), pd.DataFrame()).to_dict("records")
    # the requests decided on an estimate: those with a threshold (`metrics/accuracy.py`)
    sent = [r for r in result.requests if r.kind in ("turn", "summary") and r.estimate_tokens is not None and r.threshold is not None]
    assert summary["estimate_ape_n"] == len(sent)
    assert summary["estimate_ape"] == pytest.approx(sum(abs(r.estimate_tokens - r.true_tokens) / r.true_tokens for r in sent) / len(sent))


def test_final_context_of_a_usage_driven_strategy_is_exact():
    # Why the final row is left out: with nothing after the last response, Pi's count of the final context is
    # that response's usage, its true count to the token (worked out by hand).
    final = replay(_session().transcript(), "pi", profile="64k").requests[-1]
    assert final.estimate_tokens == final.true_tokens == sum(map(_true, (FIRST, REPLY, SECOND, "Έγινε.")))


@pytest.mark.parametrize("strategy", ["none", "observation-masking", "openhands-v0", "aider"])
def test_a_strategy_without_an_estimate_is_left_out_not_exact(strategy):
    # These hold no count of their context (the baselines model no agent; OpenHands V0's condenser counts
    # events; Aider's limit covers the done messages only, aider.md §3): no row has an error, and the pooled
    # error over scenarios is undefined, not 0%.
    result = replay(_session().transcript(), strategy, profile="64k")
    rows = pd.DataFrame(measure_cell(result, [], answerer=None).requests).assign(scenario="s", strategy=strategy, profile="64k")
    assert rows["estimate_ape"].isna().all() and rows["estimate_error"].isna().all()
    summary = summarize(rows, pd.DataFrame(), pd.DataFrame())
    assert summary["estimate_ape_n"].tolist() == [0]
    assert math.isnan(combine(summary, "estimate_ape", "mean"))


def _recorded(total: int) -> Session:
    """The two-turn session with recorded usage totals `total` and `total` + 100 (what the recording's own
    system prompt and tools make them, beyond the replayed messages)."""
    s = Session()
    s.user(FIRST)
    s.assistant(REPLY, total=total)
    s.user(SECOND)
    s.assistant("Έγινε.", total=total + 100)
    return s


def test_an_estimate_built_on_recorded_usage_gets_no_error_and_no_verdict():
    # With `--usage recorded` the recording's usage counts its own system prompt and tool schemas, which the
    # replayed messages lack: here 20,000 tokens of them (the first response's recorded total). Pi's estimate of
    # the second request is that usage + chars/4 of SECOND (pi.md §2.3), 20,000 over the true count on nothing
    # the estimator did; the row is flagged and has no error. The first request was made before any usage:
    # it is not flagged, and its chars/4 estimate is measured as with simulated usage.
    s = _recorded(20_000)
    result = replay(s.transcript(), "pi", profile="64k", usage="recorded")
    first, second = _turns(result)
    assert first.usage_source == "recorded" and second.estimate_tokens == 20_000 + math.ceil(len(SECOND) / 4)
    rows = measure_cell(result, [], answerer=None).requests
    by_index = {row["request"]: row for row in rows}
    assert by_index[first.index]["estimate_on_recorded_usage"] is False
    assert by_index[second.index]["estimate_on_recorded_usage"] is True
    assert by_index[second.index]["estimate_error"] is None and by_index[second.index]["estimate_ape"] is None
    assert by_index[second.index]["missed_trigger"] is False
    # the same session with simulated usage measures the second request's error as the chars/4 tail's
    simulated = {row["request"]: row for row in measure_cell(replay(s.transcript(), "pi", profile="64k"), [], answerer=None).requests}
    assert by_index[first.index]["estimate_error"] == simulated[first.index]["estimate_error"]
    assert simulated[second.index]["estimate_error"] == math.ceil(len(SECOND) / 4) - _true(SECOND)
    assert simulated[second.index]["estimate_on_recorded_usage"] is False


def test_a_compaction_decided_on_recorded_usage_is_not_called_premature():
    # Pi (the 2025-12 rules, which compact a one-turn session) compacts once the last usage is over window −
    # reserve (pi.md §2.1; 64k − 16,384 here). The recording's 50,000 includes a system prompt the replay lacks,
    # so the true count before the compaction is under a hundred tokens: "premature" would blame Pi for the
    # recording's prompt. With simulated usage there is no compaction.
    s = _recorded(50_000)
    result = replay(s.transcript(), "pi-2025-12", profile="64k", usage="recorded")
    assert result.compactions and result.compactions[0].tokens_before < 100
    assert result.compactions[0].estimate_tokens >= 50_000
    (row, *_) = measure_cell(result, [], answerer=None).compactions
    assert row["estimate_on_recorded_usage"] is True and row["premature"] is False and row["estimate_error"] is None
    assert not replay(s.transcript(), "pi-2025-12", profile="64k").compactions
