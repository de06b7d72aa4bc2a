"""The whole-step figures: the verdict's split per layout and batch, the check's error, and the
composition against each engine's published TPOT (engines.csv), log-log."""

import math
import textwrap

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import NullFormatter

from tilesweep.answer_picks import numeric
from tilesweep.references import BAND
from tilesweep.report import plotting as plot
from tilesweep.report.formatting import column, plural

# Each part of the split: its bar's colour and label.
SHARES = {
    "memory_ms": {"color": "#4878d0", "label": "memory-bound parts"},
    "math_ms": {"color": "#ee854a", "label": "math-bound parts"},
    "comm_ms": {"color": "#6acc64", "label": "communication"},
    "other_ms": {"color": "#b0b0b0", "label": "launch (kernels x fixed cost)"},
}


# The most bars one row of the split carries before it wraps (the page's width).
BARS_PER_ROW = 16


def _unfit(verdict: pd.DataFrame) -> pd.Series:
    return column(verdict, "fits_memory", "").astype(str) == "no"


def _not_drawn(verdict: pd.DataFrame, drawn: pd.Series, batches: list) -> list[str]:
    """Return the sentences that name each layout left out, why and at which batches."""
    notes = []
    for reason, mask in (
        ("does not fit in memory", ~drawn & _unfit(verdict)),
        ("has no composed time (see the verdict table)", ~drawn & ~_unfit(verdict)),
    ):
        groups: dict[tuple, list[str]] = {}
        for layout, rows in verdict[mask].groupby(verdict["layout"].astype(str), sort=False):
            where = tuple(sorted(plot.whole(b) for b in numeric(rows, "batch").dropna()))
            groups.setdefault(where, []).append(layout)
        at = {w: f"batch {', '.join(map(str, w))}" for w in groups if len(w) != len(batches)}
        parts = [f"{', '.join(names)} at {at.get(w, 'every batch')}" for w, names in groups.items()]
        if parts:
            notes.append(f"No bar where a layout {reason}: " + "; ".join(parts) + ".")
    bare = [plot.whole(b) for b in batches if not drawn[numeric(verdict, "batch") == b].any()]
    if bare:
        notes.append(f"No layout has a bar at batch {', '.join(map(str, bare))}.")
    return notes


def verdict_split(verdict: pd.DataFrame) -> Figure:
    """Return stacked bars of each layout's step split in ms per token, grouped by batch."""
    shares = [c for c in SHARES if c in verdict]
    if verdict.empty or not shares or "layout" not in verdict or "batch" not in verdict:
        return plot.empty("no verdict rows", "Verdict")
    batches = sorted(pd.unique(numeric(verdict, "batch").dropna()))
    layouts = list(dict.fromkeys(verdict["layout"].astype(str)))
    total = sum((numeric(verdict, c).fillna(0) for c in shares), 0.0)
    drawn = ~_unfit(verdict) & (total > 0)  # a split to draw: it fits and has a time
    notes = _not_drawn(verdict, drawn, batches)
    if not drawn.any():
        return plot.empty(" ".join(notes), "Verdict")
    groups = []  # (batch, its drawn rows in the config's layout order)
    for batch in batches:
        part = verdict[drawn & (numeric(verdict, "batch") == batch)]
        order = part["layout"].astype(str).map(layouts.index)
        if not part.empty:
            groups.append((batch, part.iloc[np.argsort(order.to_numpy(), kind="stable")]))
    bars = sum(len(part) for _, part in groups)
    per_row = math.ceil(bars / math.ceil(bars / BARS_PER_ROW))  # rows of even length
    rows, count = [[]], 0
    for group in groups:
        if rows[-1] and count + len(group[1]) > per_row:
            rows.append([])
            count = 0
        rows[-1].append(group)
        count += len(group[1])
    fig = Figure(figsize=(plot.PAGE_WIDTH_IN, 3.6 * len(rows) + 1.2))
    axes = fig.subplots(len(rows), 1, squeeze=False, sharey=True)[:, 0]
    spans = [_split_row(ax, row, shares) for ax, row in zip(axes, rows, strict=True)]
    for ax in axes:  # one bar width on every row
        ax.set_xlim(-0.75, max(spans) - 0.75)
    handles = [Patch(**SHARES[c]) for c in shares]
    if "floor_ms" in verdict and numeric(verdict[drawn], "floor_ms").notna().any():
        handles.append(Line2D([], [], color="black", lw=1.6, label="roofline floor (floor_ms)"))
    plot.legend_below(fig, handles, [textwrap.fill(n, 150) for n in notes], ncols=len(handles))
    return plot.finish(fig)


def _split_row(ax, groups: list, shares: list[str]) -> float:
    x, names, centres, edges, pos = [], [], [], [], 0.0
    for _batch, part in groups:
        here = pos + np.arange(len(part))
        x += list(here)
        names += part["layout"].astype(str).tolist()
        centres.append(here.mean())
        edges.append(pos - 0.75)
        pos += len(part) + 0.5
    frame = pd.concat([part for _, part in groups])
    x = np.array(x)
    bottom = np.zeros(len(frame))
    for col in shares:
        vals = numeric(frame, col).fillna(0).to_numpy()
        ax.bar(x, vals, 0.75, bottom=bottom, linewidth=0, **SHARES[col])
        bottom += vals
    if "floor_ms" in frame:  # each bar's physical floor (the verdict's floor_ms) as a tick
        for xi, floor in zip(x, numeric(frame, "floor_ms"), strict=True):
            if floor == floor:
                plot.reference(ax.hlines(floor, xi - 0.375, xi + 0.375, color="black", lw=1.6))
    for xi, total in zip(x, bottom, strict=True):
        text = f"{total:.1f}" if total < 100 else f"{total:,.0f}"
        plot.note(ax, text, (xi, total), (0, 2), ha="center", va="bottom")
    for edge in edges[1:]:
        plot.reference(ax.axvline(edge, color="#999999", lw=0.8))
    ax.set_xticks(x, names, rotation=35, ha="right", fontsize=plot.TEXT_PT + 1)
    top = ax.secondary_xaxis("top")
    top.set_xticks(centres, [f"batch {plot.whole(b)}" for b, _ in groups])
    top.tick_params(length=0, labelsize=plot.TEXT_PT + 2)
    ax.set_ylabel("ms per output token")
    ax.margins(y=0.12)
    ax.grid(axis="y", alpha=0.3)
    return pos


# The most whole-step panels side by side before they wrap (the page's width).
CHECK_COLUMNS = 4


def _pct(part: pd.DataFrame, col: str) -> pd.Series:
    return (numeric(part, col) / numeric(part, "measured_ms") - 1.0) * 100.0


def check_error(check: pd.DataFrame) -> Figure:
    """Return the composition's error against the measured whole steps (%), per layout and batch."""
    if check.empty or "measured_ms" not in check:
        return plot.empty("no measured whole steps", "Check of the method")
    layouts = list(dict.fromkeys(check["layout"].astype(str)))
    nrows = math.ceil(len(layouts) / CHECK_COLUMNS)
    ncols = math.ceil(len(layouts) / nrows)
    fig = Figure(figsize=(min(plot.PAGE_WIDTH_IN, 2.9 * ncols + 0.6), 2.8 * nrows + 0.7))
    axes = fig.subplots(nrows, ncols, squeeze=False, sharex=True, sharey=True).ravel()
    batches = sorted(set(numeric(check, "batch").dropna()))
    for ax, layout in zip(axes, layouts, strict=False):
        part = check[check["layout"].astype(str) == layout].sort_values("batch")
        b = numeric(part, "batch")
        ax.set_xscale("log", base=2)
        low, high = (_pct(part, f"measured_{q}_ms") for q in ("p10", "p90"))
        ax.fill_between(b, low, high, color="#999999", alpha=0.35, label="measured p10..p90")
        for y in (-10.0, 10.0):
            plot.reference(ax.axhline(y, color="#888888", lw=0.8, ls="--"))
        plot.reference(ax.axhline(0.0, color="k", lw=0.9))
        ax.plot(b, _pct(part, "composed_ms"), "-s", color="#4878d0", ms=3, label="composed")
        ax.plot(b, _pct(part, "roofline_ms"), ":", color="#ee854a", label="roofline only")
        held = bool(part["held_out"].iloc[0]) if "held_out" in part else True
        ax.set_title(
            f"{layout}{' (held out)' if held else ' (calibration)'}", fontsize=plot.TEXT_PT + 2
        )
        ax.grid(alpha=0.3, which="major")
    ticks: list[float] = []
    for x in (x for x in batches if x > 0):  # batches at least 2.5 octaves apart: no overlap
        if not ticks or math.log2(x / ticks[-1]) >= 2.5:
            ticks.append(x)
    for i, ax in enumerate(axes):
        if i >= len(layouts):
            ax.axis("off")
            continue
        ax.set_xticks(ticks, [f"{plot.whole(t):,}" for t in ticks])
        ax.xaxis.set_minor_formatter(NullFormatter())
        if i % ncols == 0:
            ax.set_ylabel("% off the measured step")
        if i + ncols >= len(layouts):
            ax.set_xlabel("batch (sequences)")
            ax.xaxis.set_tick_params(labelbottom=True)
    handles, labels = axes[0].get_legend_handles_labels()
    handles.append(Line2D([], [], color="#888888", lw=0.8, ls="--"))
    labels.append("+-10%")
    plot.legend_below(fig, handles, labels=labels, ncols=4)
    return plot.finish(fig)


# The most engine panels side by side before they wrap.
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
        return plot.empty("no engine figure cited with a composed time", "Against engines' figures")
    gpus = list(points["hardware"].value_counts().index)
    marker = plot.cycled(sorted(set(points["engine"])), plot.MARKERS)
    color = plot.cycled(sorted(set(points["model"])), plot.COLORS)
    ncols = min(PANELS_PER_ROW, math.ceil(math.sqrt(len(gpus))))
    nrows = -(-len(gpus) // ncols)
    fig = Figure(figsize=(plot.PAGE_WIDTH_IN * 0.75, 3.3 * nrows + 0.4))
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).ravel()
    values = np.concatenate([points["engine_tpot_ms"], points["composed_tpot_ms"]])
    low, high = values.min() / 1.3, values.max() * 1.3
    line = np.geomspace(low, high, 50)
    left_out = 0
    for ax, gpu in zip(axes, gpus, strict=False):
        part = points[points["hardware"] == gpu]
        sizes = part.groupby(["engine", "model"]).size().sort_values(ascending=False)
        shown, rest = plot.top_series([f"{e} {m}" for e, m in sizes.index], plot.MAX_SERIES)
        left_out += int(sum(sizes[tuple(r.split(" ", 1))] for r in rest))
        ax.fill_between(line, line * BAND[0], line * BAND[1], color="#e3e3e3", lw=0, zorder=0)
        plot.reference(ax.plot(line, line, "--", color="#777777", lw=0.9, zorder=1)[0])
        for (engine, model), rows in part.groupby(["engine", "model"], sort=True):
            if f"{engine} {model}" not in shown:
                continue
            x, y = rows["engine_tpot_ms"], rows["composed_tpot_ms"]
            style = {"marker": marker[engine], "color": color[model], "label": f"{engine} {model}"}
            ax.scatter(x, y, s=26, alpha=0.85, zorder=3, **style)
        plot.log_axes(ax)
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
    return plot.finish(fig)
