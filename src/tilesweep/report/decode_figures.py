"""The decode figures: time and bandwidth against tokens per expert, and the measured
roofline, in facets of at most eight runners."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import NullFormatter

from tilesweep.report.plotting import empty, floats, log_axes, ok_or_all, whole


def _runner_styles(runners: list[str]) -> dict[str, dict]:
    """Return a colour and marker per runner: kernels (Triton, CUTLASS) in colour, torch
    baselines in greys."""
    from matplotlib import colormaps

    from tilesweep import backends

    tiles = [r for r in runners if backends.runner_kind(r) != "baseline"]
    others = [r for r in runners if backends.runner_kind(r) == "baseline"]
    cmap = colormaps["tab10" if len(tiles) <= 10 else "tab20"]
    styles = {r: {"color": cmap(i % cmap.N), "marker": "o"} for i, r in enumerate(tiles)}
    greys = ["#000000", "#555555", "#999999", "#bbbbbb"]
    markers = ["s", "^", "v", "P"]
    for i, r in enumerate(others):
        styles[r] = {"color": greys[i % len(greys)], "marker": markers[i % len(markers)]}
    return styles


def _short_runner(runner: str) -> str:
    """Return a runner name without the backend prefix of grid kernels."""
    from tilesweep.report.analysis import short_runner

    return short_runner(runner)


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
    ok = ok_or_all(decode)
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
                x = floats(line, "tokens_per_expert")
                tm = floats(line, "time_ms")
                lo, hi = floats(line, "time_p10_ms"), floats(line, "time_p90_ms")
                err = np.vstack(
                    [(tm - lo).clip(lower=0).fillna(0), (hi - tm).clip(lower=0).fillna(0)]
                )
                style = dict(styles[runner], ls="--" if routing == "zipf" else "-", ms=4)
                t_ax[j].errorbar(x, tm, yerr=err, capsize=2, **style)
                b_ax[j].plot(x, floats(line, "gbs"), **style)
            roof = floats(part, "ceiling_copy_gbs").dropna()
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
                log_axes(ax, x_base=2, y=_positive(floats(part, col)))
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
    ok = ok_or_all(decode)
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
        bw = floats(part, "ceiling_copy_gbs").median()
        peak = floats(part, "ceiling_matmul_tflops").median()
        inten = floats(part, "intensity").dropna()
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
                floats(pts, "intensity"),
                floats(pts, "tflops"),
                ls="",
                color=styles[runner]["color"],
                marker="o" if op == "gate_up" else "s",
                ms=5,
                alpha=0.85,
            )
        log_axes(ax, y=_positive(floats(part, "tflops")))
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
            top.set_xticks(ticks.to_numpy(float), [str(whole(v)) for v in ticks.index])
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
