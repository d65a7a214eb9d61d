"""The gate's metrics outside the probes (failed requests, overflows, integrity, costs, …) with a model's summaries:
tested per summary draw, a session in one repeat, as the probe metrics are. A summary's length moves later
compactions, overflows and costs, so two recordings of one unchanged prompt differ in them too; compared exactly, the
forty-sixth pass's audit failed `failed_requests:0` or `overflows:0` in 6 of 6 such pairs. Hand-built run folders
whose requests give each draw's value by construction; the right answers are worked out by hand (sign patterns, sums)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from compaction_bench.metrics.aggregate import draw_metrics, summarize
from compaction_bench.reports.gate import Rule, Run, gate, metric_draws
from tests.test_verdict_audit_gate import PROFILE, probe_rows, write_run

REQUESTS_PER_DRAW = 10


def requests(failed: dict[tuple[int, int], int], strategy: str = "x") -> pd.DataFrame:
    """Ten turn requests per draw (scenario `s<k>`, repeat r) of `failed`, the first `failed[k, r]` of them refused by
    the provider as too long; each sent one 100 tokens, 20 of them from the cache after the repeat's first request."""
    rows = []
    for (k, repeat), overflowing in failed.items():
        for n in range(REQUESTS_PER_DRAW):
            sent = n >= overflowing
            rows.append({
                "scenario": f"s{k}", "strategy": strategy, "profile": PROFILE, "repeat": repeat, "request": n, "step": n, "kind": "turn",
                "attempt": 0, "overflow": not sent, "refused": False, "missed_trigger": False, "estimate_error": 0.0,
                "estimate_ape": float("nan"), "true_tokens": 100, "cached_tokens": 20 if sent and n > overflowing else 0, "rebilled_tokens": 0,
                "cache_write_tokens": 0, "output_tokens": 10 if sent else 0, "cost_usd": 0.001 if sent else 0.0,
            })
    return pd.DataFrame(rows)


def folder(root: Path, failed: dict[tuple[int, int], int], summarizer: str = "openai/gpt-5-mini") -> Path:
    """A run folder of strategy x whose draws fail `failed` requests each; every probe kept (the probes do not move)."""
    scenarios = 1 + max(k for k, _ in failed)
    probes = [row | {"repeat": r} for row in probe_rows("x", scenarios, 4) for k, r in failed if row["scenario"] == f"s{k}"]
    return write_run(root, probes, requests=requests(failed), config={"summarizer": summarizer, "repeats": 1 + max(r for _, r in failed)})


def row_of(result, metric: str = "failed_requests") -> dict:
    rows = result.table[result.table["metric"] == metric].to_dict("records")
    assert len(rows) == 1
    return rows[0]


def test_two_recordings_of_one_prompt_do_not_fail_on_their_noise(tmp_path):
    """Eight sessions; the candidate's recording fails one request more in three of them and one fewer in two (the
    summaries' lengths moved, the prompt did not): +1 in all, which the exact comparison failed. Per draw the five
    changed draws' signs are three against two: P(a sum of five random ±1 ≤ −1) = (10 + 5 + 1) / 32 = 0.5."""
    base = {(0, 0): 0, (1, 0): 1, (2, 0): 0, (3, 0): 2, (4, 0): 0, (5, 0): 1, (6, 0): 0, (7, 0): 0}
    cand = {(0, 0): 1, (1, 0): 0, (2, 0): 1, (3, 0): 2, (4, 0): 1, (5, 0): 0, (6, 0): 0, (7, 0): 0}
    result = gate(folder(tmp_path / "a", base), folder(tmp_path / "b", cand), [Rule.parse("failed_requests:0")])
    row = row_of(result)
    assert (row["baseline"], row["candidate"], row["change"]) == (4, 5, 1)
    assert row["draws"] == 8 and row["min_draws"] == 5
    assert row["p_value"] >= 0.5
    assert row["status"] == "undecided" and result.passed and result.undecided == ["x 32k failed_requests: +1"]


def test_a_rise_in_every_draw_fails(tmp_path):
    """Six sessions, each failing one request more in the candidate: the one-sided sign-flip p is 0.5^6 = 1/64 and every
    draw's change is the same, beyond the tolerance: a regression the tests confirm."""
    base = {(k, 0): 0 for k in range(6)}
    cand = {(k, 0): 1 for k in range(6)}
    row = row_of(result := gate(folder(tmp_path / "a", base), folder(tmp_path / "b", cand), [Rule.parse("failed_requests:0")]))
    assert row["change"] == 6 and row["p_value"] == pytest.approx(1 / 64)
    assert row["status"] == "fail" and result.failures == ["x 32k failed_requests: +6"]
    # a tolerance of 6 (the whole rise) is not exceeded: the estimate alone decides that
    assert row_of(gate(tmp_path / "a", tmp_path / "b", [Rule.parse("failed_requests:6")]))["status"] == "ok"


def test_one_recorded_session_cannot_fail_with_sampled_summaries_and_fails_exactly_with_a_deterministic_summarizer(tmp_path):
    """One session, one repeat, three more overflows: one draw, which no test can call a regression when a model wrote
    the summaries (the row says it cannot fail, and the gate is untested: exit 2, never a pass); with the offline
    summarizer the runs repeat exactly, and the rise is the change's: it fails, with no test."""
    result = gate(folder(tmp_path / "a", {(0, 0): 0}), folder(tmp_path / "b", {(0, 0): 3}), [Rule.parse("failed_requests:0")])
    assert row_of(result)["status"] == "cannot fail" and not result.tested
    assert any("1 summary draw (1 session × 1 repeat), fewer than the 5 the sign-flip test needs" in note
               and "requests and compactions in one run follow its summaries" in note for note in result.notes)
    offline = "offline/extractive"
    exact = gate(folder(tmp_path / "c", {(0, 0): 0}, offline), folder(tmp_path / "d", {(0, 0): 3}, offline), [Rule.parse("failed_requests:0")])
    assert row_of(exact)["status"] == "fail" and row_of(exact)["p_value"] is None and row_of(exact)["draws"] is None


def test_a_sum_is_tested_on_the_figure_the_table_shows(tmp_path):
    """The table shows a sum over sessions of each session's mean over its repeats: s0 fails 1 and 3 requests more in its
    two repeats (mean 2), s1 4 more in its one, so +6. The draws' changes are scaled so their mean is that figure:
    s0's two draws by 3/2, s1's one by 3 (−1.5, −4.5, −12 in the good direction, mean −6)."""
    base = folder(tmp_path / "a", {(0, 0): 0, (0, 1): 0, (1, 0): 0})
    cand = folder(tmp_path / "b", {(0, 0): 1, (0, 1): 3, (1, 0): 4})
    runs = (Run.load(base), Run.load(cand))
    draws = tuple(draw_metrics(run.tables["requests"], run.tables["compactions"]) for run in runs)
    changes = metric_draws(draws, "x", PROFILE, "failed_requests")  # type: ignore[arg-type]
    assert sorted(changes["change"]) == [-12, -4.5, -1.5]
    assert row_of(gate(base, cand, [Rule.parse("failed_requests:0")]))["change"] == pytest.approx(-changes["change"].mean()) == 6


def test_a_rate_is_tested_on_the_pooled_ratio_the_table_shows():
    """The table pools a rate over sessions (`aggregate.combine`): each session's rate weighs what it is a share of, a
    repeat's tokens counted at their mean over the repeats. Session a caches 0.5 of 100 eligible tokens in both runs'
    two repeats but the candidate's 0.4 and 0.6; session b 0.5 of 200 in the baseline's one and 0.45 in the candidate's:
    pooled (50 + 100) / 300 = 0.5 against (50 + 90) / 300, a change of −1/30. Each draw weighs its tokens over its
    session's repeats (50, 50, 200 of 300, times 3 draws: 0.5, 0.5, 2) in its change and in its share of the
    tolerance, so the draws' mean is −1/30 (their rates' plain mean, −1/60, weighed a's repeats as much as b)."""
    def drawn(rates: list[float]) -> pd.DataFrame:
        return pd.DataFrame({"scenario": ["a", "a", "b"], "repeat": [0, 1, 0], "strategy": "x", "profile": PROFILE,
                             "cache_hit_rate": rates, "cache_eligible_tokens": [100.0, 100.0, 200.0]})
    changes = metric_draws((drawn([0.5, 0.5, 0.5]), drawn([0.4, 0.6, 0.45])), "x", PROFILE, "cache_hit_rate")
    assert changes["weight"].tolist() == pytest.approx([0.5, 0.5, 2.0])
    assert changes["change"].tolist() == pytest.approx([-0.05, 0.05, -0.1])
    assert changes["change"].mean() == pytest.approx(-1 / 30)


def test_a_rate_whose_tokens_move_between_sessions_changes_as_its_pooled_ratio_does():
    """The candidate keeps each session's hit rate (0.8 in a, 0.4 in b) but sends 150 and 50 eligible tokens where the
    baseline sent 100 and 100: pooled, (120 + 20) / 200 = 0.7 against 0.6, a rise of 0.1 with no draw's rate moved.
    Linearized about both runs' pooled 260/400 = 0.65 (each draw's amount moved times its rate's distance from it, over
    the mean amounts' 200, times 2 draws): a's 50 × 0.15 and b's −50 × −0.25 read 0.075 and 0.125, mean 0.1. Swapping
    the runs negates them; the draws' rate differences alone read no change."""
    def drawn(amounts: list[float]) -> pd.DataFrame:
        return pd.DataFrame({"scenario": ["a", "b"], "repeat": 0, "strategy": "x", "profile": PROFILE,
                             "cache_hit_rate": [0.8, 0.4], "cache_eligible_tokens": amounts})
    base, cand = drawn([100.0, 100.0]), drawn([150.0, 50.0])
    changes = metric_draws((base, cand), "x", PROFILE, "cache_hit_rate")
    assert changes["change"].tolist() == pytest.approx([0.075, 0.125])
    assert changes["weight"].tolist() == pytest.approx([1.25, 0.75])
    assert metric_draws((cand, base), "x", PROFILE, "cache_hit_rate")["change"].tolist() == pytest.approx([-0.075, -0.125])


def test_a_draws_metrics_are_its_repeat_alone():
    """Repeat 0 of a cell fails 2 of its 10 requests, repeat 1 none: the draws read 2 and 0 and the summary their mean,
    1. The cache hit rate of a draw leaves out its own first sent request: repeat 0 sends requests 2–9, and 7 of them
    read 20 of 100 tokens from the cache (0.2); repeat 1 sends 0–9, 9 of them from the cache (0.2)."""
    table = requests({(0, 0): 2, (0, 1): 0})
    draws = draw_metrics(table, pd.DataFrame())
    assert draws.sort_values("repeat")["failed_requests"].tolist() == [2, 0]
    assert draws.sort_values("repeat")["requests"].tolist() == [8, 10]
    assert draws["cache_hit_rate"].tolist() == pytest.approx([0.2, 0.2])
    assert summarize(table, pd.DataFrame(), pd.DataFrame())["failed_requests"].tolist() == [1]
    with pytest.raises(ValueError, match=r"requests\.cost_usd"):
        draw_metrics(table.drop(columns="cost_usd"), pd.DataFrame())


def test_a_run_without_the_request_columns_leaves_the_metric_untested_not_compared_exactly(tmp_path):
    """A run folder whose requests table holds only the required columns (written by an earlier version, or by hand)
    cannot give a metric per draw; with a model's summaries the rule is untested (named), not compared exactly."""
    rows = probe_rows("x", 6, 4)
    result = gate(write_run(tmp_path / "a", rows), write_run(tmp_path / "b", rows), [Rule.parse("cost:0")])
    assert row_of(result, "cost")["status"] == "untested" and not result.tested
    assert any(note.startswith("untested: x 32k cost: the baseline's tables lack requests.missed_trigger") for note in result.notes)


def test_the_probe_and_request_tests_are_one_family(tmp_path):
    """A retention rule and a failed-requests rule, both dropping in each of six sessions (p = 1/64 each): the gate is
    one decision, so the two are adjusted together. They drop in the same sessions, and the joint test flips a
    session's draw in both rows at once: of its 64 assignments only the identity gives either row p ≤ 1/64, so both
    keep 1/64 (Holm's method, which assumes nothing of how they depend, said 2/64). When the failed requests rise in
    six other sessions of twelve instead, the rows are independent: of 4096 assignments, 64 leave either row's six
    draws unflipped, 64 + 64 − 1 = 127 one or the other, so both read 127/4096, just under Holm's 128/4096."""
    lost = {(k, 0) for k in range(6)}
    base = write_run(tmp_path / "a", probe_rows("x", 6, 4), requests=requests({(k, 0): 0 for k in range(6)}))
    cand = write_run(tmp_path / "b", probe_rows("x", 6, 4, lost=lost), requests=requests({(k, 0): 1 for k in range(6)}))
    result = gate(base, cand, [Rule.parse("retention:0"), Rule.parse("failed_requests:0")])
    assert result.table["p_value"].tolist() == pytest.approx([1 / 64, 1 / 64]) and result.table["adjusted"].all()
    assert not result.passed and len(result.failures) == 2
    assert np.isclose(row_of(result, "retention")["p_test"], 1 / 64)
    base = write_run(tmp_path / "c", probe_rows("x", 12, 4), requests=requests({(k, 0): 0 for k in range(12)}))
    cand = write_run(tmp_path / "d", probe_rows("x", 12, 4, lost=lost), requests=requests({(k, 0): int(k >= 6) for k in range(12)}))
    apart = gate(base, cand, [Rule.parse("retention:0"), Rule.parse("failed_requests:0")])
    assert apart.table["p_value"].tolist() == pytest.approx([127 / 4096, 127 / 4096]) and not apart.passed


def test_integrity_per_draw_sums_only_the_wire_formats_both_runs_checked(tmp_path):
    """The baseline was measured before a wire format was checked (its requests have no column for it); the candidate
    has one error in it in each of six sessions. Per draw, as in the exact comparison, only the formats both runs
    checked are summed: no change, where summing the candidate's would fail six draws of six."""
    failed = {(k, 0): 0 for k in range(6)}
    rows = probe_rows("x", 6, 4)
    formats = {"integrity_openai_chat": 0, "integrity_anthropic": 0}
    table = requests(failed).assign(**formats)
    base = write_run(tmp_path / "a", rows, requests=table)
    cand = write_run(tmp_path / "b", rows, requests=table.assign(integrity_gemini=(table["request"] == 0).astype(int)))
    row = row_of(gate(base, cand, [Rule.parse("integrity:0")]), "integrity")
    assert (row["change"], row["draws"], row["status"]) == (0, 6, "ok")


def test_rows_that_move_together_cost_the_family_one_test(tmp_path):
    """Seven sessions; each of four strategies loses a probe and fails a request more in each of them: every row's
    one-sided sign-flip p is 0.5^7 = 1/128. The joint test flips a session's draw in all eight rows at once, and only
    the identity of its 128 assignments gives any row p ≤ 1/128, so each row's adjusted p stays 1/128 and all eight
    fail. (Holm's method, the gate's until the forty-eighth pass, multiplied it by 8: 8/128 ≥ 0.05, and no row could
    fail whatever the candidate did.)"""
    names = [f"x{k}" for k in range(4)]
    lost = {(k, 0) for k in range(7)}
    base = [row for name in names for row in probe_rows(name, 7, 4)]
    cand = [row for name in names for row in probe_rows(name, 7, 4, lost=lost)]
    more = {(k, 0): 1 for k in range(7)}
    result = gate(
        write_run(tmp_path / "a", base, requests=pd.concat([requests(dict.fromkeys(more, 0), name) for name in names])),
        write_run(tmp_path / "b", cand, requests=pd.concat([requests(more, name) for name in names])),
        [Rule.parse("retention:0"), Rule.parse("failed_requests:0")],
    )
    assert result.table["p_test"].tolist() == pytest.approx([1 / 128] * 8)
    assert result.table["p_value"].tolist() == pytest.approx([1 / 128] * 8) and len(result.failures) == 8


def test_a_row_the_family_puts_out_of_reach_cannot_fail_and_says_so(tmp_path):
    """Seven sessions, eight strategies, every retention row changed in all seven: `x0` lost a probe in each (p =
    1/128); `x1`…`x7` each lost one in six sessions and gained one in the seventh, a different session each (p = 8/128:
    all drops, or one rise among them). Each row's drops-only sign pattern is another assignment of the joint test, so 8
    of its 128 give some row p ≤ 1/128: `x0`'s adjusted p is 8/128 ≥ 0.05. Its draws could be no worse, so it cannot
    fail; nor could any `x<j>` with all seven draws dropping (then it shares `x0`'s pattern: 7 assignments of 128). No
    row of the rule could fail whatever the candidate did: the gate is untested (exit 2), never passed (the
    forty-seventh pass's audit: such a gate passed a candidate strictly worse than one it failed)."""
    base, cand = probe_rows("x0", 7, 4), probe_rows("x0", 7, 4, lost={(k, 0) for k in range(7)})
    for j in range(1, 8):
        base += probe_rows(f"x{j}", 7, 4, lost={(j - 1, 0)})
        cand += probe_rows(f"x{j}", 7, 4, lost={(k, 0) for k in range(7) if k != j - 1})
    result = gate(write_run(tmp_path / "a", base), write_run(tmp_path / "b", cand), [Rule.parse("retention:0")])
    rows = result.table.set_index("strategy")
    assert rows["p_test"].tolist() == pytest.approx([1 / 128] + [8 / 128] * 7)
    assert rows.loc["x0", "p_value"] == pytest.approx(8 / 128)
    assert not result.failures and not result.tested and set(result.table["status"]) == {"cannot fail"}
    (note,) = [note for note in result.notes if note.startswith("cannot fail: the gate's 8 tests are adjusted together")]
    assert "x0 32k retention (7 draws, p ≥ 0.0625)" in note and "x1 32k retention (7 draws, p ≥ 0.0547)" in note
    assert "8 draws, every one worse, fail whatever the other rows show" in note
    assert result.markdown().count("| 7 | 5 | cannot fail (too few summary draws for the family) |") == 8


def test_a_draw_one_run_lacks_leaves_the_row_untested(tmp_path):
    """The candidate's recording lacks repeat 1 of s0 (a failed repeat): the table's figure averages each run's own
    repeats (s0 in the baseline over two, in the candidate over one), the test pairs the draws both hold, and the two
    would measure different things, so the row is untested and the note names the draw."""
    base = {(k, r): 0 for k in range(6) for r in range(2)}
    cand = {key: 1 for key in base if key != (0, 1)}
    result = gate(folder(tmp_path / "a", base), folder(tmp_path / "b", cand), [Rule.parse("failed_requests:0")], allow_different_inputs=True)
    assert row_of(result)["status"] == "untested" and not result.tested
    assert any("the runs hold different summary draws (s0 repeat 1 (baseline only))" in note for note in result.notes)


def test_draws_already_at_the_worst_cannot_make_a_row_fail(tmp_path):
    """Six sessions; the baseline already lost all four probes of sessions 0 and 1, and the candidate loses every probe
    everywhere, the worst data there is. Only four draws can get worse: 0.5^4 = 0.0625 ≥ 0.05, so no candidate could
    fail the row. It reads "cannot fail" and the gate is untested (exit 2); it read "passed with 1 undecided row"
    (the forty-eighth pass's audit). With the baseline keeping something in every session, the same candidate fails."""
    floor = {(k, n) for k in (0, 1) for n in range(4)}
    every = {(k, n) for k in range(6) for n in range(4)}
    result = gate(write_run(tmp_path / "a", probe_rows("x", 6, 4, lost=floor)), write_run(tmp_path / "b", probe_rows("x", 6, 4, lost=every)),
                  [Rule.parse("retention:0")])
    row = row_of(result, "retention")
    assert (row["draws"], row["worsenable"], row["status"]) == (6, 4, "cannot fail") and not result.tested and not result.failures
    assert any("6 summary draws (6 sessions × 1 repeat), of which 2 cannot get worse" in note and "so 4 could, fewer than the 5" in note
               for note in result.notes)
    assert "| 6 | 5 | cannot fail (too few summary draws) |" in result.markdown()
    once = {(k, 0) for k in range(2)}
    fails = gate(write_run(tmp_path / "c", probe_rows("x", 6, 4, lost=once)), write_run(tmp_path / "d", probe_rows("x", 6, 4, lost=every)),
                 [Rule.parse("retention:0")])
    assert row_of(fails, "retention")["worsenable"] == 6 and len(fails.failures) == 1


def test_a_best_case_leaves_the_draws_at_the_worst_unchanged(tmp_path):
    """Eight sessions. `x0` is unchanged, its baseline already lost everything in sessions 0–2: only its five draws of
    sessions 3–7 can get worse, and at best it is extreme under the 2^3 = 8 of the 256 assignments that leave those five
    unflipped. Six other strategies changed in every session, each losing a probe everywhere but where it gained one
    (in session 3, 4, 5, 6 or 7, or in 3 and 4): each is extreme under one assignment, the one that flips its gains,
    never one of `x0`'s eight. So `x0`'s best case is 8 + 6 = 14 of 256, 0.0547 ≥ 0.05: it cannot fail. Counting all
    eight of its draws it would be 1 + 6 = 7 of 256 and "ok" (the forty-eighth pass's audit: a row at the worst already
    escaped the mark)."""
    floor = {(k, n) for k in range(3) for n in range(4)}
    base, cand = probe_rows("x0", 8, 4, lost=floor), probe_rows("x0", 8, 4, lost=floor)
    for j, gains in enumerate(({3}, {4}, {5}, {6}, {7}, {3, 4}), start=1):
        base += probe_rows(f"x{j}", 8, 4, lost={(k, 0) for k in gains})
        cand += probe_rows(f"x{j}", 8, 4, lost={(k, 0) for k in range(8) if k not in gains})
    result = gate(write_run(tmp_path / "a", base), write_run(tmp_path / "b", cand), [Rule.parse("retention:0")])
    rows = result.table.set_index("strategy")
    assert (rows.loc["x0", "worsenable"], rows.loc["x0", "status"]) == (5, "cannot fail")
    assert any("x0 32k retention (8 draws, p ≥ 0.0547)" in note for note in result.notes)
