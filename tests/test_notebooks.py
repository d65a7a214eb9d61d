"""The example notebooks run top to bottom (nbclient, the venv's own kernel) on small runs, and what they show is
what their labels say: the run's summary rows labelled by scenario, profile and strategy, the report verdict's paired
differences, intervals beside every retention they compare, the offline heuristics named. Each also runs on a run of
another shape (two profiles, no probes, failed cells, several scenarios), given as the papermill convention does:
values assigned in a cell after the one tagged `parameters`."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import pandas as pd
import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell

import compaction_bench as bench
from compaction_bench.reports.verdict import verdicts
from compaction_bench.runner import Case, CellsFailed
from compaction_bench.scenarios.synthetic import generate
from tests.conftest import CORPORA

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
COMPARE, SWEEP = (next(p for p in NOTEBOOKS if p.name == name) for name in ("compare_strategies.ipynb", "sweep.ipynb"))
#: Notebooks that read the real transcripts in ../shared/corpora.
READS_CORPORA = {"compare_strategies.ipynb"}
#: A share with its interval as the compare notebook prints it: "0.60 [0.25, 0.90]".
SHARE_WITH_INTERVAL = re.compile(r"(\d\.\d\d) \[(\d\.\d\d), (\d\.\d\d)\]")
#: The probe points a headline figure is on (`aggregate.HEADLINE_KINDS`).
HEADLINE = ("checkpoint", "final")


def shown_rows(text: str, levels: int = 1, *, named: bool = True) -> dict[tuple[str, ...], dict[str, str]]:
    """A DataFrame's text output as {row labels: {column: text}}. Pandas wraps it into blocks of columns (a header
    ending in a backslash, then its rows, a blank line between blocks); a named index adds a line holding only its
    names (`named`), and of an index of `levels` levels a label equal to the one above is left blank. A share with
    its interval ("0.60 [0.25, 0.90]") is one value."""
    rows: dict[tuple[str, ...], dict[str, str]] = {}
    for block in text.split("\n\n"):
        header, *lines = block.splitlines()
        columns = header.rstrip("\\").split()
        previous: list[str] = []
        for line in lines[1:] if named else lines:
            tokens = SHARE_WITH_INTERVAL.sub(r"\1|\2|\3", line).split()
            labels, values = tokens[: len(tokens) - len(columns)], tokens[len(tokens) - len(columns):]
            labels = previous[: levels - len(labels)] + labels
            previous = labels
            rows.setdefault(tuple(labels), {}).update(zip(columns, values, strict=True))
    return rows


def tagged(notebook: nbformat.NotebookNode, tag: str) -> nbformat.NotebookNode:
    (cell,) = [c for c in notebook.cells if tag in c.metadata.get("tags", [])]
    return cell


def table_of(cell: nbformat.NotebookNode) -> str:
    """The text of the table a cell shows (a DataFrame, also rendered as HTML): its value."""
    (output,) = [o for o in cell.outputs if o.get("output_type") == "execute_result"]
    assert "text/html" in output["data"]
    return output["data"]["text/plain"]


def printed(cell: nbformat.NotebookNode, stream: str = "stdout") -> str:
    return "".join(o["text"] for o in cell.outputs if o.get("output_type") == "stream" and o.get("name") == stream)


def execute(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parameters: str = "") -> nbformat.NotebookNode:
    """The notebook executed in a kernel of the venv, its temporary folders under `tmp_path / "tmp"`, `parameters`
    (code) run after its cell tagged `parameters`; no cell may fail."""
    monkeypatch.setenv("COMPACTION_BENCH_CORPORA", str(CORPORA))
    (tmp_path / "tmp").mkdir(exist_ok=True)
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))  # where the kernel's tempfile puts a notebook's run
    notebook = nbformat.read(path, as_version=4)
    if parameters:
        notebook.cells.insert(notebook.cells.index(tagged(notebook, "parameters")) + 1, new_code_cell(parameters))
    NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    assert not [o for cell in notebook.cells for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    return notebook


def stderr_of(notebook: nbformat.NotebookNode) -> str:
    return "".join(printed(cell, "stderr") for cell in notebook.cells if cell.cell_type == "code")


def run_made_in(tmp_path: Path) -> Path:
    """The folder of the one run a notebook made in its temporary folder."""
    (summary_file,) = tmp_path.glob("tmp/*/*/summary.parquet")
    return summary_file.parent


def same_label(shown: str, name: str) -> bool:
    """A label as pandas shows it: whole, or cut to its first characters and "..."."""
    return shown == name or (shown.endswith("...") and name.startswith(shown[:-3]))


def check_summary_table(text: str, summary: pd.DataFrame, columns: tuple[str, ...]) -> None:
    """The table shows every summary row once, labelled by its scenario, profile and strategy, with its numbers."""
    shown = shown_rows(text, levels=3)
    assert len(shown) == len(summary)
    for (scenario, profile, strategy), row in shown.items():
        (expected,) = [r for r in summary.itertuples(index=False) if same_label(scenario, r.scenario) and (r.profile, r.strategy) == (profile, strategy)]
        assert row["cannot_serve"] == str(expected.cannot_serve)
        for column in columns:
            assert float(row[column]) == pytest.approx(round(getattr(expected, column), 3), abs=1e-9), (strategy, profile, column)


def headline_points(probes: pd.DataFrame, profile: str) -> pd.DataFrame:
    """Presence at the probe points every strategy of `profile` has (one scenario, one repeat: no votes), by hand: a
    row per (scenario, probe, point), a column per strategy."""
    rows = probes[(probes["profile"] == profile) & probes["point_kind"].isin(HEADLINE)]
    table = rows.pivot_table(index=["scenario", "probe_id", "point_kind", "step"], columns="strategy", values="present", aggfunc="mean")
    return table.dropna()


def check_differences_table(text: str, root: Path) -> None:
    """Each row is `strategy` − `minus` at one profile: its mean, pairs and probes those of the README's definition
    (per probe, the mean of b − a over the points every strategy has; then the mean over probes), computed by hand from
    the probes table; the pair the report's verdict compares has the verdict's numbers, interval and p-value too."""
    tables = bench.load_run(root)
    summary, probes, requests = tables["summary"], tables["probes"], tables["requests"]
    shown = {(row["profile"], row["strategy"], row["minus"]): row for row in shown_rows(text, named=False).values()}
    profiles = list(dict.fromkeys(summary["profile"]))
    names = list(dict.fromkeys(summary["strategy"]))
    assert len(shown) == len(profiles) * len(names) * (len(names) - 1) // 2  # every pair of strategies, at every profile
    for (profile, b, a), row in shown.items():
        points = headline_points(probes, profile)
        per_probe = (points[b] - points[a]).groupby(level=["scenario", "probe_id"]).mean()
        assert float(row["difference"]) == pytest.approx(round(per_probe.mean(), 3), abs=1e-9)
        assert (int(row["pairs"]), int(row["probes"])) == (len(points), len(per_probe))
    compared = [v for v in verdicts(summary, probes, requests) if v.difference is not None]
    assert [v.profile for v in compared] == profiles
    for verdict in compared:
        d = verdict.difference
        assert d is not None
        row = shown.get((verdict.profile, d.a, d.b)) or shown[(verdict.profile, d.b, d.a)]
        sign = 1 if row["strategy"] == d.a else -1  # the verdict's is a − b; the table's, strategy − minus
        low, high = (d.lo, d.hi) if sign == 1 else (-d.hi, -d.lo)
        assert float(row["difference"]) == pytest.approx(round(sign * d.mean, 3), abs=1e-9)
        assert [float(row["ci_low"]), float(row["ci_high"])] == pytest.approx([round(low, 3), round(high, 3)], abs=1e-9)
        assert float(row["p"]) == pytest.approx(d.p_value, rel=1e-5, abs=5e-7)  # as pandas prints it: six digits
        assert (int(row["pairs"]), int(row["probes"]), row["detectable"]) == (d.n, d.probes, str(d.detectable))


def check_families_table(text: str, summary: pd.DataFrame) -> None:
    """One scenario: each (profile, family) cell is that profile's summary `retention_<family>` with an interval around
    it, and a profile's families hold every paired probe once."""
    names = list(dict.fromkeys(summary["strategy"]))
    shown = shown_rows(text, levels=2)
    by = summary.set_index(["profile", "strategy"])
    probes_of: dict[str, int] = {}
    for (profile, family), row in shown.items():
        probes_of[profile] = probes_of.get(profile, 0) + int(row["probes"])
        assert [c for c in row if c != "probes"] == names
        for strategy in names:
            value, low, high = row[strategy].split("|")
            assert float(value) == pytest.approx(round(by.loc[(profile, strategy), f"retention_{family}"], 2), abs=1e-9)
            assert float(low) <= float(value) <= float(high)
            # n probes all kept (or all lost): the exact binomial bound lets a share 1 - 0.025^(1/n) of them differ
            if value == "1.00":
                assert float(low) == pytest.approx(round(0.025 ** (1 / int(row["probes"])), 2), abs=1e-9)
            if value == "0.00":
                assert float(high) == pytest.approx(round(1 - 0.025 ** (1 / int(row["probes"])), 2), abs=1e-9)
    assert {"constraint", "recall"} <= {family for _, family in shown}
    for profile, count in probes_of.items():
        assert set(by.loc[profile, "paired_probes"]) == {count}


def check_drawn(cell: nbformat.NotebookNode, requests: pd.DataFrame) -> str:
    """The plot's lines count what it draws of the run's first scenario, repeat 0, per profile and strategy, as the
    requests table has them: the turn requests that reached the model (the line), those the provider rejected as too
    long (`overflow` and not `refused`, ×) and those the agent itself did not send (`refused`, ○)."""
    text = printed(cell)
    first = requests[(requests["scenario"] == requests["scenario"].iloc[0]) & (requests["repeat"] == 0) & (requests["kind"] == "turn")]
    for (profile, strategy), turns in first.groupby(["profile", "strategy"]):
        accepted, refused = int((~turns["overflow"]).sum()), int(turns["refused"].sum())
        rejected = int((turns["overflow"] & ~turns["refused"]).sum())
        assert f"{profile}, {strategy}: {accepted} accepted, {rejected} rejected by the provider (×), {refused} not sent by the agent (○)" in text
    return text


def check_sweep_table(text: str, tables: dict[str, pd.DataFrame], variants: dict[str, int]) -> None:
    """Each (profile, value) row is the report verdict's row of that variant (the run's `tables`): retention with its
    interval, and over the same scenarios the cost, failed requests, compactions and scenarios it cannot serve."""
    rows = {(verdict.profile, row.strategy): row for verdict in verdicts(tables["summary"], tables["probes"], tables["requests"]) for row in verdict.rows}
    shown = shown_rows(text, named=False)
    for row in shown.values():
        (variant,) = [v for v, value in variants.items() if str(value) == row["keep_recent_tokens"]]
        expected = rows[(row["profile"], variant)]
        assert [float(row[c]) for c in ("retention", "ci_low", "ci_high", "cost_usd")] == pytest.approx(
            [round(expected.retention, 3), round(expected.lo, 3), round(expected.hi, 3), round(expected.cost_usd, 3)], abs=1e-9)
        assert (int(row["scenarios"]), int(row["cannot_serve"])) == (expected.scenarios, expected.cannot_serve)
        assert (float(row["failed_requests"]), float(row["compactions"])) == (expected.failed_requests, expected.compactions)
    assert len(shown) == len([key for key in rows if key[1] in variants])


def test_there_are_notebooks():
    assert {"quickstart.ipynb", "compare_strategies.ipynb", "sweep.ipynb"} <= {p.name for p in NOTEBOOKS}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_a_notebook_is_committed_without_outputs(path):
    notebook = nbformat.read(path, as_version=4)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert not [c for c in code if c.outputs or c.execution_count is not None]


#: The helpers beside the top-level API that the notebooks may use: the package docstring (and the README's Python API
#: section) names them as supported.
SUPPORTED = {
    "compaction_bench.runner": {"Case"},
    "compaction_bench.scenarios.synthetic": {"generate"},
    "compaction_bench.profiles": {"get_profile"},
    "compaction_bench.metrics.aggregate": {"compared_rows", "paired_differences", "overall", "unfinished", "shared_scenarios"},
}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_a_notebook_imports_only_the_supported_api(path):
    """Before: the notebooks imported `per_probe` and `cluster_bootstrap_ci`, which no documentation named, so nothing
    said they were there to stay or what they return."""
    notebook = nbformat.read(path, as_version=4)
    code = "\n".join(line for c in notebook.cells if c.cell_type == "code" for line in c.source.splitlines() if not line.startswith("%"))
    documented = " ".join(bench.__doc__.split())
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("compaction_bench"):
            names = {alias.name for alias in node.names}
            assert names <= SUPPORTED.get(node.module, set()), (node.module, names)
            for name in names:
                assert f"`{name}`" in documented or f"`{node.module.removeprefix('compaction_bench.')}.{name}`" in documented, name
        if isinstance(node, ast.Import):
            assert all(alias.name in {"compaction_bench"} or not alias.name.startswith("compaction_bench") for alias in node.names)


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
    notebook = execute(path, tmp_path, monkeypatch)
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    # No warning or log line: a notebook's output is what its code shows.
    assert not stderr_of(notebook)
    root = run_made_in(tmp_path)
    summary = pd.read_parquet(root / "summary.parquet")
    if path.name != "quickstart.ipynb":  # the plots were drawn
        assert any("image/png" in o.get("data", {}) for o in outputs)
    if path.name == "quickstart.ipynb":
        check_quickstart(notebook, root, summary, outputs)
    if path.name == "compare_strategies.ipynb":
        check_summary_table(table_of(tagged(notebook, "summary")), summary, ("retention", "retention_lo", "retention_hi", "answered", "answered_ceiling"))
        check_differences_table(table_of(tagged(notebook, "differences")), root)
        check_families_table(table_of(tagged(notebook, "families")), summary)
        check_drawn(tagged(notebook, "plot"), pd.read_parquet(root / "requests.parquet"))
        assert list(summary["strategy"].unique()) == ["codex-local", "pi", "truncate"]
    if path.name == "sweep.ipynb":
        values = [2_000, 6_000, 12_000, 20_000]
        check_sweep_table(table_of(tagged(notebook, "sweep")), bench.load_run(root), {f"pi@keep_recent_tokens={v}": v for v in values})
        # one scenario: each variant's pooled retention and interval are its summary row's
        shown = {row["keep_recent_tokens"]: row for row in shown_rows(table_of(tagged(notebook, "sweep")), named=False).values()}
        assert sorted(shown) == sorted(str(v) for v in values)
        for row in summary.itertuples(index=False):
            value = shown[row.strategy.rsplit("=", 1)[1]]
            assert [float(value[c]) for c in ("retention", "ci_low", "ci_high")] == pytest.approx(
                [round(row.retention, 3), round(row.retention_lo, 3), round(row.retention_hi, 3)], abs=1e-9)


def check_quickstart(notebook: nbformat.NotebookNode, root: Path, summary: pd.DataFrame, outputs: list) -> None:
    """It ends with the run's summary rows: retention with its interval and the probes it rests on, the offline reader's
    score beside its ceiling, the strategies that cannot serve the window marked. Its replay table is what the run's
    own tables say of the same strategies on the same session and window."""
    asked = int(re.search(r"(\d+) probes", printed(notebook.cells[1])).group(1))  # "<scenario> <n> items, <n> probes"
    check_summary_table(table_of(tagged(notebook, "summary")), summary,
                        ("retention", "retention_lo", "retention_hi", "answered", "answered_lo", "answered_hi", "answered_ceiling", "cost_usd",
                         "failed_requests"))
    assert set(summary["strategy"]) == {"truncate", "codex-local", "pi"} and set(summary["paired_probes"]) == {asked}
    replays = {row["strategy"]: row for row in shown_rows(table_of(tagged(notebook, "replays")), named=False).values()}
    assert set(replays) == {"none", "truncate", "codex-local", "pi", "opencode-v1"}
    tables = bench.load_run(root)
    for strategy in summary["strategy"]:
        requests = tables["requests"][tables["requests"]["strategy"] == strategy]
        turns = requests[requests["kind"] == "turn"]
        shown = {column: int(replays[strategy][column]) for column in ("requests", "overflowed", "compactions", "largest_request", "final_context")}
        assert shown == {
            "requests": len(turns),  # every turn request tried, rejected ones included
            "overflowed": int((turns["overflow"] & ~turns["refused"]).sum()),  # the provider's rejections only
            "compactions": int((tables["compactions"]["strategy"] == strategy).sum()),
            "largest_request": int(turns["true_tokens"].max()),
            "final_context": int(requests.loc[requests["kind"] == "final", "true_tokens"].item()),
        }, strategy
    # bench.run() in a notebook shows its progress as an HTML bar, updated in place up to the end of finalize.
    bars = [o["data"]["text/html"] for o in outputs if "<progress" in o.get("data", {}).get("text/html", "")]
    assert any("finalize" in bar and "</progress> 5/5" in bar for bar in bars)
    assert any("cells" in bar and "</progress> 3/3" in bar for bar in bars)


@pytest.mark.slow
def test_the_compare_notebook_on_two_profiles_compares_within_each(tmp_path, monkeypatch):
    """Before: its paired differences and family table pooled the profiles (a probe counted once per profile), and its
    plot joined both profiles' requests into one line under a 32k window. A synthetic session of 30,000 tokens, its
    probes mined as the notebook's own are: it compacts at 32k and never at 64k."""
    session = generate("short-turns", seed=0, target_tokens=30_000).transcript.write(tmp_path / "short-turns.jsonl")
    notebook = execute(COMPARE, tmp_path, monkeypatch, f'session = {str(session)!r}\nstrategies = ["codex-local", "truncate"]\nprofiles = ["32k", "64k"]')
    assert not stderr_of(notebook)
    root = run_made_in(tmp_path)
    summary = pd.read_parquet(root / "summary.parquet")
    assert sorted(summary["profile"]) == ["32k", "32k", "64k", "64k"]
    check_summary_table(table_of(tagged(notebook, "summary")), summary, ("retention", "retention_lo", "retention_hi", "answered"))
    check_differences_table(table_of(tagged(notebook, "differences")), root)
    check_families_table(table_of(tagged(notebook, "families")), summary)
    check_drawn(tagged(notebook, "plot"), pd.read_parquet(root / "requests.parquet"))
    (figure,) = [o["data"]["text/plain"] for o in tagged(notebook, "plot").outputs if "image/png" in o.get("data", {})]
    assert figure.endswith("with 2 Axes>")  # one panel per profile


@pytest.mark.slow
def test_the_compare_notebook_on_a_run_without_probes_with_requests_the_agent_refused(tmp_path, monkeypatch):
    """Before: its summary cell stopped with a KeyError (the retention columns a run without probes does not have), and
    its plot marked every request that reached no model as rejected by the provider (×), those the agent itself did not
    send (Claude Code 2.1 at its blocking limit, auto-compact off) included."""
    session = generate("short-turns", seed=0, target_tokens=30_000)
    strategies = ["truncate", "claude-code-2.1@auto_compact=false"]
    root = bench.run(strategies=strategies, profiles=["32k"], cases=[Case(session.name, session.transcript, ())], out=tmp_path / "runs",
                     run_id="r", jobs=1, report=False, progress=False)
    requests = pd.read_parquet(root / "requests.parquet")
    refusing = requests[(requests["strategy"] == strategies[1]) & (requests["kind"] == "turn")]
    assert refusing["refused"].any() and (refusing["overflow"] & ~refusing["refused"]).any()  # both kinds of mark to draw
    notebook = execute(COMPARE, tmp_path, monkeypatch, f"run_dir = {str(root)!r}")
    assert not stderr_of(notebook)
    assert "This run has no probes: no retention" in printed(tagged(notebook, "summary"))
    assert "retention" not in table_of(tagged(notebook, "summary"))
    assert "No paired probe points: no retention to compare." in printed(tagged(notebook, "differences"))
    assert "No paired probe points" in printed(tagged(notebook, "families"))
    check_drawn(tagged(notebook, "plot"), requests)


FRAGILE = """
from compaction_bench.strategies.pi import Pi


class Fragile(Pi):
    \"\"\"Pi failing in the scenario `synthetic-short-turns-s0` at every profile, and in every scenario at 64k.\"\"\"

    def request(self):
        if self.ctx.session["id"] == "synthetic-short-turns-s0" or self.ctx.profile.name == "64k":
            raise RuntimeError("fragile")
        return super().request()
"""


@pytest.mark.slow
def test_the_sweep_notebook_pools_scenarios_per_profile_as_the_verdict_and_names_a_variant_without_cells(tmp_path, monkeypatch):
    """Before: on a run of two scenarios or two profiles its plot cell stopped (`zip(..., strict=True)`: a row per
    scenario and profile against one value per variant), and a variant without a row stopped it with a KeyError."""
    plugin = tmp_path / "fragile.py"
    plugin.write_text(FRAGILE)
    variants = {"pi@keep_recent_tokens=2000": 2000, "pi@keep_recent_tokens=20000": 20000, f"{plugin}:Fragile@keep_recent_tokens=6000": 6000}
    sessions = [generate("short-turns", seed=0, target_tokens=30_000), generate("long-loop", seed=1, target_tokens=30_000)]
    with pytest.raises(CellsFailed):
        bench.run(strategies=list(variants), profiles=["32k", "64k"], cases=[Case(s.name, s.transcript, tuple(s.probes)) for s in sessions],
                  out=tmp_path / "runs", run_id="r", jobs=1, report=False, progress=False)
    root = tmp_path / "runs" / "r"
    notebook = execute(SWEEP, tmp_path, monkeypatch, f"run_dir = {str(root)!r}\nvariants = {list(variants)!r}\nvalues = {list(variants.values())!r}\n"
                       'profiles = ["32k", "64k"]')
    assert "3 cell(s) failed" in stderr_of(notebook)  # load_run's warning
    with pytest.warns(RuntimeWarning, match=r"3 cell\(s\) failed"):
        tables = bench.load_run(root)
    check_sweep_table(table_of(tagged(notebook, "sweep")), tables, variants)
    shown = shown_rows(table_of(tagged(notebook, "sweep")), named=False).values()
    # 32k: the fragile variant finished one scenario, so every variant is pooled over that one; 64k: it has no row, and
    # the others are pooled over both scenarios
    assert sorted((row["profile"], row["keep_recent_tokens"], row["scenarios"]) for row in shown) == [
        ("32k", "2000", "1"), ("32k", "20000", "1"), ("32k", "6000", "1"), ("64k", "2000", "2"), ("64k", "20000", "2")]
    assert f"64k: no pooled figures for {plugin}:Fragile@keep_recent_tokens=6000" in "".join(printed(c) for c in notebook.cells if c.cell_type == "code")
    (figure,) = [o["data"]["text/plain"] for o in tagged(notebook, "plot").outputs if "image/png" in o.get("data", {})]
    assert figure.endswith("with 2 Axes>")  # one panel per profile
