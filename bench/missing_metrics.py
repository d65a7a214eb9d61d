"""Metrics a finished run could not compute: said out loud instead of an en dash in a table.

A run whose answerer failed on every call (a wrong key, an endpoint that is down) still finishes:
presence needs no model, and each failed answer is recorded in `probes.answer_error`. Its
`answered` column is then empty everywhere (the rows no model was asked about, contexts that reached
no model, are graded wrong, but a cell whose answerer answered nothing keeps no grade:
`metrics.aggregate.silenced`), which the leaderboard shows as "–" like a metric that does not apply.
`check_run` tells the two apart: a metric with questions to grade and not one answer is *missing*,
and `bench run` says so and exits non-zero unless `--allow-missing-metrics`; from Python,
`compaction_bench.run`, `score` and `load_run` warn (`RuntimeWarning`) for each missing metric.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from compaction_bench.metrics.aggregate import CELL, beyond_window_errors, silent_answerers

#: Exit status of `bench run` when a whole metric could not be computed (1: failed cells, 2: user error).
EXIT_MISSING_METRICS = 3


#: What failed answers do to `answered`, said after their count: a failed answer unscores its point for every strategy
#: (`metrics.aggregate.paired`), and the graded points of its kind weigh for it (`metrics.aggregate.answer_weights`: an
#: overflowed context, graded without a call, cannot fail, and unweighed the points that survive many failures would
#: more often be the overflowed ones). The weights hold where a failure is as likely at every point of a kind; a
#: failure that is not (a rate limit in one session's burst) is what `bench score` mends, asking the failed ones again.
FAILED_ANSWERS_WEIGHED = (
    "their points are left out for every strategy, and the graded points asked of the same strategies weigh for them "
    "in `answered`, which holds if every such point was as likely to fail; `bench score` on the run asks only the failed ones again"
)


#: What a question beyond the answerer's window does to `answered`, said after their count
BEYOND_LEFT_OUT = ("their points are left out for every strategy, and `answered` covers the points at which every context fits "
                   "the answerer (an answerer with a larger window grades them)")


@dataclass(frozen=True)
class RunHealth:
    """What a run could not grade: whole metrics missing, and the questions put to the answerer (`asked`: a call made,
    or refused before it as beyond the answerer's window) that failed."""

    missing: tuple[str, ...]
    failed_answers: int
    asked: int
    first_error: str | None
    #: the cells ("scenario · strategy · profile", "(its judge probes)" after it where only those) of which a repeat got
    #: no grade for any question put to the answerer, every one failed, when other cells got some
    silent_cells: tuple[str, ...] = ()
    #: of `failed_answers`, the questions put to no model, their context beyond the answerer's own window
    #: (`metrics.aggregate.BEYOND_WINDOW`): asking again cannot grade them
    beyond_window: int = 0

    def lines(self) -> list[str]:
        notes = (self.failed_note(), self.silent_note())
        return [*(f"metric not computed: {m}" for m in self.missing), *(note for note in notes if note)]

    def failed_note(self) -> str | None:
        """The line counting the failed answers of a run that computed `answered` (and, apart, the questions beyond the
        answerer's window), None without any."""
        if not self.failed_answers or self.missing:
            return None
        failed = self.failed_answers - self.beyond_window
        beyond = (f"{self.beyond_window} of {self.asked} probe questions were put to no model, their context beyond the "
                  f"answerer's window: {BEYOND_LEFT_OUT}") if self.beyond_window else ""
        if not failed:
            return beyond
        return (f"{failed} of {self.asked} probe answers failed (unscored: {FAILED_ANSWERS_WEIGHED}); first error: {self.first_error}"
                + (f". {beyond}" if beyond else ""))

    def silent_note(self) -> str | None:
        """The line naming `silent_cells` (the first three), None without any."""
        if not self.silent_cells or self.missing:
            return None
        named = ", ".join(self.silent_cells[:3]) + (f" and {len(self.silent_cells) - 3} more" if len(self.silent_cells) > 3 else "")
        return (f"answered not computed where every question of a cell put to the answerer failed, nor at its points for any "
                f"strategy of its scenario and profile: {named}")


def check_run(root: Path) -> RunHealth:
    """Which whole metrics of the run at `root` have questions to grade but not a single answer."""
    probes_path = root / "probes.parquet"
    probes = pd.read_parquet(probes_path) if probes_path.is_file() else pd.DataFrame()
    try:
        config = json.loads((root / "manifest.json").read_text(encoding="utf-8")).get("config") or {}
    except (OSError, ValueError, AttributeError):
        config = {}
    return health_of(probes, config)


def health_of(probes: pd.DataFrame, config: Mapping[str, Any]) -> RunHealth:
    """`check_run` of a run's probes table and its manifest's `config`, for a caller that has read them
    (`compaction_bench.load_run`)."""
    missing: list[str] = []
    failed, asked, beyond_window, first = 0, 0, 0, None
    silent_cells: tuple[str, ...] = ()
    if not probes.empty and "correct" in probes.columns and config.get("answerer"):
        errors = probes["answer_error"].dropna() if "answer_error" in probes.columns else pd.Series(dtype=object)
        answers = int(probes["answer"].notna().sum()) if "answer" in probes.columns else 0
        # the questions put to the answerer: a row no model was asked about (its context reached none) is graded
        # without one, so it neither counts as asked nor makes the metric computed
        failed, asked = int(len(errors)), answers + int(len(errors))
        beyond = beyond_window_errors(errors)
        beyond_window = int(beyond.sum())
        shown = errors[~beyond] if (~beyond).any() else errors  # a failed call's error before a window's
        first = str(shown.iloc[0]) if len(shown) else None
        if failed and not answers and beyond_window == failed:
            missing.append(f"answered (every one of the {asked} questions had a context beyond the answerer {config['answerer']}'s "
                           f"window; first: {first})")
        elif failed and not answers:
            missing.append(f"answered (the answerer {config['answerer']} failed on all {asked} calls; first error: {first})")
        elif probes["correct"].isna().all():
            missing.append(f"answered (none of the {len(probes)} probe answers could be graded)")
        elif failed:
            # the groups silent for their failures (a `judge` probe run without a judge is asked and never graded)
            silent = silent_answerers(probes) & probes["answer_error"].notna().to_numpy()
            judged = (probes["match"] == "judge").to_numpy() if "match" in probes.columns else np.zeros(len(probes), dtype=bool)
            cells = probes.loc[silent, [k for k in CELL if k in probes.columns]].assign(judged=judged[silent]).drop_duplicates()
            silent_cells = tuple(" · ".join(map(str, cell[:-1])) + (" (its judge probes)" if cell[-1] else "")
                                 for cell in cells.itertuples(index=False, name=None))
    return RunHealth(tuple(missing), failed, asked, first, silent_cells, beyond_window)
