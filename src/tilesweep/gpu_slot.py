"""A GPU of its own for each GPU job here (Snakemake counts GPUs, it does not assign them)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tilesweep.provenance import gpu_names


@contextlib.contextmanager
def gpu_slot(wait_s: float = 3600.0) -> Iterator[str | None]:
    """Yield the GPU index this job holds, or None where none is assigned here."""
    count = len(gpu_names())
    if count == 0 or os.environ.get("CUDA_VISIBLE_DEVICES"):
        yield None
        return
    lock_dir = Path(tempfile.gettempdir()) / "tilesweep-gpu-locks"
    lock_dir.mkdir(exist_ok=True)
    deadline = time.monotonic() + wait_s
    while True:
        for index in range(count):
            handle = open(lock_dir / f"gpu{index}.lock", "w")  # noqa: SIM115 (held while yielding)
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            os.environ["CUDA_VISIBLE_DEVICES"] = str(index)
            try:
                yield str(index)
            finally:
                del os.environ["CUDA_VISIBLE_DEVICES"]
                fcntl.flock(handle, fcntl.LOCK_UN)
                handle.close()
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"no free GPU among {count} after {wait_s:.0f} s")
        time.sleep(0.5)
