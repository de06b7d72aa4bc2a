"""A diagnostic: the kernels a captured decode step runs, as the profiler sees graph replays.
With TILESWEEP_KERNEL_PROFILE set to a folder (and TILESWEEP_KERNEL_PROFILE_BATCHES=1,64 to limit
the batches) every graphed whole step also writes `kernels_<layout>_rank<r>_b<batch>.csv` there:
each kernel of one replay in launch order, its start (from the first kernel) and duration in us,
averaged over a few replays, so the gaps between kernels show; no table of the sweep reads it."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

ENV = "TILESWEEP_KERNEL_PROFILE"
REPLAYS = 5


def folder(batch: int) -> Path | None:
    """Return the folder the kernel profile of a step of `batch` sequences goes to, or None
    when none was asked for (TILESWEEP_KERNEL_PROFILE_BATCHES, comma-separated: only those)."""
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
