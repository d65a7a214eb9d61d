"""Leftovers of a code review (pass 41): the strategies' colours without the guard that never fired, and a run's
manifest read once by `load_run_with_manifest` (the tables and the manifest the callers need, from one read)."""

from __future__ import annotations

import builtins
import colorsys
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import compaction_bench as bench
from compaction_bench.reports.figures import colours
from compaction_bench.store import P_BEST_JUDGED, P_BEST_RULE, failed_cells_in, load_run, load_run_with_manifest, p_best_judged_in
from tests.conftest import write_tiny_session

#: matplotlib's tab10 (its default colour cycle), which are tab20's dark shades: the first ten strategies' colours.
TAB10 = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]


def _hex(colour: tuple[float, ...]) -> str:
    return "#" + "".join(f"{round(v * 255):02x}" for v in colour[:3])


# ---------------------------------------------------------------------------- 1: colours never repeat, in the run's order
def test_the_first_ten_strategies_take_tab10_in_the_runs_order():
    names = [f"s{n}" for n in range(10)]
    assert [_hex(c) for c in colours(names).values()] == TAB10
    assert [_hex(c) for c in colours(list(reversed(names))).values()] == TAB10  # by place, not by name


def test_a_name_given_twice_keeps_its_first_place():
    palette = colours(["b", "a", "b", "c"])
    assert list(palette) == ["b", "a", "c"]
    assert palette == colours(["b", "a", "c"])


def test_colours_never_repeat_however_many_strategies_a_run_has():
    """The guard that skipped a colour already given never fired: the 60 table colours differ, none of them has the
    generated colours' HLS saturation (0.75) at one of their lightnesses, and the generated hues are a golden angle
    apart. A run of 100,000 strategies keeps them all apart, and a shorter run's colours are a longer one's first."""
    names = [f"s{n}" for n in range(100_000)]
    palette = colours(names)
    assert len(set(palette.values())) == len(names)
    table = list(palette.values())[:60]
    for colour in table:
        _, lightness, saturation = colorsys.rgb_to_hls(*colour[:3])
        assert abs(saturation - 0.75) > 1e-3 or min(abs(lightness - v) for v in (0.35, 0.5, 0.65)) > 1e-3
    assert colours(names[:500]) == {name: palette[name] for name in names[:500]}


# ---------------------------------------------------------------------------- 3: a load reads the manifest once
@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tiny")
    session = write_tiny_session(folder)
    return bench.run([session], strategies=["none", "truncate"], profiles=["32k"], out=folder / "runs", run_id="r", jobs=1,
                     report=False, progress=False, probes=str(folder / "probes.yaml"))


def _counting(real: Callable[..., Any], manifest: Path, opened: list[str]) -> Callable[..., Any]:
    """`real` (the built-in `open`), recording each opening of `manifest` in `opened`."""

    def open_file(file: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(file, (str, Path)) and Path(file).resolve() == manifest:
            opened.append(str(file))
        return real(file, *args, **kwargs)

    return open_file


@pytest.fixture
def manifest_opens(tiny_run, monkeypatch) -> list[str]:
    """The openings of the tiny run's manifest.json while the test runs: `open` and `io.open` (which `Path.read_text`
    calls) wrapped with a counter that then opens the file as the real one does."""
    opened: list[str] = []
    counting = _counting(builtins.open, (tiny_run / "manifest.json").resolve(), opened)
    monkeypatch.setattr(builtins, "open", counting)
    monkeypatch.setattr(io, "open", counting)
    return opened


def test_the_counter_sees_a_read_of_the_manifest(tiny_run, manifest_opens):
    (tiny_run / "manifest.json").read_text(encoding="utf-8")
    with open(tiny_run / "manifest.json", encoding="utf-8"):
        pass
    assert len(manifest_opens) == 2


def test_a_run_and_its_manifest_load_with_one_read_of_the_manifest(tiny_run, manifest_opens):
    tables, manifest = load_run_with_manifest(tiny_run)
    assert len(manifest_opens) == 1
    assert manifest == json.loads((tiny_run / "manifest.json").read_text(encoding="utf-8"))
    assert p_best_judged_in(manifest) and manifest[P_BEST_JUDGED] == P_BEST_RULE
    assert failed_cells_in(manifest) == manifest["cells"]["failed"] == []
    del manifest_opens[:]
    alone = load_run(tiny_run)
    assert len(manifest_opens) == 1
    assert list(alone) == list(tables) == ["requests", "compactions", "probes", "summary"]
    for name, frame in tables.items():
        pd.testing.assert_frame_equal(frame, alone[name])
    assert len(tables["requests"]) and len(tables["probes"]) and len(tables["summary"])  # the tiny run compacts nothing


def test_a_summary_written_before_p_best_was_judged_loads_with_it_withheld(tiny_run, tmp_path):
    """An older run's manifest lacks `p_best_judged`, or holds the forty-first to forty-fifth passes' `true` (its
    scenarios' probes counted as independent units): its stored P(best) is withheld (NaN), from the one read; with
    the current rule's mark, the stored P(best) loads as it is."""
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    older = tmp_path / "older"
    shutil.copytree(tiny_run, older)
    summary = pq.read_table(older / "summary.parquet")
    column = summary.schema.get_field_index("p_best")
    pq.write_table(summary.set_column(column, "p_best", pa.array([0.5] * len(summary), pa.float64())), older / "summary.parquet")
    assert load_run_with_manifest(older)[0]["summary"]["p_best"].tolist() == [0.5, 0.5]
    manifest = json.loads((older / "manifest.json").read_text(encoding="utf-8"))
    for mark in (True, None):  # the earlier rule's mark, then none
        if mark is None:
            del manifest[P_BEST_JUDGED]
        else:
            manifest[P_BEST_JUDGED] = mark
        (older / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
        tables, read = load_run_with_manifest(older)
        assert not p_best_judged_in(read) and tables["summary"]["p_best"].isna().all()
