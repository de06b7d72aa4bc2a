"""The fused-MoE package's report sections: its kernel's tuning and the drop-in engine files."""

from __future__ import annotations

import pandas as pd

from tilesweep import package_data
from tilesweep.columns import REPORT_DROPIN_COLUMNS, TUNE_TARGET_COLUMNS, TUNE_TOP_COLUMNS, Status
from tilesweep.fused_moe.tune_analysis import tune_summary, tune_targets
from tilesweep.report.document import Block, Figure, Table, Text
from tilesweep.report.formatting import plural

# Its sections, after the decode section: key, title, the navigation's short name.
SECTIONS = (
    ("tune", "The project's fused-MoE kernel tuned in the engines' conditions", "Tuning"),
    ("dropins", "Files to drop into vLLM and SGLang", "Drop-ins"),
)


def _tune_speedup(tables: dict[str, pd.DataFrame]):
    """Return the tuning figure (tune_figure.tune_speedup)."""
    # matplotlib: loaded when a figure is drawn, not by every Snakefile read that lists figures
    from tilesweep.fused_moe.tune_figure import tune_speedup

    return tune_speedup(tables)


# The package data this module reads (rerun_keys.code_hash hashes it with the module): the
# section's fixed texts and its figure's.
DATA_FILES = ("fused_moe/data/report_texts.yaml",)
TEXTS = package_data.data_typed("tilesweep", DATA_FILES[0], None, dict[str, str])
# Its figure: category in `snakemake --report`, alt text, caption and how it is drawn.
FIGURES = {
    "tune_speedup": ("Tuning", TEXTS["figure_alt"], TEXTS["figure_caption"], _tune_speedup),
}
# The tuning section's short table: the batches the tuned config gains most on.
TOP_ROWS = 8


def report_sections(tables: dict[str, pd.DataFrame]) -> list[tuple[str, str, str, list[Block]]]:
    """Return its sections (key, title, short name, blocks) from the tune and dropins tables."""
    empty = pd.DataFrame()
    blocks = {
        "tune": tune_blocks(tables.get("tune", empty)),
        "dropins": dropin_blocks(tables.get("dropins", empty)),
    }
    return [(key, title, short, blocks[key]) for key, title, short in SECTIONS]


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
    blocks: list[Block] = [
        Text(TEXTS["tune_intro"]),
        Table(
            tune_targets(summary),
            TUNE_TARGET_COLUMNS,
            title="Against the tuning targets, per problem and routing",
            note=TEXTS["targets_note"],
        ),
        Figure(
            "tune_speedup", text=FIGURES["tune_speedup"][2], alt_text=FIGURES["tune_speedup"][1]
        ),
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
