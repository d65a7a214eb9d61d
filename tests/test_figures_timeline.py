"""A scenario's context timeline shows its tables: per panel the line's points, the ▲ of points above the y
axis's top, the × of overflowed requests, the ▼ of compactions and the ticks of masking rewrites, the window
line, the title and the axis ranges, read from the Figure before it is saved and from its SVG, on hand-built
tables whose answers are counted below; its texts fit their canvas without overlapping; its SVG is the
same bytes twice and keeps one element per kind of dense mark however many marks it holds."""

from __future__ import annotations

import gc
import itertools
import re
import xml.etree.ElementTree as ET

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PathCollection
from matplotlib.lines import Line2D
from matplotlib.patches import PathPatch

from compaction_bench.reports import figures
from compaction_bench.reports.drawings import Drawings
from compaction_bench.reports.figures import context_timeline, relative_path, timeline_figure

WINDOW = 1_000
#: a: tokens per step 0–9; above the top (1.3 × the window = 1,300, as the peak 5,000 is over it): steps 4, 5, 6, 9.
A_TOKENS = [100, 400, 900, 1_200, 1_400, 2_000, 5_000, 300, 500, 1_350]
#: a's overflowed requests (flagged by hand, not by the tokens): steps 3–6, so "a · 4 overflows".
A_OVERFLOWS = {3, 4, 5, 6}
ORDER = ["a", "b", "masker"]


def _requests(strategies: dict[str, list[int]], overflows: dict[str, set[int]]) -> pd.DataFrame:
    return pd.DataFrame([
        {"scenario": "s", "strategy": name, "profile": "1k", "repeat": 0, "kind": "turn", "request": step, "step": step,
         "true_tokens": tokens, "overflow": step in overflows.get(name, set())}
        for name, series in strategies.items() for step, tokens in enumerate(series)
    ])


def _compactions(marks: list[tuple[str, str, int, int]]) -> pd.DataFrame:
    return pd.DataFrame([
        {"scenario": "s", "strategy": name, "profile": "1k", "repeat": 0, "trigger": trigger, "step": step, "tokens_before": before}
        for name, trigger, step, before in marks
    ])


def tables() -> tuple[pd.DataFrame, pd.DataFrame]:
    """b compacts at steps 2 and 5 (threshold); masker masks at steps 1–8 and compacts once at 9 (auto) from
    2,000 tokens, drawn on the top edge (1,300)."""
    requests = _requests({"a": A_TOKENS, "b": [100, 300, 800, 200, 500, 900, 300, 400, 500, 600], "masker": [200] * 10},
                         {"a": A_OVERFLOWS})
    marks = [("b", "threshold", 2, 800), ("b", "threshold", 5, 900), *[("masker", "masking", s, 250) for s in range(1, 9)],
             ("masker", "auto", 9, 2_000)]
    return requests, _compactions(marks)


def _panels(fig) -> dict[str, object]:
    return {ax.get_title().split(" · ")[0]: ax for ax in fig.axes if ax.get_visible()}


def _marks(ax, label: str) -> np.ndarray:
    """The points a panel's dense marks of one kind stand for: the middle of each mark's first stroke (▲ its
    apex to its lower-left corner, × its rising stroke, | its foot to its top), moved to the mark's centre line."""
    patches = [p for p in ax.patches if isinstance(p, PathPatch) and p.get_label() == label]
    if not patches:
        return np.empty((0, 2))
    (patch,) = patches
    path = patch.get_path()
    moves = np.flatnonzero(path.codes == 1)[:: 2 if label == "_overflow" else 1]  # a × is two strokes
    starts, ends = path.vertices[moves], path.vertices[moves + 1]
    middle = (starts + ends) / 2
    return np.column_stack([starts[:, 0] if label != "_overflow" else middle[:, 0], middle[:, 1]])


def test_each_panel_shows_its_strategys_points_marks_window_title_and_ranges():
    requests, compactions = tables()
    fig = timeline_figure(requests, compactions, WINDOW, "s · 1k", ORDER)
    panels = _panels(fig)
    assert list(panels) == ORDER
    assert fig.get_suptitle() == "s · 1k"
    assert [ax.get_title() for ax in panels.values()] == ["a · 4 overflows", "b · 0 overflows", "masker · 0 overflows"]
    for name, ax in panels.items():
        # steps 0–9 with matplotlib's 5% margin each side; tokens from 0 to 1.3 × the window
        assert ax.get_xlim() == pytest.approx((-0.45, 9.45)) and ax.get_ylim() == pytest.approx((0, 1_300))
        (line,) = [ln for ln in ax.get_lines() if len(ln.get_xdata()) > 2]
        tokens = requests[requests["strategy"] == name]["true_tokens"].clip(upper=1_300)
        assert list(line.get_xdata()) == list(range(10)) and list(line.get_ydata()) == list(tokens)
        (window,) = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
        assert list(window.get_ydata()) == [WINDOW, WINDOW]
    a, b, masker = panels.values()
    np.testing.assert_allclose(_marks(a, "_above"), [[4, 1_300], [5, 1_300], [6, 1_300], [9, 1_300]], atol=1e-6)
    np.testing.assert_allclose(_marks(a, "_overflow"), [[3, 1_200], [4, 1_300], [5, 1_300], [6, 1_300]], atol=1e-6)
    assert len(_marks(b, "_above")) == len(_marks(b, "_overflow")) == len(_marks(masker, "_overflow")) == 0
    np.testing.assert_allclose(_marks(masker, "_masking"), [[s, 0] for s in range(1, 9)], atol=1e-6)
    assert len(_marks(a, "_masking")) == len(_marks(b, "_masking")) == 0
    compacted = {name: [c.get_offsets().tolist() for c in ax.collections if isinstance(c, PathCollection)] for name, ax in panels.items()}
    assert compacted == {"a": [], "b": [[[2, 800], [5, 900]]], "masker": [[[9, 1_300]]]}


def test_a_dense_mark_is_drawn_at_its_markers_size_in_points():
    """▲ spans √6 pt (scatter size 6 pt²), × √14 pt (14 pt²), the masking tick 4 pt, on the saved canvas."""
    requests, compactions = tables()
    fig = timeline_figure(requests, compactions, WINDOW, "s · 1k", ORDER)
    a, _, masker = _panels(fig).values()
    to_points = a.transData + fig.dpi_scale_trans.inverted()  # data → inches
    for ax, label, width, height in ((a, "_above", 6**0.5, 6**0.5), (a, "_overflow", 14**0.5, 14**0.5), (masker, "_masking", 0, 4)):
        (patch,) = [p for p in ax.patches if p.get_label() == label]
        path = patch.get_path()
        first_mark = path.vertices[: {"_above": 4, "_overflow": 4, "_masking": 2}[label]]
        inches = to_points.transform(first_mark) if ax is a else (masker.transData + fig.dpi_scale_trans.inverted()).transform(first_mark)
        size = (inches.max(axis=0) - inches.min(axis=0)) * 72
        assert size == pytest.approx([width, height], abs=1e-6)


def _drawn_elements(svg: str) -> dict[str, int]:
    """SVG elements by tag, leaving out the axes' ticks (their number follows the axis's range)."""
    counts: dict[str, int] = {}

    def walk(element: ET.Element) -> None:
        if element.get("id", "").startswith(("xtick_", "ytick_")):
            return
        tag = element.tag.rsplit("}", 1)[-1]
        counts[tag] = counts.get(tag, 0) + 1
        for child in element:
            walk(child)

    walk(ET.fromstring(svg))
    return counts


def test_dense_marks_are_one_svg_path_each_however_many():
    """Every step overflowed, above the top and masked: 300 steps draw as many SVG elements as 10 (ticks aside)."""
    def drawn(steps: int) -> str:
        requests = _requests({"a": [5_000] * steps}, {"a": set(range(steps))})
        masking = _compactions([("a", "masking", s, 250) for s in range(steps)])
        return context_timeline(requests, masking, WINDOW, "s · 1k", ["a"])

    few, many = drawn(10), drawn(300)
    assert _drawn_elements(few) == _drawn_elements(many)
    assert ">a · 300 overflows<" in many and ">a · 10 overflows<" in few


def test_the_svg_is_the_same_bytes_twice():
    requests, compactions = tables()
    assert context_timeline(requests, compactions, WINDOW, "s · 1k", ORDER) == context_timeline(requests, compactions, WINDOW, "s · 1k", ORDER)


def _text_boxes(fig) -> list[tuple[str, object]]:
    """Every text the figure shows, with its extent on an Agg canvas of the figure."""
    renderer = FigureCanvasAgg(fig).get_renderer()
    texts = [fig._suptitle, fig._supxlabel, fig._supylabel]
    for ax in fig.axes:
        texts.append(ax.title)
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            texts += [t.label1 for t in axis.get_major_ticks() if low <= t.get_loc() <= high and t.label1.get_visible()]
    return [(t.get_text(), t.get_window_extent(renderer)) for t in texts if t is not None and t.get_visible() and t.get_text()]


@pytest.mark.parametrize("names", [
    ORDER[:1],
    [f"strategy-{n}" for n in range(5)],
    ["anthropic-clear-tool-uses", "observation-masking", "codex-token-budget", "claude-code-2.1", *[f"s{n}" for n in range(17)]],
    ["a-strategy-whose-name-is-much-longer-than-its-panel-is-wide", "b", "c"],
])
def test_the_texts_fit_the_canvas_and_touch_no_other_text_or_panel(names):
    """The layout is computed from the texts' sizes, not by tight_layout: no text leaves the canvas, no two texts
    overlap, and no title or tick label lies on a panel it does not belong to (a title above its own panel)."""
    requests = _requests({name: [1_000 * (n + 1) for n in range(600)] for name in names}, {names[0]: {599}})
    fig = timeline_figure(requests, _compactions([]), 64_000, "synthetic-constraint-change-s6 · 64k", names)
    canvas = fig.bbox
    boxes = _text_boxes(fig)
    for text, box in boxes:
        assert canvas.x0 <= box.x0 and box.x1 <= canvas.x1 and canvas.y0 <= box.y0 and box.y1 <= canvas.y1, text
    for (one, first), (other, second) in itertools.combinations(boxes, 2):
        assert not first.overlaps(second), (one, other)
    panels = [ax.get_window_extent() for ax in fig.axes]
    for ax in fig.axes:
        title = ax.title.get_window_extent()
        assert all(not title.overlaps(panel) for panel in panels), ax.get_title()


def test_relative_path_data_draws_the_same_points():
    """A triangle, then a line and a cubic curve after a close: each point written from the one before (a close
    returns to its subpath's start), rounded to 0.01 before the difference, a repeated command written once."""
    data = "M 0 -1.224745 \nL -1.224745 1.224745 \nL 1.224745 1.224745 \nz\nM 5 5 \nL 6 6 \nL 7 5.5 \nC 1 2 3 4 5 6 \nz\n"
    # (0, -1.22) → (-1.22, 1.22) is (-1.22, +2.44); → (1.22, 1.22) is (+2.44, 0); z back to (0, -1.22); (5, 5) is
    # (+5, +6.22) from there; the curve's points from (7, 5.5): (-6, -3.5), (-4, -1.5), (-2, +.5).
    assert relative_path(data) == "m0-1.22l-1.22 2.44 2.44 0zm5 6.22l1 1 1-.5c-6-3.5-4-1.5-2 .5z"


def test_relative_path_keeps_every_point_of_a_long_line_to_the_hundredth():
    rng = np.random.default_rng(7)
    points = np.round(rng.uniform(0, 800, size=(500, 2)), 6)
    data = "M " + " \nL ".join(f"{x:f} {y:f}" for x, y in points) + " \n"
    numbers = [float(n) for n in re.findall(r"-?(?:\d+\.?\d*|\.\d+)", relative_path(data))]
    assert np.allclose(np.cumsum(np.array(numbers).reshape(-1, 2), axis=0), points, atol=0.005 + 1e-9)


def test_drawings_restore_the_collectors_state():
    requests, compactions = tables()
    for running in (True, False):
        (gc.enable if running else gc.disable)()
        try:
            with Drawings(requests, compactions, pd.DataFrame(), {"profiles": {"1k": {"context_window": WINDOW}}}, jobs=1) as drawn:
                (svg,) = drawn.timelines("s")
            assert gc.isenabled() is running
        finally:
            gc.enable()
    assert svg == context_timeline(requests, compactions, WINDOW, "s · 1k", sorted(ORDER))


def test_line_points_are_plotted_unclipped_but_for_the_top():
    """A point above the top is drawn on the top edge (1,300), the others at their tokens."""
    requests, compactions = tables()
    fig = timeline_figure(requests, compactions, WINDOW, "s · 1k", ORDER)
    (line,) = [ln for ln in _panels(fig)["a"].get_lines() if isinstance(ln, Line2D) and len(ln.get_xdata()) > 2]
    assert list(line.get_ydata()) == [100, 400, 900, 1_200, 1_300, 1_300, 1_300, 300, 500, 1_300]


def test_a_canvas_drawn_on_before_draws_what_a_new_figure_draws():
    """`context_timeline` draws on a canvas of as many panels drawn on and cleared before: each timeline of a
    sequence through one canvas (marks of every kind; a name too long for its panel, which `tight_layout` lays out;
    other limits and no marks; the first again) is the SVG of the same timeline on a new figure."""
    requests, compactions = tables()
    long_names = ["a-strategy-whose-name-is-much-longer-than-its-panel-is-wide", "b", "c"]
    other = _requests({name: [7_000 * (n + 1) for n in range(600)] for name in long_names}, {"b": {599}})
    timelines = [
        (requests, compactions, WINDOW, "s · 1k", ORDER),
        (other, _compactions([]), 64_000, "synthetic-constraint-change-s6 · 64k", long_names),
        (other.assign(true_tokens=other["true_tokens"] // 7), _compactions([("c", "threshold", 300, 2_000)]), None, "t · 64k", long_names),
        (requests, compactions, WINDOW, "s · 1k", ORDER),
    ]
    figures._CANVASES.pop(3, None)
    for drawn in timelines:
        svg = context_timeline(*drawn)
        assert 3 in figures._CANVASES  # cleared and kept for the next timeline of three panels
        assert svg == figures.to_svg(timeline_figure(*drawn), crop=False), drawn[3]
