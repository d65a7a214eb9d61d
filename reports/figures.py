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

import io
import math
import re
from collections.abc import Sequence
from typing import Any

import matplotlib
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


#: Geometry attributes whose numbers are rounded to 2 decimals (a third of the size; text content is never touched).
_COORDINATES = re.compile(r'\b(d|x|y|x1|x2|y1|y2|transform|points)="([^"]*)"')
_DIGITS = re.compile(r"(\d+\.\d\d)\d+")


def _thousands(value: float, _: object = None) -> str:
    return f"{value / 1e6:.1f}M" if abs(value) >= 1e6 else f"{value / 1e3:.0f}k" if abs(value) >= 1e3 else f"{value:.0f}"


def colours(strategies: Sequence[str]) -> dict[str, tuple[float, ...]]:
    """One stable colour per strategy (order of first appearance)."""
    tab20 = matplotlib.colormaps["tab20"]
    palette = [tab20(i) for i in range(20)]
    return {s: palette[(2 * n) % 20 if n < 10 else (2 * n + 1) % 20] for n, s in enumerate(dict.fromkeys(strategies))}


def to_svg(fig: Figure, crop: bool = True) -> str:
    """The figure as an SVG string, cropped to what it draws (`bbox_inches="tight"`, a layout pass of
    its own) unless `crop` is False (a figure laid out by `tight_layout` already fits its canvas)."""
    buffer = io.StringIO()
    with matplotlib.rc_context(STYLE):
        fig.savefig(buffer, format="svg", bbox_inches="tight" if crop else None, metadata={"Date": None})
    svg = buffer.getvalue()
    return _COORDINATES.sub(_rounded, svg[svg.index("<svg"):])


def _rounded(match: re.Match[str]) -> str:
    return match.group(1) + '="' + _DIGITS.sub(r"\1", match.group(2)) + '"'


def _figure(rows: int, cols: int, width: float, height: float, **kw) -> tuple[Figure, np.ndarray]:
    """A figure of its own (no pyplot: the caller's backend, e.g. a notebook's inline one, is never switched)."""
    with matplotlib.rc_context(STYLE):
        fig = Figure(figsize=(width, height))
        return fig, fig.subplots(rows, cols, squeeze=False, **kw)


def context_timeline(
    requests: pd.DataFrame, compactions: pd.DataFrame, window: int | None, title: str, order: Sequence[str] | None = None
) -> str:
    """Small multiples: true context tokens per turn request, one panel per strategy, shared axes.

    ▼ marks a compaction (tokens before it; masking rewrites, which happen at every step, are
    ticks along the bottom), × an overflowed request, the dashed line the window. The y axis stops
    at 1.3 × the window (the window line always shows); points above it are drawn on the top edge as ▲.
    A run with repeats draws its first (`timeline_rows`), and the title says which.
    """
    turns, compactions, shown = timeline_rows(requests, compactions)
    if shown:
        title = f"{title} · {shown}"
    present = set(turns["strategy"].unique())
    strategies = [s for s in (order or turns["strategy"].unique()) if s in present]
    cols = min(4, max(1, len(strategies)))
    rows = max(1, math.ceil(len(strategies) / cols))
    # Shared axes by equal limits, not by matplotlib's axis sharing: with 20 panels sharing spends
    # seconds per figure keeping the panels' limits in step (a minute of a default run's report).
    fig, axes = _figure(rows, cols, 2.7 * cols + 0.4, 1.55 * rows + 0.5)
    peak = float(turns["true_tokens"].max()) if len(turns) else 1.0
    top = min(max(peak, window) * 1.08, window * 1.3) if window else peak * 1.05
    first, last = (float(turns["step"].min()), float(turns["step"].max())) if len(turns) else (0.0, 1.0)
    margin = (last - first) * 0.05 or 0.5  # matplotlib's default autoscale margin
    palette = colours(strategies)
    with matplotlib.rc_context(STYLE):
        for n, ax in enumerate(axes.flat):
            if n >= len(strategies):
                ax.set_visible(False)
                continue
            strategy = strategies[n]
            frame = turns[turns["strategy"] == strategy].sort_values("request")
            ax.plot(frame["step"], frame["true_tokens"].clip(upper=top), linewidth=0.9, color=palette[strategy])
            above = frame[frame["true_tokens"] > top]
            if len(above):
                ax.scatter(above["step"], [top] * len(above), marker="^", s=6, color=palette[strategy], clip_on=False)
            over = frame[frame["overflow"].astype(bool)]
            if len(over):
                ax.scatter(over["step"], over["true_tokens"].clip(upper=top), marker="x", s=14, color="#b00", linewidths=0.8, zorder=4)
            if not compactions.empty:
                mine = compactions[compactions["strategy"] == strategy]
                masking = mine[mine["trigger"] == "masking"]
                other = mine[mine["trigger"] != "masking"]
                if len(other):
                    ax.scatter(other["step"], other["tokens_before"].clip(upper=top), marker="v", s=16, color="black", zorder=3)
                if len(masking):
                    ax.plot(masking["step"], [0] * len(masking), "|", color="#777", markersize=4)
            if window:
                ax.axhline(window, color="#b00", linestyle="--", linewidth=0.8)
            ax.set_xlim(first - margin, last + margin)
            ax.set_ylim(0, top)
            ax.label_outer()
            ax.set_title(f"{strategy} · {len(over)} overflows", fontsize=7.5)
            ax.grid(alpha=0.25)
            ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(_thousands))
        fig.suptitle(title, fontsize=9)
        fig.supxlabel("step (recorded model response)", fontsize=7.5)
        fig.supylabel("context tokens", fontsize=7.5)
        fig.tight_layout()
    # laid out to fit: cropping it again would draw each of its panels' ticks once more (about a sixth of its time)
    return to_svg(fig, crop=False)


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
    palette = colours(order)
    with matplotlib.rc_context(STYLE):
        for strategy in order:
            if strategy in table.columns:
                ax.plot((table.index + 0.5) / BINS, table[strategy], marker="o", markersize=2.5, linewidth=1, label=strategy, color=palette[strategy])
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
    optionally `flagged` (drawn hollow, named so, and off the front: `pareto_front`).
    """
    fig, axes = _figure(1, 2, 10, 3.2)
    palette = colours([*order, *points.index])
    with matplotlib.rc_context(STYLE):
        for ax, column, label in ((axes[0, 0], "cost_usd", "cost ($)"), (axes[0, 1], "rebilled_tokens", "re-billed tokens")):
            data = points[np.isfinite(points[column]) & np.isfinite(points["retention"])]
            for name, row in data.iterrows():
                flagged = bool(row.get("flagged", False))
                ax.errorbar(row[column], row["retention"], yerr=[[row["retention"] - row["lo"]], [row["hi"] - row["retention"]]] if np.isfinite(row["lo"]) else None,
                            fmt="o", markersize=4, color=palette[name], elinewidth=0.7, markerfacecolor="none" if flagged else palette[name])
                ax.annotate(f"{name} (flagged)" if flagged else str(name), (row[column], row["retention"]), fontsize=6.5, xytext=(3, 3),
                            textcoords="offset points")
            front = data.loc[pareto_front(data, column)].sort_values(column)
            if len(front):
                ax.step(front[column], front["retention"], where="post", color="#444", linewidth=0.8, linestyle=":", label="Pareto front")
                ax.legend(fontsize=6.5, frameon=False, loc="lower right")
            ax.set_xlabel(label)
            if column == "rebilled_tokens":
                ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(_thousands))
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
    palette = colours(order)
    with matplotlib.rc_context(STYLE):
        for strategy in order:
            if strategy not in grouped.index.get_level_values(0):
                continue
            part = grouped.loc[strategy]
            x = (part.index + 0.5) / BINS
            axes[0, 0].plot(x, part["hit"], linewidth=1, marker="o", markersize=2, color=palette[strategy], label=strategy)
            axes[0, 1].plot(x, part["rebilled_tokens"], linewidth=1, marker="o", markersize=2, color=palette[strategy], label=strategy)
        axes[0, 0].set_ylabel("cache hit rate")
        axes[0, 0].set_ylim(-0.02, 1.02)
        axes[0, 1].set_ylabel("re-billed tokens (per tenth)")
        axes[0, 1].yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(_thousands))
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
