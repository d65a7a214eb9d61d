"""`bench compare --html`'s better and worse tags keep the family error the page claims (the s43 audit's F2): runs drawn
from one process, whose probes of a scenario move together (they share its summary), tagged a strategy in about one
page of five with the probe-level sign-flip test; the gate's test (`gate.probe_test`, clustered by scenario) tags at
most about 5%."""

from __future__ import annotations

import numpy as np
import pandas as pd

from compaction_bench.reports.compare import adjustment_note, retention_changes

STRATEGIES = [f"strategy{k}" for k in range(10)]
SCENARIOS, PROBES, CHECKPOINTS, PAGES = 7, 12, 2, 30


def _run(rng: np.random.Generator, dependent: np.ndarray, fixed: np.ndarray) -> pd.DataFrame:
    """One run of every strategy (the audit's `sim_compare.py`): half the probes depend on the summary, whose quality is
    drawn once per (run, strategy, scenario), a full or a terse one as a sampling summarizer writes; the rest are fixed."""
    rows = []
    for strategy in STRATEGIES:
        for s in range(SCENARIOS):
            full = rng.random() < 0.5
            for p in range(PROBES):
                present = bool(rng.random() < (0.8 if full else 0.4)) if dependent[s, p] else bool(fixed[s, p])
                rows += [(f"s{s}", strategy, "64k", 0, f"p{p}", "checkpoint", step, step, present) for step in range(CHECKPOINTS)]
    return pd.DataFrame(rows, columns=["scenario", "strategy", "profile", "repeat", "probe_id", "point_kind", "step", "request", "present"])


def test_two_runs_of_one_process_are_tagged_on_at_most_about_five_percent_of_pages():
    """30 pages of 10 strategies, no strategy differing between the two runs: every tag is a false claim, and the page
    says its tags' family error is 0.05. At a true 5%, 30 pages tag 1.5 on average and more than 5 with probability
    0.3%; the probe-level sign-flip test tagged about a quarter of such pages (24 of 100 in the audit; 11 of these 30,
    where the gate's test tags 1)."""
    tagged = 0
    for page in range(PAGES):
        rng = np.random.default_rng(1000 + page)
        dependent, fixed = rng.random((SCENARIOS, PROBES)) < 0.5, rng.random((SCENARIOS, PROBES)) < 0.7
        a, b = _run(rng, dependent, fixed), _run(rng, dependent, fixed)
        changes = retention_changes(a, b, [(strategy, "64k") for strategy in STRATEGIES])
        tagged += any(change is not None and change.detectable for change in changes.values())
    assert tagged <= 5


def test_a_rows_p_and_changed_count_are_the_gate_tests_not_the_scenarios():
    """One session in four repeats, each repeat of the candidate losing the same two of ten probes: one scenario differs
    (its sign-flip test over scenarios reads 1.0), four summary draws do. The page's row carries the gate's draw test:
    two-sided, 2 × 0.5^4 = 0.125 (four draws of the same change), and 4 changed draws;
    too few to reach 0.05 (2 × 0.5^4 ≥ 0.05), so it is no member of the adjusted family."""
    def run(lost: set[int]) -> pd.DataFrame:
        return pd.DataFrame([("s0", "x", "64k", r, f"p{p}", "checkpoint", 5, 5, p not in lost) for r in range(4) for p in range(10)],
                            columns=["scenario", "strategy", "profile", "repeat", "probe_id", "point_kind", "step", "request", "present"])

    (change,) = retention_changes(run(set()), run({0, 1}), [("x", "64k")]).values()
    assert change is not None and change.mean == -0.2
    assert (change.p_value, change.changed, change.p_adjusted) == (0.125, 4, None)
    assert not change.detectable
    note = adjustment_note({("x", "64k"): change})
    assert note is not None and "The intervals pool as few as 1 scenario: with fewer than 6 they resample little but this session's probes" in note
