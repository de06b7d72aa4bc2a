"""Diagnostic: with TILESWEEP_KERNEL_PROFILE=<folder> (and TILESWEEP_KERNEL_PROFILE_BATCHES=1,64)
each graphed whole step writes `kernels_<layout>_rank<r>_b<batch>.csv`: one replay's kernels in
order, start and duration in us; no sweep table reads it."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

ENV = "TILESWEEP_KERNEL_PROFILE"
REPLAYS = 5


def folder(batch: int) -> Path | None:
    """Return the kernel-profile folder for a step of `batch` sequences, or None when not asked."""
    where = os.environ.get(ENV)
    only = os.environ.get(f"{ENV}_BATCHES", "")
    if only and str(batch) not in only.split(","):
        return None
    return Path(where) if where else None


def profile_graph(torch, graph, name: str, where: Path) -> Path:
    """Replay `graph` REPLAYS times under the profiler; write and return its kernel table."""
    from torch.profiler import ProfilerActivity, profile

    graph.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(REPLAYS):
            graph.replay()
            torch.cuda.synchronize()
    kernels = sorted(
        (e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
        key=lambda e: e.time_range.start,
    )
    per = len(kernels) // REPLAYS
    rows = []
    for i in range(per):
        runs = [kernels[r * per + i] for r in range(REPLAYS)]
        first = [kernels[r * per] for r in range(REPLAYS)]
        rows.append(
            {
                "index": i,
                "kernel": runs[0].name[:160],
                "start_us": sum(
                    k.time_range.start - f.time_range.start
                    for k, f in zip(runs, first, strict=True)
                )
                / REPLAYS,
                "us": sum(k.time_range.elapsed_us() for k in runs) / REPLAYS,
            }
        )
    where.mkdir(parents=True, exist_ok=True)
    path = where / f"kernels_{name}.csv"
    tmp = path.with_suffix(".tmp")
    pd.DataFrame(rows).to_csv(tmp, index=False)
    tmp.replace(path)
    return path
