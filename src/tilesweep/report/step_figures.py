"""The whole-step figures: the verdict's split of a decode step per layout and batch, and the
check of composed against measured steps."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from tilesweep.report.plotting import empty, floats, log_axes, whole

SHARE_COLORS = {
    "memory_ms": "#4878d0",
    "math_ms": "#ee854a",
    "comm_ms": "#6acc64",
    "other_ms": "#b0b0b0",
}
SHARE_LABELS = {
    "memory_ms": "memory-bound parts",
    "math_ms": "math-bound parts",
    "comm_ms": "communication",
    "other_ms": "launch (kernels x fixed cost)",
}


def verdict_split(verdict: pd.DataFrame) -> Figure:
    """Return stacked bars of each layout's step split (memory, math, communication, other) in
    ms per output token, one panel per batch; a layout that does not fit is marked, not drawn."""
    shares = [c for c in SHARE_COLORS if c in verdict]
    if verdict.empty or not shares or "layout" not in verdict or "batch" not in verdict:
        return empty("no verdict rows", "Verdict")
    batches = sorted(pd.unique(floats(verdict, "batch").dropna()))
    layouts = list(dict.fromkeys(verdict["layout"].astype(str)))
    ncols = min(3, len(batches))
    nrows = math.ceil(len(batches) / ncols)
    width = min(4.2, max(3.2, 0.45 * len(layouts) + 1.2))
    fig = Figure(figsize=(width * ncols, 3.2 * nrows + 0.8))
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, batch in zip(axes, batches, strict=False):
        part = verdict[floats(verdict, "batch") == batch]
        pos = {name: i for i, name in enumerate(layouts)}
        x = np.array([pos[str(n)] for n in part["layout"]], dtype=float)
        bottom = np.zeros(len(part))
        for col in shares:
            vals = floats(part, col).fillna(0).to_numpy()
            ax.bar(x, vals, 0.75, bottom=bottom, color=SHARE_COLORS[col], linewidth=0)
            bottom += vals
        top = max(bottom.max() if len(bottom) else 0.0, 1e-9)
        for xi, rec in zip(x, part.to_dict("records"), strict=True):
            if rec.get("fits_memory") == "no":
                ax.text(xi, 0.02 * top, "does not fit", rotation=90, ha="center", va="bottom",
                        fontsize="x-small", color="#a00000")  # fmt: skip
        ax.set_xticks(range(len(layouts)), layouts, rotation=45, ha="right", fontsize="small")
        ax.set_title(f"batch {whole(batch)} (concurrent sequences)", fontsize="medium")
        ax.set_ylabel("ms per output token")
        ax.margins(y=0.08)
        ax.grid(axis="y", alpha=0.3)
    for ax in axes[len(batches) :]:
        ax.axis("off")
    handles = [Patch(color=SHARE_COLORS[c], label=SHARE_LABELS[c]) for c in shares]
    fig.legend(handles=handles, loc="outside lower center", ncols=4, fontsize="small")
    fig.set_layout_engine("constrained")
    return fig


def check_error(check: pd.DataFrame) -> Figure:
    """Return composed against measured whole-step time per layout and batch, with the
    measured p10..p90 band and the composed and roofline-only errors."""
    if check.empty or "measured_ms" not in check:
        return empty("no measured whole steps", "Check of the method")
    layouts = list(dict.fromkeys(check["layout"].astype(str)))
    fig = Figure(figsize=(min(12.0, 3.0 * len(layouts) + 1.0), 3.6))
    axes = fig.subplots(1, len(layouts), squeeze=False).ravel()
    for ax, layout in zip(axes, layouts, strict=True):
        part = check[check["layout"].astype(str) == layout].sort_values("batch")
        b = floats(part, "batch")
        ax.fill_between(b, floats(part, "measured_p10_ms"), floats(part, "measured_p90_ms"),
                        color="#999999", alpha=0.3, label="measured p10..p90")  # fmt: skip
        ax.plot(b, floats(part, "measured_ms"), "k-o", ms=3, label="measured (median)")
        ax.plot(b, floats(part, "composed_ms"), "-s", color="#4878d0", ms=3, label="composed")
        ax.plot(b, floats(part, "roofline_ms"), ":", color="#ee854a", label="roofline only")
        held = bool(part["held_out"].iloc[0]) if "held_out" in part else True
        ax.set_title(f"{layout}{' (held out)' if held else ' (calibration)'}", fontsize="medium")
        log_axes(ax, x_base=2)
        ax.set_xlabel("batch (sequences)")
        ax.set_ylabel("ms per step")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=4, fontsize="small")
    fig.set_layout_engine("constrained")
    return fig
