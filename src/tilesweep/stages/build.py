"""Stage 1: build kernels with their backend: one cell per job, or one architecture's batch."""

import json
from pathlib import Path

from tilesweep import backends
from tilesweep.cells import write_cell_json
from tilesweep.provenance import build_stamp, cell_hash
from tilesweep.stages import logged, utc_now


def build_kernel(cell_json: str, record_path: str, log_path: str | None = None) -> dict:
    """Build one cell with its backend for its architecture; write and return its build record."""
    cell = json.loads(cell_json)
    backend = backends.builder(cell["backend"])
    job_start = utc_now()
    with logged(log_path) as log:
        log.info("building %s", cell)
        (result,) = backend.build([cell], Path(record_path).parent)
        log.info("result %s", result)
    record = {
        **cell,
        **result,
        **build_stamp(backend.toolchain()),
        "source": backend.source,
        "cell_hash": cell_hash(cell_json),
        "job_start_utc": job_start,
        "job_end_utc": utc_now(),
    }
    # The compiled binary is checked with the record: a deleted or edited one rebuilds the cell.
    binary = record.get("binary")
    found = isinstance(binary, str) and (Path(record_path).parent / binary).is_file()
    write_cell_json(record_path, record, files=[binary] if found else [])
    return record


def build_batch(
    cells_json: str, record_path: str, log_path: str | None = None, threads: int = 1
) -> dict:
    """Build every cell of one backend and architecture in one job; write the records by kernel."""
    cells = json.loads(cells_json)
    records = {}
    with logged(log_path) as log:
        if cells:
            backend = backends.builder(cells[0]["backend"])
            log.info("building %d %s cells with %d jobs", len(cells), cells[0]["backend"], threads)
            stamp = build_stamp(backend.toolchain())
            results = backend.build(cells, Path(record_path).parent, jobs=threads)
            for cell, result in zip(cells, results, strict=True):
                records[cell["kernel"]] = {**cell, **result, **stamp, "source": backend.source}
                log.info("%s: %s", cell["kernel"], result.get("status"))
    record = {"cells": records}
    write_cell_json(record_path, record)
    return record
