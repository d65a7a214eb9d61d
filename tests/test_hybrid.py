"""`hybrid` (docs/specs/evaluation.md §2): masking while the context grows, a summary only when masking is
not enough (the masked context crosses the threshold, or N + M steps since the last summary)."""

from __future__ import annotations

import pytest

from compaction_bench.metrics.integrity import check
from compaction_bench.replay import replay
from compaction_bench.strategy import OptionError
from tests.pi_builders import Session, small_profile
from tests.test_gemini_cli import strategy_pair_errors


def _steps(n: int, chars: int) -> Session:
    s = Session()
    s.user("Port the CLI to click; keep the --verbose flag.")
    for k in range(n):
        s.assistant(f"step {k}", calls=[(f"c{k}", "bash", {"cmd": f"run {k}"})])
        s.result(f"c{k}", f"out {k}\n" + "log line\n" * (chars // 9), name="bash")
    s.assistant("done")
    return s


def test_masking_only_while_the_masked_context_fits():
    # 20 steps of small outputs in a 64k window: outputs older than the last 10 steps are masked, no summary.
    result = replay(_steps(20, 400).transcript(), "hybrid", profile="64k")
    assert {c.trigger for c in result.compactions} == {"masking"}
    assert sum(1 for r in result.requests if r.kind == "summary") == 0
    tools = {m.tool_call_id: m.content for m in result.final.messages if m.role == "tool"}
    assert tools["c0"].startswith("[Old tool output omitted:") and tools["c10"].startswith("out 10")
    assert strategy_pair_errors(result) == 0


def test_summary_when_masking_is_not_enough():
    # Large recent outputs (inside the unmasked M = 10 steps) push the masked context over 0.9 × 12,000.
    result = replay(_steps(16, 6_000).transcript(), "hybrid", profile=small_profile(12_000))
    summaries = [c for c in result.compactions if c.trigger == "threshold"]
    assert summaries
    first = summaries[0]
    assert first.estimate_tokens > 10_800
    # The newest 10 steps stay verbatim after the summary, which comes first.
    assert first.after[0].role == "user" and first.after[0].content == first.summary
    kept_calls = [c.id for m in first.after for c in m.tool_calls]
    assert len(kept_calls) == 10 and kept_calls[-1] == f"c{first.step - 1}"
    assert strategy_pair_errors(result) == 0


def test_deferred_summary_after_n_plus_m_steps():
    # N + M = 43 + 10 = 53 agent steps since the start: the summary fires before step 53 even with room left.
    result = replay(_steps(60, 100).transcript(), "hybrid", profile="1m")
    summaries = [c for c in result.compactions if c.trigger == "steps"]
    assert [c.step for c in summaries] == [53]
    assert strategy_pair_errors(result) == 0


def _tool_steps(n: int, text_only_after: int | None = None) -> Session:
    s = Session()
    s.user("task")
    for k in range(n):
        s.assistant(f"step {k}", calls=[(f"c{k}", "read", {"p": k})])
        s.result(f"c{k}", f"OUTPUT-{k}", name="read")
        if k == text_only_after:
            s.assistant("thinking aloud, no tool")  # a step that produced no output
            s.user("go on")
    s.assistant("done")
    return s


@pytest.mark.parametrize("strategy", ["observation-masking", "hybrid"])
def test_masking_keeps_the_outputs_of_exactly_the_newest_m_steps_that_produced_one(strategy):
    """SWE-agent's `LastNObservations(n)` keeps its last n observations, one a step (evaluation.md §2). With M = 2 the
    last request kept OUTPUT-3, 4 and 5, the M + 1 newest steps' (the answering step counted as one of them)."""
    options = {"keep_last": 2} | ({"summarize_steps": 100} if strategy == "hybrid" else {})
    for session, kept in ((_tool_steps(6), ["OUTPUT-4", "OUTPUT-5"]), (_tool_steps(6, text_only_after=4), ["OUTPUT-4", "OUTPUT-5"])):
        result = replay(session.transcript(), strategy, profile=small_profile(64_000), options=options)
        last = [r for r in result.requests if r.kind == "turn"][-1]
        assert [m.content for m in last.messages if m.role == "tool" and not m.content.startswith("[Old")] == kept
    with pytest.raises(OptionError, match=rf"option {strategy}.keep_last=0: out of range; expected a value ≥ 1"):
        replay(_tool_steps(2).transcript(), strategy, profile="64k", options={"keep_last": 0})


def test_after_the_first_summary_each_comes_n_steps_later_and_covers_n_steps():
    """The paper's `SummarizeEveryNTurns` leaves the M turns a summary keeps unprocessed, so the next summary comes N
    turns later and covers N (evaluation.md §2: "once N + M turns have accumulated, summarizes N"). With N = 3, M = 2
    the summaries came at steps 5, 10, 15, 20 and covered 15 items each after the first."""
    result = replay(_tool_steps(20).transcript(), "hybrid", profile="1m", options={"keep_last": 2, "summarize_steps": 3})
    summaries = [c for c in result.compactions if c.trigger == "steps"]
    assert [c.step for c in summaries] == [5, 8, 11, 14, 17, 20]
    # each covers 3 steps of 3 items (the response's text, its call, the result); the first also the user's message
    assert [len(c.summarized_ids) for c in summaries] == [10, 9, 9, 9, 9, 9]


def test_a_summary_after_an_unanswered_call_keeps_the_newest_m_steps_verbatim():
    """Session 42's audit: a call that never got a result (interrupted) made every later step one pair-safe unit, so
    the step-53 summary took all 159 items and kept none. By the rule the summary keeps the newest M = 10 steps from a
    pair-safe boundary: the calls and results of the 10 responses before the summary's step."""
    s = Session()
    s.user("Port the CLI to click; keep the --verbose flag.")
    s.assistant("try", calls=[("c_abort", "bash", {"cmd": "sleep"})])  # never answered
    for k in range(60):
        s.assistant(f"step {k}", calls=[(f"c{k}", "bash", {"cmd": f"run {k}"})])
        s.result(f"c{k}", f"out {k}\n" + "log line\n" * 11, name="bash")
    s.assistant("done")
    result = replay(s.transcript(), "hybrid", profile="1m")
    (summary,) = [c for c in result.compactions if c.trigger == "steps"]
    newest = [i.call_id for i in s.items if i.kind == "tool_call" and i.response is not None and i.response < summary.step][-10:]
    kept_calls = [c.id for m in summary.after for c in m.tool_calls]
    assert summary.step == 53 and kept_calls == newest == [f"c{k}" for k in range(42, 52)]
    assert [m.tool_call_id for m in summary.after if m.role == "tool"] == newest
    assert s.items[2].call_id == "c_abort" and s.items[2].id in summary.summarized_ids


def test_hybrid_counts_a_masked_outputs_lines_as_swe_agent_does():
    """`len(output.splitlines())`, SWE-agent's `_get_content_stats`
    (sweagent/agent/history_processors.py@3ea751c087f32b16e039a2233dd6eefecef325d5 L23-28): "a\\nb\\n" is 2 lines,
    "" is 0 (it said 3 and 1)."""
    from tests.test_baselines_audit import LINE_COUNTS, _masked_outputs

    masked = _masked_outputs("hybrid", {"summarize_steps": 100})
    assert masked == {text: f"[Old tool output omitted: {lines} lines]" for text, lines in LINE_COUNTS.items()}


def test_a_result_that_arrives_after_a_summary_took_its_call_is_dropped_with_a_record():
    """A call answered only four steps later (the recording's own break): a summary with M = 2 took the call before its
    result came. Sent, the result would answer no call (metrics/integrity.py, orphan_result); it is removed by a
    recorded compaction."""
    s = Session()
    s.user("task")
    s.assistant("start", calls=[("c_late", "bash", {})])
    late = None
    for k in range(8):
        s.assistant(f"step {k}", calls=[(f"c{k}", "read", {"p": k})])
        s.result(f"c{k}", f"OUTPUT-{k}", name="read")
        if k == 4:
            late = s.result("c_late", "late output", name="bash")
    s.assistant("done")
    result = replay(s.transcript(), "hybrid", profile="1m", options={"keep_last": 2, "summarize_steps": 1})
    (removal,) = [c for c in result.compactions if c.trigger == "orphaned-results"]
    assert late is not None and removal.dropped_ids == (late.id,)
    assert not any(v.kind == "orphan_result" for r in result.requests for vs in check(r.messages).values() for v in vs)
