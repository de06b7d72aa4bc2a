"""The Pareto figure: tokens/s per GPU against tokens/s per user, with the frontier drawn."""

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from tilesweep.answer_picks import numeric
from tilesweep.report import plotting as plot
from tilesweep.report.formatting import plural

# An axis whose values span more than this factor is drawn on a log scale.
LOG_SPAN = 20.0
# How the frontier is drawn: wide, grey and under the layouts' own lines, so a layout whose line
# runs along it stays visible on top of it.
FRONTIER = {"color": "#9a9a9a", "lw": 7.0, "alpha": 0.45, "solid_capstyle": "round"}
# Points closer than this fraction on both axes coincide: each later one is drawn smaller,
# inside the one before (a square with a triangle in it), so neither hides the other.
SAME_POINT = 0.01
MARKER_SIZE = 42.0


def pareto_points(verdict: pd.DataFrame) -> pd.DataFrame:
    """Return one row per fitting layout and batch: tpot_ms, per_user, per_gpu and source."""
    need = {"layout", "batch", "tpot_ms", "tokens_per_s_per_gpu", "fits_memory"}
    cols = ["layout", "batch", "tpot_ms", "per_user", "per_gpu", "source"]
    if verdict.empty or not need <= set(verdict):
        return pd.DataFrame(columns=cols)
    tpot, per_gpu = numeric(verdict, "tpot_ms"), numeric(verdict, "tokens_per_s_per_gpu")
    keep = (verdict["fits_memory"] == "yes") & (tpot > 0) & np.isfinite(tpot)
    keep &= np.isfinite(per_gpu)
    rows = verdict[keep]
    return pd.DataFrame(
        {
            "layout": rows["layout"].astype(str),
            "batch": rows["batch"],
            "tpot_ms": tpot[keep],
            "per_user": 1000.0 / tpot[keep],
            "per_gpu": per_gpu[keep],
            "source": rows["source"].astype(str) if "source" in rows else "",
        }
    ).reset_index(drop=True)


def frontier(points: pd.DataFrame, x: str = "per_user", y: str = "per_gpu") -> pd.DataFrame:
    """Return the points no other point dominates, sorted by x (equal points all kept)."""
    if points.empty:
        return points
    xs, ys = points[x].to_numpy(float), points[y].to_numpy(float)
    geq = (xs[None, :] >= xs[:, None]) & (ys[None, :] >= ys[:, None])
    gt = (xs[None, :] > xs[:, None]) | (ys[None, :] > ys[:, None])
    dominated = (geq & gt).any(axis=1)
    return points[~dominated].sort_values([x, y], ascending=[True, False])


def shown_layouts(
    points: pd.DataFrame, limit: int = plot.MAX_SERIES
) -> tuple[list[str], list[str]]:
    """Return (the layouts drawn, the rest): frontier first, then best per GPU, at most `limit`."""
    if points.empty:
        return [], []
    on_front = set(frontier(points)["layout"])
    best = points.groupby("layout", sort=False)["per_gpu"].max()
    order = sorted(best.index, key=lambda lay: (lay not in on_front, -best[lay]))
    return order[:limit], order[limit:]


def _scale(axis, set_scale, values: pd.Series) -> None:
    """Put an axis on a log scale (1-2-5 ticks) when its values span over LOG_SPAN."""
    low, high = values.min(), values.max()
    if low > 0 and high / low > LOG_SPAN:
        set_scale("log")
        axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
        axis.set_minor_formatter(NullFormatter())


def pareto(verdict: pd.DataFrame) -> Figure:
    """Return tokens/s per GPU against tokens/s per user, a series per layout, frontier drawn."""
    points = pareto_points(verdict)
    if points.empty:
        return plot.empty("no layout fits in memory at any batch: nothing to trade off", "Pareto")
    drawn, rest = shown_layouts(points)
    front = frontier(points)
    fig = Figure(figsize=(9.5, 5.0))
    ax = fig.add_subplot()
    labels: list[tuple[str, tuple[float, float], str]] = []
    # The frontier under everything, wide and grey: a line of its own, never one layout's.
    ax.plot(front["per_user"], front["per_gpu"], **FRONTIER, zorder=1, gid="frontier")
    sizes = marker_sizes(points, drawn)
    for i, layout in enumerate(drawn):
        part = points[points["layout"] == layout].sort_values("batch")
        color, marker = _style(i).values()
        ax.plot(part["per_user"], part["per_gpu"], "-", color=color, lw=0.8, alpha=0.5, zorder=2)
        model = part["source"] == "model"
        for rows, face in ((part[~model], color), (part[model], "none")):
            style = {"marker": marker, "color": color, "facecolors": face, "zorder": 3 + i}
            ax.scatter(rows["per_user"], rows["per_gpu"], s=sizes[rows.index], label=None, **style)
        labels += [
            (f"{plot.whole(r['batch'])}", (r["per_user"], r["per_gpu"]), color)
            for r in part.to_dict("records")
        ]
    _scale(ax.xaxis, ax.set_xscale, points["per_user"])
    _scale(ax.yaxis, ax.set_yscale, points["per_gpu"])
    ax.margins(0.12)
    ax.grid(alpha=0.3)
    ax.set_xlabel("tokens/s per user (1,000 / TPOT in ms)")
    ax.set_ylabel("tokens/s per GPU")
    first = verdict.iloc[0]
    ax.set_title(
        f"{first.get('model', '?')} on {first.get('hardware', '?')}: throughput per GPU against "
        "speed per user (labels: batch)",
        fontsize="medium",
    )
    handles = _handles(points, drawn, rest)
    fig.legend(handles=handles, loc="outside right upper", fontsize="small", title="layout")
    fig.set_layout_engine("constrained")
    place_labels(fig, ax, labels)
    return plot.enforce_series(fig)


def _style(i: int) -> dict:
    return {
        "color": plot.COLORS[i % len(plot.COLORS)],
        "marker": plot.MARKERS[i % len(plot.MARKERS)],
    }


def _handles(points: pd.DataFrame, drawn: list[str], rest: list[str]) -> list[Line2D]:
    handles = [Line2D([], [], lw=0.8, label=lay, **_style(i)) for i, lay in enumerate(drawn)]
    handles.append(Line2D([], [], **FRONTIER, label="frontier (not dominated)"))
    if (points["source"] == "model").any():
        hollow = {"color": "#555555", "marker": "o", "mfc": "none", "lw": 0}
        handles.append(Line2D([], [], label="hollow: model (roofline only)", **hollow))
    if rest:
        more = plural(len(rest), "more layout")
        handles.append(Line2D([], [], lw=0, label=f"+{more}: verdict table"))
    return handles


def marker_sizes(points: pd.DataFrame, drawn: list[str]) -> pd.Series:
    """Return each point's marker area, shrunk 0.4 per earlier coinciding point."""
    sizes = pd.Series(MARKER_SIZE, index=points.index)
    order = {layout: i for i, layout in enumerate(drawn)}
    ranked = points[points["layout"].isin(order)]
    ranked = ranked.assign(rank=ranked["layout"].map(order)).sort_values("rank")
    seen: list[tuple[float, float]] = []
    for idx, x, y in zip(ranked.index, ranked["per_user"], ranked["per_gpu"], strict=True):
        under = sum(
            abs(x - a) <= SAME_POINT * abs(a) and abs(y - b) <= SAME_POINT * abs(b) for a, b in seen
        )
        sizes[idx] = MARKER_SIZE * 0.4**under
        seen.append((x, y))
    return sizes


# Where a point's label may go, in points from the point, in the order tried: the nearest ring
# first, then rings further out (a label never lands on another; it may land on a point only
# where no free place is left).
LABEL_OFFSETS = tuple(
    (dx * ring, dy * ring)
    for ring in (1, 2, 3, 4)
    for dx, dy in ((5, 4), (5, -12), (-7, 4), (-7, -12), (5, 14), (-7, 14), (5, -22), (-7, -22))
)


def _free(box, placed: list, points: list, radius: float) -> bool:
    """Return whether a label's box overlaps no placed label and clears `points` by `radius`."""
    if any(box.overlaps(b) for b in placed):
        return False
    return not any(
        box.x0 - radius < x < box.x1 + radius and box.y0 - radius < y < box.y1 + radius
        for x, y in points
    )


def place_labels(fig: Figure, ax, labels: list[tuple[str, tuple[float, float], str]]) -> None:
    """Annotate each point where its label overlaps nothing; coinciding points share one."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    fig.canvas.draw()  # the layout settles: display positions hold from here
    renderer = fig.canvas.get_renderer()
    where = {i: ax.transData.transform(xy) for i, (_, xy, _) in enumerate(labels)}
    merged: list[list] = []  # [text, xy, colour (grey where layouts differ), indices]
    for i, (text, xy, color) in enumerate(labels):
        same = next(
            (m for m in merged if m[0] == text and np.hypot(*(where[i] - where[m[3][0]])) < 6), None
        )
        if same is None:
            merged.append([text, xy, color, [i]])
        else:
            same[2:] = [same[2] if same[2] == color else "#333333", [*same[3], i]]
    radius = 5.0 * fig.dpi / 72.0
    placed = []
    for text, xy, color, members in merged:
        if len(members) > 1 and color == "#333333":
            text = f"{text} ({len(members)} layouts)"
        others = [where[j] for j in where if j not in members]

        tries = [(strict, dx, dy) for strict in (True, False) for dx, dy in LABEL_OFFSETS]
        for strict, dx, dy in tries:
            side = "left" if dx > 0 else "right"
            note = plot.note(ax, text, xy, (dx, dy), fontsize=9, color=color, ha=side)
            box = note.get_window_extent(renderer)
            if _free(box, placed, others if strict else [], radius):
                placed.append(box)
                break
            note.remove()
