"""The synthetic scenario generator (scenarios/synthetic.py): shapes, structure, planted facts, replays.

Sizes are measured here with the tokenizer directly; probe answers are looked up in the raw item
texts; pairing is checked from the request messages themselves.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import replace
from datetime import datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compaction_bench.metrics import grading
from compaction_bench.probes import KINDS as PROBE_KINDS
from compaction_bench.probes import Probe
from compaction_bench.registry import strategies
from compaction_bench.replay import replay
from compaction_bench.scenarios.synthetic import BALANCED_DECISIONS, SHAPES, Scenario, default_suite, generate
from compaction_bench.tokens import TokenCounter
from compaction_bench.transcript import Item, Transcript, thaw

COUNTER = TokenCounter("o200k_base")
IMAGE_TOKENS = 765  # the gpt-5 profile's price of an image


def item_tokens(item: Item) -> int:
    """Text, arguments, images and the call id (billed on both the call and its result, as providers count them)."""
    return (
        COUNTER.count(item.text) + COUNTER.count(item.arguments or "") + COUNTER.count(item.call_id or "")
        + IMAGE_TOKENS * sum(a.is_image for a in item.attachments)
    )


def answer_found(text: str, probe) -> bool:
    if probe.match == "set":
        return all(member in text for member in probe.answer)
    if probe.match == "regex":
        return re.search(probe.answer, text) is not None
    return probe.answer in text


def item_text(item: Item) -> str:
    return f"{item.text}\n{item.arguments or ''}"


def no_result_calls(transcript: Transcript) -> set[str]:
    """Call ids that never got a result anywhere in the recorded session (aborted calls)."""
    results = {i.call_id for i in transcript.items if i.kind == "tool_result"}
    return {i.call_id for i in transcript.items if i.kind == "tool_call" and i.call_id not in results}


@pytest.fixture(scope="module")
def suite() -> list[Scenario]:
    return default_suite()


def by_shape(suite: list[Scenario], shape: str) -> Transcript:
    return next(s.transcript for s in suite if s.transcript.source["shape"] == shape)


# ----------------------------------------------------------------------------- the suite
def test_default_suite_covers_every_shape_at_its_size(suite):
    assert len(suite) >= 6
    assert sorted(s.transcript.source["shape"] for s in suite) == sorted(SHAPES)
    assert len({s.name for s in suite}) == len(suite)
    for scenario in suite:
        true_tokens = sum(item_tokens(i) for i in scenario.transcript.items if i.kind != "marker")
        assert 130_000 <= true_tokens <= 250_000, (scenario.name, true_tokens)


def test_session_structure(suite):
    for scenario in suite:
        t = scenario.transcript
        items = t.items
        assert items[0].kind == "system"
        first_real = next(n for n, i in enumerate(items) if i.is_real_user)
        injected = [i for i in items[:first_real] if i.kind == "user"]
        assert injected and all(i.synthetic for i in injected)
        assert any("AGENTS.md" in i.text for i in injected)
        # Real user turns are numbered 0, 1, 2, ... and every item carries its turn.
        assert [i.turn for i in t.real_user_messages()] == list(range(len(t.real_user_messages())))
        # Each response is one contiguous run of model-output items with usage on its last item only.
        positions: dict[int, list[int]] = {}
        for n, item in enumerate(items):
            if item.response is not None:
                assert item.is_model_output
                positions.setdefault(item.response, []).append(n)
            else:
                assert item.usage is None
        assert sorted(positions) == list(range(len(positions)))
        previous_input = 0
        for response, where in sorted(positions.items()):
            assert where == list(range(where[0], where[-1] + 1)), (scenario.name, response)
            usages = [items[n].usage for n in where]
            assert usages[-1] is not None and all(u is None for u in usages[:-1])
            usage = usages[-1]
            context = sum(item_tokens(i) for i in items[: where[0]] if i.kind != "marker")
            assert 0.9 * context <= usage.input <= 1.1 * context + 50, (scenario.name, response, usage.input, context)
            assert usage.input >= previous_input and 0 < usage.output and usage.cached_input <= usage.input
            previous_input = usage.input
        # Results follow their own call; timestamps are ISO 8601, increasing, seconds to minutes apart.
        seen_calls: set[str] = set()
        for item in items:
            if item.kind == "tool_call":
                seen_calls.add(item.call_id)
            elif item.kind == "tool_result":
                assert item.call_id in seen_calls
        stamps = [datetime.fromisoformat(i.timestamp.replace("Z", "+00:00")) for i in items]
        gaps = [(b - a).total_seconds() for a, b in zip(stamps, stamps[1:], strict=False)]
        assert min(gaps) >= 0 and max(gaps) <= 600
        assert statistics.median(gaps) < 30


def test_shapes_have_their_features(suite):
    # Short turns: as many user turns as the most interactive recorded sessions (Pi's 55 and 88),
    # several times any other shape's, each answered by a few steps.
    short = by_shape(suite, "short-turns")
    assert len(short.real_user_messages()) >= 55
    assert all(len(short.real_user_messages()) >= 3 * len(s.transcript.real_user_messages()) for s in suite if s.transcript is not short)
    assert statistics.median(len([s for s in short.steps() if s.turn == t.index]) for t in short.turns()) <= 6

    loop = by_shape(suite, "long-loop")
    turn_tokens = [sum(item_tokens(i) for i in turn.items) for turn in loop.turns()]
    assert max(turn_tokens) > 64_000 and max(turn_tokens) > 0.4 * sum(turn_tokens)

    parallel = by_shape(suite, "parallel-calls")
    calling = [s for s in parallel.steps() if s.tool_calls]
    assert sum(len(s.tool_calls) > 1 for s in calling) >= 0.3 * len(calling)

    aborted = by_shape(suite, "aborted-calls")
    orphans = no_result_calls(aborted)
    assert len(orphans) >= 3
    for call_id in orphans:
        after = aborted.items[aborted.position(aborted.tool_call(call_id).id) + 1 :]
        upto_next_user = after[: next((n for n, i in enumerate(after) if i.is_real_user), len(after))]
        assert any(i.kind == "marker" and i.meta.get("event") == "aborted" for i in upto_next_user)
    for other in suite:
        if other.transcript.source["shape"] != "aborted-calls":
            assert not no_result_calls(other.transcript), other.name

    images = by_shape(suite, "images")
    assert sum(a.is_image for i in images.real_user_messages() for a in i.attachments) >= 3
    assert any(a.is_image for i in images.items if i.kind == "tool_result" for a in i.attachments)

    huge = by_shape(suite, "huge-output")
    assert max(COUNTER.count(i.text) for i in huge.items if i.kind == "tool_result") > 16_000

    changed = next(s for s in suite if s.transcript.source["shape"] == "constraint-change")
    t = changed.transcript
    line_limit = next(p for p in changed.probes if p.id == "constraint-line-length")
    source = t.by_id[line_limit.source]
    assert source.is_real_user and source.turn > 0
    kickoff = t.real_user_messages()[0]
    old = re.search(r"line-length limit at (\d+) characters", kickoff.text).group(1)
    assert old != line_limit.answer and line_limit.answer in source.text
    decision = next(p for p in changed.probes if p.kind == "decision")
    assert t.by_id[decision.source].text.startswith("I changed my mind")


def test_planted_facts_and_their_probes(suite):
    matches: set[str] = set()
    for scenario in suite:
        t = scenario.transcript
        assert {p.kind for p in scenario.probes} == set(PROBE_KINDS), scenario.name
        assert len({p.id for p in scenario.probes}) == len(scenario.probes)
        for probe in scenario.probes:
            matches.add(probe.match)
            assert probe.match != "judge"
            source = t.by_id[probe.source]
            assert answer_found(item_text(source), probe), (scenario.name, probe.id)
            assert not answer_found(probe.question, probe), (scenario.name, probe.id)
            if probe.meta.get("first_occurrence"):
                # As retention counts presence: a number only in its source's sentence (`100` in a log is not the limit).
                earlier = t.items[: t.position(source.id)]
                evidence = grading.anchor(probe, item_text(source))
                assert not any(grading.presence(probe, item_text(i), evidence=evidence).present for i in earlier), (scenario.name, probe.id)
        assert sum(bool(p.meta.get("first_occurrence")) for p in scenario.probes) >= 5
        assert [p.to_dict() for p in scenario.probes] == thaw(t.meta["probes"])
    assert {"contains", "exact", "set", "regex", "number"} <= matches


def test_every_decision_pool_entry_names_one_option_only():
    # A right reply naming the chosen option in full is never rejected (the other pattern misses it),
    # and a reply naming both options is wrong, whichever of the two was chosen.
    for topic, first, second in BALANCED_DECISIONS:  # the plain pool's entries come first
        for (chosen, pattern), (other, other_pattern) in ((first, second), (second, first)):
            decision = Probe(id="d", kind="decision", question="?", answer=pattern, match="regex", reject=(other_pattern,), source="x")
            assert grading.grade_reply(decision, f"For {topic}: {chosen}.").correct is True, chosen
            assert grading.grade_reply(decision, f"Either {chosen} or {other}.").correct is False, chosen


@pytest.mark.parametrize("balanced", [False, True])
def test_decision_and_changed_limit_probes_reject_the_other_answer(balanced):
    for seed in (0, 5):
        scenario = generate("constraint-change", seed, target_tokens=20_000, balanced_facts=balanced)
        t, probes = scenario.transcript, {p.id: p for p in scenario.probes}
        kickoff = t.real_user_messages()[0]
        old = re.search(r"line-length limit at (\d+) characters", kickoff.text).group(1)
        limit = probes["constraint-line-length"]
        assert limit.reject == (old,) and limit.answer != old
        assert grading.grade_reply(limit, f"{limit.answer} characters").correct is True
        assert grading.grade_reply(limit, f"{limit.answer} characters (it was {old})").correct is False
        # The first choice is the reversal's rejected answer: the user named both in the session.
        decision = probes["decision-approach"]
        (first,) = decision.reject
        assert any(re.search(first, i.text, re.I) for i in t.real_user_messages()), first
        assert grading.grade_reply(decision, t.by_id[decision.source].text).correct is True
        # Only replies are judged: a context holding both options still holds the answer.
        assert grading.presence(decision, "\n".join(i.text for i in t.items)).present is True
        assert [p.to_dict() for p in scenario.probes] == thaw(t.meta["probes"])

        unchanged = generate("short-turns", seed, target_tokens=20_000, balanced_facts=balanced)
        kept = {p.id: p for p in unchanged.probes}
        assert kept["constraint-line-length"].reject == ()  # the limit never changed: nothing to reject
        pick = kept["decision-approach"]
        (other,) = pick.reject
        assert not re.search(other, unchanged.transcript.by_id[pick.source].text, re.I)
        assert grading.grade_reply(pick, unchanged.transcript.by_id[pick.source].text).correct is True
        if not balanced:  # the user's question names both options: quoted as a reply, it is a hedge
            asked = next(i for i in unchanged.transcript.real_user_messages() if "should we go with" in i.text)
            assert grading.grade_reply(pick, asked.text).correct is False
            assert grading.grade_reply(replace(pick, reject=()), asked.text).correct is True


def test_same_seed_same_session_other_seed_other_session():
    a = generate("parallel-calls", 7, target_tokens=30_000)
    b = generate("parallel-calls", 7, target_tokens=30_000)
    c = generate("parallel-calls", 8, target_tokens=30_000)
    assert a.transcript.dumps() == b.transcript.dumps()
    assert a.probes == b.probes
    assert a.transcript.dumps() != c.transcript.dumps()
    assert Transcript.loads(a.transcript.dumps()).dumps() == a.transcript.dumps()


def test_small_sessions_still_plant_every_fact():
    for shape in SHAPES:
        scenario = generate(shape, 3, target_tokens=5_000)
        assert {p.kind for p in scenario.probes} == set(PROBE_KINDS)
        assert scenario.transcript.meta["true_tokens"] < 60_000


def test_bad_arguments_are_refused_clearly():
    with pytest.raises(ValueError, match="unknown synthetic shape 'nope'; known: short-turns"):
        generate("nope")
    with pytest.raises(ValueError, match="target_tokens must be positive"):
        generate("images", target_tokens=0)


# ----------------------------------------------------------------------------- replays
def test_none_with_a_1m_window_keeps_every_planted_fact(suite):
    for scenario in suite:
        result = replay(scenario.transcript, "none", profile="1m")
        assert result.overflows == 0 and not result.compactions
        final = "\n".join(
            [m.content for m in result.final.messages] + [f"{c.name} {c.arguments}" for m in result.final.messages for c in m.tool_calls]
        )
        for probe in scenario.probes:
            assert answer_found(final, probe), (scenario.name, probe.id)


def test_none_with_a_32k_window_records_overflows(suite):
    for scenario in suite:
        result = replay(scenario.transcript, "none", profile="32k")
        overflowed = [r for r in result.requests if r.overflow]
        assert overflowed and result.overflows == len([r for r in overflowed if r.kind == "turn"])
        assert all(r.error and r.error["code"] == "context_length_exceeded" for r in overflowed if r.kind == "turn")
        assert result.final.true_tokens > 32_000 and result.final.overflow


def test_truncate_compacts_every_scenario_at_least_twice_at_64k(suite):
    for scenario in suite:
        assert len(replay(scenario.transcript, "truncate", profile="64k").compactions) >= 2, scenario.name


#: Anthropic's server-side edits trigger at 100,000 / 150,000 input tokens by default: never inside 64k.
#: Claude Code 2.0.57 has no reactive compaction: once a huge output overflows a request, its stale
#: count never reaches the threshold again (docs/specs/claude-code.md §2.3), by design.
COMPACTING = sorted(set(strategies()) - {"none", "truncate", "anthropic-clear-tool-uses", "anthropic-compact", "claude-code"})


@pytest.mark.slow
@pytest.mark.parametrize("strategy", COMPACTING)
def test_every_compacting_strategy_compacts_each_scenario_at_least_twice(suite, strategy):
    for scenario in suite:
        result = replay(scenario.transcript, strategy, profile="64k")
        assert len(result.compactions) >= 2, (strategy, scenario.name, len(result.compactions))


def assert_pairs_intact(request, aborted: set[str]) -> None:
    """Every tool message answers a call made earlier in the request; every call is answered,
    except calls the recorded session itself never answered (aborted)."""
    calls: set[str] = set()
    answered: set[str] = set()
    for message in request.messages:
        if message.role == "assistant":
            calls.update(c.id for c in message.tool_calls)
        if message.role == "tool":
            assert message.tool_call_id in calls, f"request {request.index}: result {message.tool_call_id} without its call"
            answered.add(message.tool_call_id)
    unanswered = calls - answered
    assert unanswered <= aborted, f"request {request.index}: calls without results {sorted(unanswered - aborted)}"


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from(SHAPES), seed=st.integers(0, 10_000), target=st.integers(40_000, 70_000))
def test_truncate_never_splits_a_call_from_its_result(shape, seed, target):
    transcript = generate(shape, seed, target_tokens=target).transcript
    aborted = no_result_calls(transcript)
    result = replay(transcript, "truncate", profile="32k")
    assert result.compactions
    for request in result.requests:
        assert_pairs_intact(request, aborted)
