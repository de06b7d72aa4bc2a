"""The collectives figure: bus bandwidth and time against message size per collective and
group, with each latency floor."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from tilesweep.report.plotting import empty, floats, log_axes, ok_or_all, whole


def collective_bandwidth(collective: pd.DataFrame, floors: pd.DataFrame | None = None) -> Figure:
    """Return bus bandwidth and time against message size per collective and group.

    `floors` (collective, group, floor_ms) draws each latency floor as a dotted line.
    """
    ok = ok_or_all(collective)
    if not ok.empty and "collective" in ok:
        ok = ok[ok["collective"].astype(str) != "none"]
    if ok.empty or "time_ms" not in ok or "bytes" not in ok:
        return empty("no collectives timed (one-device layouts need none)", "Collectives")
    fig = Figure(figsize=(11, 4.8))
    ax_bw, ax_t = fig.subplots(1, 2)
    keys = ["collective", "group", "backend"]
    keys = [k for k in keys if k in ok]
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    for i, (key, line) in enumerate(ok.groupby(keys, sort=True)):
        key = key if isinstance(key, tuple) else (key,)
        name = " ".join(str(whole(k)) if j != 1 else f"x{whole(k)}" for j, k in enumerate(key))
        agg = line.groupby("bytes").agg(
            time_ms=("time_ms", "median"),
            lo=("time_p10_ms", "min") if "time_p10_ms" in line else ("time_ms", "min"),
            hi=("time_p90_ms", "max") if "time_p90_ms" in line else ("time_ms", "max"),
            busbw=("busbw_gbs", "median") if "busbw_gbs" in line else ("time_ms", "size"),
        )
        x = agg.index.to_numpy(float)
        color = cmap(i % cmap.N)
        ax_bw.plot(x, agg["busbw"], "o-", color=color, label=name, ms=4)
        err = np.vstack([(agg["time_ms"] - agg["lo"]).clip(lower=0), (agg["hi"] - agg["time_ms"])])
        ax_t.errorbar(x, agg["time_ms"], yerr=err.clip(min=0), fmt="o-", color=color, ms=4)
        if floors is not None and not floors.empty:
            hit = floors[
                (floors["collective"].astype(str) == str(key[0]))
                & (floats(floors, "group") == float(key[1]))
            ]
            if not hit.empty and hit["floor_ms"].iloc[0] > 0:
                ax_t.axhline(hit["floor_ms"].iloc[0], color=color, ls=":", lw=1)
    for ax in (ax_bw, ax_t):
        log_axes(ax, x_base=2, y=True)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: _size(v)))
        ax.set_xlabel("message size (bytes)")
        ax.grid(alpha=0.3, which="both")
    ax_bw.set_ylabel("bus bandwidth (GB/s)")
    ax_t.set_ylabel("time (ms), p10..p90; dotted: latency floor")
    ax_bw.legend(fontsize="small")
    fig.set_layout_engine("constrained")
    return fig


def _size(n: float) -> str:
    """Return a byte count as a short label: 512, 4K, 1M, 64M, 2G."""
    for unit, scale in (("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if n >= scale:
            return f"{n / scale:g}{unit}"
    return f"{n:g}"
