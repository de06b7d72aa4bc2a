"""Stage 1: build kernels (Triton per cell, CUTLASS accounting per architecture)."""

from __future__ import annotations

import json
from pathlib import Path

from tilesweep.io import write_json
from tilesweep.provenance import cell_hash
from tilesweep.stages import logged, utc_now


def build_kernel(cell_json: str, record_path: str, log_path: str | None = None) -> dict:
    """Compile one Triton cell for its architecture; write and return its build record."""
    from tilesweep.backends import triton_backend

    cell = json.loads(cell_json)
    job_start = utc_now()
    with logged(log_path) as log:
        log.info("building %s", cell)
        result = triton_backend.build(cell, Path(record_path).parent)
        log.info("result %s", result)
    record = {
        **cell,
        **result,
        "toolchain": triton_backend.versions(),
        "source": "compiler",
        "cell_hash": cell_hash(cell_json),
        "job_start_utc": job_start,
        "job_end_utc": utc_now(),
    }
    write_json(record_path, record)
    return record


def account_cutlass(
    cells_json: str, record_path: str, log_path: str | None = None, threads: int = 1
) -> dict:
    """Account CUTLASS shared memory for every cell of one architecture; write the records."""
    from tilesweep.backends import cutlass_smem

    cells = json.loads(cells_json)
    workdir = Path(record_path).parents[2] / "cutlass-work"
    with logged(log_path) as log:
        todo = [c for c in cells if not c.get("unsupported")]
        log.info("accounting %d CUTLASS cells with %d jobs", len(todo), threads)
        results = iter(cutlass_smem.account(todo, workdir, jobs=threads) if todo else [])
        records = {}
        for cell in cells:
            if cell.get("unsupported"):
                result = {"status": "unsupported", "reason": cell["unsupported"]}
            else:
                result = next(results)
            records[cell["kernel"]] = {**cell, **result, "source": "cutlass-types"}
            log.info("%s: %s", cell["kernel"], result.get("status"))
    record = {"cells": records}
    write_json(record_path, record)
    return record
