"""Stage 2: check a built kernel against one target's limits, beside the brief's estimate."""

import json

from tilesweep import backends, package_data
from tilesweep.cells import read_cell_json, write_cell_json
from tilesweep.plan import occupancy as launch
from tilesweep.plan.smem_estimate import hand_estimate
from tilesweep.provenance import HOST_DEVICE, cell_hash, git_commit
from tilesweep.stages import logged

DATA_FILES = ("data/columns.yaml",)
_LISTS = package_data.column_lists("tilesweep.stages.launch")
CELL_KEYS, BUILD_KEYS = _LISTS["CELL_KEYS"], _LISTS["BUILD_KEYS"]
# The brief's hand estimate's arguments, from the cell.
ESTIMATE_KEYS = ("dtype", "tile_m", "tile_n", "tile_k", "stages", "epilogue")


def launch_row(cell: dict, hw: dict, build: dict) -> dict:
    """Return the launch table row for one kernel on one target."""
    no_dtype = cell["dtype"] == "none"
    estimate = None if no_dtype else hand_estimate(*(cell[k] for k in ESTIMATE_KEYS))
    row = {
        **{k: cell[k] for k in CELL_KEYS},
        **{k: build.get(k) for k in BUILD_KEYS},
        "stages_requested": cell["stages"],
        "stages": build.get("stages", cell["stages"]),
        "smem_model_bytes": estimate,
        "source": build.get("source", "compiler"),
        # Provenance of the build this row checks, and of the check itself (written now).
        "device": build.get("device", HOST_DEVICE),
        "commit": git_commit(),
    }
    unknown = {"smem_limit_bytes": hw["smem_per_block_optin"], "fits": "unknown"}
    if build.get("status") != "ok":
        status, reason = build.get("status"), build.get("reason", "")
        if status is None:  # a record without a status is a failure that says so
            status, reason = "compile", "the build record carries no status"
        return {**row, **unknown, "status": status, "reason": reason}
    try:
        threads = backends.builder(cell["backend"]).launch_threads(build)
    except ValueError as exc:  # the record lacks what the launch needs: a row that says so
        return {**row, **unknown, "status": "compile", "reason": str(exc)}
    result = launch.check(build["smem_bytes"], build.get("regs") or 0, threads, hw)
    if estimate is not None:
        error = row["smem_model_error_bytes"] = estimate - build["smem_bytes"]
        row["smem_model_error_pct"] = round(100 * error / build["smem_bytes"], 1)
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
