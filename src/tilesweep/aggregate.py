"""Join per-cell results into tidy tables."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from tilesweep.provenance import git_commit, package_version

LAUNCH_COLUMNS = [
    "backend",
    "target",
    "arch",
    "dtype",
    "tile_m",
    "tile_n",
    "tile_k",
    "stages_requested",
    "stages",
    "warps",
    "epilogue",
    "smem_bytes",
    "smem_model_bytes",
    "smem_model_error_bytes",
    "smem_model_error_pct",
    "smem_limit_bytes",
    "smem_default_bytes",
    "smem_per_sm_bytes",
    "fits",
    "status",
    "reason",
    "overshoot_bytes",
    "blocks_per_sm",
    "blocks_per_sm_smem",
    "blocks_per_sm_regs",
    "regs",
    "local_bytes",
    "threads",
    "mainloop_smem_bytes",
    "epilogue_smem_bytes",
    "kernel",
    "source",
    "device",
    "toolchain",
    "commit",
]


def launch_table(paths: list[str]) -> pd.DataFrame:
    """Return the launch table: one row per kernel and target, with provenance columns."""
    rows = [json.loads(Path(p).read_text()) for p in paths]
    frame = pd.DataFrame(rows)
    if frame.empty:
        return pd.DataFrame(columns=LAUNCH_COLUMNS)
    frame["device"] = "none: compiled on the host, checked against the target's table"
    versions = {
        "triton": f"triton {package_version('triton')}",
        "cutlass": f"nvidia-cutlass {package_version('nvidia-cutlass')}",
    }
    frame["toolchain"] = frame["backend"].map(versions)
    frame["commit"] = git_commit()
    for col in LAUNCH_COLUMNS:
        if col not in frame:
            frame[col] = None
    extra = [c for c in frame.columns if c not in LAUNCH_COLUMNS]
    return (
        frame[LAUNCH_COLUMNS + extra]
        .sort_values(["backend", "target", "dtype", "tile_m", "tile_n", "tile_k", "epilogue"])
        .reset_index(drop=True)
    )


def concat_tables(paths: list[str]) -> pd.DataFrame:
    """Return the concatenation of per-cell CSV tables (empty files are skipped)."""
    frames = []
    for p in paths:
        try:
            frames.append(pd.read_csv(p))
        except pd.errors.EmptyDataError:
            continue
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
