"""The HTML report on a real (small) run: escaping, math text in names, every compaction reachable, the folder form,
progress of `bench.run()`, and what headless Chromium makes of a transcript full of markup."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
from dataclasses import replace

import pandas as pd
import pytest

import compaction_bench as bench
from compaction_bench.progress import ProgressEvent
from compaction_bench.reports import html as report_html
from compaction_bench.runner import Case
from compaction_bench.scenarios.synthetic import generate
from compaction_bench.transcript import Transcript
from tests.browser import load

#: Scenario name with matplotlib math text and markup (issue 17 #15): must render literally.
NAME = "math $\\foo$ <b>name</b>.json"
SCRIPT = "<script>document.body.setAttribute('data-pwned','script')</script>"
IMG = "</script><img src=x onerror=\"document.body.setAttribute('data-pwned','img')\">"
JINJA = "{{ 7*7 }} {% if true %}jinja-ran{% endif %}"
PAYLOAD = f"{SCRIPT} {IMG} {JINJA}\n"


def hostile_transcript() -> tuple[Transcript, list]:
    """A synthetic session whose first real user message and first tool result carry script, markup and jinja syntax."""
    scenario = generate("short-turns", seed=0, target_tokens=45_000)
    items, user_done, result_done = [], False, False
    for item in scenario.transcript.items:
        if item.is_real_user and not user_done:
            user_done, item = True, replace(item, text=PAYLOAD + item.text)
        elif item.kind == "tool_result" and not result_done:
            result_done, item = True, replace(item, text=PAYLOAD + item.text)
        items.append(item)
    assert user_done and result_done
    transcript = Transcript(scenario.transcript.id, tuple(items), scenario.transcript.source, scenario.transcript.model, scenario.transcript.meta)
    return transcript, list(scenario.probes)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    transcript, probes = hostile_transcript()
    events: list[ProgressEvent] = []
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        root = bench.run(
            strategies=["codex-local", "truncate"], profiles=["32k"], cases=[Case(NAME, transcript, tuple(probes))],
            out=tmp_path_factory.mktemp("runs"), run_id="hostile", jobs=1, callback=events.append,
        )
    return root, events, stderr.getvalue()


def test_progress_events_and_plain_lines(run):
    _root, events, printed = run
    cells = [e for e in events if e.phase == "cells"]
    assert [e.done for e in cells] == [0, 1, 2] and all(e.total == 2 for e in cells)
    finals = [e for e in events if e.phase == "finalize"]
    assert finals[-1].done == finals[-1].total and any(e.label.startswith("report") for e in finals)
    # Not a terminal: one plain line per event, the label whole (no ellipsis).
    assert f"cells 1/2 {NAME} · codex-local · 32k" in printed.splitlines()
    assert "finalize 5/5 done" in printed.splitlines()


def test_every_compaction_is_in_the_browser_with_its_items(run):
    root = run[0]
    page = (root / "report.html").read_text(encoding="utf-8")
    compactions = pd.read_parquet(root / "compactions.parquet")
    assert len(compactions) > 0
    rows = re.findall(r'<tr data-scenario="\d+" data-strategy="([^"]+)"', page)
    assert len(rows) == len(compactions)
    blobs = [json.loads(b) for b in re.findall(r'<script type="application/json" class="cdata">(.*?)</script>', page, re.S)]
    data = {cid: c for blob in blobs for cid, c in blob["compactions"].items()}
    assert len(data) == len(compactions)
    items = pd.read_parquet(root / "items.parquet")
    for blob in blobs:
        assert len(blob["items"]) == len(items[items["scenario"] == blob["scenario"]])
    # The id lists of every compaction decode to exactly its stored kept/summarized/dropped ids.
    ordered = compactions.sort_values(["scenario", "strategy", "profile", "repeat", "compaction"]).reset_index(drop=True)
    ids = [str(i) for i in items.sort_values("position")["id"]]
    for cid, record in enumerate(ordered.to_dict("records")):
        lists = data[str(cid)]["lists"]
        for name in ("kept", "summarized", "dropped"):
            decoded = [ids[p] for a, b in lists[name]["ranges"] for p in range(a, b + 1)] + lists[name]["other"]
            assert sorted(decoded) == sorted(str(i) for i in record[f"{name}_ids"]), (cid, name)


def test_names_with_math_text_render_literally(run):
    root = run[0]
    page = (root / "report.html").read_text(encoding="utf-8")
    escaped = "math $\\foo$ &lt;b&gt;name&lt;/b&gt;.json"
    assert escaped in page  # tables and headings, autoescaped
    timeline = page[page.index('<figure class="timeline">'):]
    assert escaped + " · 32k" in timeline[: timeline.index("</figure>")]  # the SVG title: text, not math


def test_transcript_markup_never_reaches_the_page_as_markup(run):
    page = (run[0] / "report.html").read_text(encoding="utf-8")
    assert SCRIPT not in page and "<img src=x" not in page
    assert page.count("jinja-ran") == page.count("{% if true %}jinja-ran{% endif %}") > 0  # never evaluated


def test_a_large_run_becomes_a_folder(run, monkeypatch, tmp_path):
    monkeypatch.setattr(report_html, "SINGLE_FILE_SCENARIOS", 0)
    root = run[0]
    pages = report_html.render_pages(root)
    names = sorted(pages)
    assert names[0] == "report.html" and len(names) == 2 and names[1].startswith("report/0000-math_foo_b_name_b_.json")
    index, scenario = pages["report.html"], pages[names[1]]
    assert f'href="{names[1]}#c0"' in index  # the browser links into the scenario page
    assert 'class="cdata"' not in index and 'class="cdata"' in scenario
    compactions = pd.read_parquet(root / "compactions.parquet")
    assert index.count("<tr data-scenario=") == len(compactions) == scenario.count("<tr data-scenario=")
    # a scenario page shows the offline summarizer's summaries: it says so, as the index does
    assert "offline/extractive" in index.split('class="note">', 1)[1].split("</p>", 1)[0]
    assert "offline/extractive" in scenario.split('class="note">', 1)[1].split("</p>", 1)[0]


def test_a_run_is_one_page_exactly_while_that_page_is_within_the_limit(run, monkeypatch):
    """The single page is left unrendered when its scenarios' bodies alone pass the limit; the outcome is still the
    rule's: one page while the page the run would get is at most `SINGLE_FILE_LIMIT` bytes, else a folder."""
    root = run[0]
    monkeypatch.setattr(report_html, "SINGLE_FILE_LIMIT", 10**12)
    (single,) = report_html.render_pages(root).values()
    size = len(single.encode("utf-8"))
    for limit, one_page in ((size, True), (size - 1, False), (1, False)):
        monkeypatch.setattr(report_html, "SINGLE_FILE_LIMIT", limit)
        pages = report_html.render_pages(root)
        assert (list(pages) == ["report.html"]) == one_page, limit
        if one_page:
            assert pages["report.html"] == single


def test_chromium_runs_no_transcript_script(run):
    root = run[0]
    compactions = pd.read_parquet(root / "compactions.parquet")
    ordered = compactions.sort_values(["scenario", "strategy", "profile", "repeat", "compaction"]).reset_index(drop=True)
    first = int(ordered.index[ordered["strategy"] == "codex-local"][0])
    page = load(root / "report.html", f"#c{first}")
    assert 'data-report-ready="1"' in page.dom
    assert not re.search(r"<html[^>]*data-js-error", page.dom) and page.console == []
    assert not re.search(r"<body[^>]*data-pwned", page.dom)  # neither the script nor the onerror handler ran
    drill = page.dom[page.dom.index('<div id="drill">'):]
    # The payload is on the page as text inside the drill-down's items, and the jinja syntax is not evaluated.
    assert "&lt;script&gt;document.body.setAttribute('data-pwned','script')&lt;/script&gt;" in drill
    assert "{{ 7*7 }} {% if true %}jinja-ran{% endif %}" in drill


def _three_timelines(root):
    """The run's manifest, requests, compactions and probes, and its requests and compactions with a second scenario
    ("twin") and a second profile (64k) added, so that there are three timelines to share out."""
    manifest = json.loads((root / "manifest.json").read_text(encoding="utf-8"))
    requests, compactions = pd.read_parquet(root / "requests.parquet"), pd.read_parquet(root / "compactions.parquet")
    probes = pd.read_parquet(root / "probes.parquet")
    both = pd.concat([requests, requests.assign(scenario="twin"), requests.assign(profile="64k")], ignore_index=True)
    points = pd.concat([compactions, compactions.assign(scenario="twin"), compactions.assign(profile="64k")], ignore_index=True)
    return manifest, requests, compactions, probes, both, points


def test_figures_drawn_in_worker_processes_are_the_ones_drawn_here(run):
    """`Drawings` with `jobs=3` (two workers) gives each scenario the SVGs `figures.context_timeline` draws in this process,
    and each profile the overview figures `figures` draws here."""
    from compaction_bench.metrics.aggregate import headline_rows
    from compaction_bench.reports import figures
    from compaction_bench.reports.drawings import Drawings

    manifest, requests, compactions, probes, both, points = _three_timelines(run[0])
    twin, other = requests.assign(scenario="twin"), requests.assign(profile="64k")
    with Drawings(both, points, probes, manifest, jobs=3) as drawn:
        assert drawn._pool is not None  # really drawn elsewhere
        got = {name: drawn.timelines(name) for name in (NAME, "twin", "absent")}
        overview = {profile: drawn.overview(profile) for profile in ("32k", "64k", "absent")}
    order = ["codex-local", "truncate"]
    assert drawn.order == order

    def here(frame, marks, profile, title):
        return figures.context_timeline(frame, marks, manifest["profiles"].get(profile, {}).get("context_window"), title, order)

    assert got[NAME] == [here(requests, compactions, "32k", f"{NAME} · 32k"), here(other, compactions.assign(profile="64k"), "64k", f"{NAME} · 64k")]
    assert got["twin"] == [here(twin, compactions.assign(scenario="twin"), "32k", "twin · 32k")]
    assert got["absent"] == []
    # the probes are the 32k profile's only: its three overview figures, of the paired headline rows (every strategy finished
    # every scenario, so none is left out); 64k has requests, so its cache figure
    at_32k = both[both["profile"] == "32k"]
    paired, _ = headline_rows(probes, at_32k)
    assert overview["32k"] == {
        "Retention over the session": figures.retention_over_session(paired, "facts present over the session · 32k", order),
        "Retention by probe family and fact age": figures.retention_heatmaps(paired, "facts present by family and age · 32k", order),
        "Cache over the session": figures.cache_over_session(at_32k, "cache hit rate and re-billed tokens · 32k", order),
    }
    assert list(overview["64k"]) == ["Cache over the session"] and overview["absent"] == {}


def test_what_this_process_draws_while_it_waits_is_kept_for_the_report_and_drawn_once(run):
    """While the report waits for a worker's figure, this process draws the last queued ones no worker has taken
    (`Drawings._help`): drawn here until none is left, each figure is still the one drawn without workers, each is
    drawn at most once, and the report takes each of them back when it asks for it."""
    from compaction_bench.reports.drawings import Drawings

    manifest, _, _, probes, both, points = _three_timelines(run[0])
    names, profiles = (NAME, "twin"), ("32k", "64k")
    with Drawings(both, points, probes, manifest, jobs=1) as alone:
        expected = ({name: alone.timelines(name) for name in names}, {profile: alone.overview(profile) for profile in profiles})
    with Drawings(both, points, probes, manifest, jobs=2) as drawn:
        assert drawn._pool is not None
        helped = 0
        while drawn._help():
            helped += 1
        queued = sum(map(len, drawn._futures.values()))
        assert helped == len(drawn._here) <= queued  # each drawn here once (how many the worker took first is its timing)
        got = ({name: drawn.timelines(name) for name in names}, {profile: drawn.overview(profile) for profile in profiles})
        assert drawn._here == {}  # every one drawn here was taken back
    assert got == expected


def _killed(*_args: object) -> str:
    """A drawing task whose worker process is killed as it starts it (as the out-of-memory killer would)."""
    import signal

    os.kill(os.getpid(), signal.SIGKILL)
    return ""


def test_a_drawing_worker_that_dies_leaves_the_report_whole(run, monkeypatch):
    """A drawing worker killed (the out-of-memory killer; they plot whole tables) ended the run in a
    BrokenProcessPool traceback with no report; its figures are now drawn here, the same as without workers."""
    from compaction_bench.reports import drawings
    from compaction_bench.reports.drawings import Drawings

    manifest, _, _, probes, both, points = _three_timelines(run[0])
    with Drawings(both, points, probes, manifest, jobs=1) as alone:
        expected = {name: alone.timelines(name) for name in (NAME, "twin")}
    monkeypatch.setattr(drawings, "_draw", _killed)  # what the forked workers run
    with Drawings(both, points, probes, manifest, jobs=3) as drawn:
        assert drawn._pool is not None
        got = {name: drawn.timelines(name) for name in (NAME, "twin")}
    assert got == expected


def _killed_later(*_args: object) -> str:
    """A drawing task whose worker process is killed a second after it starts it."""
    import time

    time.sleep(1.0)
    return _killed()


def test_a_dead_drawing_workers_pool_leaves_no_traceback(run, monkeypatch):
    """Python 3.11's pool thread, once a worker dies, sets each pending drawing's future to BrokenProcessPool and dies
    on the first one the report had cancelled (InvalidStateError), its traceback printed beside a report that stays
    whole. A queued drawing cancelled (as `Drawings._help` does), then the one worker killed: no error of any thread
    reaches the process's hook, the report's timelines are the ones drawn without workers, and the hook is the
    process's own again after."""
    import threading
    from concurrent.futures import wait

    from compaction_bench.reports import drawings
    from compaction_bench.reports.drawings import Drawings

    manifest, _, _, probes, both, points = _three_timelines(run[0])
    with Drawings(both, points, probes, manifest, jobs=1) as alone:
        expected = alone.timelines(NAME)
    seen: list[type[BaseException]] = []

    def hook(args: threading.ExceptHookArgs) -> None:
        seen.append(args.exc_type)

    monkeypatch.setattr(threading, "excepthook", hook)
    monkeypatch.setattr(drawings, "_draw", _killed_later)
    with Drawings(both, points, probes, manifest, jobs=2) as drawn:
        futures = [future for queued in drawn._futures.values() for future in queued]
        assert len(futures) > 3 and futures[-1].cancel()  # one worker takes two at a time: the last is still queued
        wait(futures[:1], timeout=60)  # the worker died on it
        got = drawn.timelines(NAME)
    assert seen == []
    assert threading.excepthook is hook
    assert got == expected


def test_a_drawing_the_broken_pool_never_answers_is_drawn_here(run, monkeypatch):
    """Python 3.11's pool, once a worker dies, sets each pending drawing's future to BrokenProcessPool in turn and stops
    at the first one the report had cancelled (InvalidStateError in its thread), so a drawing a worker had taken may
    never be answered. Such a future (running, never set) beside a pool that broke: the report, which waited for it
    forever, asks whether the pool still runs while it waits and draws the figure itself, the same as without workers."""
    import threading
    from concurrent.futures import FIRST_EXCEPTION, Future, wait

    from compaction_bench.reports import drawings
    from compaction_bench.reports.drawings import Drawings

    manifest, _, _, probes, both, points = _three_timelines(run[0])
    with Drawings(both, points, probes, manifest, jobs=1) as alone:
        expected = alone.timelines(NAME)
    monkeypatch.setattr(drawings, "_draw", _killed)  # what the forked workers run: the pool breaks
    monkeypatch.setattr(drawings, "POLL_SECONDS", 0.05)
    with Drawings(both, points, probes, manifest, jobs=3) as drawn:
        futures = drawn._futures[("timeline", NAME)]
        wait([f for fs in drawn._futures.values() for f in fs], timeout=60, return_when=FIRST_EXCEPTION)
        unanswered: Future[str] = Future()
        assert unanswered.set_running_or_notify_cancel()  # taken by a worker, so it cannot be cancelled
        futures[0] = unanswered
        got: list[list[str]] = []
        waiting = threading.Thread(target=lambda: got.append(drawn.timelines(NAME)), daemon=True)
        waiting.start()
        waiting.join(timeout=60)
        assert not waiting.is_alive(), "the report waited for a drawing no one will answer"
    assert got == [expected]
