"""Find the per-cell result files that hold failed rows, so just those can be rerun."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

# Statuses that are a property of the kernel or device, not a failure to retry.
SETTLED = {"ok", "unsupported", "skipped"}


def _statuses(path: Path) -> set[str]:
    """Return the statuses recorded in one per-cell result file."""
    if path.suffix == ".json":
        record = json.loads(path.read_text())
        if "cells" in record:  # CUTLASS accounting: one record per cell
            return {c.get("status", "ok") for c in record["cells"].values()}
        return {record.get("status", "ok")}
    try:
        frame = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return set()
    return set(frame["status"].astype(str)) if "status" in frame else set()


def failed_outputs(results: Path, statuses: set[str] | None = None) -> list[Path]:
    """Return per-cell outputs under results with a row whose status is a failure.

    `statuses` narrows it to those statuses (e.g. {"timeout"}); by default every status but ok,
    unsupported and skipped counts. Launch-check files (`launch/`) are left out: a kernel that
    does not fit a target is a result, and its build file is what a rerun would redo.
    """
    found = []
    for stage in ("build", "decode", "collective", "layout"):
        for path in sorted((Path(results) / stage).rglob("*")):
            if path.suffix not in (".json", ".csv") or not path.is_file():
                continue
            bad = _statuses(path) - SETTLED
            if statuses is not None:
                bad &= statuses
            if bad:
                found.append(path)
    return found
