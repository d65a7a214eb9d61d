"""matplotlib figures of a run, rendered to inline SVG strings (no files, no scripts).

Text is written as SVG `<text>` (small files, escaped by matplotlib) and never parsed as
mathtext: a scenario or strategy name with `$…$` is drawn literally (`text.parse_math` off).
Figures: context timelines as small multiples (one panel per strategy, shared axes; of a run with
repeats, the first repeat's requests and compactions, named in the title), retention
over the session, retention by probe family and fact age (heatmaps), retention against cost and
re-billed tokens with the Pareto front, cache hit rate and re-billed tokens over the session.

The overview figures show the tables' numbers: they are given the rows the tables compare (the
caller's choice, `reports.drawings`: the paired headline rows of the scenarios every strategy of the
profile finished) and weigh them as `metrics.aggregate` does. Retention weighs each probe one (its
rows averaged first, `aggregate.per_probe`), then pools every probe of every scenario, as
`aggregate.overall` pools `retention`: a family's cell is `overall()` of that family's probe rows
(for one scenario, the summary's `retention_<family>`), an age's cell the mean of the per-probe
values of that age bucket (for one scenario, `retention_age_<bucket>`), and a tenth of the session
the mean of the per-probe values in that tenth. The cache figure's hit rate leaves out each cell's
first request, as `cache_hit_rate` does, and its re-billed tokens are per repeat, so the tenths of
a strategy add up to its leaderboard `re-billed tokens`.
"""

from __future__ import annotations

import colorsys
import functools
import io
import math
import re
from collections.abc import Sequence
from typing import Any, NamedTuple

import matplotlib
import matplotlib.font_manager
import matplotlib.patches
import matplotlib.path
import matplotlib.textpath
import matplotlib.ticker
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from compaction_bench.metrics.aggregate import AGE_BUCKETS, per_probe

STYLE: Any = {"text.parse_math": False, "svg.fonttype": "none", "svg.hashsalt": "compaction-bench", "font.size": 8}
#: Session position bins of the "over the session" figures.
BINS = 10
AGE_ORDER = ["lt8k", "8k_32k", "32k_128k", "ge128k"]
AGE_LABELS = {"lt8k": "< 8k", "8k_32k": "8k–32k", "32k_128k": "32k–128k", "ge128k": "≥ 128k"}


#: Geometry attributes whose numbers are cut to 2 decimals (a third of the size; text content is never touched).
_COORDINATES = re.compile(r'\b(x|y|x1|x2|y1|y2|transform|points)="([^"]*)"')
_DIGITS = re.compile(r"(\d+\.\d\d)\d+")
#: A path's data as matplotlib writes it: absolute commands (M, L, Q, C, z) and plain decimal numbers.
_PATH_DATA = re.compile(r'\bd="([^"]*)"')
_PATH_TOKEN = re.compile(r"[MLQCz]|-?(?:\d+\.?\d*|\.\d+)")
#: How many coordinate pairs each command takes.
_PAIRS = {"M": 1, "L": 1, "Q": 2, "C": 3, "z": 0}


class TokenTicks(matplotlib.ticker.Formatter):
    """Token counts as tick labels, in k or M by the largest tick, with the fewest decimals (up to `MAX_DECIMALS`)
    that tell every tick apart: 2,600 … 3,400 read 2.6k … 3.4k, not 3k three times (whole thousands did). One
    instance per axis: the scale is its ticks' (`set_locs`, which matplotlib calls with the ticks it labels)."""

    MAX_DECIMALS = 6

    def __init__(self) -> None:
        self.unit, self.suffix, self.decimals = 1.0, "", 0

    def set_locs(self, locs: Sequence[float]) -> None:
        finite = [float(v) for v in locs if math.isfinite(v)]
        top = max((abs(v) for v in finite), default=0.0)
        self.unit, self.suffix = (1e6, "M") if top >= 1e6 else (1e3, "k") if top >= 1e3 else (1.0, "")
        distinct = len(set(finite))
        self.decimals = next((d for d in range(self.MAX_DECIMALS) if len({round(v / self.unit, d) for v in finite}) == distinct), self.MAX_DECIMALS)

    def _text(self, value: float, decimals: int) -> str:
        return "0" if value == 0 else f"{value / self.unit:.{decimals}f}{self.suffix}"

    def __call__(self, x: float, pos: int | None = None) -> str:
        return self._text(x, self.decimals)


#: Line styles and markers of the strategies, one pair per block of `BLOCK` strategies in the run's order
#: (`styles`): with the colours, which never repeat, a later block's strategy also draws unlike an earlier one's.
LINE_STYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "P", "X")
BLOCK = 20


class Style(NamedTuple):
    """How a strategy is drawn: its colour, line style and marker."""

    colour: tuple[float, ...]
    linestyle: str
    marker: str


def _palette_colour(n: int) -> tuple[float, ...]:
    """The `n`th colour of the strategies' palette: tab20's dark shades, then its light ones (the first 20), then
    tab20b's and tab20c's (the next 40, shade by shade), then hues a golden angle apart at three lightnesses.

    No two are alike: the 60 table colours differ from each other; none has the generated colours' saturation (0.75
    in HLS); two generated colours of one lightness (the same `n % 3`) have hues `(n - m) * φ` apart, never a whole
    number for φ irrational (in floats: checked for every `n` below 2,000,000, far more strategies than a run has).
    tests/test_cleanup_s41.py checks the table colours and a run of 100,000 strategies."""
    if n < 20:
        return tuple(matplotlib.colormaps["tab20"](2 * n if n < 10 else 2 * (n - 10) + 1))
    if n < 60:
        index = n - 20
        name = "tab20b" if index < 20 else "tab20c"
        return tuple(matplotlib.colormaps[name]((index % 20) % 5 * 4 + (index % 20) // 5))
    hue = (n * 0.6180339887498949) % 1.0
    return (*colorsys.hls_to_rgb(hue, (0.35, 0.5, 0.65)[n % 3], 0.75), 1.0)


def colours(strategies: Sequence[str]) -> dict[str, tuple[float, ...]]:
    """One colour per strategy, by its place in `strategies` (the run's order; a name given twice keeps its first
    place), no two alike however many there are (`_palette_colour`, whose colours never repeat; tab20 alone gave
    the 11th and the 21st one colour)."""
    return {strategy: _palette_colour(n) for n, strategy in enumerate(dict.fromkeys(strategies))}


def styles(strategies: Sequence[str]) -> dict[str, Style]:
    """Each strategy's `Style`, by its place in `strategies` (the run's order): its colour (`colours`), and a line style
    and marker per block of `BLOCK` strategies."""
    palette = colours(strategies)
    return {s: Style(palette[s], LINE_STYLES[(n // BLOCK) % len(LINE_STYLES)], MARKERS[(n // BLOCK) % len(MARKERS)])
            for n, s in enumerate(palette)}


def to_svg(fig: Figure, crop: bool = True) -> str:
    """The figure as an SVG string, cropped to what it draws (`bbox_inches="tight"`, a layout pass of
    its own) unless `crop` is False (a figure laid out to fit already fits its canvas); its paths'
    data written relative (`relative_path`), other coordinates cut to 2 decimals."""
    buffer = io.StringIO()
    with matplotlib.rc_context(STYLE):
        fig.savefig(buffer, format="svg", bbox_inches="tight" if crop else None, metadata={"Date": None})
    svg = buffer.getvalue()
    svg = _PATH_DATA.sub(lambda match: 'd="' + relative_path(match.group(1)) + '"', svg[svg.index("<svg"):])
    return _COORDINATES.sub(_rounded, svg)


def _rounded(match: re.Match[str]) -> str:
    return match.group(1) + '="' + _DIGITS.sub(r"\1", match.group(2)) + '"'


def _hundredths(value: int) -> str:
    """`value` hundredths as the shortest decimal: 150 → "1.5", -5 → "-.05", 0 → "0"."""
    sign, whole, part = "-" if value < 0 else "", abs(value) // 100, abs(value) % 100
    fraction = f"{part:02d}".rstrip("0")
    return sign + (str(whole) if whole or not fraction else "") + ("." + fraction if fraction else "")


def relative_path(data: str) -> str:
    """SVG path data of absolute M/L/Q/C/z commands rewritten with relative commands, each point to 0.01
    (under half the size; the same shape): a point is written as its distance from the one before, both
    rounded first, so no rounding error adds up along the path; a command repeated is written once."""
    tokens = _PATH_TOKEN.findall(data)
    out: list[str] = []
    x = y = start_x = start_y = 0
    previous = ""
    n = 0
    while n < len(tokens):
        command = tokens[n]
        n += 1
        if command == "z":
            out.append("z")
            x, y, previous = start_x, start_y, "z"
            continue
        pairs = []
        for _ in range(_PAIRS[command]):
            pairs.append((round(float(tokens[n]) * 100), round(float(tokens[n + 1]) * 100)))
            n += 2
        numbers = [_hundredths(v) for px, py in pairs for v in (px - x, py - y)]
        text = numbers[0]
        for number in numbers[1:]:
            text += number if number.startswith("-") else " " + number
        if command == previous and command != "M":
            out.append(text if text.startswith("-") else " " + text)
        else:
            out.append(command.lower() + text)
        x, y = pairs[-1]
        if command == "M":
            start_x, start_y = x, y
        previous = command
    return "".join(out)


def _figure(rows: int, cols: int, width: float, height: float, **kw) -> tuple[Figure, np.ndarray]:
    """A figure of its own (no pyplot: the caller's backend, e.g. a notebook's inline one, is never switched)."""
    with matplotlib.rc_context(STYLE):
        fig = Figure(figsize=(width, height))
        return fig, fig.subplots(rows, cols, squeeze=False, **kw)


def context_timeline(
    requests: pd.DataFrame, compactions: pd.DataFrame, window: int | None, title: str, order: Sequence[str] | None = None
) -> str:
    """`timeline_figure` as an SVG string, drawn on a canvas of as many panels drawn on before (`_CANVASES`)."""
    shown = _Timeline.of(requests, compactions, window, title, order)
    panels = len(shown.strategies)
    canvas = _CANVASES.pop(panels, None) or _canvas(panels)  # taken out while it is drawn on
    svg = to_svg(_draw_timeline(canvas, shown).figure, crop=False)  # laid out to fit its canvas
    _clear(canvas)
    _CANVASES[panels] = canvas
    return svg


def timeline_figure(
    requests: pd.DataFrame, compactions: pd.DataFrame, window: int | None, title: str, order: Sequence[str] | None = None
) -> Figure:
    """Small multiples: true context tokens per turn request, one panel per strategy, shared axes.

    ▼ marks a compaction (tokens before it; masking rewrites, which happen at every step, are
    ticks along the bottom), × a request that reached no model (it overflowed, or the agent would not send it; the
    panel's title counts each), the dashed line the window. The y axis stops
    at 1.3 × the window (the window line always shows); points above it are drawn on the top edge as ▲.
    A run with repeats draws its first (`timeline_rows`), and the title says which.

    Drawn for size and speed: the dense marks of a panel (its ▲, × and masking ticks, thousands in a
    default run's scenario) are one path each (`_marks`) rather than one SVG element per mark, and
    the panels are placed by `_grid_layout`, computed once from the texts' sizes, rather than by
    `tight_layout`, which measures every panel's ticks; `context_timeline` draws on the canvas of the
    last timeline of as many panels, cleared, rather than on a new figure.
    """
    shown = _Timeline.of(requests, compactions, window, title, order)
    return _draw_timeline(_canvas(len(shown.strategies)), shown).figure


class _Canvas(NamedTuple):
    """A timeline's figure and its panels (`_canvas`)."""

    figure: Figure
    axes: list[Any]


#: Timeline canvases drawn on and cleared (`_clear`), one per number of panels: a report draws hundreds of
#: timelines of a few panel counts, and making a figure's panels and their ticks was a third of each
#: timeline's time. A canvas is taken out while it is drawn on (a thread drawing beside it makes its own).
_CANVASES: dict[int, _Canvas] = {}


class _Timeline(NamedTuple):
    """What a timeline draws: the turn requests and compactions (`timeline_rows`), the window, the title (with the
    repeat drawn), the strategies with a panel, in the report's order, and each one's colour: its colour in the
    run's order (`colours(order)`), as in the overview figures, whichever strategies this scenario lacks."""

    turns: pd.DataFrame
    compactions: pd.DataFrame
    window: int | None
    title: str
    strategies: list[str]
    palette: dict[str, tuple[float, ...]]

    @classmethod
    def of(cls, requests: pd.DataFrame, compactions: pd.DataFrame, window: int | None, title: str, order: Sequence[str] | None) -> _Timeline:
        turns, marks, shown = timeline_rows(requests, compactions)
        present = set(turns["strategy"].unique())
        run_order = list(order or turns["strategy"].unique())
        strategies = [s for s in run_order if s in present]
        return cls(turns, marks, window, f"{title} · {shown}" if shown else title, strategies, colours(run_order))


def _grid(panels: int) -> tuple[int, int]:
    """(rows, columns) of a timeline of `panels` panels: four to a row."""
    cols = min(4, max(1, panels))
    return max(1, math.ceil(panels / cols)), cols


def _canvas(panels: int) -> _Canvas:
    """A new figure with `panels` panels on `_grid(panels)`, sized for it."""
    rows, cols = _grid(panels)
    with matplotlib.rc_context(STYLE):
        # Shared axes by equal limits, not by matplotlib's axis sharing: with 20 panels sharing spends
        # seconds per figure keeping the panels' limits in step (a minute of a default run's report).
        fig = Figure(figsize=(2.7 * cols + 0.4, 1.55 * rows + 0.5))
        axes = [fig.add_subplot(rows, cols, n + 1) for n in range(panels)] or [fig.add_subplot(1, 1, 1, visible=False)]
    return _Canvas(fig, axes)


def _clear(canvas: _Canvas) -> None:
    """Return a drawn canvas to the state `_canvas` made it in, as far as `_draw_timeline` reads or sets: its panels
    without the lines, marks and collections drawn on them, and their axes' tick locators as a new panel's
    (tests/test_figures_timeline.py draws on a cleared canvas and on a new one and compares their SVG)."""
    with matplotlib.rc_context(STYLE):
        for ax in canvas.axes:
            for artist in [*ax.lines, *ax.collections, *ax.patches]:
                artist.remove()
            for axis in (ax.xaxis, ax.yaxis):
                axis.set_major_locator(matplotlib.ticker.AutoLocator())


def _draw_timeline(canvas: _Canvas, shown: _Timeline) -> _Canvas:
    """`timeline_figure` of `shown` drawn on `canvas`, a new or cleared canvas of one panel per strategy it shows."""
    turns, compactions, window, title, strategies, palette = shown
    rows, cols = _grid(len(strategies))
    peak = float(turns["true_tokens"].max()) if len(turns) else 1.0
    top = min(max(peak, window) * 1.08, window * 1.3) if window else peak * 1.05
    first, last = (float(turns["step"].min()), float(turns["step"].max())) if len(turns) else (0.0, 1.0)
    margin = (last - first) * 0.05 or 0.5  # matplotlib's default autoscale margin
    by_strategy = dict(iter(turns.groupby("strategy", sort=False)))
    marks = dict(iter(compactions.groupby("strategy", sort=False))) if not compactions.empty else {}
    panel_titles = {s: _panel_title(s, by_strategy[s]) for s in strategies}
    fig, axes = canvas
    with matplotlib.rc_context(STYLE):
        for ax, strategy in zip(axes, strategies, strict=False):
            ax.set_xlim(first - margin, last + margin)
            ax.set_ylim(0, top)
            ax.yaxis.set_major_formatter(TokenTicks())
            ax.set_title(panel_titles[strategy], fontsize=7.5, y=1.0)  # placed: no search for ticks above the panel
            ax.label_outer()
        fig.suptitle(title, fontsize=9)
        fig.supxlabel("step (recorded model response)", fontsize=7.5)
        fig.supylabel("context tokens", fontsize=7.5)
        width, height = _grid_layout(fig, axes, rows, cols, list(panel_titles.values()))
        per_point = ((last - first + 2 * margin) / width, top / height)  # data units per point of a panel
        for ax, strategy in zip(axes, strategies, strict=False):
            frame = by_strategy[strategy].sort_values("request")
            colour = palette[strategy]
            ax.plot(frame["step"], frame["true_tokens"].clip(upper=top), linewidth=0.9, color=colour)
            above = frame[frame["true_tokens"] > top]
            if len(above):
                _marks(ax, above["step"], np.full(len(above), top), _ABOVE, per_point, label="_above", facecolor=colour, edgecolor=colour, zorder=1, clip_on=False)
            over = frame[frame["overflow"].astype(bool)]
            if len(over):
                _marks(ax, over["step"], over["true_tokens"].clip(upper=top), _OVERFLOW, per_point, label="_overflow", fill=False, edgecolor="#b00", linewidth=0.8, zorder=4)
            mine = marks.get(strategy)
            if mine is not None:
                masking = mine["trigger"] == "masking"
                other = mine[~masking]
                if len(other):
                    ax.scatter(other["step"], other["tokens_before"].clip(upper=top), marker="v", s=16, color="black", zorder=3)
                if masking.any():
                    _marks(ax, mine["step"][masking], np.zeros(int(masking.sum())), _MASKING, per_point, label="_masking", fill=False, edgecolor="#777", zorder=2)
            if window:
                ax.axhline(window, color="#b00", linestyle="--", linewidth=0.8)
            ax.grid(alpha=0.25)
    return canvas


#: `tight_layout`'s padding (1.08 × the 8 pt font) around the figure's texts, panels and edges, in points.
_PAD = 1.08 * 8
#: A tick mark's length, and the gap from it to its label, and from a panel to its title (matplotlib's defaults), in points.
_TICK = 3.5
_TICK_PAD = 3.5
_TITLE_PAD = 6.0


def _text_size(text: str, size: float) -> tuple[float, float]:
    """Width and height in points of one line of `text` at `size` points, as the SVG backend lays it out."""
    return _text_size_in(text, matplotlib.font_manager.FontProperties(size=size))


@functools.lru_cache(maxsize=1 << 12)
def _text_size_in(text: str, font: matplotlib.font_manager.FontProperties) -> tuple[float, float]:
    """`_text_size` in `font` (memoized by the text and the font's properties, which the rc settings in force
    when it was made decide: a report lays out the same tick labels and panel titles in every timeline)."""
    width, height, _ = matplotlib.textpath.text_to_path.get_text_width_height_descent(text, font, ismath=False)
    _, line, _ = matplotlib.textpath.text_to_path.get_text_width_height_descent("lp", font, ismath=False)
    return width, max(height, line)


def _fixed_ticks(axis: Any) -> tuple[list[float], list[str]]:
    """The ticks `axis`'s locator puts inside its view limits and their labels; the axis keeps them (located once)."""
    low, high = sorted(axis.get_view_interval())
    slack = 1e-9 * (high - low)
    ticks = [float(t) for t in axis.get_majorticklocs() if low - slack <= t <= high + slack]
    axis.set_major_locator(matplotlib.ticker.FixedLocator(ticks))
    return ticks, list(axis.get_major_formatter().format_ticks(ticks))


def _grid_layout(fig: Figure, axes: list[Any], rows: int, cols: int, titles: list[str]) -> tuple[float, float]:
    """Place a regular grid of panels with equal limits as `tight_layout` would, from the sizes of the texts
    alone: the figure's title and axis labels, the outer panels' tick labels (the first panel's ticks, which
    every panel is given) and the panels' `titles`, each padded by `_PAD`; titles wider than the grid leaves
    them are laid out by `tight_layout` itself. Returns a panel's width and height in points."""
    fig_width, fig_height = (float(v) * 72 for v in fig.get_size_inches())
    _, line = _text_size("lp", 7.5)  # a panel title's, the axis labels' height (the y label turned on its side)
    _, suptitle = _text_size(fig.get_suptitle(), 9)
    _, tick_label = _text_size("0", 8)
    top = _PAD + suptitle + _PAD + line + _TITLE_PAD
    bottom = _PAD + line + _PAD + tick_label + _TICK_PAD + _TICK
    row_gap = _TICK + _PAD + _TITLE_PAD + line  # an upper panel's tick marks, then the lower one's title
    height = (fig_height - top - bottom - (rows - 1) * row_gap) / rows
    fig.subplots_adjust(top=1 - top / fig_height, bottom=bottom / fig_height, hspace=row_gap / height)
    first = axes[0]
    _, y_labels = _fixed_ticks(first.yaxis)  # the y ticks depend on the panels' height alone
    left = _PAD + line + _PAD + max((_text_size(t, 8)[0] for t in y_labels), default=0.0) + _TICK_PAD + _TICK
    column_gap = _TICK + _PAD  # an inner panel's tick marks on its left

    def place(right: float) -> float:
        width = (fig_width - left - right - (cols - 1) * column_gap) / cols
        fig.subplots_adjust(left=left / fig_width, right=1 - right / fig_width, wspace=column_gap / width)
        return width

    right = _PAD
    width = place(right)
    x_ticks, x_labels = _fixed_ticks(first.xaxis)
    if x_labels:  # the last tick's label, centred on it, may reach past the panel's right edge
        low, high = first.get_xlim()
        overhang = _text_size(x_labels[-1], 8)[0] / 2 - (high - x_ticks[-1]) / (high - low) * width
        if overhang > 0:
            right += overhang
            width = place(right)
    for ax in axes[1:]:
        ax.xaxis.set_major_locator(first.xaxis.get_major_locator())
        ax.yaxis.set_major_locator(first.yaxis.get_major_locator())
    title_overhang = (max((_text_size(t, 7.5)[0] for t in titles), default=0.0) - width) / 2  # each side of a panel
    if (cols > 1 and 2 * title_overhang + _PAD > column_gap) or title_overhang + _PAD > min(left, right):
        fig.tight_layout()
        box = first.get_position()
        return box.width * fig_width, box.height * fig_height
    return width, height


#: The dense marks' shapes, in points around the point they mark: matplotlib's scatter markers they were
#: drawn with (▲ of area 6 pt², × of 14 pt²) and the `|` marker of 4 pt.
_ABOVE = matplotlib.path.Path(np.array([[0, 1], [-1, -1], [1, -1], [0, 1]]) * (6**0.5 / 2), closed=True)
def _panel_title(strategy: str, turns: pd.DataFrame) -> str:
    """A timeline panel's title: the strategy, its overflows and, where there are any, the requests the agent itself
    did not send (a run made before `refused` existed counts none)."""
    failed = turns["overflow"].astype(bool)
    refused = turns["refused"].astype(bool) if "refused" in turns.columns else pd.Series(False, index=turns.index)
    title = f"{strategy} · {int((failed & ~refused).sum())} overflows"
    return f"{title} · {int(refused.sum())} not sent" if refused.any() else title


_OVERFLOW = matplotlib.path.Path(np.array([[-1, -1], [1, 1], [-1, 1], [1, -1]]) * (14**0.5 / 2), [1, 2, 1, 2])
_MASKING = matplotlib.path.Path(np.array([[0, -1], [0, 1]]) * 2.0, [1, 2])


def _marks(ax: Any, x: Any, y: Any, shape: matplotlib.path.Path, per_point: tuple[float, float], **style: Any) -> None:
    """`shape` at every (x, y) as one path (one SVG element), the shape's points scaled to data units by
    `per_point` (a panel's data units per point, which `_grid_layout` fixed)."""
    offsets = np.column_stack([np.asarray(x, dtype=float), np.asarray(y, dtype=float)])
    outline = np.asarray(shape.vertices, dtype=float) * np.asarray(per_point)
    vertices = (offsets[:, None, :] + outline[None, :, :]).reshape(-1, 2)
    path = matplotlib.path.Path(vertices, np.tile(np.asarray(shape.codes), len(offsets)))
    path.should_simplify = False  # every mark kept, however close to the next
    ax.add_artist(matplotlib.patches.PathPatch(path, joinstyle="round", capstyle="butt", **style))  # the limits are set: no autoscaling


def timeline_rows(requests: pd.DataFrame, compactions: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """The turn requests and compactions a timeline draws: of a run with repeats, those of its first repeat
    (every mark on a strategy's line is of the replay the line shows), and the words saying so ("" for one repeat)."""
    turns = requests[requests["kind"] == "turn"]
    if "repeat" not in turns.columns or not len(turns) or turns["repeat"].nunique() < 2:
        return turns, compactions, ""
    first = turns["repeat"].min()
    marks = compactions[compactions["repeat"] == first] if "repeat" in compactions.columns else compactions
    return turns[turns["repeat"] == first], marks, f"repeat {first}, the first of {turns['repeat'].nunique()}"


def _session_position(frame: pd.DataFrame, column: str = "step") -> pd.Series:
    """A row's position in its cell's session, 0–1 (`column` over the cell's last value), as a bin index."""
    cell = [c for c in ("scenario", "strategy", "profile", "repeat") if c in frame.columns]
    last = frame.groupby(cell)[column].transform("max").replace(0, 1)
    return (frame[column] / last * BINS).clip(upper=BINS - 1e-9).astype(int)


def _nothing(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=8)


#: What a retention figure says when the tables compare no probe point.
NO_POINTS = "no paired probe points"
#: What the dollar panel says when some dollars are unknown.
UNPRICED = "unpriced: a model without a price,\nso the dollars are unknown (not $0)"


def presence_over_session(rows: pd.DataFrame) -> pd.DataFrame:
    """Share of facts present per tenth of the session (index) and strategy (columns), of the paired
    headline rows `rows`: each probe's rows in a tenth averaged first, then the probes pooled."""
    values = per_probe(rows.assign(bin=_session_position(rows)), by=["bin"])
    return values.pivot_table(index="bin", columns="strategy", values="present", aggfunc="mean")


def retention_over_session(rows: pd.DataFrame, title: str, order: Sequence[str]) -> str:
    """Share of probe answers present per tenth of the session, per strategy (`presence_over_session`)."""
    table = presence_over_session(rows) if len(rows) else pd.DataFrame()
    fig, axes = _figure(1, 1, 6.4, 2.8)
    ax = axes[0, 0]
    drawn = styles(order)
    with matplotlib.rc_context(STYLE):
        for strategy in order:
            if strategy in table.columns:
                style = drawn[strategy]
                ax.plot((table.index + 0.5) / BINS, table[strategy], marker=style.marker, linestyle=style.linestyle, markersize=2.5, linewidth=1,
                        label=strategy, color=style.colour)
        ax.set_xlim(0, 1)
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("position in the session (share of its steps)")
        ax.set_ylabel("facts present (paired points)")
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
        if table.empty:
            _nothing(ax, NO_POINTS)
        else:
            ax.legend(fontsize=6.5, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return to_svg(fig)


def presence_by_family_and_age(rows: pd.DataFrame, order: Sequence[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(by probe family, by fact age): share of facts present, strategies in `order` as rows, of the
    paired headline rows `rows`, each probe weighing one (its rows averaged first) and every scenario's
    probes pooled. An age column pools (probe, age bucket) means: a probe asked at several ages counts
    once in each bucket, as `retention_age_<bucket>` counts it."""
    values = per_probe(rows)
    aged = per_probe(rows.assign(age=rows["fact_age_tokens"].map(age_bucket)), by=["age"])
    present = set(values["strategy"])
    family = values.pivot_table(index="strategy", columns="kind", values="present", aggfunc="mean").reindex([s for s in order if s in present])
    age = aged.pivot_table(index="strategy", columns="age", values="present", aggfunc="mean").reindex(family.index)
    return family, age[[a for a in AGE_ORDER if a in age.columns]]


def retention_heatmaps(rows: pd.DataFrame, title: str, order: Sequence[str]) -> str:
    """Presence by probe family and by fact age (token buckets), strategies as rows (`presence_by_family_and_age`)."""
    family, age = presence_by_family_and_age(rows, order) if len(rows) else (pd.DataFrame(), pd.DataFrame())
    fig, axes = _figure(1, 2, 10.5, 0.32 * len(family) + 1.4, gridspec_kw={"width_ratios": [max(len(family.columns), 1), max(len(age.columns), 1)]})
    with matplotlib.rc_context(STYLE):
        for ax, table, label in ((axes[0, 0], family, "probe family"), (axes[0, 1], age, "fact age (tokens)")):
            if table.empty:
                _nothing(ax, NO_POINTS)
                continue
            values = table.to_numpy(dtype=float)
            ax.imshow(values, cmap="RdYlGn", vmin=0, vmax=1, aspect="auto")
            ax.set_yticks(range(len(table.index)), [str(s) for s in table.index])
            names = [AGE_LABELS.get(str(c), str(c)) for c in table.columns]
            ax.set_xticks(range(len(table.columns)), names, rotation=30, ha="right")
            ax.set_xlabel(label)
            for (i, j), value in np.ndenumerate(values):
                ax.text(j, i, "–" if np.isnan(value) else f"{value:.2f}", ha="center", va="center", fontsize=6.5)
        fig.suptitle(title, fontsize=9)
        fig.tight_layout()
    return to_svg(fig)


def age_bucket(tokens: float) -> str:
    """The fact-age bucket of `compaction_bench.metrics.aggregate.AGE_BUCKETS` a token distance falls in."""
    return next(name for low, high, name in AGE_BUCKETS if low <= tokens < high)


def pareto_front(points: pd.DataFrame, x: str, y: str = "retention") -> list[str]:
    """Strategies no other strategy beats on both: higher-or-equal `y` at lower-or-equal `x`, one strictly.
    A strategy `flagged` by the verdict (it cannot serve the window, or no API accepts its requests) is
    no choice, so it is neither on the front nor hides a strategy behind it."""
    if "flagged" in points.columns:
        points = points[~points["flagged"].astype(bool)]
    front = []
    for name, row in points.iterrows():
        dominated = (
            (points[x] <= row[x]) & (points[y] >= row[y]) & ((points[x] < row[x]) | (points[y] > row[y]))
        ).any()
        if not dominated and np.isfinite(row[x]) and np.isfinite(row[y]):
            front.append(str(name))
    return front


def retention_vs_cost(points: pd.DataFrame, title: str, order: Sequence[str]) -> str:
    """Retention against dollars and against re-billed tokens, one dot per strategy, the Pareto front joined.

    `points` is indexed by strategy with columns retention, lo, hi, cost_usd, rebilled_tokens and
    optionally `flagged` (drawn hollow, named so, and off the front: `pareto_front`). Where a strategy's
    dollars are unknown (NaN: a model without a price), the dollar panel says so and draws no dot, as a
    front of the priced ones alone would leave it out; the re-billed tokens are known and drawn.
    """
    fig, axes = _figure(1, 2, 10, 3.2)
    drawn = styles([*order, *points.index])
    with matplotlib.rc_context(STYLE):
        for ax, column, label in ((axes[0, 0], "cost_usd", "cost ($)"), (axes[0, 1], "rebilled_tokens", "re-billed tokens")):
            data = points[np.isfinite(points[column]) & np.isfinite(points["retention"])]
            if column == "cost_usd" and len(data) < int(np.isfinite(points["retention"]).sum()):  # some dollars unknown
                data = data.iloc[:0]
                _nothing(ax, UNPRICED)
            for name, row in data.iterrows():
                flagged = bool(row.get("flagged", False))
                style = drawn[str(name)]
                ax.errorbar(row[column], row["retention"], yerr=[[row["retention"] - row["lo"]], [row["hi"] - row["retention"]]] if np.isfinite(row["lo"]) else None,
                            fmt=style.marker, markersize=4, color=style.colour, elinewidth=0.7, markerfacecolor="none" if flagged else style.colour)
                ax.annotate(f"{name} (flagged)" if flagged else str(name), (row[column], row["retention"]), fontsize=6.5, xytext=(3, 3),
                            textcoords="offset points")
            front = data.loc[pareto_front(data, column)].sort_values(column)
            if len(front):
                ax.step(front[column], front["retention"], where="post", color="#444", linewidth=0.8, linestyle=":", label="Pareto front")
                ax.legend(fontsize=6.5, frameon=False, loc="lower right")
            ax.set_xlabel(label)
            if column == "rebilled_tokens":
                ax.xaxis.set_major_formatter(TokenTicks())
            ax.set_ylabel("retention (paired points)")
            ax.grid(alpha=0.3)
        fig.suptitle(title, fontsize=9)
        fig.tight_layout()
    return to_svg(fig)


def cache_by_session_position(requests: pd.DataFrame) -> pd.DataFrame:
    """Per (strategy, tenth of the session by request): the cached and input tokens the hit rate reads
    (sent requests but each cell's first of each repeat, as `cache_hit_rate`) and the re-billed tokens of
    the sent requests, each request weighing one over its cell's number of repeats (per repeat, as the
    summary's sums are), with `hit` = cached / input."""
    cell = [c for c in ("scenario", "strategy", "profile") if c in requests.columns]
    repeats = requests.groupby(cell)["repeat"].transform("nunique") if "repeat" in requests.columns else pd.Series(1, index=requests.index)
    accepted = requests["kind"].isin(["turn", "summary"]) & ~requests["overflow"].astype(bool)
    weight = 1 / repeats[accepted]
    sent = requests[accepted]
    runs = [*cell, "repeat"] if "repeat" in sent.columns else cell
    later = sent["request"] != sent.groupby(runs)["request"].transform("min")
    frame = pd.DataFrame({
        "strategy": sent["strategy"], "bin": _session_position(sent, "request"),
        "cached_tokens": sent["cached_tokens"] * weight * later, "true_tokens": sent["true_tokens"] * weight * later,
        "rebilled_tokens": sent["rebilled_tokens"] * weight,
    })
    grouped = frame.groupby(["strategy", "bin"])[["cached_tokens", "true_tokens", "rebilled_tokens"]].sum()
    return grouped.assign(hit=grouped["cached_tokens"] / grouped["true_tokens"].replace(0, np.nan))


def cache_over_session(requests: pd.DataFrame, title: str, order: Sequence[str]) -> str:
    """Cache hit rate and re-billed tokens per tenth of the session, per strategy (`cache_by_session_position`)."""
    grouped = cache_by_session_position(requests)
    fig, axes = _figure(1, 2, 10, 2.9)
    drawn = styles(order)
    with matplotlib.rc_context(STYLE):
        for strategy in order:
            if strategy not in grouped.index.get_level_values(0):
                continue
            part = grouped.loc[strategy]
            x = (part.index + 0.5) / BINS
            line = {"linewidth": 1, "marker": drawn[strategy].marker, "linestyle": drawn[strategy].linestyle, "markersize": 2,
                    "color": drawn[strategy].colour, "label": strategy}
            axes[0, 0].plot(x, part["hit"], **line)
            axes[0, 1].plot(x, part["rebilled_tokens"], **line)
        axes[0, 0].set_ylabel("cache hit rate")
        axes[0, 0].set_ylim(-0.02, 1.02)
        axes[0, 1].set_ylabel("re-billed tokens (per tenth)")
        axes[0, 1].yaxis.set_major_formatter(TokenTicks())
        for ax in axes.flat:
            ax.set_xlim(0, 1)
            ax.set_xlabel("position in the session (share of its requests)")
            ax.grid(alpha=0.3)
        if grouped.empty:  # every request overflowed: nothing reached a model, so nothing was cached or re-billed
            for ax in axes.flat:
                _nothing(ax, "no request reached the model")
        else:
            axes[0, 1].legend(fontsize=6.5, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        fig.suptitle(title, fontsize=9)
        fig.tight_layout()
    return to_svg(fig)
