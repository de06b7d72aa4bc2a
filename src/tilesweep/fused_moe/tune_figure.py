"""The tuning figure: the tuned config against vLLM's default and torch, per batch."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter

from tilesweep.answer_picks import numeric
from tilesweep.fused_moe.tune_analysis import tune_summary
from tilesweep.report.plotting import PAGE_WIDTH_IN, empty, enforce_series, reference

# What each panel draws: the column, its label and colour.
RATIOS = (
    ("x_vllm", "x vLLM default config", "#4878d0"),
    ("x_torch", "x torch grouped GEMM", "#ee854a"),
)
LINE = {"marker": "o", "ms": 3, "lw": 1.2}
ROUTING_STYLES = ("-", "--", ":", "-.")
PANELS_PER_ROW = 2


def tune_speedup(tables: dict[str, pd.DataFrame]) -> Figure:
    """Return the tuned config's speed-up against M, one panel per dtype and problem."""
    tune = tables.get("tune", pd.DataFrame())
    summary = tune_summary(tune) if not tune.empty else pd.DataFrame()
    if summary.empty:
        return empty("not tuned: no tuned config to draw", "Tuning")
    keys = ["dtype", "experts", "n"]
    problems = list(summary.groupby(keys, sort=True).groups)
    routings = sorted(set(summary["routing"].astype(str)))
    style = {r: ROUTING_STYLES[i % len(ROUTING_STYLES)] for i, r in enumerate(routings)}
    ncols = min(PANELS_PER_ROW, len(problems))
    nrows = -(-len(problems) // ncols)
    fig = Figure(figsize=(PAGE_WIDTH_IN * 0.8, 3.0 * nrows + 0.6))
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False, sharey=True)).ravel()
    for ax, (dtype, experts, n) in zip(axes, problems, strict=False):
        part = summary[(summary[keys] == [dtype, experts, n]).all(axis=1)]
        for routing in routings:
            rows = part[part["routing"].astype(str) == routing].sort_values("m")
            for col, label, color in RATIOS:
                x, y = numeric(rows, "m"), numeric(rows, col)
                ax.plot(x, y, style[routing], color=color, label=f"{label}, {routing}", **LINE)
        reference(ax.axhline(1.0, color="#555555", lw=0.8))
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}"))
        ax.grid(alpha=0.3, which="both")
        ax.set_title(f"{dtype}, {experts} experts, n={n}", fontsize="medium")
        ax.set_xlabel("batch M (tokens)")
    for ax in axes[len(problems) :]:
        ax.set_visible(False)
    for ax in axes[::ncols]:
        ax.set_ylabel("their time / tuned time")
    handles = [Line2D([], [], color=c, lw=1.2, label=label) for _, label, c in RATIOS]
    handles += [Line2D([], [], color="#555555", ls=style[r], label=r) for r in routings]
    handles.append(Line2D([], [], color="#555555", lw=0.8, label="1: as fast"))
    fig.legend(
        handles=handles, loc="outside right upper", fontsize="small", title="above 1: tuned faster"
    )
    fig.set_layout_engine("constrained")
    return enforce_series(fig)
