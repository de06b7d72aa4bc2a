"""Per-cell accounting cache (workdir/cache/<sha256 of source and nvcc version>.json); rows not the
cell's property (no nvcc, a timeout) are not cached."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from tilesweep.cutlass.source import cell_body, tu_source


def cache_key(cell: dict, version: str, toolchain: str, device_check: bool = True) -> str:
    """Return sha256 of the cell's standalone TU source plus the nvcc version."""
    src, _ = tu_source(cell["arch"], [cell_body(cell, "c0")], version, device_check)
    return hashlib.sha256((src + "\n" + toolchain).encode()).hexdigest()


def atomic_write(path: Path, text: str) -> None:
    """Write text to path via a temp file in the same dir and os.replace."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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
        atomic_write(workdir / "cache" / f"{key}.json", json.dumps(row))
