"""What every report figure shares: PNG output (no pyplot: no global state), the empty figure
that says why, the series limit, log axes; and `tilesweep compare`'s figure. Every figure reads
at a 1,280 px page: at most MAX_SERIES series per axis, no wider than PAGE_WIDTH_IN, no text
under TEXT_PT."""

import io
import math
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import Formatter, FuncFormatter, NullFormatter

from tilesweep.answer_picks import numeric
from tilesweep.report.formatting import whole

DPI = 100
# The most data series one axis carries; a reference line (a limit, a roof) is not a series.
MAX_SERIES = 6
# The report's column at a 1,280 px page (report/html.py: 1,200 px less its padding and the
# image's border, 1,164 px), in inches at DPI, less a margin for the saved figure's own edge:
# a figure this wide is shown at its own size, so TEXT_PT holds.
PAGE_WIDTH_IN = 11.5
# The smallest text on a figure, in points: 8 pt at DPI 100 is 11 px.
TEXT_PT = 8
# The series' colours and markers, in order (one palette for every figure that cycles them).
COLORS = ("#4878d0", "#ee854a", "#6acc64", "#d65f5f", "#956cb4", "#8c613c")
MARKERS = ("o", "s", "^", "D", "v", "P")
# The gid of an artist that marks a reference (a limit, a roof, a floor), not a data series.
REFERENCE = "reference"
# How a figure or panel with nothing to plot says why: centred, wrapped, grey.
SAID = {"ha": "center", "va": "center", "wrap": True, "color": "#555555"}


def png(fig: Figure) -> bytes:
    """Return the figure rendered as PNG bytes."""
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    return buf.getvalue()


def empty(message: str, title: str = "") -> Figure:
    """Return a small figure that states why there is nothing to plot."""
    fig = Figure(figsize=(6, 1.6))
    ax = fig.add_subplot()
    ax.axis("off")
    if title:
        ax.set_title(title)
    ax.text(0.5, 0.5, message, **SAID)
    return fig


def cycled(names: Iterable, palette: Sequence) -> dict:
    """Return each name's entry of palette, in order, the palette repeated."""
    return {name: palette[i % len(palette)] for i, name in enumerate(names)}


def reference(artist):
    """Return artist marked as a reference line (not counted as a series)."""
    artist.set_gid(REFERENCE)
    return artist


def series_labels(ax) -> list[str]:
    """Return the labels of ax's data series (no reference lines nor '_' labels)."""
    artists = [*ax.get_lines(), *ax.collections, *ax.containers]
    labels = [(str(a.get_label() or ""), getattr(a, "get_gid", lambda: None)()) for a in artists]
    return [
        label for label, gid in labels if label and not label.startswith("_") and gid != REFERENCE
    ]


def enforce_series(fig: Figure, most: int = MAX_SERIES) -> Figure:
    """Return fig; raise ValueError naming an axis with more than `most` series."""
    for ax in fig.get_axes():
        labels = series_labels(ax)
        if len(labels) > most:
            raise ValueError(
                f"axis {ax.get_title()!r} carries {len(labels)} series, more than {most}: "
                + ", ".join(labels)
            )
    return fig


def legend_below(fig, handles: list, notes: list[str] | None = None, **kw) -> None:
    """Put a (sub)figure's legend under it, `notes` (where given) as its title."""
    if notes is not None:
        kw |= {"title": "\n".join(notes) or None, "title_fontsize": TEXT_PT + 1}
    fig.legend(handles=handles, loc="outside lower center", fontsize=TEXT_PT + 1, **kw)


def finish(fig: Figure) -> Figure:
    """Return fig laid out (constrained) and checked (enforce_series)."""
    fig.set_layout_engine("constrained")
    return enforce_series(fig)


def top_series(
    ranked: Sequence[str], most: int = MAX_SERIES, keep: Iterable[str] = ()
) -> tuple[list[str], list[str]]:
    """Return (shown, left out) of `ranked`: `keep` always shown, then the best up to `most`."""
    kept = [k for k in dict.fromkeys(keep) if k in ranked][:most]
    chosen = {*kept, *[r for r in ranked if r not in kept][: most - len(kept)]}
    shown = [r for r in ranked if r in chosen]
    return shown, [r for r in ranked if r not in chosen]


def note(ax, text: str, xy: tuple, offset: tuple, **style):
    """Return ax's annotation of xy, `offset` points away (TEXT_PT unless `style` says)."""
    return ax.annotate(
        text, xy, xytext=offset, textcoords="offset points", **{"fontsize": TEXT_PT, **style}
    )


def say(ax, message: str) -> None:
    """Turn ax into a text panel that states why it has nothing to plot."""
    ax.set_xticks([])
    ax.set_yticks([])
    ax.text(0.5, 0.5, message, transform=ax.transAxes, fontsize=TEXT_PT + 1, **SAID)


class _MinorLogLabels(Formatter):
    """Labels minor log ticks where the axis spans under 1.5 decades (all of them under 4x)."""

    def __call__(self, x: float, pos: int | None = None) -> str:
        """Return the tick's label: plain like 0.2 or 50 (3,000 with a separator), or empty."""
        lo, hi = sorted(self.axis.get_view_interval())
        if lo <= 0 or hi / lo > 30 or x <= 0:
            return ""
        mantissa = x / 10 ** math.floor(math.log10(x))
        every = hi / lo < 4
        if every or min(abs(mantissa - m) for m in (2, 3, 5)) < 1e-6:
            return f"{x:,.0f}" if x >= 1000 else f"{x:g}"
        return ""


def log_axes(ax, x_base: int = 10, y: bool = True) -> None:
    """Set log scales on ax with plain tick labels (1, 2, 4, 0.01), narrow ranges labelled more."""
    ax.set_xscale("log", base=x_base)
    if y:
        ax.set_yscale("log")
    for axis, base in [(ax.xaxis, x_base), *([(ax.yaxis, 10)] if y else [])]:
        axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
        axis.set_minor_formatter(_MinorLogLabels() if base == 10 else NullFormatter())


def ok_or_all(frame: pd.DataFrame) -> pd.DataFrame:
    """Return the rows whose status is ok (all rows when there is no status column)."""
    if frame.empty or "status" not in frame:
        return frame
    return frame[frame["status"].astype(str) == "ok"]


def kernel_label(row: dict) -> str:
    """Return a short label of a launch row: backend, tile, stages, epilogue, dtype."""
    tile = "x".join(str(whole(row.get(k))) for k in ("tile_m", "tile_n", "tile_k"))
    stages = row.get("stages")
    stages = row.get("stages_requested") if pd.isna(stages) else stages
    parts = [str(row.get("backend", "?")), tile]
    if not pd.isna(stages):
        stages = whole(stages)
        parts.append(f"s{stages}" if isinstance(stages, int) else f"stages={stages}")
    parts += [str(row.get("epilogue", "")), str(row.get("dtype", ""))]
    return " ".join(p for p in parts if p and p != "nan")


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
