"""The baselines' defects session 42's audit found (strategies/baselines.py, strategies/history.py), each checked
against an answer known apart from the code: the unit rule applied by hand to a hand-built session, the wire rules
of metrics/integrity.py, the target/trigger arithmetic, and SWE-agent's own line count."""

from __future__ import annotations

import pytest

from compaction_bench import load_transcript
from compaction_bench.metrics.integrity import check
from compaction_bench.replay import replay
from compaction_bench.strategies.baselines import Truncate
from compaction_bench.strategies.history import answer_positions, pair_safe_units
from compaction_bench.strategy import OptionError
from compaction_bench.transcript import Usage
from tests.conftest import CORPORA
from tests.pi_builders import Session, small_profile

CODEX_FILE = CORPORA / "codex-rollout-jsonl/Monotoba__OpenPrintKit/rollout-2025-10-31T19-02-58-c61729d4-da6d-46a4-9a29-ec2c614e5e23.jsonl"


def _unit_ids(session: Session) -> list[list[str]]:
    return [[i.id for i in unit] for unit in pair_safe_units(session.items)]


def _steps_after_an_aborted_call(steps: int, lines: int) -> Session:
    """A task whose first call never gets a result (interrupted), then `steps` ordinary read steps."""
    s = Session()
    s.user("task: fix the bug")
    s.assistant("try", calls=[("c_abort", "bash", {"cmd": "sleep"})])
    for n in range(steps):
        s.assistant(f"step {n}", calls=[(f"c{n}", "read", {"p": n})])
        s.result(f"c{n}", f"line of file content {n}\n" * lines)
    s.assistant("done")
    return s


def _new_pair_errors(result) -> list[tuple[int, str, str, str]]:
    """(request, format, kind, call id) of every pair violation a request has that the `none` replay of the same
    session, which sends the recording as it is, does not have at its last request (metrics/integrity.py)."""
    recorded = {(f, v.kind, v.call_id) for f, vs in check(replay(result.transcript, "none").final.messages).items() for v in vs}
    return [
        (r.index, f, v.kind, v.call_id)
        for r in result.requests
        for f, vs in check(r.messages).items()
        for v in vs
        if (f, v.kind, v.call_id) not in recorded
    ]


# ----------------------------------------------------------------------------- 1. units and unanswered calls
def test_an_unanswered_call_holds_no_later_step_in_its_unit():
    # By the rule: a model response starts a step unit holding the results of its calls. `c_abort` gets no
    # result, so it keeps nothing together: each later response starts its own unit (it glued them all).
    s = Session()
    u = s.user("task")
    (a,) = s.assistant("", calls=[("c_abort", "bash", {})])
    (b,) = s.assistant("", calls=[("c1", "read", {})])
    r1 = s.result("c1", "one")
    (c,) = s.assistant("", calls=[("c2", "read", {})])
    r2 = s.result("c2", "two")
    assert _unit_ids(s) == [[u.id], [a.id], [b.id, r1.id], [c.id, r2.id]]


def test_a_user_message_typed_while_a_tool_runs_stays_with_that_call_and_its_result():
    # The result of `cx` comes after a real user message: no unit may start there, or dropping the units before
    # it would send the result without its call.
    s = Session()
    u = s.user("task")
    (a,) = s.assistant("", calls=[("cx", "bash", {})])
    u2 = s.user("also check the docs while that runs")
    rx = s.result("cx", "bash out")
    (b,) = s.assistant("", calls=[("c1", "read", {})])
    r1 = s.result("c1", "one")
    assert _unit_ids(s) == [[u.id], [a.id, u2.id, rx.id], [b.id, r1.id]]


def test_a_reused_call_id_pairs_as_the_wire_does():
    # The wire (compaction_bench.wire) answers a response's calls with the results right after it, the k-th call of an
    # id by its k-th result. Two parallel calls `cx` of one response: the first result answers the first call (it
    # answered the second, and the first call counted as never answered). A `cy` call left without a result (aborted)
    # whose id a later response reuses: the result answers the later call, not the aborted one.
    s = Session()
    s.user("task")
    s.assistant("", calls=[("cx", "bash", {"n": 1}), ("cx", "bash", {"n": 2})])
    s.result("cx", "first")
    s.result("cx", "second")
    s.assistant("", calls=[("cy", "bash", {})])
    s.user("that hung; run it again")
    s.assistant("", calls=[("cy", "bash", {})])
    s.result("cy", "third")
    position = {item.id: n for n, item in enumerate(s.items)}
    first_call, second_call, first, second = (position[f"i{n}"] for n in (1, 2, 3, 4))
    aborted, again, third = position["i5"], position["i7"], position["i8"]
    assert answer_positions(s.items) == {first_call: first, second_call: second, again: third}
    assert aborted not in answer_positions(s.items)


def test_truncate_cuts_inside_a_turn_after_an_unanswered_call():
    # 40 read steps of ~1,500 tokens in a 20,000 window after an aborted call: every truncation brings the context
    # to its 12,000 target (0.6) and none overflows, as without the aborted call (it used to record 25 truncations
    # that dropped nothing and overflow 22 times).
    result = replay(_steps_after_an_aborted_call(40, 150).transcript(), "truncate", profile=small_profile(20_000))
    assert result.compactions and result.overflows == 0
    assert all(c.dropped_ids and c.tokens_after <= 12_000 for c in result.compactions)


def test_a_truncation_to_the_newest_unit_keeps_the_user_message_and_that_step():
    # With a target no step fits, the rule keeps the pinned user message and the newest unit only: the newest
    # call and its result. The aborted call goes with the first truncation.
    s = _steps_after_an_aborted_call(20, 150)
    result = replay(s.transcript(), "truncate", profile=small_profile(20_000), options={"target_ratio": 0.01})
    first = result.compactions[0]
    newest_step, newest_result = first.before[-2:]
    assert newest_result.role == "tool" and newest_step.tool_calls[0].id == newest_result.tool_call_id
    assert [m.item_ids for m in first.after] == [(s.items[0].id,), newest_step.item_ids, newest_result.item_ids]
    assert s.items[2].call_id == "c_abort" and s.items[2].id in first.dropped_ids


def test_truncate_never_sends_a_result_without_its_call_after_a_user_message_typed_mid_call():
    # The auditor's case: `cx`, a user message, then `cx`'s result. A truncation that dropped `cx` kept the result
    # (the request opened with ['user', 'tool', ...]); the rule keeps or drops them together, and the window still
    # opens at a user message.
    s = Session()
    s.user("task")
    for n in range(10):
        s.assistant(f"s{n}", calls=[(f"c{n}", "read", {})])
        s.result(f"c{n}", f"x {n}\n" * 300)
    s.assistant("run it", calls=[("cx", "bash", {})])
    s.user("also check the docs while that runs")
    s.result("cx", "bash out\n" * 300)
    for n in range(10, 20):
        s.assistant(f"s{n}", calls=[(f"c{n}", "read", {})])
        s.result(f"c{n}", f"x {n}\n" * 300)
    s.assistant("done")
    result = replay(s.transcript(), "truncate", profile=small_profile(12_000))
    assert len(result.compactions) >= 2
    assert _new_pair_errors(result) == []
    assert all(r.messages[0].role == "user" for r in result.requests)


def test_a_result_that_arrives_after_its_call_was_truncated_is_dropped_with_a_record():
    # A call answered only after two later steps (the recording's own break): once a truncation dropped the call,
    # the late result would answer nothing; it is removed by a recorded compaction, and truncation still reaches
    # its target.
    s = Session()
    s.user("task")
    s.assistant("start", calls=[("c_late", "bash", {})])
    for n in range(12):
        s.assistant(f"step {n}", calls=[(f"c{n}", "read", {})])
        s.result(f"c{n}", f"line {n}\n" * 700)
        if n == 8:
            late = s.result("c_late", "late output")
    s.assistant("done")
    result = replay(s.transcript(), "truncate", profile=small_profile(20_000))
    truncations = [c for c in result.compactions if c.trigger == "threshold"]
    assert truncations and all(c.tokens_after <= 12_000 for c in truncations)
    (removal,) = [c for c in result.compactions if c.trigger == "orphaned-results"]
    assert removal.dropped_ids == (late.id,) and removal.details == {"dropped_results": [late.id]}
    assert not any(v.kind == "orphan_result" for r in result.requests for vs in check(r.messages).values() for v in vs)


# ----------------------------------------------------------------------------- 2. the target with encrypted reasoning
def _encrypted_reasoning_turns() -> Session:
    """6 turns of 6 steps, each step with encrypted reasoning the provider billed 800 tokens for."""
    s = Session()
    for t in range(6):
        s.user(f"turn {t} request")
        for n in range(6):
            s.response += 1
            s._add(kind="reasoning", text="", response=s.response, meta={"encrypted_len": 3000})
            s._add(kind="tool_call", call_id=f"c{t}_{n}", tool_name="read", arguments='{"p":1}', response=s.response,
                   usage=Usage(input=1, output=900, reasoning=800))
            s.result(f"c{t}_{n}", f"result line {n}\n" * 110)
        s.assistant(f"turn {t} done")
    return s


def test_truncate_reaches_its_target_with_encrypted_reasoning():
    # Reasoning before the last user message bills nothing in the context; counted alone, each dropped step billed
    # its 800, so truncation stopped at 15,262 over its 12,000 target (0.6 of 20,000).
    result = replay(_encrypted_reasoning_turns().transcript(), "truncate", profile=small_profile(20_000))
    assert result.compactions
    assert all(c.tokens_after <= 12_000 for c in result.compactions)


@pytest.mark.skipif(not CODEX_FILE.exists(), reason="shared corpora not available")
def test_truncate_reaches_its_target_on_a_recorded_codex_session():
    # The Codex rollout's reasoning is encrypted: 9 of its 11 truncations at 64k ended above 0.6 × 64,000.
    result = replay(load_transcript(CODEX_FILE), "truncate", profile="64k")
    target = int(result.profile.context_window * 0.6)
    assert result.compactions
    assert [c.tokens_after for c in result.compactions if c.tokens_after > target] == []


# ----------------------------------------------------------------------------- 3. truncations that drop nothing
def test_no_compaction_is_recorded_when_nothing_can_be_dropped():
    # The pinned user message alone is over the 12,000 target; once the steps before the newest are gone, a request
    # past the trigger has nothing to drop: no record and no probe point for it (there were two such).
    s = Session()
    s.user("task\n" + "context line\n" * 6000)
    for n in range(5):
        s.assistant(f"s{n}", calls=[(f"c{n}", "read", {})])
        s.result(f"c{n}", "ok")
    s.assistant("done")
    result = replay(s.transcript(), "truncate", profile=small_profile(20_000))
    assert result.compactions
    assert all(c.dropped_ids and c.tokens_after < c.tokens_before for c in result.compactions)


@pytest.mark.parametrize(("target", "trigger"), [(0.9, 0.9), (0.95, 0.9), (0.6, 0.5)])
def test_a_target_at_or_above_the_trigger_is_refused_naming_both_options(target, trigger):
    with pytest.raises(OptionError, match=r"truncate\.target_ratio=.*truncate\.trigger_ratio=") as raised:
        Truncate.parse_options({"target_ratio": target, "trigger_ratio": trigger})
    assert "less than trigger_ratio" in str(raised.value)


def test_a_target_below_the_trigger_is_accepted():
    assert Truncate.parse_options({"target_ratio": 0.5, "trigger_ratio": 0.9}).target_ratio == 0.5


# ----------------------------------------------------------------------------- 4. SWE-agent's line count
#: output -> `len(output.splitlines())`, SWE-agent's `_get_content_stats`
#: (sweagent/agent/history_processors.py@3ea751c087f32b16e039a2233dd6eefecef325d5 L23-28), worked out by hand
LINE_COUNTS = {"a\nb\n": 2, "": 0, "one line": 1, "a\n\nb": 3, "a\r\nb\rc": 3}


def _masked_outputs(strategy: str, options: dict) -> dict[str, str]:
    s = Session()
    s.user("task")
    outputs = list(LINE_COUNTS)
    for n, text in enumerate(outputs):
        s.assistant(f"s{n}", calls=[(f"c{n}", "read", {})])
        s.result(f"c{n}", text)
    s.assistant("last", calls=[("c_last", "read", {})])
    s.result("c_last", "newest output")
    s.assistant("done")
    result = replay(s.transcript(), strategy, profile="64k", options={"keep_last": 1, **options})
    tools = {m.tool_call_id: m.content for m in result.final.messages if m.role == "tool"}
    return {text: tools[f"c{n}"] for n, text in enumerate(outputs)}


def test_observation_masking_counts_lines_as_swe_agent_does():
    masked = _masked_outputs("observation-masking", {})
    assert masked == {text: f"[Old tool output omitted: {lines} lines]" for text, lines in LINE_COUNTS.items()}
