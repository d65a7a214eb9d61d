"""matplotlib figures of a run, rendered to inline SVG strings (no files, no scripts)."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402


def to_svg(fig) -> str:
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight")
    plt.close(fig)
    svg = buffer.getvalue()
    return svg[svg.index("<svg"):]


def context_timeline(requests: pd.DataFrame, compactions: pd.DataFrame, window: int | None, title: str) -> str:
    """True context tokens per model request for each strategy, compaction points marked, window line."""
    fig, ax = plt.subplots(figsize=(9, 3.6))
    turns = requests[requests["kind"] == "turn"]
    for strategy, frame in turns.groupby("strategy", sort=False):
        frame = frame[frame["repeat"] == frame["repeat"].min()]
        (line,) = ax.plot(frame["step"], frame["true_tokens"], linewidth=1.2, label=strategy)
        points = compactions[(compactions["strategy"] == strategy) & (compactions["repeat"] == frame["repeat"].min())]
        if not points.empty:
            ax.scatter(points["step"], points["tokens_before"], marker="v", s=22, color=line.get_color(), zorder=3)
    if window:
        ax.axhline(window, color="#b00", linestyle="--", linewidth=1, label=f"window {window:,}")
    ax.set_xlabel("step (recorded model response)")
    ax.set_ylabel("context tokens")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=3, loc="upper left")
    return to_svg(fig)
