"""Audit of `bench gate` and `bench compare` on hand-built run folders whose right answers are worked
out apart from the code: how many tests a gate makes and what that does to its error rate, what a
tolerance means, when a rule can fail at all, what the decision rests on, and which inputs make two
runs comparable."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from scipy import stats as scipy_stats

from compaction_bench.metrics.aggregate import summarize
from compaction_bench.reports.compare import render_compare
from compaction_bench.reports.gate import GateError, Rule, Run, gate, probe_test

PROFILE = "32k"


def probe_rows(strategy: str, scenarios: int, per_scenario: int, lost: set[tuple[int, int]] = frozenset()) -> list[dict]:
    """One final-point row per probe, present unless (scenario, probe) is in `lost`."""
    return [
        {"scenario": f"s{k}", "strategy": strategy, "profile": PROFILE, "repeat": 0, "sample": 0, "probe_id": f"p{n}", "kind": "recall",
         "point_kind": "final", "step": 9, "request": 20, "present": (k, n) not in lost, "found": "kept" if (k, n) not in lost else "absent",
         "in_summary": False, "correct": None, "ceiling_correct": None, "source_summarized": False}
        for k in range(scenarios)
        for n in range(per_scenario)
    ]


def write_run(root: Path, rows: list[dict], *, config: dict | None = None, scenarios: list[dict] | None = None,
              profiles: dict | None = None, requests: pd.DataFrame | None = None) -> Path:
    """A finished run folder holding these probe rows: one request and one summary row per cell, or `requests` (every
    column the request metrics read) and the summary `bench run` computes from them."""
    root.mkdir(parents=True)
    probes = pd.DataFrame(rows)
    compactions = pd.DataFrame({"scenario": pd.Series(dtype=str)})
    cells = probes[["scenario", "strategy", "profile"]].drop_duplicates().reset_index(drop=True)
    if requests is None:
        cells.assign(repeat=0, request=0, kind="turn", overflow=False).to_parquet(root / "requests.parquet")
        cells.assign(cost_usd=1.0).to_parquet(root / "summary.parquet")
    else:
        requests.to_parquet(root / "requests.parquet")
        summarize(requests, compactions, probes.iloc[:0]).to_parquet(root / "summary.parquet")  # the request metrics (the gate pools the probes itself)
    probes.to_parquet(root / "probes.parquet")
    compactions.to_parquet(root / "compactions.parquet")
    names = sorted(cells["scenario"].unique())
    manifest = {
        "config": {"strategies": sorted(cells["strategy"].unique()), "profiles": [PROFILE], "summarizer": "openai/gpt-5-mini",
                   "answerer": "", "judge": None, "api_base": None, "usage": "simulated", "repeats": 1, "options": {}, "probes": None,
                   "seed": 0, **(config or {})},
        "scenarios": scenarios or [{"name": n, "sha256": f"{k:064x}", "probes_sha256": f"{k + 100:064x}"} for k, n in enumerate(names)],
        "profiles": profiles or {PROFILE: {"name": PROFILE, "context_window": 32000, "tokenizer": "o200k_base"}},
    }
    (root / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return root


# ---------------------------------------------------------------------------- many rules, one decision
def test_a_gate_over_many_strategies_holds_its_alpha_for_the_whole_decision(tmp_path):
    """Eight strategies; the candidate moves five probes of each, one per scenario: four strategies
    lose theirs, four gain theirs (facts reshuffled, none lost overall). Each losing strategy's
    one-sided sign-flip p is 0.5^5 = 1/32 = 0.031. The gate decides once for all eight rows, so its
    tests are a family, adjusted together: the joint sign-flip test flips a scenario's draw in every
    row at once, and of its 32 assignments two give some row p ≤ 1/32 (none flipped: the losers; all
    five flipped: the gainers, whose rise then reads as a drop), so each loser's p is 2/32 = 0.0625:
    no row may fail. (Holm's method said 8/32. Each row alone at 0.05 would fail four of them: with
    eight tests at 5% each, a wrong failure somewhere is far likelier than 5%.)"""
    strategies = [f"x{k}" for k in range(8)]
    base, cand = [], []
    for k, strategy in enumerate(strategies):
        moved = {(s, 0) for s in range(5)}
        if k < 4:  # loses probe p0 of every scenario
            base += probe_rows(strategy, 5, 10)
            cand += probe_rows(strategy, 5, 10, lost=moved)
        else:  # gains it
            base += probe_rows(strategy, 5, 10, lost=moved)
            cand += probe_rows(strategy, 5, 10)
    result = gate(write_run(tmp_path / "a", base), write_run(tmp_path / "b", cand), [Rule.parse("retention:0")])
    retention = result.table[result.table["metric"] == "retention"]
    assert len(retention) == 8
    assert result.passed, result.failures
    lost = retention[retention["strategy"].isin(strategies[:4])]
    assert lost["p_value"].tolist() == pytest.approx([2 / 32] * 4)
    assert "adjusted" in result.markdown()
    # One strategy alone with the same five losses: a family of one, its own p = 1/32 < 0.05, and it fails.
    alone = gate(write_run(tmp_path / "c", base[:50]), write_run(tmp_path / "d", cand[:50]), [Rule.parse("retention:0")])
    assert not alone.passed and alone.table["p_value"].iloc[0] == pytest.approx(1 / 32)


def test_a_large_family_can_still_fail_on_a_clear_drop(tmp_path):
    """21 strategies × 3 profiles × 2 rules is 126 tests. A strategy that loses 21 of its 30 probes has
    a raw p at the Monte Carlo floor of its tests, and Holm multiplies the smallest p by the family's
    size: the resamples must be fine enough for 126 × p to go below 0.05 (2000 bootstrap resamples
    could not: 126/2001 = 0.063, so no gate that size could ever fail). The test's unit is the summary draw
    (a session in one repeat), so the drop is over 12 sessions: the exact sign-flip floor 0.5^12, 126 × 0.5^12 = 0.031
    (3 sessions' 0.125 could never fail any family)."""
    base = probe_rows("x", 12, 10)
    cand = probe_rows("x", 12, 10, lost={(s, n) for s in range(12) for n in range(7)})
    runs = (Run.load(write_run(tmp_path / "a", base)), Run.load(write_run(tmp_path / "b", cand)))
    test = probe_test(runs, "x", PROFILE, "retention", 0.05, 0.0, 126)
    assert test is not None and 126 * test.p_value < 0.05


# ---------------------------------------------------------------------------- what a tolerance means
def _spread_losses(count: int) -> set[tuple[int, int]]:
    """`count` lost probes spread over 10 scenarios of 20 probes, round robin."""
    return {(k % 10, k // 10) for k in range(count)}


def test_a_drop_within_reach_of_the_tolerance_does_not_fail(tmp_path):
    """200 probes, 6 lost (a drop of 3 points) against a tolerance of 2 points. The rule says: fail
    when the candidate is worse by more than 2 points. A true drop of exactly 2 points loses
    Binomial(200, 0.02) probes, and 6 or more of them with chance P(X ≥ 6) = 0.21: these data do not
    show a drop beyond the tolerance, so the gate must pass (it failed: the drop was tested against 0,
    p = 1/64, and compared with the tolerance only as a point estimate)."""
    chance = float(scipy_stats.binom.sf(5, 200, 0.02))
    assert 0.2 < chance < 0.22  # the right answer, worked out without the code
    base = probe_rows("x", 10, 20)
    cand = probe_rows("x", 10, 20, lost=_spread_losses(6))
    result = gate(write_run(tmp_path / "a", base), write_run(tmp_path / "b", cand), [Rule.parse("retention:0.02")])
    (row,) = result.table.to_dict("records")
    assert row["change"] == pytest.approx(-0.03)
    assert result.passed, result.markdown()
    assert row["p_value"] > 0.1  # the test of "worse by more than 0.02", not of "worse at all"
    # 30 of 200 lost (15 points) against 2 points: P(X ≥ 30) under Binomial(200, 0.02) is below 1e-9, and it fails.
    assert scipy_stats.binom.sf(29, 200, 0.02) < 1e-9
    far = gate(write_run(tmp_path / "c", base), write_run(tmp_path / "d", probe_rows("x", 10, 20, lost=_spread_losses(30))),
               [Rule.parse("retention:0.02")])
    assert not far.passed and far.table["p_value"].iloc[0] < 0.01


# ---------------------------------------------------------------------------- too few probes
def test_a_rule_with_too_few_probes_to_fail_is_no_pass(tmp_path):
    """Three probes, all three lost: the smallest one-sided sign-flip p three probes can give is
    0.5^3 = 0.125 > 0.05, so nothing these runs could hold would fail the rule. Such a row is not a
    pass; with no other rule the gate is untested (the CLI exits 2), not "passed"."""
    base = probe_rows("x", 1, 3)
    cand = probe_rows("x", 1, 3, lost={(0, 0), (0, 1), (0, 2)})
    result = gate(write_run(tmp_path / "a", base), write_run(tmp_path / "b", cand), [Rule.parse("retention:0")])
    assert not result.tested
    text = result.markdown()
    assert "gate: passed" not in text and "cannot fail" in text
    (row,) = result.table.to_dict("records")
    assert row["change"] == -1.0 and not row["failed"]


def test_strategies_a_change_did_not_touch_do_not_dilute_the_one_it_did(tmp_path):
    """Three strategies; the candidate loses probe p0 of each of five scenarios for `x` and changes no probe of
    `y` or `z`. The sign-flip test is conditional on which probes changed: `y` and `z` changed none, so their
    smallest possible p is 1 and they can never fail; in the family they only multiplied `x`'s p = 1/32 by 3
    (0.094: "ok", exit 0, with all five facts lost). Left out (Tarone's argument), `x` fails at 1/32."""
    base, cand = [], []
    for strategy in ("x", "y", "z"):
        base += probe_rows(strategy, 5, 10)
        cand += probe_rows(strategy, 5, 10, lost={(k, 0) for k in range(5)} if strategy == "x" else frozenset())
    result = gate(write_run(tmp_path / "a", base), write_run(tmp_path / "b", cand), [Rule.parse("retention:0")])
    rows = {row["strategy"]: row for row in result.table.to_dict("records")}
    assert rows["x"]["failed"] and rows["x"]["p_value"] == pytest.approx(1 / 32)
    assert rows["y"]["status"] == rows["z"]["status"] == "ok" and rows["y"]["change"] == 0
    assert result.failures == ["x 32k retention: -0.1"] and result.tested


def test_a_second_rule_for_one_metric_is_refused(tmp_path):
    """A looser second rule for the same metric tests nothing the stricter does not, but it was a member of the
    family: `retention:0` failed alone and passed beside `presence:0.5` (`presence` is `retention`)."""
    runs = write_run(tmp_path / "a", probe_rows("x", 5, 10)), write_run(tmp_path / "b", probe_rows("x", 5, 10))
    for rules in (["retention:0", "presence:0.5"], ["retention:0", "retention:0"]):
        with pytest.raises(GateError, match=r"two rules for retention \(tolerances 0 and 0\.?5?"):
            gate(*runs, [Rule.parse(r) for r in rules])
    for text in ("cost:inf", "cost:1e999", "cost:nan", "cost:-1"):
        with pytest.raises(GateError, match="finite number ≥ 0"):
            Rule.parse(text)
    with pytest.raises(GateError, match=r"--alpha 1e-06: must be at least 0.001"):
        gate(*runs, [Rule.parse("retention:0")], alpha=1e-6)


def test_the_same_costs_summed_in_another_order_are_no_change(tmp_path):
    """0.1 + 0.2 and 0.3 are the same dollars; as floats they differ by 5.6e-17, which failed `cost:0`. (Compared
    exactly, as with a deterministic summarizer; a model's summaries are tested per draw, `test_gate_draw_metrics`.)"""
    rows = probe_rows("x", 1, 10)
    runs = []
    for name, costs in (("a", [0.3]), ("b", [0.1 + 0.2])):
        root = write_run(tmp_path / name, rows, config={"summarizer": "offline/extractive"})
        pd.read_parquet(root / "summary.parquet").assign(cost_usd=costs).to_parquet(root / "summary.parquet")
        runs.append(root)
    assert 0.1 + 0.2 != 0.3
    result = gate(*runs, [Rule.parse("cost:0")])
    (row,) = result.table.to_dict("records")
    assert row["change"] == 0 and result.passed and result.tested
    # a real change of a cent still fails
    root = runs[1]
    pd.read_parquet(root / "summary.parquet").assign(cost_usd=[0.31]).to_parquet(root / "summary.parquet")
    assert not gate(*runs, [Rule.parse("cost:0")]).passed


def test_a_rule_no_row_could_test_leaves_the_gate_undecided_unless_another_failed(tmp_path):
    """No answerer: `answered` has no grade to test. Beside a passing `retention:0` the gate is not "passed"
    (that read as answers checked); beside a failing rule it fails."""
    same = probe_rows("x", 5, 10)
    result = gate(write_run(tmp_path / "a", same), write_run(tmp_path / "b", same), [Rule.parse("retention:0"), Rule.parse("answered:0")])
    assert result.passed and not result.tested and result.untested_rules == ["answered:0"]
    assert "gate: untested (answered:0 could not be applied" in result.markdown()
    lost = probe_rows("x", 5, 10, lost={(k, 0) for k in range(5)})
    failed = gate(write_run(tmp_path / "c", same), write_run(tmp_path / "d", lost), [Rule.parse("retention:0"), Rule.parse("answered:0")])
    assert not failed.passed and "gate: failed (1 regression)" in failed.markdown()


# ---------------------------------------------------------------------------- what the decision rests on
def test_the_gate_says_when_its_decision_rests_on_offline_heuristics(tmp_path):
    """An `answered` rule graded by offline/reader and probes over offline/extractive summaries: the
    pull-request comment must say that the decision measures those heuristics."""
    base = [dict(r, correct=True) for r in probe_rows("x", 5, 10)]
    cand = [dict(r, correct=r["probe_id"] != "p0") for r in probe_rows("x", 5, 10)]
    offline = {"summarizer": "offline/extractive", "answerer": "offline/reader"}
    result = gate(write_run(tmp_path / "a", base, config=offline), write_run(tmp_path / "b", cand, config=offline),
                  [Rule.parse("answered:0"), Rule.parse("retention:0")])
    text = result.markdown()
    assert "offline/reader" in text and "offline/extractive" in text and "heuristic" in text


def test_an_integrity_rule_sums_only_the_wire_formats_both_runs_checked(tmp_path):
    """The baseline was made before the Gemini format was checked: its summary has three integrity columns,
    the candidate's four, with 5 Gemini errors and none in the three. The same three formats show no change,
    so `integrity:0` passes; summing the candidate's fourth column would read 5 new errors that the baseline
    was never checked for. (Compared exactly, as with a deterministic summarizer; per draw, `test_gate_draw_metrics`.)"""
    rows = probe_rows("x", 2, 10)
    old_formats = {"integrity_openai_chat": 0, "integrity_openai_responses": 0, "integrity_anthropic": 0}
    runs = []
    for name, columns in (("a", old_formats), ("b", {**old_formats, "integrity_gemini": 5})):
        root = write_run(tmp_path / name, rows, config={"summarizer": "offline/extractive"})
        summary = pd.read_parquet(root / "summary.parquet")
        summary.assign(**columns).to_parquet(root / "summary.parquet")
        runs.append(root)
    result = gate(*runs, [Rule.parse("integrity:0")])
    assert result.tested
    (row,) = result.table.to_dict("records")
    assert row["change"] == 0 and not row["failed"]


# ---------------------------------------------------------------------------- comparable inputs
def test_runs_whose_probe_files_differ_are_not_comparable(tmp_path):
    """The same probe ids asking other questions (a probe file edited, or mined by another miner):
    the manifests' `probes_sha256` differ, so the runs did not measure the same thing."""
    rows = probe_rows("x", 2, 10)
    same = [{"name": f"s{k}", "sha256": f"{k:064x}", "probes_sha256": f"{k + 100:064x}"} for k in range(2)]
    edited = [dict(s, probes_sha256=("f" * 64 if s["name"] == "s1" else s["probes_sha256"])) for s in same]
    with pytest.raises(GateError, match=r"s1.*probes"):
        gate(write_run(tmp_path / "a", rows, scenarios=same), write_run(tmp_path / "b", rows, scenarios=edited), [Rule.parse("retention:0")])


def test_runs_whose_profile_of_the_same_name_differs_are_not_comparable(tmp_path):
    """`-p gpt-5` resolved from two litellm maps can be two windows under one name."""
    rows = probe_rows("x", 2, 10)
    small = {PROFILE: {"name": PROFILE, "context_window": 32000, "tokenizer": "o200k_base"}}
    large = {PROFILE: {"name": PROFILE, "context_window": 64000, "tokenizer": "o200k_base"}}
    with pytest.raises(GateError, match=r"profile"):
        gate(write_run(tmp_path / "a", rows, profiles=small), write_run(tmp_path / "b", rows, profiles=large), [Rule.parse("retention:0")])


def test_runs_that_differ_only_in_how_their_settings_were_written_are_comparable(tmp_path):
    """The same strategies and profiles in another order, an option written `0.50` and `.5`, a default given
    explicitly, the same probe file given by another path (its content is compared, `probes_sha256`): the same
    run, which the gate refused as "not comparable" (exit 2). A different option value is still refused."""
    from compaction_bench.registry import strategy_class

    rows = probe_rows("truncate", 2, 10) + probe_rows("none", 2, 10)
    default = strategy_class("truncate").Options().target_ratio
    left = {"strategies": ["none", "truncate"], "options": {"truncate": {"target_ratio": "0.50"}}, "probes": "probes.yaml"}
    right = {"strategies": ["truncate", "none"], "options": {"truncate": {"target_ratio": ".5"}}, "probes": "/ci/checkout/probes.yaml"}
    result = gate(write_run(tmp_path / "a", rows, config=left), write_run(tmp_path / "b", rows, config=right), [Rule.parse("retention:0")])
    assert result.passed and not [n for n in result.notes if "differ" in n]
    explicit = gate(write_run(tmp_path / "c", rows, config={**left, "options": {}}),
                    write_run(tmp_path / "d", rows, config={**right, "options": {"truncate": {"target_ratio": str(default)}}}),
                    [Rule.parse("retention:0")])
    assert explicit.passed
    other = {**right, "options": {"truncate": {"target_ratio": "0.7"}}}
    with pytest.raises(GateError, match=r"options differs"):
        gate(write_run(tmp_path / "e", rows, config=left), write_run(tmp_path / "f", rows, config=other), [Rule.parse("retention:0")])


def test_allowed_differences_still_name_a_template_change(tmp_path):
    """With --allow-different-inputs the notes listed only the allowed differences: the template change, usually
    the point of the gate, and what the offline summarizer makes of it, vanished."""
    rows = probe_rows("x", 2, 10)
    base = write_run(tmp_path / "a", rows, config={"summarizer": "offline/extractive", "options": {"x": {"k": "1"}}})
    cand = write_run(tmp_path / "b", rows, config={"summarizer": "offline/extractive", "prompts": {"pi_summary.j2": "mine.j2"}})
    result = gate(base, cand, [Rule.parse("retention:0")], allow_different_inputs=True)
    assert any(n.startswith("allowed difference: options differs") for n in result.notes)
    assert any(n.startswith("summary templates differ: --prompt overrides") for n in result.notes)
    assert any("does not read instruction wording" in n for n in result.notes)


def test_an_output_inside_a_run_it_reads_is_refused_even_with_force(tmp_path):
    from tests.conftest import assert_user_error, bench_cli

    run = write_run(tmp_path / "a", probe_rows("x", 2, 10))
    manifest = (run / "manifest.json").read_bytes()
    for args in (["gate", "--baseline", str(run), "--candidate", str(run), "--fail-on", "integrity:0", "--markdown", str(run / "manifest.json")],
                 ["compare", str(run), str(run), "--html", str(run / "manifest.json")],
                 ["cache", "export", str(run), "-o", str(run / "manifest.json")]):
        assert_user_error(bench_cli(*args, "--force"), f"{run / 'manifest.json'}: is inside the run folder {run}, which this command reads")
    assert (run / "manifest.json").read_bytes() == manifest


# ---------------------------------------------------------------------------- bench compare
def test_compare_adjusts_its_better_and_worse_tags_for_the_rows_it_tags(tmp_path):
    """Twelve scenarios; `x0` loses one probe of ten in each of scenarios 0–5, `x1` gains one in each of 6–11. Each
    row's two-sided sign-flip p is 2 × 0.5^6 = 2/64 and its clustered interval clears 0, so each alone would be tagged.
    The page's rows are one family, adjusted together: the joint test flips a scenario's draw in both rows at once, and
    of its 4096 assignments 128 make `x0` extreme (its six draws all unflipped or all flipped), 128 `x1`, 4 both: 252,
    0.0615 for each, and neither may be tagged (Holm's method said 2 × 2/64 = 0.0625). Eight strategies moving the
    same six scenarios (four losing, four gaining) are one pattern to the joint test: 2 of its 64 assignments make
    some row extreme, 2/64 for each, and all eight are tagged (Holm's method said 8 × 2/64 and tagged none)."""
    base = probe_rows("x0", 12, 10) + probe_rows("x1", 12, 10, lost={(s, 0) for s in range(6, 12)})
    cand = probe_rows("x0", 12, 10, lost={(s, 0) for s in range(6)}) + probe_rows("x1", 12, 10)
    page = render_compare(write_run(tmp_path / "a", base), write_run(tmp_path / "b", cand))
    assert re.findall(r'<span class="tag[^"]*">(better|worse)</span>', page) == []
    assert page.count("no detectable change") == 2
    assert "adjusted over the 2 rows" in page
    # one strategy alone with the same six losses: a family of one, tagged worse
    alone = render_compare(write_run(tmp_path / "c", base[:120]), write_run(tmp_path / "d", cand[:120]))
    assert re.findall(r'<span class="tag[^"]*">(better|worse)</span>', alone) == ["worse"]
    base, cand = [], []
    for k in range(8):
        moved = {(s, 0) for s in range(6)}
        base += probe_rows(f"x{k}", 6, 10, lost=moved if k >= 4 else set())
        cand += probe_rows(f"x{k}", 6, 10, lost=moved if k < 4 else set())
    aligned = render_compare(write_run(tmp_path / "e", base), write_run(tmp_path / "f", cand))
    assert sorted(re.findall(r'<span class="tag[^"]*">(better|worse)</span>', aligned)) == ["better"] * 4 + ["worse"] * 4


def test_compare_tags_a_change_beside_strategies_it_did_not_touch(tmp_path):
    """The same six losses for `x0`, beside three strategies with no probe changed: their smallest two-sided
    p is 1, so they can be tagged neither way and leave the family (Tarone's argument). `x0` alone is the
    family, p = 2 × 0.5^6 = 0.031 < 0.05: tagged worse (over four rows, 4 × 0.031 = 0.125 hid it)."""
    base, cand = [], []
    for k in range(4):
        base += probe_rows(f"x{k}", 6, 10)
        cand += probe_rows(f"x{k}", 6, 10, lost={(s, 0) for s in range(6)} if k == 0 else set())
    page = render_compare(write_run(tmp_path / "a", base), write_run(tmp_path / "b", cand))
    assert re.findall(r'<span class="tag[^"]*">(better|worse)</span>', page) == ["worse"]
    assert "of the one row whose changed summary draws could reach it" in page


def test_a_comparison_names_itself_in_its_note_on_an_offline_summarizer(tmp_path):
    """`bench compare` of runs differing only in a template borrowed the gate's words ("this gate cannot see")."""
    from compaction_bench.reports.gate import check_comparable

    rows = probe_rows("x", 2, 10)
    base = write_run(tmp_path / "a", rows, config={"summarizer": "offline/extractive"})
    cand = write_run(tmp_path / "b", rows, config={"summarizer": "offline/extractive", "prompts": {"pi_summary.j2": "mine.j2"}})
    notes = check_comparable(Run.load(base), Run.load(cand), allow_offline_summarizer=True, by="comparison")
    assert any("so this comparison cannot see what the prompt change does" in n for n in notes)
    assert not any("gate" in n for n in notes)
