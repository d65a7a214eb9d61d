"""Third audit of the verdict layer, against answers worked out apart from the code: P(best) withheld where
the tests cannot tell the two highest retentions apart (a few probes, now a few scenarios, made it read as
near-certainty beside a sentence that claimed nothing), a strategy flagged for requests every API rejects worded with its scope,
and a scenario in which every cell failed named, in the report's verdict and in the terminal."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from compaction_bench.metrics.aggregate import overall, summarize, unfinished
from compaction_bench.reports.leaderboard import leaderboard
from compaction_bench.reports.verdict import verdicts

INTEGRITY = ("integrity_openai_chat", "integrity_openai_responses", "integrity_anthropic", "integrity_gemini")


def _final(scenario: str, strategy: str, probe: str, present: bool, profile: str = "64k") -> dict:
    return {"scenario": scenario, "strategy": strategy, "profile": profile, "repeat": 0, "probe_id": probe, "kind": "recall",
            "point_kind": "final", "step": 9, "request": 10, "present": present, "correct": None, "sample": 0, "fact_age_tokens": 1000,
            "found": "kept" if present else "absent", "source_summarized": False, "status": "seen", "ceiling_correct": None}


def _request(scenario: str, strategy: str, request: int, profile: str = "64k", broken: bool = False) -> dict:
    row = {"scenario": scenario, "strategy": strategy, "profile": profile, "repeat": 0, "request": request, "step": request, "kind": "turn",
           "overflow": False, "refused": False, "missed_trigger": False, "estimate_error": None, "estimate_ape": None, "cached_tokens": 0,
           "true_tokens": 100, "rebilled_tokens": 0, "cache_write_tokens": 0, "output_tokens": 10, "cost_usd": 0.001}
    return row | {column: int(broken) for column in INTEGRITY} | {column.replace("integrity_", "integrity_recorded_"): 0 for column in INTEGRITY}


SESSIONS = 8


def _lead_of(changed: int, probes: int = 61) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The audit's shape, spread over sessions: `probes` probes, probe n in scenario s{n % 8}; `a` and `b` keep the
    same facts but `changed` more of a's (b loses probes 0 … changed − 1, a keeps them: with at most 8, one probe in
    each of `changed` scenarios); both lose the last ten. Probes and requests tables (requests for every scenario
    that has a probe, for both strategies: each finished its cells)."""
    scenario = [f"s{n % SESSIONS}" for n in range(probes)]
    probes_rows = [_final(scenario[n], "a", f"p{n}", n < probes - 10) for n in range(probes)]
    probes_rows += [_final(scenario[n], "b", f"p{n}", changed <= n < probes - 10) for n in range(probes)]
    requests = pd.DataFrame([_request(sc, strategy, k) for sc in sorted(set(scenario)) for strategy in "ab" for k in range(3)])
    return pd.DataFrame(probes_rows), requests


# ---------------------------------------------------------------------------- 3: P(best) withheld on a lead the tests cannot claim
def test_the_rule_is_the_verdict_s_rule_for_a_difference():
    """Units are scenarios (one group each), a scenario's probes flipped together as its sum. Per-probe differences
    of +1 and 0, one +1 in each of k scenarios: the two-sided sign-flip p of k scenarios all one way is 2 / 2^k, so
    five give 0.0625 (no claim, whatever the interval) and six give 0.031; six of eight scenarios of five probes
    leave a two-stage resample without a +1 with chance about (2/8 + 6/8 × (4/5)^5)^8 ≈ 0.003 < 0.025, so the
    interval is clear of 0 and the lead is claimed. Six scenarios for the leader and one against: p = 2 × (1 + 7)
    / 128 = 0.125, no claim. Probes in one scenario move together: however many, they are one unit."""
    from compaction_bench.metrics.stats import difference_claimed

    def scenarios(*sums: float, size: int = 5, total: int = 8) -> list[list[float]]:
        """One scenario per entry of `sums` holding one probe of that difference, then scenarios without one."""
        return [[value] + [0.0] * (size - 1) for value in sums] + [[0.0] * size for _ in range(total - len(sums))]

    assert not difference_claimed(scenarios(*[1.0] * 5))
    assert difference_claimed(scenarios(*[1.0] * 6))
    assert not difference_claimed(scenarios(*[1.0] * 6, -1.0))
    assert not difference_claimed([[1.0]])  # one probe is no evidence
    assert not difference_claimed([[1.0] * 3 + [0.0] * 17, [1.0] * 3 + [0.0] * 17])  # six probes over two scenarios: two units
    assert not difference_claimed([[1.0] * 6 + [0.0] * 34])  # six of 40 probes, the count that once claimed, in one scenario
    assert not difference_claimed([[1.0] * 40] * 5)  # five scenarios that lose everything: still five units
    # A scenario whose probes cancel (+1 and −1) sums to 0: it does not differ. Beside five that lose two of five probes
    # (an interval clear of 0), the sign-flip test has five units, p = 0.0625; beside six, p = 0.031 and the claim stands.
    cancelling, two = [1.0, -1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0, 0.0]
    assert not difference_claimed([*[two] * 5, *[[0.0] * 5] * 2, cancelling])
    assert difference_claimed([*[two] * 6, [0.0] * 5, cancelling])


def test_five_scenarios_that_differ_show_no_p_best_where_the_bootstrap_alone_read_near_certainty():
    """The audit's run, its probes spread over 8 scenarios: 5 of 61 probes differ, all for the leader, one in each of
    5 scenarios; the sentence says no detectable difference (p = 2/32 = 0.0625: five scenarios, fewer than the six the
    test needs) while the bootstrap's share puts the leader near certainty (a two-stage resample without any of the
    five, about (3/8 + 5/8 × (7/8)^8)^8 ≈ 0.015, is the only way it is not first). Withheld in every table that holds
    P(best): the pooled one (terminal and report), the per-scenario summary (what `load_run` returns; one repeat, so
    never judged there) and the verdict's rows."""
    from compaction_bench.metrics.stats import p_best

    probes, requests = _lead_of(5)
    ordered = probes.sort_values(["strategy", "probe_id"])
    table = np.stack([ordered.loc[ordered["strategy"] == s, "present"].to_numpy(dtype=float) for s in "ab"])
    assert p_best(table, ordered.loc[ordered["strategy"] == "a", "scenario"].tolist())[0] > 0.975  # the share as it is
    pooled = overall(probes, requests).set_index("strategy")
    assert pooled["p_best"].isna().all()
    summary = summarize(requests, pd.DataFrame(), probes)
    assert "p_best" in summary.columns and summary["p_best"].isna().all()  # the column stays: NaN, withheld
    (verdict,) = verdicts(summary, probes, requests)
    assert verdict.difference is not None and (verdict.difference.changed, verdict.difference.scenarios) == (5, 8)
    assert verdict.difference.p_value == pytest.approx(0.0625) and verdict.difference.lo > 0  # clear of 0, yet no claim
    assert "no detectable difference" in verdict.sentence
    assert "but only 5 scenarios differ, and the sign-flip test over the scenarios needs 6, 61 probes in 8 scenarios)" in verdict.sentence
    assert all(math.isnan(r.p_best) for r in verdict.rows)
    assert verdict.notes == ["P(best) is not shown: only 5 scenarios differ between a and b, the two highest retentions, and the sign-flip "
                             "test needs 6 before it can tell two strategies apart (it counts scenarios, as a scenario's probes move "
                             "together); a share of bootstrap resamples would claim more than the tests can."]
    header, rows = leaderboard(summary, probes, requests)
    assert [row[header.index("P(best)")] for row in rows] == ["–", "–"]

    # One more, six of 61 in six scenarios: p = 2/64 = 0.031, and the interval is clear of 0 (a resample lacks all six
    # with chance about (2/8 + 6/8 × 0.34)^8 ≈ 0.004 < 0.025). The sentence claims the lead, so P(best) is shown, a's at
    # least 0.975 (b ahead or level in under 2.5% of resamples), and no note is needed.
    probes, requests = _lead_of(6)
    summary = summarize(requests, pd.DataFrame(), probes)
    (verdict,) = verdicts(summary, probes, requests)
    assert verdict.difference is not None and verdict.difference.p_value == pytest.approx(0.03125)
    assert verdict.sentence.startswith("At 64k, a keeps 10 points more facts than b")  # 6 of 61, whole points
    by = {r.strategy: r for r in verdict.rows}
    assert by["a"].p_best >= 0.975 and by["a"].p_best + by["b"].p_best == pytest.approx(1.0)
    assert verdict.notes == []
    # A scenario's own P(best) is judged on its summary draws: one repeat is one draw, never a claim, so NaN even here.
    assert summary["p_best"].isna().all()


def test_a_single_probe_shows_no_p_best():
    """With one probe, one strategy keeping it and the other not, the bootstrap's share is 1.00 against 0.00 on every
    resample, while the retention intervals span most of [0, 1]: no test makes any claim from one probe."""
    probes, requests = _lead_of(1, probes=1)
    probes = probes.assign(present=probes["strategy"] == "a")
    pooled = overall(probes, requests).set_index("strategy")
    assert pooled.loc["a", "retention_lo"] < 0.05 and pooled.loc["a", "retention_hi"] == 1.0
    assert pooled["p_best"].isna().all()


def _exact_signflip(sums: list[float]) -> float:
    """The two-sided sign-flip p of units' sums, by enumerating every sign pattern of those that are not 0."""
    units = [value for value in sums if value != 0]
    observed = abs(sum(units))
    patterns = list(itertools.product((1, -1), repeat=len(units)))
    return sum(abs(sum(sign * value for sign, value in zip(signs, units, strict=True))) >= observed - 1e-12 for signs in patterns) / len(patterns)


def test_p_best_is_shown_exactly_where_the_sentence_claims_the_lead():
    """Whatever the tables, the verdict's P(best) and its sentence rest on one test of the same pair (the two highest
    retentions, both serving): P(best) is a number where the sentence claims a difference and "–" where it does not.
    b loses some of a's facts and gains a few, probe n in scenario s{n % 8}: some seeds give a lead the sentence
    claims, others none. A claim needs the sign-flip test over the scenarios' summed differences to reject, worked out
    here by enumerating the sign patterns; where it does not, nothing is claimed."""
    claimed = []
    for seed in range(10):
        rng = np.random.default_rng(seed)
        size = int(rng.integers(8, 60))
        keeps = {"a": rng.random(size) < 0.7}
        lose, gain = rng.uniform(0.05, 0.5), rng.uniform(0.0, 0.3)
        keeps["b"] = np.where(keeps["a"], rng.random(size) >= lose, rng.random(size) < gain)
        scenario = [f"s{n % SESSIONS}" for n in range(size)]
        probes = pd.DataFrame([_final(scenario[n], s, f"p{n}", bool(keeps[s][n])) for s in "ab" for n in range(size)])
        requests = pd.DataFrame([_request(sc, s, 0) for sc in sorted(set(scenario)) for s in "ab"])
        (verdict,) = verdicts(summarize(requests, pd.DataFrame(), probes), probes, requests)
        assert verdict.difference is not None and ("more facts" in verdict.sentence) == verdict.difference.detectable
        assert [not math.isnan(r.p_best) for r in verdict.rows] == [verdict.difference.detectable] * 2, (seed, verdict.sentence)
        lead = keeps[verdict.difference.a].astype(int) - keeps[verdict.difference.b].astype(int)
        sums = [float(lead[[sc == name for sc in scenario]].sum()) for name in sorted(set(scenario))]
        assert verdict.difference.p_value == pytest.approx(_exact_signflip(sums)), seed
        if _exact_signflip(sums) >= 0.05:
            assert not verdict.difference.detectable, seed
        claimed += [seed] if verdict.difference.detectable else []
    assert 0 < len(claimed) < 10, claimed  # both kinds of table are met


def test_the_glossary_says_when_p_best_is_withheld():
    from compaction_bench.reports.html import describe

    assert "withheld" in describe("P(best)") and "six scenarios that differ" in describe("P(best)")


# ---------------------------------------------------------------------------- 4: a strategy every API rejects, with its scope
def _rejected_once() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Three scenarios of 10 probes and 4 requests each. a keeps 5 of each scenario's probes; b keeps 8, but one of its
    12 requests (scenario s, request 1) breaks a tool pair in every wire format."""
    probes, requests = [], []
    for scenario in ("s", "t", "u"):
        probes += [_final(scenario, "a", f"p{n}", n < 5) for n in range(10)] + [_final(scenario, "b", f"p{n}", n < 8) for n in range(10)]
        requests += [_request(scenario, strategy, k, broken=(scenario, strategy, k) == ("s", "b", 1)) for strategy in "ab" for k in range(4)]
    probes_frame, requests_frame = pd.DataFrame(probes), pd.DataFrame(requests)
    return summarize(requests_frame, pd.DataFrame(), probes_frame), probes_frame, requests_frame


def test_a_strategy_rejected_once_is_ranked_after_with_its_scope_and_the_other_is_not_the_only_one_compared():
    """The audit's run in small: b keeps 30 points more facts on every paired point but one of its 12 requests, in one of
    its three scenarios, is one no API takes. It is ranked after a, and the sentence says why and how much of b that is;
    "only a can be compared" was untrue, as both have paired retention."""
    summary, probes, requests = _rejected_once()
    assert summary.groupby("strategy")["integrity_anthropic"].sum().to_dict() == {"a": 0, "b": 1}
    (verdict,) = verdicts(summary, probes, requests)
    assert [(r.strategy, r.rank, r.retention) for r in verdict.rows] == [("a", 1, 0.5), ("b", 2, 0.8)]
    assert verdict.rows[1].rejected
    assert "can be compared" not in verdict.sentence
    assert verdict.sentence == (
        "At 64k, a is the only strategy that serves every scenario: it keeps 50% of the facts. b is ranked after the strategies that "
        "serve every scenario, as every API would reject some of its requests (HTTP 400): they break tool pairs in every wire format "
        "(1 of its 12 requests, in 1 of its 3 scenarios).")


def test_without_the_requests_integrity_the_scope_is_the_scenarios():
    """A requests table without the integrity columns (the summary alone knows the pair errors): the scope is what the
    summary can tell, its scenarios."""
    summary, probes, requests = _rejected_once()
    (verdict,) = verdicts(summary, probes, requests.drop(columns=list(INTEGRITY)))
    assert verdict.sentence.endswith("they break tool pairs in every wire format (1 of its 3 scenarios).")


# ---------------------------------------------------------------------------- 6: a scenario where every cell failed
def _all_failed_in_u() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Scenarios s, t and u; every cell of u failed (no row in any table), a and b finished s and t."""
    probes = [_final(sc, st, f"p{n}", n < (8 if st == "a" else 4)) for sc in "st" for st in "ab" for n in range(10)]
    requests = pd.DataFrame([_request(sc, st, k) for sc in "st" for st in "ab" for k in range(2)])
    probes_frame = pd.DataFrame(probes)
    return summarize(requests, pd.DataFrame(), probes_frame), probes_frame, requests


def test_a_scenario_in_which_every_cell_failed_is_named():
    """u is named as left out, and the comparison is of s and t alone: two scenarios that differ (a keeps 8 of each
    ten, b 4), too few for the sign-flip test over the scenarios, so P(best) is withheld and the second note says so."""
    summary, probes, requests = _all_failed_in_u()
    assert unfinished(requests) == {}  # the tables alone cannot show it
    assert unfinished(requests, ["s", "t", "u"]) == {("u", "64k"): ["a", "b"]}
    (verdict,) = verdicts(summary, probes, requests, scenarios=["s", "t", "u"])
    assert verdict.notes == ["Left out of this comparison: u, where a, b did not finish their cells (see errors.log).",
                             "P(best) is not shown: only 2 scenarios differ between a and b, the two highest retentions, and the sign-flip "
                             "test needs 6 before it can tell two strategies apart (it counts scenarios, as a scenario's probes move "
                             "together); a share of bootstrap resamples would claim more than the tests can.",
                             "The intervals pool 2 scenarios: with fewer than 6 they resample little but these sessions' probes, so they "
                             "describe these sessions (and, with a model summarizer, the summaries drawn for them), not sessions like them; in "
                             "a simulation of a sampling summarizer they held the mean over sessions 51% of the time on one scenario and 86% on "
                             "three."]
    assert "in 2 scenarios" in verdict.sentence


def _run_folder(root: Path, summary: pd.DataFrame, probes: pd.DataFrame, requests: pd.DataFrame, manifest: dict) -> Path:
    root.mkdir()
    summary.to_parquet(root / "summary.parquet")
    probes.to_parquet(root / "probes.parquet")
    requests.to_parquet(root / "requests.parquet")
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root


def test_the_terminal_names_a_scenario_in_which_every_cell_failed(tmp_path, capsys):
    from compaction_bench import cli

    summary, probes, requests = _all_failed_in_u()
    manifest = {"scenarios": [{"name": n} for n in "stu"], "config": {"strategies": ["a", "b"], "profiles": ["64k"]}}
    cli._print_summary(_run_folder(tmp_path / "run", summary, probes, requests, manifest), report=False)
    out = " ".join(capsys.readouterr().out.split())
    assert "note: left out of the 64k comparison: u, where a, b did not finish" in out


def test_the_terminal_names_a_strategy_that_finished_no_cell_at_one_profile(tmp_path, capsys):
    """b finished its cells at 32k and none at 64k: the report's verdict for 64k names it, and so must the terminal."""
    from compaction_bench import cli

    probes = [_final("s", st, f"p{n}", n < 5, profile) for profile in ("32k", "64k") for st in "ab" for n in range(10)]
    requests = [_request("s", st, 0, profile) for profile in ("32k", "64k") for st in "ab"]
    probes_frame = pd.DataFrame(probes)
    probes_frame = probes_frame[(probes_frame["strategy"] == "a") | (probes_frame["profile"] == "32k")]
    requests_frame = pd.DataFrame(requests)
    requests_frame = requests_frame[(requests_frame["strategy"] == "a") | (requests_frame["profile"] == "32k")]
    summary = summarize(requests_frame, pd.DataFrame(), probes_frame)
    manifest = {"scenarios": [{"name": "s"}], "config": {"strategies": ["a", "b"], "profiles": ["32k", "64k"]}}
    cli._print_summary(_run_folder(tmp_path / "run", summary, probes_frame, requests_frame, manifest), report=False)
    out = " ".join(capsys.readouterr().out.split())
    assert "note: not in the 64k comparison: b, which finished no cell at 64k (see errors.log)" in out
    assert "not in the 32k comparison" not in out and "not in the comparison: b" not in out


def test_the_terminal_says_why_p_best_is_withheld(tmp_path, capsys):
    from compaction_bench import cli

    probes, requests = _lead_of(5)
    summary = summarize(requests, pd.DataFrame(), probes)
    manifest = {"scenarios": [{"name": f"s{k}"} for k in range(SESSIONS)], "config": {"strategies": ["a", "b"], "profiles": ["64k"]}}
    cli._print_summary(_run_folder(tmp_path / "run", summary, probes, requests, manifest), report=False)
    out = " ".join(capsys.readouterr().out.split())
    assert ("note: 64k: P(best) is not shown: only 5 scenarios differ between a and b, the two highest retentions, and the sign-flip "
            "test needs 6 before it can tell two strategies apart (it counts scenarios, as a scenario's probes move together)") in out
    assert "left out" not in out  # every scenario of the manifest finished: the only note is P(best)'s
