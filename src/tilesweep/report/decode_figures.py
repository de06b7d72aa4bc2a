"""The decode figures: time and bandwidth against tokens per expert, and the measured roofline;
one block per dtype of at most MAX_SERIES runners (the rest in the decode table)."""

import math

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FixedLocator, NullFormatter

from tilesweep import backends
from tilesweep.answer_picks import numeric
from tilesweep.report import plotting as plot
from tilesweep.report.analysis import short_runner
from tilesweep.report.document import TEXTS
from tilesweep.report.formatting import plural

ROOF_COLOR = "#c0392b"
ROOF_TEXT = {"fontsize": plot.TEXT_PT, "color": ROOF_COLOR}
# The measured ceilings a roof is drawn from: what each is called, and its unit.
CEILINGS = {
    "ceiling_copy_gbs": ("copy bandwidth", "GB/s"),
    "ceiling_matmul_tflops": ("matmul peak", "TFLOPS"),
}
# The torch baselines' colours and markers, in order (the kernels take tab10's colours).
GREYS = ("#000000", "#666666", "#999999", "#bbbbbb")
# A point of the decode sweep: the runners compared there are timed on the same problem.
POINT = ["op", "routing", "tokens_per_expert"]


def _is_baseline(runner: str) -> bool:
    return backends.runner_kind(runner) == "baseline"


def _runner_styles(runners: list[str]) -> dict[str, dict]:
    """Return a colour and marker per runner: kernels in colour, torch baselines in greys."""
    tiles = [r for r in runners if not _is_baseline(r)]
    bases = [r for r in runners if _is_baseline(r)]
    cmap = colormaps["tab10"]
    styles = {r: {"color": cmap(i % cmap.N), "marker": "o"} for i, r in enumerate(tiles)}
    colors, markers = plot.cycled(bases, GREYS), plot.cycled(bases, "s^vP")
    styles |= {r: {"color": colors[r], "marker": markers[r]} for r in bases}
    return {r: styles[r] for r in runners}


def _label(runner: str, dtype: str) -> str:
    short = short_runner(runner)
    return short.removeprefix(f"{dtype}-") if short != runner else short


def rank_runners(rows: pd.DataFrame) -> list[str]:
    """Return the runners of timed decode rows, best first (fastest at most points, then median)."""
    timed = rows[numeric(rows, "time_ms") > 0]
    if timed.empty:
        return []
    keys = [k for k in POINT if k in timed]
    time = numeric(timed, "time_ms")
    best = time.groupby([timed[k] for k in keys]).transform("min") if keys else time.min()
    score = pd.DataFrame(
        {"runner": timed["runner"].astype(str), "ratio": time / best, "won": time == best}
    )
    per = score.groupby("runner").agg(won=("won", "sum"), ratio=("ratio", "median"))
    return per.sort_values(["won", "ratio"], ascending=[False, True]).index.tolist()


def shown_runners(rows: pd.DataFrame) -> tuple[list[str], list[str]]:
    """Return (shown, left out) runners of a dtype's rows: the fastest baseline always shown."""
    ranked = rank_runners(rows)
    baselines = [r for r in ranked if _is_baseline(r)]
    return plot.top_series(ranked, plot.MAX_SERIES, keep=baselines[:1])


def _selection(shown: list[str], left: list[str]) -> str:
    """Return the legend title that says which runners a block shows and where the rest are."""
    if not left:
        return f"all {plural(len(shown), 'runner')} timed"
    baseline = ", and the fastest torch baseline" if any(map(_is_baseline, shown)) else ""
    said = TEXTS["runners_shown"].format(
        shown=len(shown), timed=len(shown) + len(left), baseline=baseline
    )
    return f"{said}\nthe other {len(left)} {'is' if len(left) == 1 else 'are'} in the decode table"


def _num(value: float) -> str:
    """Return a measured figure for a label: 4,220 or 24 or 0.000954."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _ceiling(rows: pd.DataFrame, col: str, achieved: pd.Series) -> tuple[float, str]:
    """Return (a measured ceiling, ''), or (NaN, the gap's note) if missing or a run beat it."""
    value = numeric(rows, col).dropna().median()
    name, unit = CEILINGS[col]
    if math.isnan(value):
        return math.nan, f"no measured {name}: no roof drawn"
    top = achieved.max()
    if not math.isnan(top) and top > value:
        said = {"name": name, "value": _num(value), "unit": unit, "top": _num(top)}
        return math.nan, TEXTS["ceiling_below"].format(**said)
    return value, ""


def _columns(rows: pd.DataFrame) -> list[tuple[str, str]]:
    """Return the (op, routing) panels of a dtype's rows, ops outer, routings as timed."""
    ops = list(dict.fromkeys(rows["op"].astype(str)))
    routings = sorted(dict.fromkeys(rows["routing"].astype(str)), key=lambda r: (r != "uniform", r))
    have = set(zip(rows["op"].astype(str), rows["routing"].astype(str), strict=True))
    return [(op, r) for op in ops for r in routings if (op, r) in have]


def _by_dtype(ok: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """Return (dtype, its rows) in table order; ('?', every row) without a dtype column."""
    if "dtype" not in ok:
        return [("?", ok)]
    dtype = ok["dtype"].astype(str)
    return [(d, ok[dtype == d]) for d in dict.fromkeys(dtype)]


def _dtype_blocks(ok: pd.DataFrame, block_height_in: float, draw) -> Figure:
    blocks = _by_dtype(ok)
    fig = Figure(figsize=(plot.PAGE_WIDTH_IN, block_height_in * len(blocks)))
    subs = fig.subfigures(len(blocks), 1, squeeze=False)[:, 0]
    for sub, (dtype, rows) in zip(subs, blocks, strict=True):
        draw(sub, rows, dtype)
    return plot.finish(fig)


def _handles(styles: dict[str, dict], dtype: str, **line) -> list[Line2D]:
    return [
        Line2D([], [], color=s["color"], marker=s["marker"], label=_label(r, dtype), **line)
        for r, s in styles.items()
    ]


def _block_legend(sub, title: str, handles: list, notes: list[str], ncols: int) -> None:
    sub.suptitle(title, fontsize=plot.TEXT_PT + 4, x=0.01, ha="left")
    plot.legend_below(sub, handles, notes, ncols=ncols)


def _tpe_ticks(ax, values: pd.Series) -> None:
    """Label the tokens-per-expert axis at every other timed value, so labels never touch."""
    ticks = sorted(v for v in pd.unique(values.dropna()) if v > 0)
    if ticks:
        ax.xaxis.set_major_locator(FixedLocator(ticks[::2] if len(ticks) > 5 else ticks))
        ax.xaxis.set_minor_locator(FixedLocator(ticks))
        ax.xaxis.set_minor_formatter(NullFormatter())


def decode_time(decode: pd.DataFrame) -> Figure:
    """Return time and achieved bandwidth against tokens per expert: a block per dtype."""
    ok = plot.ok_or_all(decode)
    if ok.empty or "time_ms" not in ok or "op" not in ok:
        return plot.empty("no decode measurements (nothing timed on this device)", "Decode")
    if "routing" not in ok:
        return plot.empty("decode rows without a routing column", "Decode")
    ok = ok[numeric(ok, "time_ms") > 0]
    if ok.empty:
        return plot.empty("no decode row has a time", "Decode")
    return _dtype_blocks(ok, 6.4, _time_block)


def decode_time_caption(decode: pd.DataFrame) -> str:
    """Return decode_time's caption from what its panels draw."""
    ok = plot.ok_or_all(decode)
    if ok.empty or not {"time_ms", "op", "routing"} <= set(ok.columns):
        return "No decode measurement to draw."
    ok = ok[numeric(ok, "time_ms") > 0]
    lines, missing = [], []
    for dtype, rows in _by_dtype(ok):
        copy, gap = _ceiling(rows, "ceiling_copy_gbs", numeric(rows, "gbs"))
        if not (numeric(rows, "gbs") > 0).any():
            missing.append(f"{dtype} panels: its rows carry no bytes moved")
        elif math.isnan(copy):
            missing.append(f"{dtype} panels: {gap}")
        else:
            lines.append(dtype)
    text = TEXTS["decode_time_caption"]
    if lines:
        text += f" Dashed red: the measured copy bandwidth, on the {', '.join(lines)} panels."
    if missing:
        text += " No copy-bandwidth line on " + "; ".join(f"the {m}" for m in missing) + "."
    return text


def _time_block(sub, rows: pd.DataFrame, dtype: str) -> None:
    """Draw one dtype's time and bandwidth panels, and its legend, on a subfigure."""
    shown, left = shown_runners(rows)
    styles = _runner_styles(shown)
    columns = _columns(rows)
    axes = sub.subplots(2, len(columns), squeeze=False, sharex=True, sharey="row")
    copy, gap = _ceiling(rows, "ceiling_copy_gbs", numeric(rows, "gbs"))
    has_gbs = bool((numeric(rows, "gbs") > 0).any())
    for j, (op, routing) in enumerate(columns):
        t_ax, b_ax = axes[0, j], axes[1, j]
        part = rows[(rows["op"].astype(str) == op) & (rows["routing"].astype(str) == routing)]
        plot.log_axes(t_ax, x_base=2)
        plot.log_axes(b_ax, x_base=2, y=has_gbs)
        for runner in shown:
            line = part[part["runner"].astype(str) == runner].sort_values("tokens_per_expert")
            if line.empty:
                continue
            style = dict(styles[runner], ms=4, label=_label(runner, dtype))
            x, tm = numeric(line, "tokens_per_expert"), numeric(line, "time_ms")
            lo, hi = numeric(line, "time_p10_ms"), numeric(line, "time_p90_ms")
            err = np.vstack([(tm - lo).clip(lower=0).fillna(0), (hi - tm).clip(lower=0).fillna(0)])
            t_ax.errorbar(x, tm, yerr=err, capsize=2, **style)  # p10..p90 bars
            if has_gbs:
                b_ax.plot(x, numeric(line, "gbs"), **style)
        if has_gbs and not math.isnan(copy):
            plot.reference(b_ax.axhline(copy, color=ROOF_COLOR, ls="--", lw=1))
            if j == 0:
                where = {"xycoords": ("axes fraction", "data"), "va": "bottom", **ROOF_TEXT}
                b_ax.annotate(f"measured copy {_num(copy)} GB/s", (0.02, copy), **where)
        t_ax.set_title(f"{op}, {routing} routing", fontsize=plot.TEXT_PT + 2)
        b_ax.set_xlabel("tokens per expert")
        _tpe_ticks(b_ax, numeric(rows, "tokens_per_expert"))
        for ax in (t_ax, b_ax):
            ax.grid(alpha=0.3, which="both")
        if not has_gbs:
            plot.say(b_ax, "no bandwidth: these rows carry no bytes moved")
    if has_gbs and not math.isnan(copy):
        axes[1, 0].set_ylim(top=max(axes[1, 0].get_ylim()[1], copy * 1.3))
    axes[0, 0].set_ylabel("time per grouped GEMM (ms)")
    axes[1, 0].set_ylabel("achieved bandwidth (GB/s)")
    notes = [_selection(shown, left), *([gap] if gap and has_gbs else [])]
    _block_legend(sub, dtype, _handles(styles, dtype), notes, 3)


def decode_roofline(decode: pd.DataFrame) -> Figure:
    """Return the measured roofline per dtype and op, with decode_time's runners on it."""
    ok = plot.ok_or_all(decode)
    need = {"intensity", "tflops", "ceiling_copy_gbs", "ceiling_matmul_tflops", "dtype", "op"}
    if ok.empty or not need <= set(ok.columns):
        return plot.empty("no decode measurements to place on a roofline", "Roofline")
    ok = ok[(numeric(ok, "tflops") > 0) & (numeric(ok, "intensity") > 0)]
    if ok.empty:
        return plot.empty("no decode row has a FLOP rate and an intensity", "Roofline")
    return _dtype_blocks(ok, 5.6, _roofline_block)


def _roof(rows: pd.DataFrame) -> tuple:
    """Return (intensities, roof TFLOPS, (copy GB/s, gap), (matmul TFLOPS, gap))."""
    inten = numeric(rows, "intensity")
    implied_gbs = numeric(rows, "tflops") * 1e3 / inten
    bw, bw_gap = _ceiling(rows, "ceiling_copy_gbs", implied_gbs)
    peak, peak_gap = _ceiling(rows, "ceiling_matmul_tflops", numeric(rows, "tflops"))
    lo, hi = inten.min(), inten.max()
    if not (math.isnan(bw) or math.isnan(peak)):
        ridge = peak * 1e3 / bw
        lo, hi = min(lo, ridge), max(hi, ridge)
    xs = np.geomspace(lo / 4, hi * 4, 200)
    roof = np.fmin(np.full_like(xs, peak), bw * xs / 1e3)  # a missing ceiling binds nowhere
    return xs, roof, (bw, bw_gap), (peak, peak_gap)


def _tokens_axis(ax, part: pd.DataFrame) -> None:
    ticks = part.groupby("tokens_per_expert")["intensity"].median().dropna()
    ticks = ticks[ticks > 0]
    if ticks.empty:
        return
    top = ax.twiny()
    top.set_xscale("log")
    top.set_xlim(ax.get_xlim())
    every = ticks.iloc[::2] if len(ticks) > 5 else ticks
    top.set_xticks(every.to_numpy(float), [str(plot.whole(v)) for v in every.index])
    top.xaxis.set_minor_formatter(NullFormatter())
    top.tick_params(labelsize=plot.TEXT_PT + 1)
    top.set_xlabel("tokens per expert", fontsize=plot.TEXT_PT + 1)


def _roofline_block(sub, rows: pd.DataFrame, dtype: str) -> None:
    """Draw one dtype's roofline panels, one per op, and its legend, on a subfigure."""
    shown, left = shown_runners(rows)
    styles = _runner_styles(shown)
    uniform = rows[rows["routing"].astype(str) == "uniform"] if "routing" in rows else rows
    uniform = uniform if not uniform.empty else rows
    ops = list(dict.fromkeys(uniform["op"].astype(str)))
    axes = sub.subplots(1, len(ops), squeeze=False, sharex=True, sharey=True)[0]
    xs, roof, (bw, bw_gap), (peak, peak_gap) = _roof(rows)
    for ax, op in zip(axes, ops, strict=True):
        part = uniform[uniform["op"].astype(str) == op]
        plot.log_axes(ax)
        if np.isfinite(roof).any():
            plot.reference(ax.plot(xs, roof, color=ROOF_COLOR, lw=2)[0])
        for runner in shown:
            pts = part[part["runner"].astype(str) == runner]
            style = dict(styles[runner], ls="", ms=6, alpha=0.85, label=_label(runner, dtype))
            if not pts.empty:
                ax.plot(numeric(pts, "intensity"), numeric(pts, "tflops"), **style)
        ax.set_xlabel("arithmetic intensity (FLOP/byte)")
        ax.set_title(f"{op}, uniform routing", fontsize=plot.TEXT_PT + 2)
        ax.grid(alpha=0.3, which="both")
        _tokens_axis(ax, part)
    axes[0].set_ylabel("achieved TFLOPS")
    if not (math.isnan(bw) or math.isnan(peak)):
        ridge = f"ridge {peak * 1e3 / bw:,.1f} FLOP/B\n{_num(bw)} GB/s, {_num(peak)} TFLOPS"
        # top left lies above the roof, where no point can be
        axes[0].text(0.02, 0.98, ridge, transform=axes[0].transAxes, va="top", **ROOF_TEXT)
    handles = _handles(styles, dtype, ls="")
    if np.isfinite(roof).any():
        what = {
            (True, True): "measured roof",
            (True, False): "measured copy bandwidth only",
            (False, True): "measured matmul peak only",
        }[(not math.isnan(bw), not math.isnan(peak))]
        handles.append(Line2D([], [], color=ROOF_COLOR, lw=2, label=what))
    notes = [_selection(shown, left), *(g for g in (bw_gap, peak_gap) if g)]
    _block_legend(sub, f"{dtype}: measured roofline", handles, notes, 4)
