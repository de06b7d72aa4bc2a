"""One CUTLASS accounting row: the shared-memory numbers a compiled unit printed, or why none."""

from __future__ import annotations

import re

from tilesweep.cutlass.cell_spec import requested_tags

NUMERIC_FIELDS = (
    "smem_bytes",
    "threads_per_block",
    "mainloop_smem_bytes",
    "epilogue_smem_bytes",
    "other_smem_bytes",
    "mainloop_shared_storage_bytes",
    "epilogue_shared_storage_bytes",
    "stages",
    "epilogue_stages",
    "epilogue_stages_c",
    "epilogue_tile",
    "builder_smem_capacity",
)


def base_row(cell: dict, status: str, reason: str, toolchain: str, version: str) -> dict:
    """Return a result row with every field present and numbers left empty."""
    row = {"status": status, "reason": reason, "error_location": "", "cell": cell}
    row.update({k: None for k in NUMERIC_FIELDS})
    row.update(alignment_a=None, alignment_b=None, fits=None, cutlass_version=version)
    row.update(schedule=cell.get("schedule"), schedule_types=requested_tags(cell))
    row.update(toolchain=toolchain, cached=False)
    return row


def type_name(pretty: str) -> str:
    """Return the type name inside a __PRETTY_FUNCTION__ string of ts_name<T>()."""
    m = re.search(r"\[with T = (.*)\]$", pretty)
    return m.group(1) if m else pretty


def ok_row(cell: dict, data: dict, toolchain: str) -> dict:
    """Return a result row from one JSON line printed by the compiled TU."""
    row = base_row(cell, "ok", "", toolchain, data["cutlass_version"])
    for k in NUMERIC_FIELDS:
        if k in data:
            row[k] = None if data[k] == -1 else data[k]
    row["epilogue_tile"] = data["epilogue_tile"] if min(data["epilogue_tile"]) > 0 else None
    row["alignment_a"], row["alignment_b"] = data["alignment_a"], data["alignment_b"]
    known = [row[k] or 0 for k in ("mainloop_smem_bytes", "epilogue_smem_bytes")]
    row["other_smem_bytes"] = row["smem_bytes"] - sum(known)
    row["fits"] = row["smem_bytes"] <= row["builder_smem_capacity"]
    row["schedule_types"].update(
        mainloop=type_name(data["mainloop_schedule"]),
        mainloop_policy=type_name(data["mainloop_policy"]),
        epilogue=type_name(data["epilogue_policy"]),
    )
    return row


def timed(row: dict, secs: float, n: int) -> dict:
    """Return row with the TU's compile time and the cells it was shared by."""
    row["compile_seconds"] = round(secs, 2)
    row["cells_in_tu"] = n
    return row
