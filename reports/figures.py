"""matplotlib figures of a run, rendered to inline SVG strings (no files, no scripts)."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402


def to_svg(fig) -> str:
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    svg = buffer.getvalue()
    return svg[svg.index("<svg"):]


def context_timeline(requests: pd.DataFrame, compactions: pd.DataFrame, window: int | None, title: str) -> str:
    """True context tokens per model request for each strategy, compaction points marked, window line.

    The y axis stops at 1.6 × the window (a strategy that never compacts keeps climbing; its line
    leaves the plot there). Continuous masking rewrites are not marked: they happen at every step.
    """
    fig, ax = plt.subplots(figsize=(10, 3.8))
    turns = requests[requests["kind"] == "turn"]
    colours = plt.get_cmap("tab20").colors
    for n, (strategy, frame) in enumerate(turns.groupby("strategy", sort=False)):
        first_repeat = frame["repeat"].min()
        frame = frame[frame["repeat"] == first_repeat]
        colour = colours[(2 * n) % 20 if n < 10 else (2 * n + 1) % 20]
        ax.plot(frame["step"], frame["true_tokens"], linewidth=1.1, label=strategy, color=colour)
        if compactions.empty:
            continue
        points = compactions[
            (compactions["strategy"] == strategy) & (compactions["repeat"] == first_repeat) & (compactions["trigger"] != "masking")
        ]
        if not points.empty:
            ax.scatter(points["step"], points["tokens_before"], marker="v", s=22, color=colour, zorder=3)
    if window:
        ax.axhline(window, color="#b00", linestyle="--", linewidth=1, label=f"window {window:,}")
        ax.set_ylim(0, window * 1.6)
    ax.set_xlabel("step (recorded model response)")
    ax.set_ylabel("context tokens")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=1, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return to_svg(fig)
