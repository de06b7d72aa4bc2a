"""The collectives figure: bus bandwidth and time against message size, with latency floors."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator

from tilesweep.answer_picks import numeric
from tilesweep.report import plotting as plot
from tilesweep.report.formatting import plural

# The most collectives side by side before the panels wrap (the page's width).
COLUMNS = 3


def _series_name(key: tuple) -> str:
    """Return a (group, backend) key's label: x8 nccl."""
    return " ".join(f"x{plot.whole(k)}" if j == 0 else str(k) for j, k in enumerate(key))


def collective_bandwidth(collective: pd.DataFrame, floors: pd.DataFrame | None = None) -> Figure:
    """Return bus bandwidth and time against message size, a column per collective."""
    ok = plot.ok_or_all(collective)
    if not ok.empty and "collective" in ok:
        ok = ok[ok["collective"].astype(str) != "none"]
    need = {"time_ms", "bytes", "collective", "group"}
    if ok.empty or not need <= set(ok.columns):
        return plot.empty("no collectives timed (one-device layouts need none)", "Collectives")
    keys = [k for k in ("group", "backend") if k in ok]
    names = list(dict.fromkeys(ok["collective"].astype(str)))
    series = sorted({tuple(k) for k in ok[keys].itertuples(index=False)})
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    colors = {key: cmap(i % cmap.N) for i, key in enumerate(series)}
    ncols = min(COLUMNS, len(names))
    nrows = math.ceil(len(names) / ncols)
    fig = Figure(figsize=(min(plot.PAGE_WIDTH_IN, 3.7 * ncols + 0.6), 5.4 * nrows + 0.6))
    axes = fig.subplots(2 * nrows, ncols, squeeze=False, sharex=True, sharey="row")
    notes = []
    for i, name in enumerate(names):
        ax_bw, ax_t = axes[2 * (i // ncols), i % ncols], axes[2 * (i // ncols) + 1, i % ncols]
        part = ok[ok["collective"].astype(str) == name]
        mine = sorted({tuple(k) for k in part[keys].itertuples(index=False)})
        shown, left = plot.top_series([_series_name(k) for k in mine])
        if left:
            more = plural(len(left), "more group")
            notes.append(f"{name}: {more} in the table ({', '.join(left)})")
        for key in (k for k in mine if _series_name(k) in shown):
            line = part[(part[keys].astype(str) == [str(k) for k in key]).all(axis=1)]
            _draw(ax_bw, ax_t, line, key, colors[key], floors)
        _style(ax_bw, ax_t, name)
    for i in range(len(names), nrows * ncols):
        axes[2 * (i // ncols), i % ncols].axis("off")
        axes[2 * (i // ncols) + 1, i % ncols].axis("off")
    for r in range(nrows):
        axes[2 * r, 0].set_ylabel("bus bandwidth (GB/s)")
        axes[2 * r + 1, 0].set_ylabel("time (ms), p10..p90")
    handles = [
        Line2D([], [], color=c, marker="o", label=_series_name(k)) for k, c in colors.items()
    ]
    handles.append(Line2D([], [], color="#555555", ls=":", label="latency floor"))
    plot.legend_below(fig, handles, notes, ncols=min(6, len(handles)))
    return plot.finish(fig)


def _style(ax_bw, ax_t, name: str) -> None:
    ax_bw.set_title(name, fontsize=plot.TEXT_PT + 2)
    for ax in (ax_bw, ax_t):
        plot.log_axes(ax, x_base=2, y=True)
        ax.xaxis.set_major_locator(LogLocator(base=4))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: _size(v)))
        ax.grid(alpha=0.3, which="both")
    ax_t.set_xlabel("message size (bytes)")
    ax_t.xaxis.set_tick_params(labelbottom=True)


def _draw(ax_bw, ax_t, line: pd.DataFrame, key: tuple, color, floors) -> None:
    agg = line.groupby("bytes").agg(
        time_ms=("time_ms", "median"),
        lo=("time_p10_ms", "min") if "time_p10_ms" in line else ("time_ms", "min"),
        hi=("time_p90_ms", "max") if "time_p90_ms" in line else ("time_ms", "max"),
        busbw=("busbw_gbs", "median") if "busbw_gbs" in line else ("time_ms", "size"),
    )
    x = agg.index.to_numpy(float)
    label = _series_name(key)
    if "busbw_gbs" in line:
        ax_bw.plot(x, agg["busbw"], "o-", color=color, label=label, ms=4)
    err = np.vstack([(agg["time_ms"] - agg["lo"]).clip(lower=0), (agg["hi"] - agg["time_ms"])])
    ax_t.errorbar(x, agg["time_ms"], yerr=err.clip(min=0), fmt="o-", color=color, ms=4, label=label)
    if floors is not None and not floors.empty:
        hit = floors[
            (floors["collective"].astype(str) == str(line["collective"].iloc[0]))
            & (numeric(floors, "group") == float(key[0]))
        ]
        if not hit.empty and hit["floor_ms"].iloc[0] > 0:
            plot.reference(ax_t.axhline(hit["floor_ms"].iloc[0], color=color, ls=":", lw=1))


def _size(n: float) -> str:
    """Return a byte count as a short label: 512, 4K, 1M, 64M, 2G."""
    for unit, scale in (("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if n >= scale:
            return f"{n / scale:g}{unit}"
    return f"{n:g}"
