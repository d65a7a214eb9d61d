"""Audit of the default suite's planted facts (scenarios/synthetic.py, balanced facts).

The checks use the grader's own presence rule (`metrics.grading.presence`: normalization, whole
tokens, a short answer anchored to its source sentence), item by item, so "first stated at its
source" and "carried only by tool outputs" mean what retention will count. The reference figures
come from the real corpora: of the probes `mine_probes` draws from the coding-agent files (Claude
Code, Codex, Pi, mini-swe-agent, SWE-agent, OpenHands; 2,377 probes), 26% have their answer in tool
outputs only (errors 97%, recall facts 68%), and 25–28% have their source in the last quarter of
the session's tokens.
"""

from __future__ import annotations

import dataclasses
import hashlib

import pytest

from compaction_bench.metrics import grading
from compaction_bench.probes import Probe
from compaction_bench.scenarios.synthetic import SHAPE_SPECS, SHAPES, Scenario, default_suite, generate
from compaction_bench.tokens import TokenCounter
from compaction_bench.transcript import Item, Transcript

COUNTER = TokenCounter("o200k_base")
#: The set of files a turn modified is a set of paths, and paths are in every listing, grep hit and
#: `git status` before the assistant states the set: the one family planted without a first occurrence.
PATH_SET_PROBES = {"artifact-files-modified"}
#: Facts of the one repository every scenario works on: the same AGENTS.md rule, and a set of three
#: of the five files the implementation may touch (ten sets for seven scenarios).
SHARED_ACROSS_SCENARIOS = {"constraint-vendor", "artifact-files-modified"}


def item_text(item: Item) -> str:
    return f"{item.text}\n{item.arguments or ''}"


def carriers(transcript: Transcript, probe: Probe) -> list[int]:
    """Positions of the items that alone hold the probe's answer, by the grader's presence rule."""
    source = transcript.by_id[probe.source]
    evidence = grading.anchor(probe, item_text(source))
    return [
        n for n, item in enumerate(transcript.items)
        if item.kind != "marker" and grading.presence(probe, item_text(item), grading.normalize(item_text(item)), evidence).present
    ]


def token_share_before(transcript: Transcript, item_id: str) -> float:
    tokens = [0 if i.kind == "marker" else COUNTER.count(item_text(i)) for i in transcript.items]
    return sum(tokens[: transcript.position(item_id)]) / sum(tokens)


@pytest.fixture(scope="module")
def suite() -> list[Scenario]:
    return default_suite()


def test_every_answer_but_a_path_set_is_first_stated_at_its_source(suite):
    for scenario in suite:
        t = scenario.transcript
        for probe in scenario.probes:
            source = t.position(probe.source)
            found = carriers(t, probe)
            assert source in found, (scenario.name, probe.id)
            if probe.id in PATH_SET_PROBES:
                assert not probe.meta["first_occurrence"]
                continue
            assert probe.meta["first_occurrence"], (scenario.name, probe.id)
            assert min(found) == source, (scenario.name, probe.id, [t.items[n].id for n in found if n < source])


def test_no_answer_is_in_its_question_or_in_the_call_whose_output_states_it(suite):
    for scenario in suite:
        t = scenario.transcript
        for probe in scenario.probes:
            assert not grading.presence(probe, probe.question).present, (scenario.name, probe.id)
            source = t.by_id[probe.source]
            if source.kind == "tool_result":
                call = t.tool_call(source.call_id)
                assert call is not None and not grading.presence(probe, call.arguments or "").present, (scenario.name, probe.id)


def test_decision_options_are_described_not_named_before_the_choice(suite):
    for scenario in suite:
        t = scenario.transcript
        decision = next(p for p in scenario.probes if p.kind == "decision")
        pick = t.by_id[decision.source]
        assert pick.is_real_user and pick.text.startswith(("For ", "I changed my mind"))
        offer = [i for i in t.items[: t.position(pick.id)] if i.kind == "assistant" and i.text.startswith("Option 1: ")]
        assert len(offer) == 1, scenario.name


def test_tool_output_facts_are_not_restated_by_the_assistant(suite):
    """A strategy that drops or masks old tool outputs must be able to lose these facts."""
    for scenario in suite:
        t = scenario.transcript
        output_only = {
            p.id for p in scenario.probes
            if {t.items[n].kind for n in carriers(t, p)} == {"tool_result"}
        }
        assert output_only == {"error-first-failure", "error-export-failure", "recall-stuck-batch", "recall-port", "recall-revert-commit"}, scenario.name
        # At least the corpora's share (26%) of the probes, and every error probe (97% on the corpora).
        assert len(output_only) >= 0.26 * len(scenario.probes)
        assert all(p.id in output_only for p in scenario.probes if p.kind == "error")


def test_facts_are_spread_over_the_session(suite):
    for scenario in suite:
        t = scenario.transcript
        positions = sorted(token_share_before(t, p.source) for p in scenario.probes)
        assert sum(x >= 0.5 for x in positions) >= 3, (scenario.name, positions)
        assert positions[-1] >= 0.8, (scenario.name, positions)


@pytest.mark.parametrize("seed", [0, 5])
def test_no_two_scenarios_of_a_suite_share_an_answer(seed):
    answers: dict[str, dict[str, str]] = {}
    for scenario in default_suite(seed):
        for probe in scenario.probes:
            if probe.id not in SHARED_ACROSS_SCENARIOS:
                answers.setdefault(probe.id, {})[scenario.name] = str(probe.answer)
    for probe_id, by_scenario in answers.items():
        assert len(set(by_scenario.values())) == len(by_scenario), (probe_id, by_scenario)
    # The pooled facts differ across scenarios by kind too: no error of one is another's export error.
    errors = [a for pid in ("error-first-failure", "error-export-failure") for a in answers[pid].values()]
    assert len(set(errors)) == len(errors)


def test_balanced_sessions_are_deterministic_and_seed_dependent():
    a = generate("images", 11, target_tokens=30_000, balanced_facts=True)
    b = generate("images", 11, target_tokens=30_000, balanced_facts=True)
    c = generate("images", 12, target_tokens=30_000, balanced_facts=True)
    assert a.transcript.dumps() == b.transcript.dumps() and a.probes == b.probes
    assert {p.id: p.answer for p in a.probes} != {p.id: p.answer for p in c.probes}
    assert a.transcript.source["facts"] == "balanced"


def test_small_balanced_sessions_still_plant_every_fact():
    for shape in SHAPES:
        probes = {p.id for p in generate(shape, 2, target_tokens=5_000, balanced_facts=True).probes}
        assert {"recall-port", "recall-revert-commit", "error-export-failure", "decision-approach"} <= probes, shape


def test_the_plain_generator_is_unchanged():
    """`generate` without balanced facts is the session tests/test_replay_equivalence.py replays,
    as the generator produced it before balanced facts existed (its sha256 recorded then, without the
    probes in its meta: they gained `reject` answers since, which no replay reads; and with the shape's
    description as it was worded then: the fortieth pass reworded it, which no replay reads either)."""
    session = generate("short-turns", seed=0, target_tokens=200_000).transcript
    assert session.meta["description"] == SHAPE_SPECS["short-turns"].description
    then = {"description": "many short turns: quick questions and one- or two-step tool loops"}
    unprobed = dataclasses.replace(session, meta={k: then.get(k, v) for k, v in session.meta.items() if k != "probes"})
    assert hashlib.sha256(unprobed.dumps().encode()).hexdigest() == "849e13e10433ab068db5628236bb79d4717fd5430c54d7657bfa95da43f66bab"
    assert "facts" not in session.source
