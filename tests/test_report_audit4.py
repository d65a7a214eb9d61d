"""What a fourth audit of the report found, each checked against an answer known apart from the code.

1. "facts lost 0" for compactions never measured: a probe point follows only the newest probed compaction before
   a request (bench/replay.py `_mark_points`), and a rewrite recorded with `probe=False` (observation masking: the
   `Strategy.record_compaction` docstring) has none, so nothing measured what it lost: "–", never 0, and
   `compactions.parquet` says which compactions have a point (`probed`); a run written before says nothing, and
   its compactions without probe rows read unknown.
2. `bench report` and a finalize deleted a user's `report/2024-q3-notes.html` (any four-digit name): only the pages
   the report's index lists (or, for an older index, links to) are removed.
3. tab20 gave the 11th and 21st strategy one colour: a default run has 21 (opencode-v1 and hybrid drew alike).
4. a scenario's timeline coloured its strategies by those present in it, not by the run's order.
5. the verdict's tooltips said "overflowed" for counts that include requests the agent itself refused.
6. the re-billed-token axis read "3k" for 2,600 … 3,400.
7. sorting a column of names read a hex session id's leading digits as a number ("703e4528-…" as Infinity).
The run is a synthetic aborted-calls session at 32k under none (overflows: cannot serve), truncate (a threshold
compaction, each followed by its request) and observation-masking (masking rewrites only).
"""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

import compaction_bench as bench
from compaction_bench.reports import html as report_html
from compaction_bench.reports.figures import TokenTicks, colours, retention_vs_cost, styles, timeline_figure
from compaction_bench.reports.html import NO_POINT, NOT_SEEN, UNKNOWN, _points_seen, _unmeasured, describe, write_report
from compaction_bench.reports.report_files import listed_pages, remove_report
from compaction_bench.runner import Case
from compaction_bench.scenarios.synthetic import generate
from tests.browser import load

#: Scenario names that are session ids: as text "703e…" comes first ("0" < "1"), while read as numbers "703e4528" is
#: 703 × 10^4528, Infinity, after 71, and its digit run 703 is after 71 too.
NAMES = ("703e4528-0c1d-s3", "71ab2c3d-9f2e-s4")
#: The strategies of a default run, in its order (the README's `bench run`).
DEFAULT_STRATEGIES = [
    "none", "truncate", "observation-masking", "codex-local", "codex-remote-v1", "codex-remote-v2", "codex-token-budget", "pi", "pi-2026-03",
    "pi-2025-12", "opencode-v1", "opencode-v2", "claude-code", "claude-code-2.1", "gemini-cli", "openhands", "openhands-v0", "aider",
    "anthropic-clear-tool-uses", "anthropic-compact", "hybrid",
]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    cases = []
    for name, seed in zip(NAMES, (3, 4), strict=True):
        scenario = generate("aborted-calls", seed=seed, target_tokens=40_000)
        cases.append(Case(name, scenario.transcript, tuple(scenario.probes)))
    return bench.run(strategies=["none", "truncate", "observation-masking"], profiles=["32k"], cases=cases, out=tmp_path_factory.mktemp("runs"),
                     run_id="audit4", jobs=1, report=True, progress=False)


@pytest.fixture
def run_copy(run, tmp_path) -> Path:
    return Path(shutil.copytree(run, tmp_path / "audit4"))


def _browser_rows(page: str) -> list[tuple[str, str, str]]:
    """(strategy, trigger, facts lost cell) of each row of the compaction browser."""
    body = page[page.index('<table id="compactions"'):page.index('<div id="drill">')]
    return re.findall(r'<tr data-scenario="\d+" data-strategy="([^"]+)" data-trigger="([^"]+)".*?<td data-v="[^"]*">([^<]*)</td></tr>', body, re.S)


def _drill_data(page: str) -> list[dict]:
    blobs = re.findall(r'<script type="application/json" class="cdata">(.*?)</script>', page, re.S)
    return [c for blob in blobs for c in json.loads(blob)["compactions"].values()]


# ---------------------------------------------------------------------------- 1: facts lost where a probe point measured it
def test_a_compaction_without_a_probe_point_reads_not_measured_not_zero(run):
    compactions = bench.load_run(run)["compactions"]
    masking = compactions[compactions["trigger"] == "masking"]
    truncate = compactions[compactions["strategy"] == "truncate"]
    assert len(masking) and len(truncate)
    assert not masking["probed"].any()  # recorded with probe=False: no point follows them
    assert truncate["next_request"].is_unique and truncate["probed"].all()  # each followed by a request of its own: its point
    page = (run / "report.html").read_text(encoding="utf-8")
    rows = _browser_rows(page)
    assert {lost for strategy, trigger, lost in rows if trigger == "masking"} == {"–"}
    assert all(lost.isdigit() for strategy, _, lost in rows if strategy == "truncate")
    data = _drill_data(page)
    assert {(c["flips"] is None, c.get("unmeasured")) for c in data if c["trigger"] == "masking"} == {(True, NO_POINT)}
    assert all(isinstance(c["flips"], list) and "unmeasured" not in c for c in data if c["strategy"] == "truncate")
    # the header says what "–" means
    assert re.search(r'<th title="[^"]*– not measured: the compaction has no probe point[^"]*">facts lost</th>', page)


def test_a_run_written_before_the_probed_column_loads_and_reads_unknown_unless_probe_rows_measured_it(run_copy):
    file = run_copy / "compactions.parquet"
    pd.read_parquet(file).drop(columns="probed").to_parquet(file, index=False)
    tables = bench.load_run(run_copy)  # a notebook's load: the column is absent, not refused
    assert "probed" not in tables["compactions"].columns
    write_report(run_copy)
    page = (run_copy / "report.html").read_text(encoding="utf-8")
    rows = _browser_rows(page)
    assert {lost for _, trigger, lost in rows if trigger == "masking"} == {"–"}
    assert all(lost.isdigit() for strategy, _, lost in rows if strategy == "truncate")  # its probe rows show its points
    assert {c.get("unmeasured") for c in _drill_data(page) if c["trigger"] == "masking"} == {UNKNOWN}


def test_a_point_whose_request_overflowed_is_not_measured_and_a_flip_is_always_shown():
    """p1 absent at compaction 0's point, whose request overflowed (not_seen): `_flips` counts nothing there, and that
    is no measured 0. Compaction 1's point was seen. Compaction 2 has no probe rows: its `probed` decides."""
    def row(compaction: int, status: str) -> dict:
        return {"scenario": "s", "strategy": "a", "profile": "64k", "repeat": 0, "probe_id": "p1", "compaction": compaction, "status": status}

    seen = _points_seen(pd.DataFrame([row(0, "not_seen"), row(1, "seen")]))
    key = ("s", "a", "64k", 0)
    assert _unmeasured({"probed": True}, (*key, 0), {}, seen) == NOT_SEEN
    assert _unmeasured({"probed": True}, (*key, 1), {}, seen) is None
    assert _unmeasured({"probed": True}, (*key, 2), {}, seen) is None  # a point with no probe to ask yet: nothing to lose
    assert _unmeasured({"probed": False}, (*key, 2), {}, seen) == NO_POINT
    assert _unmeasured({}, (*key, 2), {}, seen) == UNKNOWN
    assert _unmeasured({}, (*key, 2), {(*key, 2): [["p1"]]}, seen) is None


# ---------------------------------------------------------------------------- 2: a report removes only its own pages
def _folder_report(root: Path, monkeypatch) -> list[str]:
    monkeypatch.setattr(report_html, "SINGLE_FILE_SCENARIOS", 0)
    write_report(root)
    return sorted(p.name for p in (root / "report").iterdir())


def test_a_report_and_a_finalize_leave_a_users_page_shaped_file_in_the_report_folder(run_copy, monkeypatch):
    pages = _folder_report(run_copy, monkeypatch)
    assert len(pages) == 2 and listed_pages(run_copy) == set(pages)
    users = {"2024-q3-notes.html": "mine\n", "notes.html": "mine too\n"}
    for name, text in users.items():
        (run_copy / "report" / name).write_text(text)
    write_report(run_copy)  # `bench report` again
    assert {n: (run_copy / "report" / n).read_text() for n in users} == users
    monkeypatch.setattr(report_html, "SINGLE_FILE_SCENARIOS", 60)
    write_report(run_copy)  # a single page now: the earlier report's pages go, the user's files stay
    assert sorted(p.name for p in (run_copy / "report").iterdir()) == sorted(users)
    remove_report(run_copy)  # what every finalize and resume does first
    assert not (run_copy / "report.html").exists()
    assert {n: (run_copy / "report" / n).read_text() for n in users} == users


def test_the_pages_of_a_report_written_before_the_listing_are_those_its_index_links_to(run_copy, monkeypatch):
    pages = _folder_report(run_copy, monkeypatch)
    index = run_copy / "report.html"
    index.write_text(re.sub(r'<script type="application/json" id="report-pages">.*?</script>', "", index.read_text(encoding="utf-8")),
                     encoding="utf-8")
    (run_copy / "report" / "2024-q3-notes.html").write_text("mine\n")
    assert listed_pages(run_copy) == set(pages)
    remove_report(run_copy)
    assert [p.name for p in (run_copy / "report").iterdir()] == ["2024-q3-notes.html"]


def test_a_listing_names_nothing_outside_the_report_folder(tmp_path):
    (tmp_path / "report.html").write_text('<script type="application/json" id="report-pages">["../manifest.json", "0001-a.html", 7]</script>')
    assert listed_pages(tmp_path) == {"0001-a.html"}


# ---------------------------------------------------------------------------- 3, 4: a strategy's colour
def test_every_strategy_of_a_default_run_and_of_a_larger_one_has_a_colour_of_its_own():
    palette = colours(DEFAULT_STRATEGIES)
    assert palette["opencode-v1"] != palette["hybrid"]
    assert len(set(palette.values())) == len(DEFAULT_STRATEGIES)
    many = [f"s{n}" for n in range(300)]
    assert len(set(colours(many).values())) == 300
    assert len({(s.colour, s.linestyle, s.marker) for s in styles(many).values()}) == 300
    assert styles(DEFAULT_STRATEGIES)["hybrid"][1:] != styles(DEFAULT_STRATEGIES)["opencode-v1"][1:]  # and it draws unlike it


def test_a_timeline_colours_each_strategy_as_the_run_does_when_a_scenario_lacks_one():
    order = ["a", "b", "c"]
    requests = pd.DataFrame([{"scenario": "s", "strategy": s, "profile": "1k", "repeat": 0, "kind": "turn", "request": n, "step": n,
                              "true_tokens": 100 * (n + 1), "overflow": False} for s in ("b", "c") for n in range(4)])
    compactions = pd.DataFrame(columns=["scenario", "strategy", "profile", "repeat", "trigger", "step", "tokens_before"])
    fig = timeline_figure(requests, compactions, 1_000, "s · 1k", order)
    drawn = {ax.get_title().split(" · ")[0]: [ln for ln in ax.get_lines() if len(ln.get_xdata()) > 2][0].get_color()
             for ax in fig.axes if ax.get_visible()}
    assert drawn == {s: colours(order)[s] for s in ("b", "c")}


# ---------------------------------------------------------------------------- 5: tooltips say what the glossary says
def test_the_verdicts_failed_requests_and_cannot_serve_titles_are_the_glossarys(run):
    page = (run / "report.html").read_text(encoding="utf-8")
    verdict = page[page.index('id="verdict"'):page.index('id="figures"')]
    header = re.search(r'<th title="([^"]*)">failed requests</th>', verdict)
    tag = re.search(r'<span class="tag bad" title="([^"]*)">cannot serve the window', verdict)  # none overflows
    assert header and tag
    assert html.unescape(header.group(1)) == describe("failed_requests") and html.unescape(tag.group(1)) == describe("cannot_serve")
    assert "the agent itself" in describe("failed_requests") and "overflow" not in describe("cannot_serve")


# ---------------------------------------------------------------------------- 6: token tick labels
def test_token_tick_labels_differ_wherever_the_ticks_do():
    assert TokenTicks().format_ticks([2_600, 2_800, 3_000, 3_200, 3_400]) == ["2.6k", "2.8k", "3.0k", "3.2k", "3.4k"]
    assert TokenTicks().format_ticks([0, 500, 1_000, 1_500, 2_000]) == ["0", "0.5k", "1.0k", "1.5k", "2.0k"]
    assert TokenTicks().format_ticks([0, 20_000, 40_000]) == ["0", "20k", "40k"]
    # matplotlib's ticks past the view too: 0.5M is no 0M beside the 0 (the labels differed only as "0" and "0M")
    assert TokenTicks().format_ticks([-500_000, 0, 500_000, 1_000_000, 1_500_000]) == ["-0.5M", "0", "0.5M", "1.0M", "1.5M"]
    assert TokenTicks().format_ticks([1_000_000, 1_050_000, 1_100_000]) == ["1.00M", "1.05M", "1.10M"]
    points = pd.DataFrame({"retention": [0.5, 0.6, 0.7], "lo": [0.4, 0.5, 0.6], "hi": [0.6, 0.7, 0.8], "cost_usd": [1.0, 2.0, 3.0],
                           "rebilled_tokens": [2_650.0, 3_000.0, 3_350.0]}, index=pd.Index(["a", "b", "c"], name="strategy"))
    svg = retention_vs_cost(points, "t", ["a", "b", "c"])
    labels = re.findall(r">(-?[\d.]+k)</text>", svg)
    assert len(labels) >= 3 and len(set(labels)) == len(labels)


# ---------------------------------------------------------------------------- 7: names sort as text (in Chromium)
def test_columns_of_names_sort_as_text_and_unmeasured_losses_sort_last(run, tmp_path):
    page = (run / "report.html").read_text(encoding="utf-8")
    clicks = """<script>
    function header(table, name) { return Array.prototype.find.call(document.querySelectorAll("#" + table + " th"), function (h) { return h.textContent === name; }); }
    function column(table, index) { return Array.prototype.map.call(document.querySelectorAll("#" + table + " tbody tr"), function (r) { return r.cells[index].textContent.trim(); }); }
    var out = {};
    header("scenarios", "scenario").click();
    out.scenarios = column("scenarios", 0);
    var lost = header("compactions", "facts lost"), index = Array.prototype.indexOf.call(lost.parentNode.children, lost);
    lost.click(); out.up = column("compactions", index);
    lost.click(); out.down = column("compactions", index);
    document.body.setAttribute("data-sorted", JSON.stringify(out));
    </script></body>"""
    sorted_page = tmp_path / "report.html"
    sorted_page.write_text(page.replace("</body>", clicks), encoding="utf-8")
    dom = load(sorted_page).dom
    found = re.search(r'data-sorted="([^"]*)"', dom)
    assert found, dom[-2000:]
    out = json.loads(html.unescape(found.group(1)))
    assert out["scenarios"] == sorted(out["scenarios"]) and out["scenarios"][0].startswith(NAMES[0])
    for values in (out["up"], out["down"]):
        measured = [v for v in values if v != "–"]
        assert values == measured + ["–"] * (len(values) - len(measured)) and len(measured) < len(values)
    assert [int(v) for v in out["up"] if v != "–"] == sorted(int(v) for v in out["up"] if v != "–")
