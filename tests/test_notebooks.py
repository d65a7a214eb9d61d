"""The example notebooks run top to bottom (nbclient, the venv's own kernel) on small runs."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pandas as pd
import pytest
from nbclient import NotebookClient

from tests.conftest import CORPORA

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
#: Notebooks that read the real transcripts in ../shared/corpora.
READS_CORPORA = {"compare_strategies.ipynb"}


def shown_table(text: str) -> dict[tuple[str, str], float]:
    """A DataFrame's text output (rows of an index, columns named on the first line) as {(row, column): value}."""
    lines = [line.split() for line in text.splitlines()]
    columns = lines[0][1:]
    return {(row[0], column): float(value) for row in lines[1:] if len(row) > 1 for column, value in zip(columns, row[1:], strict=True)}


def wrapped_rows(text: str) -> dict[str, dict[str, str]]:
    """A DataFrame's text output, which pandas wraps into blocks of columns (a header ending in a backslash, then
    its rows, a blank line between blocks), as {row label: {column: text}}."""
    rows: dict[str, dict[str, str]] = {}
    for block in text.split("\n\n"):
        header, *lines = block.splitlines()
        columns = header.rstrip("\\").split()
        for line in lines:
            label, *values = line.split()
            rows.setdefault(label, {}).update(zip(columns, values, strict=True))
    return rows


def test_there_are_notebooks():
    assert {"quickstart.ipynb", "compare_strategies.ipynb", "sweep.ipynb"} <= {p.name for p in NOTEBOOKS}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_a_notebook_whose_run_is_offline_says_what_its_numbers_measure(path):
    """A notebook that runs the benchmark with the default models (no `summarizer=`/`answerer=`) reads numbers of the
    offline heuristics, and its text names them, as the report and the terminal do."""
    notebook = nbformat.read(path, as_version=4)
    code = "\n".join(c.source for c in notebook.cells if c.cell_type == "code")
    text = "\n".join(c.source for c in notebook.cells if c.cell_type == "markdown")
    if "bench.run(" in code and "summarizer=" not in code:
        assert "offline/extractive" in text


@pytest.mark.slow
@pytest.mark.parametrize(
    "path",
    [pytest.param(p, marks=[pytest.mark.corpora] if p.name in READS_CORPORA else []) for p in NOTEBOOKS],
    ids=lambda p: p.name,
)
def test_notebook_executes(path, tmp_path, monkeypatch):
    if path.name in READS_CORPORA and not CORPORA.is_dir():
        pytest.skip(f"{CORPORA} is not there")
    monkeypatch.setenv("COMPACTION_BENCH_CORPORA", str(CORPORA))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))  # where the kernel's tempfile puts a notebook's run
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(notebook, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    # Every notebook ends with a table (a DataFrame rendered as HTML).
    assert "text/html" in notebook.cells[-1].outputs[0]["data"]
    # The plots were drawn.
    if path.name != "quickstart.ipynb":
        assert any("image/png" in o.get("data", {}) for o in outputs)
    if path.name == "compare_strategies.ipynb":
        # Its table of retention by probe family is the report's (paired rows, each probe weighing one, pooled):
        # for its one scenario the summary's retention_<family>, not a mean over every probe row.
        (summary_file,) = tmp_path.glob("tmp/*/*/summary.parquet")
        summary = pd.read_parquet(summary_file).set_index("strategy")
        shown = shown_table(notebook.cells[-1].outputs[0]["data"]["text/plain"])
        assert {family for family, _ in shown} >= {"constraint", "recall"}
        assert shown == {(f, s): pytest.approx(round(summary.loc[s, f"retention_{f}"], 2), abs=1e-9) for f, s in shown}
    if path.name == "sweep.ipynb":  # the sweep's table: each variant's summary row (one scenario, as the report's leaderboard)
        (summary_file,) = tmp_path.glob("tmp/*/*/summary.parquet")
        summary = pd.read_parquet(summary_file).set_index("strategy")
        for row in wrapped_rows(notebook.cells[-1].outputs[0]["data"]["text/plain"]).values():
            variant = f"pi@keep_recent_tokens={row['keep_recent_tokens']}"
            assert float(row["retention"]) == pytest.approx(round(summary.loc[variant, "retention"], 3), abs=1e-9)
            # with the interval the report gives it (one scenario: the summary row's)
            shown = [float(row["ci_low"]), float(row["ci_high"])]
            assert shown == pytest.approx([round(summary.loc[variant, f"retention_{end}"], 3) for end in ("lo", "hi")], abs=1e-9)
    if path.name == "quickstart.ipynb":
        # Its last table states the run's retention by probe family as the report does: the summary's retention_<family>
        # (paired checkpoints, each probe weighing one), not a mean over every probe row (compaction points included).
        (summary_file,) = tmp_path.glob("tmp/*/*/summary.parquet")  # the run the notebook made in its temporary folder
        summary = pd.read_parquet(summary_file).set_index("strategy")
        lines = [line.split() for line in notebook.cells[-1].outputs[0]["data"]["text/plain"].splitlines()]
        strategies = lines[0][1:]  # "strategy  codex-local  pi  truncate"
        shown = {(row[0], strategy): float(value) for row in lines[1:] for strategy, value in zip(strategies, row[1:], strict=True)}
        families = {f"retention_{kind}" for kind in pd.read_parquet(summary_file.parent / "probes.parquet")["kind"].unique()}
        assert {column for column, _ in shown} == families & set(summary.columns) and "retention_constraint" in families
        assert shown == {(c, s): pytest.approx(round(summary.loc[s, c], 2), abs=1e-9) for c, s in shown}
        # bench.run() in a notebook shows its progress as an HTML bar, updated in place up to the end of finalize.
        bars = [o["data"]["text/html"] for o in outputs if "<progress" in o.get("data", {}).get("text/html", "")]
        assert any("finalize" in bar and "</progress> 5/5" in bar for bar in bars)
        assert any("cells" in bar and "</progress> 3/3" in bar for bar in bars)
