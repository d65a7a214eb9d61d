"""compaction-bench: replay agent transcripts through context-compaction strategies and measure them.

Python API:
- `load_transcript(path, format="auto")` / `load_transcripts(path)`: import recorded sessions;
- `replay(transcript, strategy, profile=..., summarizer=..., options={...})`: one cell, with
  `.requests` and `.compactions`;
- `run(paths, strategies, profiles, ...)`: a whole run into `runs/<id>/`;
- `score(run_dir, probes=..., answerer=...)`: measure a finished run again from its folder,
  without replaying, into a new folder;
- `load_run(path)`: the run's tables as pandas DataFrames.

`run`, `score` and `load_run` warn (`RuntimeWarning`) where `bench run` prints a warning: a metric the run could
not compute at all, and (`load_run`) every failed cell. The notebooks also use a small set of helpers, supported
as this API is (README, Python API): `runner.Case`, `scenarios.synthetic.generate`, `profiles.get_profile`,
`ReplayResult.turn_requests` / `.overflows` / `.final`, and in `metrics.aggregate` `compared_rows`,
`paired_differences` (one profile at a time), `overall`, `unfinished` and `shared_scenarios`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from compaction_bench.missing_metrics import RunHealth

# Offline by default: no cost-map fetch, no tokenizer downloads (a remote model still works).
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")

from compaction_bench.importing import load_transcript, load_transcripts  # noqa: E402
from compaction_bench.records import ReplayResult  # noqa: E402
from compaction_bench.replay import replay  # noqa: E402
from compaction_bench.transcript import Item, Transcript, Usage  # noqa: E402

__all__ = ["Item", "ReplayResult", "Transcript", "Usage", "load_run", "load_transcript", "load_transcripts", "replay", "run", "score"]
__version__ = "0.1.0"


def run(*args: Any, **kwargs: Any) -> Path:
    """Run a benchmark (see `compaction_bench.runner.run`). A metric the run could not compute at all (every answer
    failed: a wrong key, an endpoint that is down) is a `RuntimeWarning` naming it, as `bench run` warns and exits 3
    (`missing_metrics.check_run`); its column is NaN, which would otherwise read as "does not apply". Answers that
    failed in a run that computed `answered` are a `RuntimeWarning` counting them."""
    from compaction_bench.runner import run as _run

    root = _run(*args, **kwargs)
    _warn_missing_metrics(root, _health_at(root))
    return root


def score(*args: Any, **kwargs: Any) -> Path:
    """Measure a finished run again from its folder, without replaying (see `compaction_bench.runner.score`); a
    metric it could not compute is a `RuntimeWarning`, as for `run` (`bench score` warns and exits 3)."""
    from compaction_bench.runner import score as _score

    root = _score(*args, **kwargs)
    _warn_missing_metrics(root, _health_at(root))
    return root


def _health_at(root: Path) -> RunHealth:
    """What the run at `root` could not grade (`missing_metrics.check_run`)."""
    from compaction_bench.missing_metrics import check_run

    return check_run(Path(root))


def _warn_missing_metrics(path: str | Path, health: RunHealth) -> None:
    """One `RuntimeWarning` per whole metric of the run at `path` that could not be computed, one counting the answers
    that failed in a run that computed `answered`, and one naming the cells whose answerer answered nothing when others
    did: the CLI's lines (bench/cli.py, `_warn_missing_metrics`)."""
    import warnings

    for metric in health.missing:
        warnings.warn(f"{path}: metric not computed: {metric}; its NaN columns mean not computed, not \"does not apply\"",
                      RuntimeWarning, stacklevel=3)
    for note in (health.failed_note(), health.silent_note()):
        if note:
            warnings.warn(f"{path}: {note}", RuntimeWarning, stacklevel=3)


def load_run(path: str | Path) -> dict[str, pd.DataFrame]:
    """A finished run's tables as DataFrames, by name: `requests` (one row per request: turns, their retries,
    summary requests, the final context), `compactions` (one per compaction), `probes` (one per probe per
    probe point) and `summary` (one per scenario, strategy and profile, repeats pooled), each with a plain
    RangeIndex; every table but `summary` starts with scenario, strategy, profile, repeat (the README's run
    layout lists the columns), each column with the dtype its name has in every run. A run with failed cells
    loads with a `RuntimeWarning` naming every failed cell with its error, and a metric the run could not
    compute at all (every answer failed) with a `RuntimeWarning` naming it, and some failed answers with one counting
    them (`missing_metrics.health_of`), as `bench run` warns. Raises `StoreError`, naming the file, for a path that is no run
    folder, an unfinished run, a folder a run is working in, a damaged table (a column it needs missing or of
    another type) or manifest (its failed cells not objects with their cell and error, …) and a file or folder
    the system refuses to read (`compaction_bench.store.load_run`, `compaction_bench.store.read_manifest`; the
    manifest read once, `load_run_with_manifest`)."""
    import warnings

    from compaction_bench.missing_metrics import health_of
    from compaction_bench.store import failed_cells_in, load_run_with_manifest, p_best_judged_in

    tables, manifest = load_run_with_manifest(path)
    if not p_best_judged_in(manifest):
        warnings.warn(f"{path}: its summary's per-scenario P(best) was judged by an earlier rule (before this version, each "
                      "scenario's probes counted as independent units, not its summary draws); its `p_best` is NaN here (`bench score` "
                      "computes it again)", RuntimeWarning, stacklevel=2)
    failed = failed_cells_in(manifest)
    if failed:
        warnings.warn(_failed_cells_text(path, failed), RuntimeWarning, stacklevel=2)
    _warn_missing_metrics(path, health_of(tables["probes"], manifest.get("config") or {}))
    return tables


def _failed_cells_text(path: str | Path, failed: list[dict[str, Any]]) -> str:
    """The warning of a run with failed cells: the first with its error, then, of several, each error once with every
    cell it failed, so no failed cell goes unnamed (the manifest's `cells.failed`; `errors.log` holds the tracebacks)."""
    first = failed[0]
    text = (f"{path}: {len(failed)} cell(s) failed (first: {first.get('cell')}: {first.get('error')}); the tables hold the finished "
            "cells only; `bench run --resume` redoes the failed ones")
    if len(failed) == 1:
        return text
    by_error: dict[str, list[str]] = {}
    for cell in failed:
        by_error.setdefault(str(cell.get("error")), []).append(str(cell.get("cell")))
    return text + ". All of them: " + "; ".join(f"{error} ({len(cells)}): {', '.join(cells)}" for error, cells in by_error.items())
