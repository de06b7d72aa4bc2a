"""Per-cell accounting cache (workdir/cache/<sha256 of source and nvcc version>.json); rows not the
cell's property (no nvcc, a timeout) are not cached."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tilesweep.cutlass.source import cell_body, tu_source
from tilesweep.io import write_text


def cache_key(cell: dict, version: str, toolchain: str, device_check: bool = True) -> str:
    """Return sha256 of the cell's standalone TU source plus the nvcc version."""
    src, _ = tu_source(cell["arch"], [cell_body(cell, "c0")], version, device_check)
    return hashlib.sha256((src + "\n" + toolchain).encode()).hexdigest()


def read_cache(workdir: Path, key: str) -> dict | None:
    """Return the cached result for key, or None."""
    path = workdir / "cache" / f"{key}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def cacheable(row: dict) -> bool:
    """Return whether a row is a property of the cell (ok, or a located compile error)."""
    return row["status"] == "ok" or bool(row.get("error_location"))


def write_cache(workdir: Path, key: str, row: dict) -> None:
    """Store a row under its key when it is a property of the cell; drop it otherwise."""
    if cacheable(row):
        write_text(workdir / "cache" / f"{key}.json", json.dumps(row))
