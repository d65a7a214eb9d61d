"""The example notebooks run top to bottom (nbclient, the venv's own kernel) on small runs, and what they show is
what their labels say: the run's summary rows, intervals beside every retention they compare, the offline
heuristics named."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pandas as pd
import pytest
from nbclient import NotebookClient

from tests.conftest import CORPORA

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
#: Notebooks that read the real transcripts in ../shared/corpora.
READS_CORPORA = {"compare_strategies.ipynb"}
#: A share with its interval as the compare notebook prints it: "0.60 [0.25, 0.90]".
SHARE_WITH_INTERVAL = re.compile(r"(\d\.\d\d) \[(\d\.\d\d), (\d\.\d\d)\]")


def wrapped_rows(text: str) -> dict[str, dict[str, str]]:
    """A DataFrame's text output, which pandas wraps into blocks of columns (a header ending in a backslash, then
    its rows, a blank line between blocks; a named index adds a line holding only its name), as
    {row label: {column: text}}."""
    rows: dict[str, dict[str, str]] = {}
    for block in text.split("\n\n"):
        header, *lines = block.splitlines()
        columns = header.rstrip("\\").split()
        for line in lines:
            label, *values = line.split()
            if values:
                rows.setdefault(label, {}).update(zip(columns, values, strict=True))
    return rows


def last_table(notebook: nbformat.NotebookNode) -> str:
    """The text of the table the notebook ends with (a DataFrame, also rendered as HTML): its last cell's value."""
    (output,) = [o for o in notebook.cells[-1].outputs if o.get("output_type") == "execute_result"]
    assert "text/html" in output["data"]
    return output["data"]["text/plain"]


def run_summary(tmp_path: Path) -> pd.DataFrame:
    """The summary table of the one run a notebook made in its temporary folder, by strategy."""
    (summary_file,) = tmp_path.glob("tmp/*/*/summary.parquet")
    return pd.read_parquet(summary_file).set_index("strategy")


def test_there_are_notebooks():
    assert {"quickstart.ipynb", "compare_strategies.ipynb", "sweep.ipynb"} <= {p.name for p in NOTEBOOKS}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_a_notebook_whose_run_is_offline_says_what_its_numbers_measure(path):
    """A notebook that runs the benchmark with the default models (no `summarizer=`/`answerer=`) reads numbers of the
    offline heuristics, and its text names them as heuristics, as the report and the terminal do."""
    notebook = nbformat.read(path, as_version=4)
    code = "\n".join(c.source for c in notebook.cells if c.cell_type == "code")
    text = " ".join(" ".join(c.source.split()) for c in notebook.cells if c.cell_type == "markdown")
    if "bench.run(" in code and "summarizer=" not in code:
        assert "offline/extractive" in text and "heuristic" in text
    if '"answered"' in code and "answerer=" not in code:  # the answerer's score is shown: the offline reader's
        assert "offline/reader" in text and "answered_ceiling" in text


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
    NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    # No warning or log line: a notebook's output is what its code shows.
    assert not [o["text"] for o in outputs if o.get("output_type") == "stream" and o.get("name") == "stderr"]
    table = last_table(notebook)
    summary = run_summary(tmp_path)
    if path.name != "quickstart.ipynb":  # the plots were drawn
        assert any("image/png" in o.get("data", {}) for o in outputs)
    if path.name == "quickstart.ipynb":
        # It ends with the run's summary rows: retention with its interval and the probes it rests on, the offline
        # reader's score beside its ceiling, the strategies that cannot serve the window marked.
        shown = wrapped_rows(table)
        assert set(shown) == set(summary.index) == {"truncate", "codex-local", "pi"}
        (printed,) = notebook.cells[1].outputs  # "<scenario> <n> items, <n> probes"
        asked = int(re.search(r"(\d+) probes", printed["text"]).group(1))
        for strategy, row in shown.items():
            for column in ("retention", "retention_lo", "retention_hi", "answered", "answered_lo", "answered_hi", "answered_ceiling", "cost_usd"):
                assert float(row[column]) == pytest.approx(round(summary.loc[strategy, column], 3), abs=1e-9), (strategy, column)
            assert int(row["paired_probes"]) == summary.loc[strategy, "paired_probes"] == asked  # every probe of the scenario
            assert row["cannot_serve"] == str(summary.loc[strategy, "cannot_serve"])
            assert float(row["retention_lo"]) <= float(row["retention"]) <= float(row["retention_hi"])
            assert float(row["failed_requests"]) == summary.loc[strategy, "failed_requests"]
        # bench.run() in a notebook shows its progress as an HTML bar, updated in place up to the end of finalize.
        bars = [o["data"]["text/html"] for o in outputs if "<progress" in o.get("data", {}).get("text/html", "")]
        assert any("finalize" in bar and "</progress> 5/5" in bar for bar in bars)
        assert any("cells" in bar and "</progress> 3/3" in bar for bar in bars)
    if path.name == "compare_strategies.ipynb":
        # Its table of retention by probe family is the report's (paired rows, each probe weighing one, pooled): for
        # its one scenario the summary's retention_<family>, each with an interval around it and the family's probes.
        lines = table.splitlines()
        strategies = lines[0].split()[1:]
        assert strategies == ["codex-local", "pi", "truncate"]
        families: dict[str, int] = {}
        for line in lines[1:]:
            family, probes = line.split()[:2]
            families[family] = int(probes)
            cells = SHARE_WITH_INTERVAL.findall(line)
            assert len(cells) == len(strategies), line
            for strategy, (value, low, high) in zip(strategies, cells, strict=True):
                assert float(value) == pytest.approx(round(summary.loc[strategy, f"retention_{family}"], 2), abs=1e-9)
                assert float(low) <= float(value) <= float(high)
                # n probes all kept (or all lost): the exact binomial bound lets a share 1 - 0.025^(1/n) of them differ
                if value == "1.00":
                    assert float(low) == pytest.approx(round(0.025 ** (1 / int(probes)), 2), abs=1e-9)
                if value == "0.00":
                    assert float(high) == pytest.approx(round(1 - 0.025 ** (1 / int(probes)), 2), abs=1e-9)
        assert {"constraint", "recall"} <= set(families)
        # every paired probe sits in one family
        assert sum(families.values()) == summary.loc["codex-local", "paired_probes"] == summary.loc["pi", "paired_probes"]
        # Its summary table is the run's, the strategies that cannot serve the window marked.
        (summary_output,) = notebook.cells[3].outputs
        for strategy, row in wrapped_rows(summary_output["data"]["text/plain"]).items():
            assert row["cannot_serve"] == str(summary.loc[strategy, "cannot_serve"])
            for column in ("retention", "retention_lo", "retention_hi", "answered", "answered_ceiling"):
                assert float(row[column]) == pytest.approx(round(summary.loc[strategy, column], 3), abs=1e-9), (strategy, column)
    if path.name == "sweep.ipynb":  # the sweep's table: each variant's summary row (one scenario, as the report's leaderboard)
        for row in wrapped_rows(table).values():
            variant = f"pi@keep_recent_tokens={row['keep_recent_tokens']}"
            assert float(row["retention"]) == pytest.approx(round(summary.loc[variant, "retention"], 3), abs=1e-9)
            # with the interval the report gives it (one scenario: the summary row's)
            shown = [float(row["ci_low"]), float(row["ci_high"])]
            assert shown == pytest.approx([round(summary.loc[variant, f"retention_{end}"], 3) for end in ("lo", "hi")], abs=1e-9)
            assert row["cannot_serve"] == str(summary.loc[variant, "cannot_serve"])
            assert float(row["failed_requests"]) == summary.loc[variant, "failed_requests"]
