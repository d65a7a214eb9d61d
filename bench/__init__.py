"""compaction-bench: replay agent transcripts through context-compaction strategies and measure them.

Python API:
- `load_transcript(path, format="auto")` / `load_transcripts(path)`: import recorded sessions;
- `replay(transcript, strategy, profile=..., summarizer=..., options={...})`: one cell, with
  `.requests` and `.compactions`;
- `run(paths, strategies, profiles, ...)`: a whole run into `runs/<id>/`;
- `score(run_dir, probes=..., answerer=...)`: measure a finished run again from its folder,
  without replaying, into a new folder;
- `load_run(path)`: the run's tables as pandas DataFrames.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

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
    """Run a benchmark (see `compaction_bench.runner.run`)."""
    from compaction_bench.runner import run as _run

    return _run(*args, **kwargs)


def score(*args: Any, **kwargs: Any) -> Path:
    """Measure a finished run again from its folder, without replaying (see `compaction_bench.runner.score`)."""
    from compaction_bench.runner import score as _score

    return _score(*args, **kwargs)


def load_run(path: str | Path) -> dict[str, pd.DataFrame]:
    """A finished run's tables as DataFrames, by name: `requests` (one row per request: turns, their retries,
    summary requests, the final context), `compactions` (one per compaction), `probes` (one per probe per
    probe point) and `summary` (one per scenario, strategy and profile, repeats pooled), each with a plain
    RangeIndex; every table but `summary` starts with scenario, strategy, profile, repeat (the README's run
    layout lists the columns), each column with the dtype its name has in every run. A run with failed cells
    loads with a `RuntimeWarning` naming them. Raises `StoreError`, naming the file, for a path that is no run
    folder, an unfinished run, a folder a run is working in, a damaged table (a column it needs missing or of
    another type) or manifest (its failed cells not objects with their cell and error, …) and a file or folder
    the system refuses to read (`compaction_bench.store.load_run`, `compaction_bench.store.read_manifest`; the
    manifest read once, `load_run_with_manifest`)."""
    import warnings

    from compaction_bench.store import failed_cells_in, load_run_with_manifest, p_best_judged_in

    tables, manifest = load_run_with_manifest(path)
    if not p_best_judged_in(manifest):
        warnings.warn(f"{path}: its summary was written before P(best) was withheld where no difference can be claimed; "
                      "its `p_best` is NaN here (`bench score` computes it again)", RuntimeWarning, stacklevel=2)
    failed = failed_cells_in(manifest)
    if failed:
        warnings.warn(f"{path}: {len(failed)} cell(s) failed (first: {failed[0]['cell']}: {failed[0]['error']}); the tables "
                      "hold the finished cells only; `bench run --resume` redoes the failed ones", RuntimeWarning, stacklevel=2)
    return tables
