"""The sections that weigh the question's own readings: the power section and the question's
panel (its layouts, the winner per batch, what would change it, and its tiles' launch truth)."""

from __future__ import annotations

import pandas as pd

from tilesweep.report.analysis import verdict_pivot
from tilesweep.report.document import Block, Bullets, Table, Text
from tilesweep.tables import REPORT_POWER_COLUMNS, WINNER_COLUMNS


def power_blocks(power: pd.DataFrame) -> list[Block]:
    """Return the power section's blocks: each load's draw against the limit, and what the
    brief's 39% of the limit is consistent with."""
    from tilesweep.stages.power import BRIEF_POWER_FRAC, brief_consistency

    blocks: list[Block] = [
        Text(
            "Loads of known bound, each sustained for a few seconds on the device at hand "
            "under NVML sampling: the fraction of the enforced power limit they draw (p10, "
            "median, p90). The brief read about 235 W of 600 W "
            f"({BRIEF_POWER_FRAC:.0%}) during decode and took it to mean 'not "
            "communication-bound'."
        ),
        Table(power, REPORT_POWER_COLUMNS, empty="(no power table)"),
    ]
    judged = brief_consistency(power)
    if not judged.empty:
        blocks.append(
            Table(
                judged,
                title=f"Which bounds draw {BRIEF_POWER_FRAC:.0%} of the limit here",
                note="Consistent: the brief's fraction lies inside the load's p10..p90 band on "
                "this device. A fraction of the limit on another GPU is a lead, not proof.",
            )
        )
    return blocks


def question_blocks(panel: dict, launch: pd.DataFrame, power: pd.DataFrame) -> list[Block]:
    """Return the brief's panel: its 8-GPU layouts, the winner per batch, what would change
    the answer, what power can tell, and the SM120 launch truth of its tiles."""
    from tilesweep.plan.sensitivity import changes

    rows = panel["rows"]
    sources = ", ".join(sorted(rows["source"].astype(str).unique())) if len(rows) else "none"
    blocks: list[Block] = [
        Text(
            "GLM-5 in the deployment's format on eight RTX PRO 6000 over PCIe: TP8, TP4+PP2 "
            f"and EP8 at each batch, composed (sources: {sources}); inputs and their sources "
            "are in the verdict section."
        ),
        Table(verdict_pivot(rows), title="Bound and speed per layout and batch", style="verdict"),
        Table(panel["winners"], WINNER_COLUMNS, title="Which layout wins, and by how much"),
        Bullets(changes(panel["band"], panel["winners"])),
        Table(
            panel["band"],
            title="Each interconnect and bandwidth input at half and at double",
            collapsed=True,
        ),
    ]
    truth = sm120_launch_truth(launch)
    if not truth.empty:
        blocks.append(
            Table(
                truth,
                title="The brief's tiles on SM120 (NVFP4): which reproduce its initialize failure",
                note="From CUTLASS's own types (SharedStorageSize) against the RTX PRO 6000's "
                "101,376 B opt-in limit: a tile over it passes can_implement and fails "
                "initialize, as the brief saw.",
            )
        )
    from tilesweep.stages.power import brief_consistency

    judged = brief_consistency(power)
    if not judged.empty:
        blocks.append(
            Bullets(
                [
                    f"{r['load']} ({r['expected_bound']}): {r['consistent']}."
                    for r in judged.to_dict("records")
                ]
            )
        )
    return blocks


SM120_BRIEF_TILES = {(128, 128, 128), (128, 128, 256), (128, 256, 128), (256, 128, 128)}


def sm120_launch_truth(launch: pd.DataFrame) -> pd.DataFrame:
    """Return the brief's four tiles on the RTX PRO 6000 (CUTLASS NVFP4): epilogue, stage
    count asked and chosen, shared memory, limit, and whether it reproduces the brief's
    initialize failure (over the opt-in limit)."""
    need = {"backend", "target", "tile_m", "tile_n", "tile_k", "smem_bytes", "fits"}
    if launch.empty or not need <= set(launch):
        return pd.DataFrame()
    rows = launch[(launch["backend"] == "cutlass") & (launch["target"] == "rtx_pro_6000")]
    tiles = list(zip(rows["tile_m"], rows["tile_n"], rows["tile_k"], strict=True))
    rows = rows[[tuple(int(v) for v in tile) in SM120_BRIEF_TILES for tile in tiles]]
    if rows.empty:
        return pd.DataFrame()
    out = rows.assign(
        tile=[
            f"{m}x{n}x{k}"
            for m, n, k in zip(rows["tile_m"], rows["tile_n"], rows["tile_k"], strict=True)
        ],
        reproduces_brief_failure=[
            "yes: over the opt-in limit"
            if f == "no"
            else ("no" if f in ("default", "optin") else f"unknown ({s})")
            for f, s in zip(rows["fits"], rows["status"], strict=True)
        ],
    )
    cols = [
        "tile", "dtype", "epilogue", "stages_requested", "stages", "smem_bytes",
        "smem_limit_bytes", "overshoot_bytes", "fits", "reproduces_brief_failure", "reason",
    ]  # fmt: skip
    return (
        out[[c for c in cols if c in out]].sort_values(["tile", "epilogue"]).reset_index(drop=True)
    )
