"""The fused-MoE package's report sections: its kernel's tuning (the tuned config per batch, the
targets, the figure) and the drop-in engine files."""

import numpy as np
import pandas as pd

from tilesweep import backends, package_data
from tilesweep.answer_picks import numeric
from tilesweep.columns import (
    REPORT_DROPIN_COLUMNS,
    TUNE_SUMMARY_COLUMNS,
    TUNE_TARGET_COLUMNS,
    TUNE_TOP_COLUMNS,
    Status,
)
from tilesweep.report.document import Block, Figure, Table, Text
from tilesweep.report.formatting import plural

# Its sections, after the decode section: key, title, the navigation's short name.
SECTIONS = (
    ("tune", "The project's fused-MoE kernel tuned in the engines' conditions", "Tuning"),
    ("dropins", "Files to drop into vLLM and SGLang", "Drop-ins"),
)
# The section's fixed texts and its figure's.
DATA_FILES = ("fused_moe/data/report_texts.yaml",)
TEXTS = package_data.data_typed("tilesweep", DATA_FILES[0], None, dict[str, str])
# The tuning section's short table: the batches the tuned config gains most on.
TOP_ROWS = 8

# What each panel draws: the column, its label and colour.
RATIOS = (
    ("x_vllm", "x vLLM default config", "#4878d0"),
    ("x_torch", "x torch grouped GEMM", "#ee854a"),
)
LINE = {"marker": "o", "ms": 3, "lw": 1.2}
ROUTING_STYLES = ("-", "--", ":", "-.")
PANELS_PER_ROW = 2


def report_sections(tables: dict[str, pd.DataFrame]) -> list[tuple[str, str, str, list[Block]]]:
    """Return its sections (key, title, short name, blocks) from the tune and dropins tables."""
    empty, blocks = pd.DataFrame(), {"tune": tune_blocks, "dropins": dropin_blocks}
    return [(k, title, short, blocks[k](tables.get(k, empty))) for k, title, short in SECTIONS]


def dropin_blocks(dropins: pd.DataFrame) -> list[Block]:
    """Return the drop-in files' blocks: each file with its held-out ratios, else why none."""
    if dropins.empty:
        return [Text(TEXTS["no_dropins"])]
    done = dropins[dropins["status"] == "exported"] if "status" in dropins else dropins
    lowest = pd.to_numeric(done.get("worst_x_baseline"), errors="coerce").min()
    return [
        Text(TEXTS["dropins_intro"].format(exported=len(done), files=len(dropins), lowest=lowest)),
        Table(dropins, [c for c in REPORT_DROPIN_COLUMNS if c in dropins]),
    ]


def tune_blocks(tune: pd.DataFrame) -> list[Block]:
    """Return the tuning section's blocks: tuned config against each default and torch."""
    if tune.empty:
        return [Text(TEXTS["untuned"])]
    summary = tune_summary(tune)
    failed = tune[tune["status"] != Status.OK].groupby(["dtype", "source", "status"]).size()
    _, alt, caption, _ = FIGURES["tune_speedup"]
    blocks: list[Block] = [
        Text(TEXTS["tune_intro"]),
        Table(
            tune_targets(summary),
            TUNE_TARGET_COLUMNS,
            title="Against the tuning targets, per problem and routing",
            note=TEXTS["targets_note"],
        ),
        Figure("tune_speedup", text=caption, alt_text=alt),
        Table(
            summary.sort_values("x_vllm", ascending=False).head(TOP_ROWS),
            TUNE_TOP_COLUMNS,
            title=f"The {plural(min(TOP_ROWS, len(summary)), 'batch', 'batches')} the tuned "
            f"config gains most on over the vLLM default, of {len(summary)} tuned (not "
            "exported; every batch is in the figure and the tune table)",
            empty="(none)",
        ),
    ]
    if len(failed):
        frame = failed.rename("rows").reset_index()
        title = "Rows without a time"
        blocks.append(Table(frame, list(frame.columns), title=title, note=TEXTS["failed_note"]))
    return blocks


def tune_targets(summary: pd.DataFrame) -> pd.DataFrame:
    """Return one row per (dtype, problem, routing) of a tune summary: its lowest figures against
    the targets (a read fraction for 1.15x above 1: no once-reading kernel gets there)."""
    keys = ["dtype", "experts", "n", "routing"]
    rows = []
    for key, group in summary.groupby(keys):
        tpe, big = group["tokens_per_expert"], group[group["m"] >= 1024]
        decode, small = group[(tpe >= 1) & (tpe <= 256)], group[tpe <= 32]
        row = {**dict(zip(keys, key, strict=True)), "x_vllm_min": group["x_vllm"].min()}
        for col in ("x_vllm", "best_x_vllm"):
            row[f"{col}_min_m1024"] = big[col].min()
        # The read fraction 1.15x over the vLLM default needs (same bytes, 1.15x less time)
        row["read_fraction_for_1_15x_m1024"] = (big["read_fraction"] * 1.15 / big["x_vllm"]).max()
        for col in ("best_x_torch", "fastest_x_torch"):
            row[f"{col}_min_tpe_1_256"] = decode[col].min()
        for col in ("copy_fraction", "fastest_copy_fraction"):
            row[f"{col}_min_tpe_32"] = small[col].min()
            row[f"{col}_min_tpe_1_32"] = small[small["tokens_per_expert"] >= 1][col].min()
        rows.append(row)
    return pd.DataFrame(rows, columns=TUNE_TARGET_COLUMNS)


# Tune-table columns a summary carries for a picked config, and their names after its prefix
# ("" keeps the column's own name).
_BEST_COLUMNS = {"config": "config", "over_vllm_default": "x_vllm", "over_baseline": "x_torch"}


def _fastest_per_point(rows: pd.DataFrame, keys: list[str], prefix: str, columns: dict):
    """Return the fastest of `rows` per `keys` (ties: the smaller config), columns prefixed."""
    first = rows.sort_values([*keys, "time_ms", "config"]).drop_duplicates(keys)
    names = {col: prefix + (new or col) for col, new in columns.items()}
    return first[[*keys, *columns]].rename(columns=names)


def tune_summary(tune: pd.DataFrame) -> pd.DataFrame:
    """Return the tuned config per (dtype, problem, batch, routing) with its speed-ups."""
    picked = tune[(tune["tuned"] == True) & (tune["op"] == "both")]  # noqa: E712
    if picked.empty:
        return pd.DataFrame(columns=TUNE_SUMMARY_COLUMNS)
    names = {f"over_{e}_default": f"x_{e}" for e in ("vllm", "vllm_legacy", "sglang")}
    out = picked.rename(columns={**names, "over_baseline": "x_torch"})
    keys = ["dtype", "experts", "n", "routing", "m"]
    # A tuned config that is also an engine's default is timed under both names: the faster
    # row, as the pick took the faster of its times.
    out = out.sort_values([*keys, "time_ms"]).drop_duplicates(keys)
    best = tune[(tune["best"] == True) & (tune["op"] == "both")]  # noqa: E712
    out = out.merge(_fastest_per_point(best, keys, "best_", _BEST_COLUMNS), on=keys, how="left")
    # The fastest config timed at each batch and routing, of any source (the engines' space,
    # their defaults, the project's variants): the project's kernel at its best on that batch.
    ok = (tune["op"] == "both") & (tune["status"] == Status.OK) & tune["source"].ne("screen")
    timed = tune[ok & (tune["runner"].astype(str).map(backends.runner_kind) == "fused")]
    fastest = _fastest_per_point(timed, keys, "fastest_", {**_BEST_COLUMNS, "copy_fraction": ""})
    out = out.merge(fastest, on=keys, how="left")
    return out.reindex(columns=TUNE_SUMMARY_COLUMNS)


def tune_speedup(tables: dict[str, pd.DataFrame]) -> Figure:
    """Return the tuned config's speed-up against M, one panel per dtype and problem."""
    # matplotlib: loaded when a figure is drawn, not by every Snakefile read that lists figures
    from matplotlib.figure import Figure as Canvas
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter

    # matplotlib: the report's plotting module draws with it
    from tilesweep.report.plotting import PAGE_WIDTH_IN, empty, enforce_series, reference

    tune = tables.get("tune", pd.DataFrame())
    summary = tune_summary(tune) if not tune.empty else pd.DataFrame()
    if summary.empty:
        return empty("not tuned: no tuned config to draw", "Tuning")
    keys = ["dtype", "experts", "n"]
    problems = list(summary.groupby(keys, sort=True).groups)
    routings = sorted(set(summary["routing"].astype(str)))
    style = {r: ROUTING_STYLES[i % len(ROUTING_STYLES)] for i, r in enumerate(routings)}
    ncols = min(PANELS_PER_ROW, len(problems))
    nrows = -(-len(problems) // ncols)
    fig = Canvas(figsize=(PAGE_WIDTH_IN * 0.8, 3.0 * nrows + 0.6))
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False, sharey=True)).ravel()
    for ax, (dtype, experts, n) in zip(axes, problems, strict=False):
        part = summary[(summary[keys] == [dtype, experts, n]).all(axis=1)]
        for routing in routings:
            rows = part[part["routing"].astype(str) == routing].sort_values("m")
            for col, label, color in RATIOS:
                x, y = numeric(rows, "m"), numeric(rows, col)
                ax.plot(x, y, style[routing], color=color, label=f"{label}, {routing}", **LINE)
        reference(ax.axhline(1.0, color="#555555", lw=0.8))
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}"))
        ax.grid(alpha=0.3, which="both")
        ax.set_title(f"{dtype}, {experts} experts, n={n}", fontsize="medium")
        ax.set_xlabel("batch M (tokens)")
    for ax in axes[len(problems) :]:
        ax.set_visible(False)
    for ax in axes[::ncols]:
        ax.set_ylabel("their time / tuned time")
    handles = [Line2D([], [], color=c, lw=1.2, label=label) for _, label, c in RATIOS]
    handles += [Line2D([], [], color="#555555", ls=style[r], label=r) for r in routings]
    handles.append(Line2D([], [], color="#555555", lw=0.8, label="1: as fast"))
    fig.legend(
        handles=handles, loc="outside right upper", fontsize="small", title="above 1: tuned faster"
    )
    fig.set_layout_engine("constrained")
    return enforce_series(fig)


# Its figure: category in `snakemake --report`, alt text, caption and how it is drawn.
FIGURES = {"tune_speedup": ("Tuning", TEXTS["figure_alt"], TEXTS["figure_caption"], tune_speedup)}
