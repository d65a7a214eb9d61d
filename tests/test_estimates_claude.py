"""What Claude Code's and Anthropic's server-side strategies report of their counts: each request's
`estimate_tokens` is the count the strategy holds of the messages it sends (docs/specs/claude-code.md §2.2,
§8.2; docs/specs/anthropic-context-management.md §2, §4), and `threshold` the count at which it would compact
them. Each expected value is worked out from the spec's rule (or from the `none` replay's true counts, for the
server's exact count of the unedited prompt), not read from the strategy.
"""

from __future__ import annotations

import math

from compaction_bench.metrics.accuracy import estimate_error, premature
from compaction_bench.replay import replay
from compaction_bench.strategies.claude_code import SUMMARY_PREFIX, SUMMARY_PREFIX_LATER
from tests.pi_builders import Session
from tests.test_claude_code import _session

OPUS = {"model": "claude-opus-4-5-20251101", "max_output_tokens_env": 64_000}
PLACEHOLDER = "[Old tool result content cleared]"


def turns(result):
    return [r for r in result.requests if r.kind == "turn"]


# ----------------------------------------------------------------------------- claude-code (§2.2, §2.3)
def test_base_request_after_auto_compaction_carries_the_count_of_the_compacted_context():
    # T = 200,000 − 64,000 − 13,000 = 123,000 (§2.1). The check before step 3 reads 123,000 and compacts
    # (§2.3 steps 3-5); the request then sends [summary, attachments]. BASE's count of those messages (§2.2
    # `AK`): no assistant message with usage since the boundary, so 0 — not the 123,000 it decided on. That
    # request goes out unchecked (§2.3 step 5): no threshold. The next check reads that request's own usage.
    result = replay(_session([100_000, 122_999, 123_000, 50_000]).transcript(), "claude-code", profile="claude-opus",
                    usage="recorded", options=OPUS)
    (compaction,) = result.compactions
    assert (compaction.trigger, compaction.step, compaction.estimate_tokens, compaction.threshold) == ("auto", 3, 123_000, 123_000)
    requests = turns(result)
    sent = requests[3]
    assert result.requests[compaction.next_request] is sent
    assert sent.messages[0].content.startswith(SUMMARY_PREFIX)
    assert not any(m.role == "assistant" for m in sent.messages)  # nothing for `AK` to read
    assert sent.meta["count"] == 123_000  # what the check decided on
    assert sent.estimate_tokens == 0
    assert sent.threshold is None and not estimate_error(sent).missed_trigger
    # §2.2 step 3 on the response to the compacted request (simulated: the replay left the recording)
    assert requests[4].estimate_tokens == sent.true_tokens + sent.output_tokens
    assert requests[4].threshold == 123_000


def test_later_request_after_auto_compaction_carries_the_chars4_estimate_of_the_new_context():
    # 2.1.112: T = 200,000 − min(64,000, 20,000) − 13,000 = 167,000 (§8.1). Before step 2 the count is 170,000
    # plus the tail (§8.2) and compacts. The compacted request holds the summary message alone (no file read,
    # 2.1.112 restores no todo list): `vJ` finds no response with usage and estimates every message, text
    # `round(len/4)` (half up) — the summary message's.
    s = _session([100_000, 170_000])
    result = replay(s.transcript(), "claude-code-2.1", profile="claude-opus", usage="recorded", options=OPUS)
    (compaction,) = result.compactions
    assert compaction.step == 2 and compaction.estimate_tokens >= 170_000 and compaction.threshold == 167_000
    sent = result.requests[compaction.next_request]
    assert sent is turns(result)[2]
    (summary,) = sent.messages
    assert summary.role == "user" and summary.content.startswith(SUMMARY_PREFIX_LATER) and summary.content.isascii()
    assert sent.estimate_tokens == math.floor(len(summary.content) / 4 + 0.5)
    assert sent.meta["count"] == compaction.estimate_tokens  # the decision's count, kept apart
    assert sent.threshold is None
    assert abs(sent.estimate_tokens - sent.true_tokens) / sent.true_tokens < 0.5  # was 170,000 against a few hundred


def test_failed_compaction_reports_the_count_it_sent_on():
    # §2.3 step 6: a failed compaction sends the original messages; the count the check read is the count of
    # those messages, and the threshold stays (the next request checks again). A 100-token window of its own
    # for the summarizer makes every summary request overflow.
    from compaction_bench.llm import LLMClient
    from compaction_bench.profiles import get_profile

    class Tiny(LLMClient):
        @property
        def limits(self):
            from dataclasses import replace

            return replace(get_profile("claude-opus"), context_window=100, max_output=100)

    result = replay(_session([100_000, 123_500, 124_000]).transcript(), "claude-code", profile="claude-opus", usage="recorded",
                    options=OPUS, summarizer=Tiny())
    assert result.compactions == []
    requests = turns(result)
    assert [r.estimate_tokens for r in requests[2:4]] == [123_500, 124_000]
    assert [r.threshold for r in requests] == [123_000] * len(requests)


# ----------------------------------------------------------------------------- anthropic-clear-tool-uses (§2)
def _tools(steps: int, chars: int = 4_000) -> Session:
    s = Session()
    s.user("Investigate the flaky test in tests/test_io.py; do not change the CI config.")
    for k in range(steps):
        s.assistant(f"step {k}", calls=[(f"c{k}", "Bash", {"command": f"cmd {k}"})])
        s.result(f"c{k}", f"output {k}\n" + f"line {k} of the log\n" * (chars // 20), name="Bash")
    s.assistant("done")
    return s


def test_clear_tool_uses_reports_the_servers_count_only_of_the_prompt_it_counted():
    # The server counts the unedited prompt exactly (the client's whole history, which `none` sends: its true
    # count) and clears when that exceeds the trigger (§2.1). A request whose prompt was edited was not the
    # prompt counted: no estimate. A request sent unedited: the server's count is its true count.
    t = _tools(16).transcript()
    trigger = 8_000  # ~1,000 tokens a result: the three kept and the newest stay under it once cleared
    result = replay(t, "anthropic-clear-tool-uses", profile="claude-opus", options={"trigger_value": trigger})
    unedited = turns(replay(t, "none", profile="claude-opus"))
    requests = turns(result)
    assert len(requests) == len(unedited)
    edited = [r for r in requests if "applied_edits" in r.meta]
    assert edited and len(edited) < len(requests)
    for request, full in zip(requests, unedited, strict=True):
        assert request.threshold == trigger + 1  # "exceeds" is `>`: the smallest count that clears
        if "applied_edits" in request.meta:
            assert full.true_tokens > trigger and request.true_tokens < full.true_tokens
            assert request.estimate_tokens is None
        else:
            assert request.estimate_tokens == full.true_tokens == request.true_tokens
        assert not estimate_error(request).missed_trigger
    # The first clearing's context before it is the unedited prompt the server decided on: its exact count and
    # the trigger, and it was not premature (that count exceeded it). Every later clearing starts from the
    # previous edited prompt, under the trigger here, on which nothing was decided: no count, no threshold,
    # so it is not judged premature on a prompt the server never compared with the trigger.
    first, *later = result.compactions
    step = result.requests[first.next_request].step
    decided = next(r for r in unedited if r.step == step)
    assert first.estimate_tokens == first.tokens_before == decided.true_tokens > trigger
    assert first.threshold == trigger + 1 and not premature(first)
    assert later and all(c.tokens_before < trigger for c in later)
    assert all(c.estimate_tokens is None and c.threshold is None and not premature(c) for c in later)
    assert all(any(m.content == PLACEHOLDER for m in c.before) for c in later)  # the previous edit


# ----------------------------------------------------------------------------- anthropic-compact (§4.2, §4.4)
def test_compact_reports_the_servers_count_of_the_prompt_it_decided_on():
    # The server compares its exact count of the prompt with the trigger before sampling (§4.2 step 1). In the
    # call that compacts, the model then reads the compacted prompt, which was not that prompt: no estimate.
    # After a paused compaction (§4.4) the request is the client's next call, the block and the newest messages
    # it keeps, which the server counts and decides on: its exact count. Every other request is sent as counted.
    t = _tools(40, chars=8_000).transcript()
    for pause in (False, True):
        result = replay(t, "anthropic-compact", profile="claude-opus", options={"trigger": 50_000, "pause_after_compaction": pause})
        assert result.compactions
        after = {c.next_request for c in result.compactions}
        for compaction in result.compactions:
            assert compaction.estimate_tokens == compaction.tokens_before >= 50_000 and not premature(compaction)
        for request in turns(result):
            assert request.threshold == 50_000 and not estimate_error(request).missed_trigger  # "reaches" 50,000: `>=`
            if request.index in after and not pause:
                assert request.messages[0].role == "compaction" and request.estimate_tokens is None
            else:
                assert request.estimate_tokens == request.true_tokens


def test_with_auto_compact_off_no_request_reports_a_threshold():
    # §2.3: the check runs only when auto-compact is on (`auto_compact=false` is the user's setting, DISABLE_COMPACT
    # the environment's). With it off nothing is checked, so nothing can be a missed trigger, though the counts
    # pass 123,000 (the threshold the same session compacts at with it on).
    for off in ({"auto_compact": False}, {"disable_compact": True}):
        result = replay(_session([100_000, 122_999, 123_000, 150_000]).transcript(), "claude-code", profile="claude-opus",
                        usage="recorded", options={**OPUS, **off})
        assert not result.compactions
        assert all(r.threshold is None for r in turns(result))
        assert not any(estimate_error(r).missed_trigger for r in result.requests)
    on = replay(_session([100_000, 122_999, 123_000, 150_000]).transcript(), "claude-code", profile="claude-opus",
                usage="recorded", options=OPUS)
    assert on.compactions and any(r.threshold == 123_000 for r in turns(on))


def test_compact_fires_when_the_input_reaches_the_trigger_exactly():
    """The compaction page: the API summarises "when it reaches the configured token threshold" ("Detects when input
    tokens reach your specified trigger threshold"), so a prompt of exactly `trigger` tokens compacts (§7 leaves the
    operator open; before session 42 it took `>` and compacted one request later)."""
    t = _tools(40, chars=8_000).transcript()
    uncompacted = turns(replay(t, "anthropic-compact", profile="claude-opus", options={"trigger": 10_000_000}))
    first = next(r for r in uncompacted if r.true_tokens >= 50_000)
    assert all(r.true_tokens < first.true_tokens for r in uncompacted[: uncompacted.index(first)])
    result = replay(t, "anthropic-compact", profile="claude-opus", options={"trigger": first.true_tokens})
    assert result.compactions[0].tokens_before == first.true_tokens
    assert result.compactions[0].threshold == first.true_tokens and not premature(result.compactions[0])
