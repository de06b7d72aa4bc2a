"""The engines figure: composed against each engine's published TPOT (engines.csv), log-log."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from tilesweep.answer_picks import numeric
from tilesweep.references import BAND
from tilesweep.report.formatting import plural
from tilesweep.report.plotting import (
    COLORS,
    MARKERS,
    MAX_SERIES,
    PAGE_WIDTH_IN,
    empty,
    finish,
    log_axes,
    reference,
    top_series,
)

PANELS_PER_ROW = 3


def engine_points(engines: pd.DataFrame) -> pd.DataFrame:
    """Return the engines' figures the composition has a finite positive time for."""
    cols = ["engine", "model", "hardware", "engine_tpot_ms", "composed_tpot_ms"]
    if engines.empty or not set(cols) <= set(engines):
        return pd.DataFrame(columns=cols)
    measured, composed = numeric(engines, "engine_tpot_ms"), numeric(engines, "composed_tpot_ms")
    keep = (measured > 0) & (composed > 0) & np.isfinite(measured) & np.isfinite(composed)
    rows = engines.loc[keep, cols[:3]].astype(str)
    return rows.assign(engine_tpot_ms=measured[keep], composed_tpot_ms=composed[keep])


def _label_axes(axes, panels: int, ncols: int) -> None:
    """Name the axes on the panels' outer edges and hide the panels past the last."""
    for i, ax in enumerate(axes[:panels]):
        if i + ncols >= panels:  # the lowest panel of its column
            ax.set_xlabel("engine's measured TPOT (ms)")
        if i % ncols == 0:
            ax.set_ylabel("composed TPOT (ms)")
    for ax in axes[panels:]:
        ax.set_visible(False)


def engine_tpot(engines: pd.DataFrame) -> Figure:
    """Return composed against engine TPOT, log-log, one panel per GPU, with the BAND shaded."""
    points = engine_points(engines)
    if points.empty:
        return empty("no engine figure cited with a composed time", "Against engines' figures")
    gpus = list(points["hardware"].value_counts().index)
    marker = {e: MARKERS[i % len(MARKERS)] for i, e in enumerate(sorted(set(points["engine"])))}
    color = {m: COLORS[i % len(COLORS)] for i, m in enumerate(sorted(set(points["model"])))}
    ncols = min(PANELS_PER_ROW, math.ceil(math.sqrt(len(gpus))))
    nrows = -(-len(gpus) // ncols)
    fig = Figure(figsize=(PAGE_WIDTH_IN * 0.75, 3.3 * nrows + 0.4))
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).ravel()
    values = np.concatenate([points["engine_tpot_ms"], points["composed_tpot_ms"]])
    low, high = values.min() / 1.3, values.max() * 1.3
    line = np.geomspace(low, high, 50)
    left_out = 0
    for ax, gpu in zip(axes, gpus, strict=False):
        part = points[points["hardware"] == gpu]
        sizes = part.groupby(["engine", "model"]).size().sort_values(ascending=False)
        shown, rest = top_series([f"{e} {m}" for e, m in sizes.index], MAX_SERIES)
        left_out += int(sum(sizes[tuple(r.split(" ", 1))] for r in rest))
        ax.fill_between(line, line * BAND[0], line * BAND[1], color="#e3e3e3", lw=0, zorder=0)
        reference(ax.plot(line, line, "--", color="#777777", lw=0.9, zorder=1)[0])
        for (engine, model), rows in part.groupby(["engine", "model"], sort=True):
            if f"{engine} {model}" not in shown:
                continue
            ax.scatter(
                rows["engine_tpot_ms"],
                rows["composed_tpot_ms"],
                s=26,
                alpha=0.85,
                marker=marker[engine],
                color=color[model],
                zorder=3,
                label=f"{engine} {model}",
            )
        log_axes(ax)
        ax.set_xlim(low, high)
        ax.set_ylim(low, high)
        ax.set_aspect("equal", adjustable="box")
        ax.grid(alpha=0.3, which="both")
        inside = part["composed_tpot_ms"] / part["engine_tpot_ms"]
        within = int(((inside >= BAND[0]) & (inside <= BAND[1])).sum())
        ax.set_title(f"{gpu}: {within} of {plural(len(part), 'figure')} in band", fontsize="medium")
    _label_axes(axes, len(gpus), ncols)
    handles = [Line2D([], [], color="#555555", marker=m, lw=0, label=e) for e, m in marker.items()]
    handles += [Line2D([], [], color=c, marker="o", lw=0, label=m) for m, c in color.items()]
    handles.append(
        Line2D([], [], color="#e3e3e3", lw=6, label=f"composed/engine {BAND[0]}-{BAND[1]}x")
    )
    handles.append(Line2D([], [], color="#777777", ls="--", lw=0.9, label="equal"))
    if left_out:
        handles.append(Line2D([], [], lw=0, label=f"+{plural(left_out, 'figure')}: table"))
    fig.legend(handles=handles, loc="outside right upper", fontsize="small", title="marker: engine")
    return finish(fig)
