"""Figures of the sweep's tables: shared memory per tile, decode rooflines, collectives, layouts.

Every function takes tidy tables and returns a matplotlib Figure built without pyplot (no global
state, Agg canvas), or a figure that says why it is empty; `png` turns one into bytes.
"""

from __future__ import annotations

import io
import math

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import Formatter, FuncFormatter, NullFormatter

FIT_COLORS = {"default": "#3a8a3a", "optin": "#e09b00", "no": "#c0392b", "unknown": "#9a9a9a"}
FIT_LABELS = {
    "default": "fits by default",
    "optin": "fits after opt-in",
    "no": "does not fit",
    "unknown": "unknown",
}
LIMITS = (
    ("smem_default_bytes", "default per block", ":"),
    ("smem_limit_bytes", "opt-in per block", "--"),
    ("smem_per_sm_bytes", "per SM", "-"),
)
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
DPI = 100


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
    ax.text(0.5, 0.5, message, ha="center", va="center", wrap=True, color="#555555")
    return fig


def _num(frame: pd.DataFrame, col: str) -> pd.Series:
    """Return a column as floats (NaN where absent or not a number)."""
    if col not in frame:
        return pd.Series(np.nan, index=frame.index, dtype=float)
    return pd.to_numeric(frame[col], errors="coerce").astype(float)


class _MinorLogLabels(Formatter):
    """Labels minor log ticks at 2x and 5x a power of ten, when the axis spans < 1.5 decades."""

    def __call__(self, x: float, pos: int | None = None) -> str:
        """Return the tick's label: plain like 0.2 or 50, or empty."""
        lo, hi = sorted(self.axis.get_view_interval())
        if lo <= 0 or hi / lo > 30 or x <= 0:
            return ""
        mantissa = x / 10 ** math.floor(math.log10(x))
        return f"{x:g}" if min(abs(mantissa - 2), abs(mantissa - 5)) < 1e-6 else ""


def _log_axes(ax, x_base: int = 10, y: bool = True) -> None:
    """Set log scales on ax with plain tick labels (1, 2, 4, 0.01) instead of powers; within
    a narrow range, intermediate ticks are labelled too."""
    ax.set_xscale("log", base=x_base)
    axes = [ax.xaxis]
    if y:
        ax.set_yscale("log")
        axes.append(ax.yaxis)
    for axis in axes:
        base = x_base if axis is ax.xaxis else 10
        axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
        axis.set_minor_formatter(_MinorLogLabels() if base == 10 else NullFormatter())


def _ok(frame: pd.DataFrame) -> pd.DataFrame:
    """Return the rows whose status is ok (all rows when there is no status column)."""
    if frame.empty or "status" not in frame:
        return frame
    return frame[frame["status"].astype(str) == "ok"]


def kernel_label(row: dict) -> str:
    """Return a short label of a launch row: backend, tile, stages, epilogue, dtype."""
    tile = "x".join(str(_int(row.get(k))) for k in ("tile_m", "tile_n", "tile_k"))
    stages = row.get("stages")
    stages = row.get("stages_requested") if _missing(stages) else stages
    parts = [str(row.get("backend", "?")), tile]
    if not _missing(stages):
        stages = _int(stages)
        parts.append(f"s{stages}" if isinstance(stages, int) else f"stages={stages}")
    parts += [str(row.get("epilogue", "")), str(row.get("dtype", ""))]
    return " ".join(p for p in parts if p and p != "nan")


def _missing(value: object) -> bool:
    """Return whether a cell is empty (None or NaN)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def _int(value: object) -> object:
    """Return value as an int when it is a whole number, else unchanged."""
    try:
        as_float = float(value)
    except (TypeError, ValueError):
        return value
    return int(as_float) if as_float.is_integer() else value


def launch_smem(launch: pd.DataFrame) -> Figure:
    """Return bars of shared memory per kernel, one panel per target, with its limit lines.

    Bars are the compiler's (Triton) or CUTLASS's number, coloured by whether the kernel fits;
    CUTLASS bars are split into mainloop and the rest (epilogue); a black diamond is the hand
    estimate; vertical lines are the target's default, opt-in and per-SM limits.
    """
    if launch.empty or "target" not in launch:
        return empty("no launch checks in this sweep", "Shared memory per tile")
    targets = list(dict.fromkeys(launch["target"].astype(str)))
    heights = [max(2.0, 0.32 * (launch["target"] == t).sum() + 1.2) for t in targets]
    fig = Figure(figsize=(9, sum(heights)))
    axes = fig.subplots(len(targets), 1, squeeze=False, height_ratios=heights)[:, 0]
    for ax, target in zip(axes, targets, strict=True):
        part = launch[launch["target"].astype(str) == target].reset_index(drop=True)
        _smem_panel(ax, part, target)
    handles = [Patch(color=c, label=FIT_LABELS[k]) for k, c in FIT_COLORS.items()]
    handles += [
        Patch(facecolor="white", edgecolor="#333333", hatch="///", label="epilogue + rest"),
        Line2D([], [], marker="D", color="black", ls="", label="hand estimate"),
    ]
    handles += [Line2D([], [], color="#333333", ls=ls, label=lab) for _, lab, ls in LIMITS]
    fig.legend(handles=handles, loc="outside lower center", ncols=4, fontsize="small")
    fig.set_layout_engine("constrained")
    return fig


def _smem_panel(ax, part: pd.DataFrame, target: str) -> None:
    """Draw one target's shared-memory bars, estimates and limit lines on ax."""
    rows = part.to_dict("records")
    labels = [kernel_label(r) for r in rows]
    y = np.arange(len(rows))
    smem = _num(part, "smem_bytes").to_numpy() / 1024
    mainloop = _num(part, "mainloop_smem_bytes").to_numpy() / 1024
    colors = [FIT_COLORS.get(str(r.get("fits")), FIT_COLORS["unknown"]) for r in rows]
    split = ~np.isnan(mainloop) & ~np.isnan(smem)
    whole = np.where(split, mainloop, smem)
    ax.barh(y, np.nan_to_num(whole), color=colors, height=0.7)
    if split.any():
        ax.barh(
            y[split],
            (smem - mainloop)[split],
            left=mainloop[split],
            color=[c for c, s in zip(colors, split, strict=True) if s],
            edgecolor="#333333",
            hatch="///",
            height=0.7,
            linewidth=0.3,
        )
    model = _num(part, "smem_model_bytes").to_numpy() / 1024
    ax.plot(model, y, "D", color="black", markersize=4, ls="")
    for i, r in enumerate(rows):
        if np.isnan(smem[i]):
            ax.annotate(
                f"no number ({r.get('status')} failed: see the table)",
                (0 if np.isnan(model[i]) else model[i], i),
                xytext=(8, 0),
                textcoords="offset points",
                va="center",
                fontsize="x-small",
                color="#555555",
            )
    for col, _label, ls in LIMITS:
        values = _num(part, col).dropna()
        if not values.empty:
            ax.axvline(values.iloc[0] / 1024, color="#333333", ls=ls, lw=1)
    ax.set_yticks(y, labels, fontsize="small")
    ax.invert_yaxis()
    arch = str(part["arch"].iloc[0]) if "arch" in part else ""
    ax.set_title(f"{target} ({arch})", fontsize="medium", loc="left")
    ax.set_xlabel("shared memory per block (KiB)")
    ax.grid(axis="x", alpha=0.3)


def _runner_styles(runners: list[str]) -> dict[str, dict]:
    """Return a colour and marker per runner: kernels (Triton, CUTLASS) in colour, torch
    baselines in greys."""
    from matplotlib import colormaps

    tiles = [r for r in runners if not r.startswith("torch")]
    others = [r for r in runners if r.startswith("torch")]
    cmap = colormaps["tab10" if len(tiles) <= 10 else "tab20"]
    styles = {r: {"color": cmap(i % cmap.N), "marker": "o"} for i, r in enumerate(tiles)}
    greys = ["#000000", "#555555", "#999999", "#bbbbbb"]
    markers = ["s", "^", "v", "P"]
    for i, r in enumerate(others):
        styles[r] = {"color": greys[i % len(greys)], "marker": markers[i % len(markers)]}
    return styles


def _short_runner(runner: str) -> str:
    """Return a runner name without the backend prefix of Triton kernels."""
    return runner.replace("triton:", "")


MAX_RUNNERS_PER_AXIS = 8


def runner_facets(frame: pd.DataFrame, most: int = MAX_RUNNERS_PER_AXIS) -> list[tuple[str, list]]:
    """Return (title, runners) per facet: per dtype, the runners in groups of at most `most`.

    A dtype's runners share one facet when they fit; otherwise each backend (triton, cutlass,
    torch baselines) gets its own, split further into chunks of `most`.
    """
    facets = []
    for dtype in dict.fromkeys(frame["dtype"].astype(str)) if "dtype" in frame else ["?"]:
        part = frame[frame["dtype"].astype(str) == dtype] if "dtype" in frame else frame
        runners = sorted(part["runner"].astype(str).unique())
        if len(runners) <= most:
            facets.append((dtype, runners))
            continue
        for family in dict.fromkeys(r.split(":")[0].split("_")[0] for r in runners):
            mine = [r for r in runners if r.split(":")[0].split("_")[0] == family]
            chunks = [mine[i : i + most] for i in range(0, len(mine), most)]
            for i, chunk in enumerate(chunks):
                more = f" ({i + 1} of {len(chunks)})" if len(chunks) > 1 else ""
                facets.append((f"{dtype}, {family}{more}", chunk))
    return facets


def _positive(values: pd.Series) -> bool:
    """Return whether a column has a positive number, so a log axis can show it."""
    return bool((values > 0).any())


def decode_time(decode: pd.DataFrame) -> Figure:
    """Return time and achieved bandwidth against tokens-per-expert: one row pair per facet of
    at most eight runners (see runner_facets), one column per op, a legend per facet.

    Error bars span p10..p90; the dashed line in the bandwidth row is the measured copy
    bandwidth (the memory roof); zipf routing is drawn dashed.
    """
    ok = _ok(decode)
    if ok.empty or "time_ms" not in ok:
        return empty("no decode measurements (nothing timed on this device)", "Decode")
    if "routing" not in ok:
        return empty("decode rows without a routing column", "Decode")
    ops = list(dict.fromkeys(ok["op"].astype(str)))
    facets = runner_facets(ok)
    fig = Figure(figsize=(4.6 * len(ops) + 3.4, 5.4 * len(facets)))
    axes = fig.subplots(2 * len(facets), len(ops), squeeze=False)
    for f, (title, runners) in enumerate(facets):
        styles = _runner_styles(runners)
        rows = ok[ok["runner"].astype(str).isin(runners)]
        if "dtype" in ok:
            rows = rows[rows["dtype"].astype(str) == title.split(",")[0]]
        t_ax, b_ax = axes[2 * f], axes[2 * f + 1]
        for j, op in enumerate(ops):
            part = rows[rows["op"].astype(str) == op]
            for (runner, routing), line in part.groupby(["runner", "routing"], sort=True):
                line = line.sort_values("tokens_per_expert")
                x = _num(line, "tokens_per_expert")
                tm = _num(line, "time_ms")
                lo, hi = _num(line, "time_p10_ms"), _num(line, "time_p90_ms")
                err = np.vstack(
                    [(tm - lo).clip(lower=0).fillna(0), (hi - tm).clip(lower=0).fillna(0)]
                )
                style = dict(styles[runner], ls="--" if routing == "zipf" else "-", ms=4)
                t_ax[j].errorbar(x, tm, yerr=err, capsize=2, **style)
                b_ax[j].plot(x, _num(line, "gbs"), **style)
            roof = _num(part, "ceiling_copy_gbs").dropna()
            if not roof.empty:
                b_ax[j].axhline(roof.median(), color="#c0392b", ls="--", lw=1)
                b_ax[j].set_ylim(top=max(b_ax[j].get_ylim()[1], roof.median() * 1.4))
                b_ax[j].annotate(
                    f"measured copy {roof.median():,.3g} GB/s",
                    (0.98, roof.median()),
                    xycoords=("axes fraction", "data"),
                    ha="right",
                    va="bottom",
                    fontsize="x-small",
                    color="#c0392b",
                    bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1},
                )
            t_ax[j].set_title(f"{title}: {op}", fontsize="medium")
            t_ax[j].set_ylabel("time per grouped GEMM (ms)")
            b_ax[j].set_ylabel("achieved bandwidth (GB/s)")
            b_ax[j].set_xlabel("tokens per expert")
            for ax, col in ((t_ax[j], "time_ms"), (b_ax[j], "gbs")):
                _log_axes(ax, x_base=2, y=_positive(_num(part, col)))
                ax.grid(alpha=0.3, which="both")
        handles = [
            Line2D([], [], color=s["color"], marker=s["marker"], label=_short_runner(r))
            for r, s in styles.items()
        ]
        if (rows["routing"].astype(str) == "zipf").any():
            handles.append(Line2D([], [], color="#333333", ls="--", label="zipf routing"))
        t_ax[-1].legend(
            handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize="small"
        )
    fig.set_layout_engine("constrained")
    return fig


def decode_roofline(decode: pd.DataFrame) -> Figure:
    """Return the measured roofline per facet of at most eight runners (see runner_facets), with
    every timed decode GEMM on it.

    The roof is min(measured matmul peak, measured copy bandwidth x intensity). Tokens per
    expert label the top axis, once per gate_up point, so no two labels share a place.
    """
    ok = _ok(decode)
    need = {"intensity", "tflops", "ceiling_copy_gbs", "ceiling_matmul_tflops", "dtype"}
    if ok.empty or not need <= set(ok.columns):
        return empty("no decode measurements to place on a roofline", "Roofline")
    ok = ok[ok["routing"].astype(str) == "uniform"] if "routing" in ok else ok
    facets = runner_facets(ok)
    ncols = min(2, len(facets))
    nrows = math.ceil(len(facets) / ncols)
    fig = Figure(figsize=(7.2 * ncols, 5.4 * nrows))
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, (title, runners) in zip(axes, facets, strict=False):
        dtype = title.split(",")[0]
        part = ok[(ok["dtype"].astype(str) == dtype) & ok["runner"].astype(str).isin(runners)]
        styles = _runner_styles(runners)
        bw = _num(part, "ceiling_copy_gbs").median()
        peak = _num(part, "ceiling_matmul_tflops").median()
        inten = _num(part, "intensity").dropna()
        if not (math.isnan(bw) or math.isnan(peak)) and not inten.empty:
            ridge = peak * 1e3 / bw
            xs = np.geomspace(min(inten.min(), ridge) / 4, max(inten.max(), ridge) * 4, 200)
            ax.plot(xs, np.minimum(peak, bw * xs / 1e3), color="#c0392b", lw=2)
            ax.text(  # top left lies above the roof, where no point can be
                0.02,
                0.98,
                f"ridge {ridge:,.1f} FLOP/B\n{bw:,.0f} GB/s, {peak:,.3g} TFLOPS",
                transform=ax.transAxes,
                va="top",
                fontsize="x-small",
                color="#c0392b",
            )
        for (runner, op), pts in part.groupby(["runner", "op"], sort=True):
            ax.plot(
                _num(pts, "intensity"),
                _num(pts, "tflops"),
                ls="",
                color=styles[runner]["color"],
                marker="o" if op == "gate_up" else "s",
                ms=5,
                alpha=0.85,
            )
        _log_axes(ax, y=_positive(_num(part, "tflops")))
        ax.set_xlabel("arithmetic intensity (FLOP/byte)")
        ax.set_ylabel("achieved TFLOPS")
        ax.set_title(f"{title}: measured roofline", fontsize="medium")
        ax.grid(alpha=0.3, which="both")
        gate_up = part[part["op"].astype(str) == "gate_up"]
        ticks = gate_up.groupby("tokens_per_expert")["intensity"].median().dropna()
        ticks = ticks[ticks > 0]
        if not ticks.empty:
            top = ax.twiny()
            top.set_xscale("log")
            top.set_xlim(ax.get_xlim())
            top.set_xticks(ticks.to_numpy(float), [str(_int(v)) for v in ticks.index])
            top.xaxis.set_minor_formatter(NullFormatter())
            top.tick_params(labelsize="x-small")
            top.set_xlabel("tokens per expert (gate_up)", fontsize="small")
        handles = [
            Line2D([], [], color=s["color"], marker="o", ls="", label=_short_runner(r))
            for r, s in styles.items()
        ]
        handles += [
            Line2D([], [], color="#333333", marker="o", ls="", label="gate_up"),
            Line2D([], [], color="#333333", marker="s", ls="", label="down"),
            Line2D([], [], color="#c0392b", lw=2, label="measured roof"),
        ]
        ax.legend(handles=handles, loc="lower right", fontsize="x-small")
    for ax in axes[len(facets) :]:
        ax.axis("off")
    fig.set_layout_engine("constrained")
    return fig


def collective_bandwidth(collective: pd.DataFrame, floors: pd.DataFrame | None = None) -> Figure:
    """Return bus bandwidth and time against message size per collective and group.

    `floors` (collective, group, floor_ms) draws each latency floor as a dotted line.
    """
    ok = _ok(collective)
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
        name = " ".join(str(_int(k)) if j != 1 else f"x{_int(k)}" for j, k in enumerate(key))
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
                & (_num(floors, "group") == float(key[1]))
            ]
            if not hit.empty and hit["floor_ms"].iloc[0] > 0:
                ax_t.axhline(hit["floor_ms"].iloc[0], color=color, ls=":", lw=1)
    for ax in (ax_bw, ax_t):
        _log_axes(ax, x_base=2, y=True)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: _size(v)))
        ax.set_xlabel("message size (bytes)")
        ax.grid(alpha=0.3, which="both")
    ax_bw.set_ylabel("bus bandwidth (GB/s)")
    ax_t.set_ylabel("time (ms), p10..p90; dotted: latency floor")
    ax_bw.legend(fontsize="small")
    fig.set_layout_engine("constrained")
    return fig


def verdict_split(verdict: pd.DataFrame) -> Figure:
    """Return stacked bars of each layout's step split (memory, math, communication, other) in
    ms per output token, one panel per batch; a layout that does not fit is marked, not drawn."""
    shares = [c for c in SHARE_COLORS if c in verdict]
    if verdict.empty or not shares or "layout" not in verdict or "batch" not in verdict:
        return empty("no verdict rows", "Verdict")
    batches = sorted(pd.unique(_num(verdict, "batch").dropna()))
    layouts = list(dict.fromkeys(verdict["layout"].astype(str)))
    ncols = min(3, len(batches))
    nrows = math.ceil(len(batches) / ncols)
    width = min(4.2, max(3.2, 0.45 * len(layouts) + 1.2))
    fig = Figure(figsize=(width * ncols, 3.2 * nrows + 0.8))
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, batch in zip(axes, batches, strict=False):
        part = verdict[_num(verdict, "batch") == batch]
        pos = {name: i for i, name in enumerate(layouts)}
        x = np.array([pos[str(n)] for n in part["layout"]], dtype=float)
        bottom = np.zeros(len(part))
        for col in shares:
            vals = _num(part, col).fillna(0).to_numpy()
            ax.bar(x, vals, 0.75, bottom=bottom, color=SHARE_COLORS[col], linewidth=0)
            bottom += vals
        top = max(bottom.max() if len(bottom) else 0.0, 1e-9)
        for xi, rec in zip(x, part.to_dict("records"), strict=True):
            if rec.get("fits_memory") == "no":
                ax.text(xi, 0.02 * top, "does not fit", rotation=90, ha="center", va="bottom",
                        fontsize="x-small", color="#a00000")  # fmt: skip
        ax.set_xticks(range(len(layouts)), layouts, rotation=45, ha="right", fontsize="small")
        ax.set_title(f"batch {_int(batch)} (concurrent sequences)", fontsize="medium")
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
        b = _num(part, "batch")
        ax.fill_between(b, _num(part, "measured_p10_ms"), _num(part, "measured_p90_ms"),
                        color="#999999", alpha=0.3, label="measured p10..p90")  # fmt: skip
        ax.plot(b, _num(part, "measured_ms"), "k-o", ms=3, label="measured (median)")
        ax.plot(b, _num(part, "composed_ms"), "-s", color="#4878d0", ms=3, label="composed")
        ax.plot(b, _num(part, "roofline_ms"), ":", color="#ee854a", label="roofline only")
        held = bool(part["held_out"].iloc[0]) if "held_out" in part else True
        ax.set_title(f"{layout}{' (held out)' if held else ' (calibration)'}", fontsize="medium")
        _log_axes(ax, x_base=2)
        ax.set_xlabel("batch (sequences)")
        ax.set_ylabel("ms per step")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=4, fontsize="small")
    fig.set_layout_engine("constrained")
    return fig


def _size(n: float) -> str:
    """Return a byte count as a short label: 512, 4K, 1M, 64M, 2G."""
    for unit, scale in (("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if n >= scale:
            return f"{n / scale:g}{unit}"
    return f"{n:g}"


def compare_ratios(changes: pd.DataFrame, top: int = 30) -> Figure:
    """Return B/A ratios per compared value, one panel per table; beyond-noise points in red.

    Each panel shows the `top` values that moved most. `changes` has columns table, label,
    metric, ratio and beyond (see tilesweep.compare).
    """
    if changes.empty or "ratio" not in changes:
        return empty("nothing numeric to compare", "B / A")
    ratio = _num(changes, "ratio")
    numeric = changes[np.isfinite(ratio) & (ratio > 0)].copy()
    if numeric.empty:
        return empty("nothing numeric to compare", "B / A")
    numeric["_size"] = np.abs(np.log(_num(numeric, "ratio")))
    tables = list(dict.fromkeys(numeric["table"].astype(str)))
    shown = {
        t: numeric[numeric["table"].astype(str) == t].nlargest(top, "_size").reset_index(drop=True)
        for t in tables
    }
    heights = [max(1.6, 0.22 * len(shown[t]) + 0.9) for t in tables]
    fig = Figure(figsize=(9, sum(heights)))
    axes = fig.subplots(len(tables), 1, squeeze=False, height_ratios=heights)[:, 0]
    for ax, table in zip(axes, tables, strict=True):
        part = shown[table]
        total = int((numeric["table"].astype(str) == table).sum())
        y = np.arange(len(part))
        beyond = part["beyond"].astype(bool).to_numpy()
        colors = np.where(beyond, "#c0392b", "#8a8a8a")
        ax.scatter(_num(part, "ratio"), y, c=colors, s=14, zorder=3)
        ax.axvline(1.0, color="black", lw=0.8)
        labels = (part["label"].astype(str) + "  " + part["metric"].astype(str)).tolist()
        ax.set_yticks(y, labels, fontsize=6)
        ax.invert_yaxis()
        _log_axes(ax, y=False)
        title = f"{table}: B / A, the {len(part)} largest moves of {total} (red: beyond noise)"
        ax.set_title(title, fontsize="medium", loc="left")
        ax.grid(axis="x", alpha=0.3, which="both")
    fig.set_layout_engine("constrained")
    return fig
