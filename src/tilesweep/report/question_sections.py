"""The sections that weigh the question's own readings (conf/question): the power section, which
sets the question's power reading against loads of known bound, and the question's panel (its
layouts, the winner per batch, what would change it, and its tiles' launch truth)."""

from __future__ import annotations

import pandas as pd

from tilesweep.question import Question, Tiles
from tilesweep.report.document import Block, Bullets, Table, Text
from tilesweep.report.sections import verdict_grid
from tilesweep.tables import REPORT_POWER_COLUMNS, WINNER_COLUMNS


def _judged(power: pd.DataFrame, asked: Question | None) -> pd.DataFrame:
    """Return the question's power reading judged against each measured load (empty without a
    question or a reading)."""
    from tilesweep.stages.power import reading_consistency

    if asked is None or asked.power is None:
        return pd.DataFrame()
    return reading_consistency(power, asked.power.fraction, asked.name)


def power_blocks(power: pd.DataFrame, asked: Question | None) -> list[Block]:
    """Return the power section's blocks: each load's draw against the limit, and what the
    question's reading (a fraction of the limit) is consistent with."""
    text = (
        "Loads of known bound, each sustained for a few seconds on the device at hand "
        "under NVML sampling: the fraction of the enforced power limit they draw (p10, "
        "median, p90)."
    )
    reading = asked.power if asked is not None else None
    if reading is not None:
        text += (
            f" The {asked.name} read about {reading.watts:g} W of {reading.limit_watts:g} W "
            f"({reading.fraction:.0%}) {reading.claim}."
        )
    blocks: list[Block] = [Text(text), Table(power, REPORT_POWER_COLUMNS, empty="(no power table)")]
    judged = _judged(power, asked)
    if not judged.empty:
        blocks.append(
            Table(
                judged,
                title=f"Which bounds draw {reading.fraction:.0%} of the limit here",
                note=f"Consistent: the {asked.name}'s fraction lies inside the load's p10..p90 "
                "band on this device. A fraction of the limit on another GPU is a lead, not proof.",
            )
        )
    return blocks


def question_blocks(
    asked: Question, panel: dict, launch: pd.DataFrame, power: pd.DataFrame
) -> list[Block]:
    """Return the question's panel: its layouts, the winner per batch, what would change the
    answer, its tiles' launch truth on its hardware, and what power can tell."""
    from tilesweep.plan.sensitivity import changes

    rows = panel["rows"]
    sources = ", ".join(sorted(rows["source"].astype(str).unique())) if len(rows) else "none"
    blocks: list[Block] = [
        Text(
            f"{asked.setting}, composed (sources: {sources}); inputs and their sources "
            "are in the verdict section."
        ),
        verdict_grid(rows, "Bound and speed per layout and batch"),
        Table(panel["winners"], WINNER_COLUMNS, title="Which layout wins, and by how much"),
        Bullets(changes(panel["band"], panel["winners"])),
        Table(
            panel["band"],
            title="Each interconnect and bandwidth input at half and at double",
            collapsed=True,
        ),
    ]
    truth = tile_launch_truth(launch, asked) if asked.tiles else pd.DataFrame()
    if not truth.empty:
        blocks.append(Table(truth, title=asked.tiles.title, note=asked.tiles.note))
    judged = _judged(power, asked)
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


def _asked_rows(launch: pd.DataFrame, tiles: Tiles, hardware: str) -> pd.DataFrame:
    """Return the launch rows of the asked tiles, from their backend, on the question's hardware."""
    rows = launch[(launch["backend"] == tiles.backend) & (launch["target"] == hardware)]
    asked = {(t.m, t.n, t.k) for t in tiles.shapes}
    shapes = zip(rows["tile_m"], rows["tile_n"], rows["tile_k"], strict=True)
    return rows[[tuple(int(v) for v in shape) in asked for shape in shapes]]


def tile_launch_truth(launch: pd.DataFrame, asked: Question) -> pd.DataFrame:
    """Return the question's tiles on its hardware (from its tiles' backend): epilogue, stage
    count asked and chosen, shared memory, limit, and whether each reproduces the question's
    launch failure (over the opt-in limit)."""
    need = {"backend", "target", "tile_m", "tile_n", "tile_k", "smem_bytes", "fits"}
    if launch.empty or not need <= set(launch):
        return pd.DataFrame()
    rows = _asked_rows(launch, asked.tiles, asked.hardware)
    if rows.empty:
        return pd.DataFrame()
    reproduces = f"reproduces_{asked.name}_failure"
    out = rows.assign(
        tile=[
            f"{m}x{n}x{k}"
            for m, n, k in zip(rows["tile_m"], rows["tile_n"], rows["tile_k"], strict=True)
        ],
        **{
            reproduces: [
                "yes: over the opt-in limit"
                if f == "no"
                else ("no" if f in ("default", "optin") else f"unknown ({s})")
                for f, s in zip(rows["fits"], rows["status"], strict=True)
            ]
        },
    )
    cols = [
        "tile", "dtype", "epilogue", "stages_requested", "stages", "smem_bytes",
        "smem_limit_bytes", "overshoot_bytes", "fits", reproduces, "reason",
    ]  # fmt: skip
    return (
        out[[c for c in cols if c in out]].sort_values(["tile", "epilogue"]).reset_index(drop=True)
    )
