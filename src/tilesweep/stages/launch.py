"""Stage 2: check a built kernel against one target's limits, beside the brief's estimate."""

from __future__ import annotations

import json

from tilesweep import backends
from tilesweep.cells import read_cell_json, write_cell_json
from tilesweep.plan import occupancy as launch
from tilesweep.plan.smem_estimate import hand_estimate
from tilesweep.provenance import HOST_DEVICE, cell_hash, git_commit
from tilesweep.stages import logged


def launch_row(cell: dict, hw: dict, build: dict) -> dict:
    """Return the launch table row for one kernel on one target."""
    stages = build.get("stages", cell["stages"])
    estimate = (
        hand_estimate(
            cell["dtype"],
            cell["tile_m"],
            cell["tile_n"],
            cell["tile_k"],
            cell["stages"],
            cell["epilogue"],
        )
        if cell["dtype"] != "none"
        else None
    )
    row = {
        "backend": cell["backend"],
        "target": cell["target"],
        "arch": cell["arch"],
        "dtype": cell["dtype"],
        "tile_m": cell["tile_m"],
        "tile_n": cell["tile_n"],
        "tile_k": cell["tile_k"],
        "stages_requested": cell["stages"],
        "stages": stages,
        "warps": cell["warps"],
        "epilogue": cell["epilogue"],
        # The kernel schedule the build compiled (CUTLASS: cooperative, pingpong, ...), if any.
        "schedule": build.get("schedule"),
        "kernel": cell["kernel"],
        "smem_bytes": build.get("smem_bytes"),
        "smem_dynamic_bytes": build.get("smem_dynamic_bytes"),
        "smem_static_bytes": build.get("smem_static_bytes"),
        "smem_model_bytes": estimate,
        "regs": build.get("regs"),
        "local_bytes": build.get("local_bytes"),
        "mainloop_smem_bytes": build.get("mainloop_smem_bytes"),
        "epilogue_smem_bytes": build.get("epilogue_smem_bytes"),
        "source": build.get("source", "compiler"),
        # Provenance of the build this row checks, and of the check itself (written now).
        "device": build.get("device", HOST_DEVICE),
        "toolchain": build.get("toolchain"),
        "commit": git_commit(),
    }
    if build.get("status") != "ok":
        status, reason = build.get("status"), build.get("reason", "")
        if status is None:  # a record without a status is a failure that says so
            status, reason = "compile", "the build record carries no status"
        return {
            **row,
            "smem_limit_bytes": hw["smem_per_block_optin"],
            "fits": "unknown",
            "status": status,
            "reason": reason,
        }
    try:
        threads = backends.builder(cell["backend"]).launch_threads(build)
    except ValueError as exc:  # the record lacks what the launch needs: a row that says so
        return {
            **row,
            "smem_limit_bytes": hw["smem_per_block_optin"],
            "fits": "unknown",
            "status": "compile",
            "reason": str(exc),
        }
    result = launch.check(build["smem_bytes"], build.get("regs") or 0, threads, hw)
    if estimate is not None:
        row["smem_model_error_bytes"] = estimate - build["smem_bytes"]
        row["smem_model_error_pct"] = round(
            100 * (estimate - build["smem_bytes"]) / build["smem_bytes"], 1
        )
    return {**row, **result, "threads": threads}


def check_launch(
    cell_json: str, build_path: str, record_path: str, log_path: str | None = None
) -> dict:
    """Check one kernel against one target; write and return its launch record."""
    spec = json.loads(cell_json)
    cell, hw = spec["cell"], spec["hardware"]
    with logged(log_path) as log:
        build = read_cell_json(build_path)
        if backends.builder(cell["backend"]).build_per == "arch":
            build = build["cells"][cell["kernel"]]
        row = {**launch_row(cell, hw, build), "cell_hash": cell_hash(cell_json)}
        log.info("%s on %s: %s (%s)", cell["kernel"], cell["target"], row["status"], row["reason"])
    write_cell_json(record_path, row)
    return row
