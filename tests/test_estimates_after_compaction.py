"""What a request reports after its strategy compacted inside `request()`, and with automatic compaction off.

`Request.estimate_tokens` is the strategy's own belief of the size of the messages it sends, at the moment it
sends them: after a compaction that is its estimate of the compacted context (by its own estimator), or None
when it holds none; never the count it decided on before compacting. `Request.threshold` is the count at which
it would compact: None when no count ever triggers a compaction (the `auto` / `enabled` switch off), so that
no request can count as a missed trigger. Each expected value is worked out from the strategy's documented
estimator (docs/specs), not read from the strategy.
"""

from __future__ import annotations

import json
import math

import pytest

from compaction_bench.metrics.accuracy import estimate_error
from compaction_bench.replay import replay
from compaction_bench.scenarios.synthetic import generate
from compaction_bench.strategies.gemini_cli import ACK
from compaction_bench.strategies.pi_session_tree import COMPACTION_SUMMARY_PREFIX
from compaction_bench.transcript import Item, Transcript
from tests.pi_builders import RecordingSummarizer, Session, small_profile
from tests.test_gemini_cli import log_reads


def turns(result):
    return [r for r in result.requests if r.kind == "turn"]


def request_after(result, compaction):
    """The request that first sent the context a compaction left."""
    return result.requests[compaction.next_request]


# ----------------------------------------------------------------------------- gemini-cli (§10.1, §10.2)
def _gemini_units(message) -> float:
    """§10.2 by hand for an ASCII-only wire message of a Gemini content: a text part len/4; a function call
    `JSON.stringify({functionCall: {name, args, id}})`/4; a function response len(name)/4 +
    `JSON.stringify({output: text})`/4."""
    assert message.content.isascii()
    if message.role == "tool":
        return len(message.name or "") / 4 + len(json.dumps({"output": message.content}, separators=(",", ":"))) / 4
    units = len(message.content) / 4 if message.content else 0.0
    for call in message.tool_calls:
        part = {"functionCall": {"name": call.name, "args": json.loads(call.arguments), "id": call.id}}
        units += len(json.dumps(part, separators=(",", ":"))) / 4
    return units


def test_gemini_request_after_compression_carries_the_estimate_of_the_new_history():
    # 0.5 × 64,000 = 32,000: the recorded prompt count of 32,000 compresses before step 3 (§2.2). Upstream then
    # starts a new chat whose `lastPromptTokenCount` is the §10.2 estimate of its history (§6, §10.1): the
    # summary, the acknowledgement and the kept tail, without the pending user message.
    s = Session()
    for n in range(8):
        s.user(f"request {n}: please handle item {n}. " + "w " * 1_000)
        s.assistant(f"answer {n} " + "v " * 1_000, total=[10_000, 31_999, 32_000][n] if n < 3 else 1_000)
    result = replay(s.transcript(), "gemini-cli", profile="64k", usage="recorded")
    (compaction,) = [c for c in result.compactions if c.trigger == "threshold"]
    assert compaction.estimate_tokens == 32_000  # what the check read (unchanged)
    sent = request_after(result, compaction)
    assert sent.messages[0].content == compaction.summary and sent.messages[1].content == ACK
    history, pending = sent.messages[:-1], sent.messages[-1]
    assert pending.role == "user" and pending.content.startswith("request 3")
    expected = math.floor(sum(_gemini_units(m) for m in history))
    assert sent.estimate_tokens == expected
    assert expected < 32_000
    # the check runs once per request (§2.1) and fired: no count compacts this request again
    assert sent.threshold is None
    assert all(r.threshold == 32_000 for r in turns(result) if r is not sent)


def test_gemini_request_after_compression_is_no_missed_trigger_when_the_context_stays_over():
    # A system prompt of ~30,000 tokens, which the history's estimate leaves out (§6 "Bias"): the compressed
    # request is still over 32,000 by the true count while Gemini's new count (the history's estimate) is
    # under it. It compressed on this request and checks once (§2.1): no trigger was missed.
    s = Session()
    system = Item(id="sys", kind="system", text="rule " * 31_000)
    for n in range(6):
        s.user(f"request {n}: please handle item {n}. " + "w " * 1_000)
        s.assistant(f"answer {n} " + "v " * 1_000, total=32_000 if n == 2 else 31_000)
    transcript = Transcript(id="big-system", items=(system, *s.items))
    result = replay(transcript, "gemini-cli", profile="64k", usage="recorded")
    # (once the replay leaves the recording, the counts are the simulated ones, still over: it compresses again)
    compactions = [c for c in result.compactions if c.trigger == "threshold"]
    assert compactions[0].step == 3
    sent = request_after(result, compactions[0])
    assert sent.true_tokens >= 32_000 > sent.estimate_tokens
    assert sent.estimate_tokens == math.floor(sum(_gemini_units(m) for m in sent.messages[1:-1]))  # no system, no pending
    assert sent.threshold is None and not estimate_error(sent).missed_trigger


def test_gemini_request_after_masking_carries_the_estimate_of_the_masked_history():
    # Masking (§8) writes the history back with `setHistory`, which sets the count to its estimate (§10.1).
    # Before step 5 r1 and r0 are masked (tests/test_gemini_cli.py works the window out); r4 is pending.
    result = replay(log_reads().transcript(), "gemini-cli", profile="1m", options={"token_limit": 1_048_576})
    masking = [c for c in result.compactions if c.trigger == "masking"]
    assert masking[0].step == 5
    sent = request_after(result, masking[0])
    history = sent.messages[:-1]
    assert sent.messages[-1].tool_call_id == "r4" and history[-1].tool_calls[0].id == "r4"
    assert sent.estimate_tokens == math.floor(sum(_gemini_units(m) for m in history))


# ----------------------------------------------------------------------------- openhands (§4.7)
def test_openhands_request_after_condensation_carries_the_count_of_the_condensed_view():
    # max_size 8: the view of 9+ events condenses (EVENTS) before the request. The SDK counts a view with the
    # model's tokenizer (`get_total_token_count`, §4.7), which the replay's provider stands for: the request
    # after the condensation carries the count of the condensed view it sends, its true count.
    s = Session()
    s.user("Refactor the billing module; keep the public API unchanged.")
    for k in range(8):
        s.assistant(f"step {k}", calls=[(f"c{k}", "execute_bash", {"command": f"run {k}"})])
        s.result(f"c{k}", f"result {k} " + "r" * 400, name="execute_bash")
    s.assistant("done")
    result = replay(s.transcript(), "openhands", profile="64k", options={"max_size": 8, "keep_first": 2})
    condensations = [c for c in result.compactions if c.trigger == "condensation"]
    assert condensations
    for compaction in condensations:
        sent = request_after(result, compaction)
        assert sent.estimate_tokens == sent.true_tokens < compaction.estimate_tokens
    assert all(r.estimate_tokens == r.true_tokens for r in turns(result))


# ----------------------------------------------------------------------------- hybrid (evaluation.md §2)
def test_hybrid_request_after_summary_carries_the_count_of_the_summarized_context():
    # N + M = 2 + 1 steps: the deferred summary fires with room left (`steps`). Hybrid counts its context with
    # the provider's tokenizer, as `truncate` does: the request after the summary carries its true count.
    s = Session()
    s.user("Port the CLI to click; keep the --verbose flag.")
    for k in range(6):
        s.assistant(f"step {k}", calls=[(f"c{k}", "bash", {"cmd": f"run {k}"})])
        s.result(f"c{k}", f"out {k}\n" + "log line\n" * 60, name="bash")
    s.assistant("done")
    result = replay(s.transcript(), "hybrid", profile="64k", options={"summarize_steps": 2, "keep_last": 1})
    summaries = [c for c in result.compactions if c.trigger == "steps"]
    assert summaries
    for compaction in summaries:
        sent = request_after(result, compaction)
        assert sent.messages[0].content == compaction.summary or sent.messages[1].content == compaction.summary
        assert sent.estimate_tokens == sent.true_tokens < compaction.estimate_tokens
    assert all(r.estimate_tokens == r.true_tokens for r in turns(result))


# ----------------------------------------------------------------------------- pi (§2.3, §2.4)
PI_OPTS = {"reserve_tokens": 2000, "keep_recent_tokens": 30}


@pytest.mark.parametrize("strategy", ["pi", "pi-2026-03"])
def test_pi_holds_no_count_of_the_compacted_context_until_an_assistant_answers_it(strategy):
    # Window 10,000 - reserve 2,000 = 8,000. The assistant's recorded 9,000 crosses it: compaction after the
    # run. Its usage, the size of the context before the compaction, is the last one the compacted context
    # holds, so Pi has no count of that context (`getContextUsage` returns null, the staleness guard refuses
    # it, §2.3, §2.4): None, not 9,000 + 2. Once an assistant has answered it: its usage + chars/4 after it.
    s = Session()
    s.user("please fix the parser")
    s.assistant("a" * 200, total=9000)
    s.user("thanks")
    s.assistant("b", total=300)
    s.user("abcdefgh")  # 8 chars: 2 tokens after the usage of 300
    s.assistant("c", total=400)
    result = replay(s.transcript(), strategy, profile=small_profile(10_000), usage="recorded-always", options=PI_OPTS,
                    summarizer=RecordingSummarizer())
    (compaction,) = result.compactions
    first, second, third = turns(result)
    assert first.estimate_tokens == math.ceil(len("please fix the parser") / 4)
    assert request_after(result, compaction) is second
    assert second.messages[0].content.startswith(COMPACTION_SUMMARY_PREFIX) and "a" * 200 in [m.content for m in second.messages]
    assert second.estimate_tokens is None
    assert third.estimate_tokens == 300 + 2
    # strict `> 8,000` (§2.2), on each request a pre-prompt check preceded; the first prompt had no assistant to check
    assert (first.threshold, second.threshold, third.threshold) == (None, 8001, 8001)


def test_pi_2025_12_counts_the_running_loop_until_the_compacted_context_is_sent():
    # 83a6c269: the compaction after the tool call's assistant (9,000 > 8,000) leaves the running loop on its
    # uncompacted messages: the request with the tool result extends the context that 9,000 counted (9,000 +
    # 40/4). The run ends at "done" (600, no compaction); the next prompt sends the compacted context, which
    # no assistant has answered yet (the run's usages all counted the context before it): None. Then usage +
    # chars/4 again.
    s = Session()
    s.user("u" * 400)
    s.assistant("x", total=500)
    s.user("please go on")
    s.assistant(calls=[("c1", "read", {"path": "a"})], total=9000)
    s.result("c1", "r" * 40)
    s.assistant("done", total=600)
    s.user("thanks")
    s.assistant("y", total=700)
    s.user("abcdefgh")
    s.assistant("z", total=800)
    result = replay(s.transcript(), "pi-2025-12", profile=small_profile(10_000), usage="recorded-always", options=PI_OPTS,
                    summarizer=RecordingSummarizer())
    (compaction,) = result.compactions
    requests = turns(result)
    loop = requests[2]
    assert loop.messages[-1].tool_call_id == "c1" and not loop.messages[0].content.startswith(COMPACTION_SUMMARY_PREFIX)
    assert loop.estimate_tokens == 9000 + 10
    sent = request_after(result, compaction)
    assert sent is requests[3] and sent.messages[0].content.startswith(COMPACTION_SUMMARY_PREFIX)
    assert [m.content for m in sent.messages][-2:] == ["done", "thanks"]  # the run's last assistant is kept
    assert sent.estimate_tokens is None
    assert requests[4].estimate_tokens == 700 + 2


# ----------------------------------------------------------------------------- automatic compaction off
@pytest.fixture(scope="module")
def short_turns():
    return generate("short-turns", seed=0, target_tokens=80_000).transcript


@pytest.mark.parametrize(
    ("strategy", "off", "on_threshold"),
    [
        ("opencode-v1", {"auto": False}, 32_000),  # usable window: 64,000 - min(32,000, 32,000)
        # compaction.ts@031a4a9c L564-569: 64,000 - max(min(32,000, 32,000), 20,000); no tool definitions by default
        ("opencode-v2", {"auto": False}, 64_000 - 32_000),
        ("pi", {"enabled": False}, 64_000 - 16_384 + 1),  # strict `>` (§2.2): the smallest count that compacts
        ("pi-2026-03", {"enabled": False}, 64_000 - 16_384 + 1),
        ("pi-2025-12", {"enabled": False}, 64_000 - 16_384 + 1),
    ],
)
def test_no_threshold_without_automatic_compaction(short_turns, strategy, off, on_threshold):
    on = replay(short_turns, strategy, profile="64k")
    if strategy == "opencode-v2":
        # the request built from a new checkpoint is sent unchecked (compaction.ts@031a4a9c L558-560): no threshold
        after = {c.next_request for c in on.compactions}
        assert after and all(r.threshold is None for r in turns(on) if r.index in after)
        assert {r.threshold for r in turns(on) if r.index not in after} == {on_threshold}
    elif strategy.startswith("pi"):
        # Pi checks before a prompt, not between a run's tool calls (pi.md §2.3): the threshold is on the first request
        # of each user turn after the first (which has no assistant to check), None on the others
        requests = turns(on)
        firsts = {r.index for r, before in zip(requests[1:], requests[:-1], strict=True) if r.turn != before.turn}
        assert firsts and {r.threshold for r in requests if r.index in firsts} == {on_threshold}
        assert all(r.threshold is None for r in requests if r.index not in firsts)
    else:
        assert {r.threshold for r in turns(on)} == {on_threshold}
    result = replay(short_turns, strategy, profile="64k", options=off)
    assert max(r.true_tokens for r in turns(result)) >= (on_threshold or 32_000)  # the count passes the threshold it had
    assert all(r.threshold is None for r in turns(result))
    assert all(c.threshold is None for c in result.compactions)
    assert not any(estimate_error(r).missed_trigger for r in result.requests)
    if strategy == "opencode-v2":
        # a provider overflow compacts only with `auto` on (runner/llm.ts@008d5715 L256): none here
        assert result.compactions == [] and any(r.overflow for r in turns(result))
