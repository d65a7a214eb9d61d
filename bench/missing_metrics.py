"""Metrics a finished run could not compute: said out loud instead of an en dash in a table.

A run whose answerer failed on every call (a wrong key, an endpoint that is down) still finishes:
presence needs no model, and each failed answer is recorded in `probes.answer_error`. Its
`answered` column is then empty everywhere, which the leaderboard shows as "–" like a metric that
does not apply. `check_run` tells the two apart: a metric with something to grade and no grade at
all is *missing*, and `bench run` says so and exits non-zero unless `--allow-missing-metrics`; from
Python, `compaction_bench.run`, `score` and `load_run` warn (`RuntimeWarning`) for each missing metric.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

#: Exit status of `bench run` when a whole metric could not be computed (1: failed cells, 2: user error).
EXIT_MISSING_METRICS = 3


@dataclass(frozen=True)
class RunHealth:
    """What a run could not grade: whole metrics missing, and answer calls that failed."""

    missing: tuple[str, ...]
    failed_answers: int
    asked: int
    first_error: str | None

    def lines(self) -> list[str]:
        out = [f"metric not computed: {m}" for m in self.missing]
        if self.failed_answers and not self.missing:
            out.append(f"{self.failed_answers} of {self.asked} probe answers failed (unscored); first error: {self.first_error}")
        return out


def check_run(root: Path) -> RunHealth:
    """Which whole metrics of the run at `root` have probes to grade but not a single grade."""
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
    failed, asked, first = 0, 0, None
    if not probes.empty and "correct" in probes.columns and config.get("answerer"):
        errors = probes["answer_error"].dropna() if "answer_error" in probes.columns else pd.Series(dtype=object)
        failed, asked = int(len(errors)), int(len(probes))
        first = str(errors.iloc[0]) if len(errors) else None
        if probes["correct"].isna().all():
            reason = (
                f"the answerer {config['answerer']} failed on all {asked} calls; first error: {first}" if failed == asked
                else f"none of the {asked} probe answers could be graded"
            )
            missing.append(f"answered ({reason})")
    return RunHealth(tuple(missing), failed, asked, first)
