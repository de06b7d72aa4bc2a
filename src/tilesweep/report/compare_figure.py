"""The comparison figure of `tilesweep compare`: B/A ratios per compared value and table."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from tilesweep.answer_picks import numeric
from tilesweep.report.plotting import TEXT_PT, empty, finish, log_axes, reference


def compare_ratios(changes: pd.DataFrame, top: int = 30) -> Figure:
    """Return B/A ratios of the `top` values that moved most, one panel per table."""
    if changes.empty or "ratio" not in changes:
        return empty("nothing numeric to compare", "B / A")
    ratio = numeric(changes, "ratio")
    moved = changes[np.isfinite(ratio) & (ratio > 0)].copy()
    if moved.empty:
        return empty("nothing numeric to compare", "B / A")
    moved["_size"] = np.abs(np.log(numeric(moved, "ratio")))
    tables = list(dict.fromkeys(moved["table"].astype(str)))
    shown = {
        t: moved[moved["table"].astype(str) == t].nlargest(top, "_size").reset_index(drop=True)
        for t in tables
    }
    heights = [max(1.8, 0.2 * len(shown[t]) + 1.1) for t in tables]
    fig = Figure(figsize=(9, sum(heights)))
    axes = fig.subplots(len(tables), 1, squeeze=False, height_ratios=heights)[:, 0]
    for ax, table in zip(axes, tables, strict=True):
        part = shown[table]
        total = int((moved["table"].astype(str) == table).sum())
        y = np.arange(len(part))
        beyond = part["beyond"].astype(bool).to_numpy()
        ratio = numeric(part, "ratio").to_numpy()
        for mask, color, label in (
            (beyond, "#c0392b", "beyond noise"),
            (~beyond, "#8a8a8a", "within noise"),
        ):
            if mask.any():
                ax.scatter(ratio[mask], y[mask], c=color, s=14, zorder=3, label=label)
        reference(ax.axvline(1.0, color="black", lw=0.8))
        labels = (part["label"].astype(str) + "  " + part["metric"].astype(str)).tolist()
        ax.set_yticks(y, labels, fontsize=TEXT_PT)
        ax.invert_yaxis()
        log_axes(ax, y=False)
        title = f"{table}: B / A, the {len(part)} largest moves of {total} (red: beyond noise)"
        ax.set_title(title, fontsize=TEXT_PT + 2, loc="left")
        ax.grid(axis="x", alpha=0.3, which="both")
    return finish(fig)
