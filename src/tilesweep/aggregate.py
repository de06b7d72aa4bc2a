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


def _measured_on(decode: pd.DataFrame) -> pd.Series:
    """Return, per decode row, the conf/hardware name of the device that measured it."""
    from tilesweep.bench.ceilings import catalog_name

    return decode["device"].astype(str).map(lambda d: catalog_name(d) or "")


def _launch_outcome(rows: pd.DataFrame) -> tuple[str, object]:
    """Return (measured launch status, shared memory the device saw) for one kernel's rows."""
    statuses = set(rows["status"].astype(str))
    smem = rows["smem_runtime_bytes"].dropna() if "smem_runtime_bytes" in rows else []
    seen = int(smem.iloc[0]) if len(smem) else None
    if "ok" in statuses or "correctness" in statuses:
        return "launched", seen
    failed = rows[rows["status"] == "launch"]
    if not failed.empty:
        return f"failed: {failed['reason'].iloc[0]}", seen
    return "not run", seen


def attach_measured_launch(launch: pd.DataFrame, decode: pd.DataFrame) -> pd.DataFrame:
    """Return the launch table with what a real launch on the benchmark device showed.

    Where the decode benchmark ran a kernel on a device that is one of the targets (an H200
    for the h200 rows), `measured_launch` says whether it launched (or the device's own error)
    and `measured_smem_bytes` the shared memory the launch asked for: Triton's dynamic shared
    memory as JIT-compiled on the device, or CUTLASS's SharedStorageSize in the SM90 program.
    """
    launch = launch.copy()
    launch["measured_launch"] = None
    launch["measured_smem_bytes"] = None
    if decode.empty or "device" not in decode or "runner" not in decode:
        return launch
    decode = decode.assign(target=_measured_on(decode))
    decode = decode[decode["target"] != ""]
    for i, row in launch.iterrows():
        here = decode[decode["target"] == row["target"]]
        if row["backend"] == "triton":
            rows = here[here["runner"] == f"triton:{row['kernel']}"]
        elif (
            row["backend"] == "cutlass"
            and row["stages_requested"] == "auto"
            and row["status"] == "ok"
        ):  # the SM90 program uses the same schedule
            tile = f"{row['tile_m']}x{row['tile_n']}x{row['tile_k']}"
            rows = here[
                (here["runner"] == f"cutlass:{tile}")
                & (row["epilogue"] == "default")
                & (here["dtype"] == row["dtype"])
            ]
        else:
            continue
        if not rows.empty:
            launch.at[i, "measured_launch"], launch.at[i, "measured_smem_bytes"] = _launch_outcome(
                rows
            )
    return launch
