"""`hybrid` (docs/specs/evaluation.md §2): masking while the context grows, a summary only when masking is
not enough (the masked context crosses the threshold, or N + M steps since the last summary)."""

from __future__ import annotations

from compaction_bench.replay import replay
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
