"""The figures of what the sweep measured besides decode: shared memory per kernel and target
against the target's limits (launch), and bus bandwidth and time against message size with
latency floors (collectives)."""

import math

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogLocator

from tilesweep.answer_picks import numeric
from tilesweep.report import plotting as plot
from tilesweep.report.formatting import plural

FIT_COLORS = {"default": "#3a8a3a", "optin": "#e09b00", "no": "#c0392b", "unknown": "#9a9a9a"}
FIT_LABELS = {
    "default": "fits by default",
    "optin": "fits after opt-in",
    "no": "does not fit",
    "unknown": "unknown",
}
# The hatched part of a bar past the mainloop's shared memory.
REST = {"edgecolor": "#333333", "hatch": "///", "label": "epilogue + rest"}
# The target's limits: column, label, line style, colour and width. The opt-in per-block limit
# and the per-SM capacity lie 1 KiB apart on SM120 (and SM90), so the per-SM line is a wide pale
# band under the dashed opt-in line, and each line is named above the panel on its own tier.
LIMITS = (
    ("smem_default_bytes", "default per block", ":", "#555555", 1.5),
    ("smem_limit_bytes", "opt-in per block", "--", "#1f5fbf", 1.5),
    ("smem_per_sm_bytes", "per SM", "-", "#b07cc6", 4.0),
)
# The height of one tier of limit names above a panel, in points.
TIER_PT = plot.TEXT_PT + 3


def launch_smem(launch: pd.DataFrame, first: str | None = None) -> Figure:
    """Return bars of shared memory per kernel, one panel per target, with the target's limits."""
    if launch.empty or "target" not in launch:
        return plot.empty("no launch checks in this sweep", "Shared memory per tile")
    # The targets in table order, `first` ahead of the rest.
    targets = sorted(dict.fromkeys(launch["target"].astype(str)), key=lambda t: t != first)
    heights = [max(2.2, 0.3 * (launch["target"] == t).sum() + 1.4) for t in targets]
    fig = Figure(figsize=(9, sum(heights)))
    axes = fig.subplots(len(targets), 1, squeeze=False, height_ratios=heights, sharex=True)
    for ax, target in zip(axes[:, 0], targets, strict=True):
        part = launch[launch["target"].astype(str) == target].reset_index(drop=True)
        _smem_panel(ax, part, target, deployed=target == first)
    handles = [Patch(color=c, label=FIT_LABELS[k]) for k, c in FIT_COLORS.items()]
    handles += [
        Patch(facecolor="white", **REST),
        Line2D([], [], marker="D", color="black", ls="", label="hand estimate"),
    ]
    handles += [Line2D([], [], color=c, ls=ls, lw=w, label=lab) for _, lab, ls, c, w in LIMITS]
    plot.legend_below(fig, handles, ncols=4)
    return plot.finish(fig)


def _smem_panel(ax, part: pd.DataFrame, target: str, deployed: bool = False) -> None:
    """Draw one target's shared-memory bars, estimates and limit lines on ax."""
    rows = part.to_dict("records")
    labels = [plot.kernel_label(r) for r in rows]
    y = np.arange(len(rows))
    smem = numeric(part, "smem_bytes").to_numpy() / 1024
    mainloop = numeric(part, "mainloop_smem_bytes").to_numpy() / 1024
    fits = np.array(
        [str(r.get("fits")) if str(r.get("fits")) in FIT_COLORS else "unknown" for r in rows]
    )
    split = ~np.isnan(mainloop) & ~np.isnan(smem)
    whole = np.nan_to_num(np.where(split, mainloop, smem))
    for key, color in FIT_COLORS.items():
        mine = fits == key
        if mine.any():
            ax.barh(y[mine], whole[mine], color=color, height=0.7, label=FIT_LABELS[key])
    if split.any():
        rest, colors = (smem - mainloop)[split], [FIT_COLORS[f] for f in fits[split]]
        ax.barh(y[split], rest, left=mainloop[split], color=colors, height=0.7, lw=0.3, **REST)
    model = numeric(part, "smem_model_bytes").to_numpy() / 1024
    if not np.isnan(model).all():
        ax.plot(model, y, "D", color="black", markersize=4, ls="", label="hand estimate")
    for i, r in enumerate(rows):
        if np.isnan(smem[i]):
            failed = f"no number ({r.get('status')} failed: see the table)"
            at = (0 if np.isnan(model[i]) else model[i], i)
            plot.note(ax, failed, at, (8, 0), va="center", color="#555555")
    tiers = _limit_lines(ax, part)
    ax.set_yticks(y, labels, fontsize=plot.TEXT_PT + 1)
    ax.set_ylim(len(rows) - 0.4, -0.6)
    arch = str(part["arch"].iloc[0]) if "arch" in part else ""
    note = " (the deployment's hardware)" if deployed else ""
    ax.set_title(
        f"{target} ({arch}){note}", fontsize=plot.TEXT_PT + 3, loc="left", pad=6 + tiers * TIER_PT
    )
    ax.set_xlabel("shared memory per block (KiB)")
    ax.xaxis.set_tick_params(labelbottom=True)
    ax.grid(axis="x", alpha=0.3)


def _limit_lines(ax, part: pd.DataFrame) -> int:
    """Draw the target's limits as vertical lines, names on their own tiers; return the tiers."""
    found = []
    for col, label, ls, color, width in LIMITS:
        values = numeric(part, col).dropna()
        if not values.empty:
            found.append((values.iloc[0] / 1024, label, ls, color, width))
    found.sort(key=lambda f: f[0])
    for tier, (kib, label, ls, color, width) in enumerate(found):
        # The wide per-SM band lies under the dashed opt-in line: where they coincide both show.
        zorder = 3 if ls == "-" else 4
        ax.axvline(kib, color=color, ls=ls, lw=width, zorder=zorder, gid=plot.REFERENCE)
        where = {"xycoords": ("data", "axes fraction"), "annotation_clip": False, "va": "bottom"}
        plot.note(
            ax, f"{label} {kib:,.0f} KiB", (kib, 1.0), (2, 2 + tier * TIER_PT), color=color, **where
        )
    return len(found)


def deployment_target(verdict: pd.DataFrame) -> str | None:
    """Return the verdict's one hardware, or None when it names none or several."""
    names = list(dict.fromkeys(verdict["hardware"].astype(str))) if "hardware" in verdict else []
    return names[0] if len(names) == 1 else None


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
