"""How a StepRank's whole step is measured: warm-up, launches, eager and graphed steps, parts.

Launches are torch's device launches per named part (aten ops that reach a kernel, views excepted).
Diagnostic: with TILESWEEP_KERNEL_PROFILE=<folder> (and TILESWEEP_KERNEL_PROFILE_BATCHES=1,64)
each graphed whole step writes `kernels_<layout>_rank<r>_b<batch>.csv`: one replay's kernels in
order, start and duration in us; no sweep table reads it."""

import os
import time
from pathlib import Path

import pandas as pd

from tilesweep import package_data
from tilesweep.io import write_table
from tilesweep.measure import timing
from tilesweep.measure.step.clock import PartClock
from tilesweep.measure.step.shapes import micro_batches

DATA_FILES = ("data/launch_count.yaml",)
# aten ops that return a view or metadata and launch no kernel.
NO_LAUNCH = frozenset(package_data.data_mapping("tilesweep", DATA_FILES[0])["no_launch"])


def make_counter():
    """Return a new LaunchCounter (built lazily: torch is imported only when one is made)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class LaunchCounter(TorchDispatchMode):
        """Counts launches per part; `part` names the part the next ops belong to."""

        def __init__(self):
            super().__init__()
            self.part = "unnamed"
            self.counts: dict[str, int] = {}

        def add(self, n: int) -> None:
            """Count n launches made outside torch's dispatcher in the current part."""
            self.counts[self.part] = self.counts.get(self.part, 0) + n

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.__name__.split(".")[0] not in NO_LAUNCH:  # `aten.mm.default` -> `mm`
                self.add(1)
            return func(*args, **(kwargs or {}))

    return LaunchCounter()


ENV = "TILESWEEP_KERNEL_PROFILE"
REPLAYS = 5


def profile_folder(batch: int) -> Path | None:
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
    write_table(where / f"kernels_{name}.csv", pd.DataFrame(rows))
    return where / f"kernels_{name}.csv"


def run_batch(rank, batch: int, warmup: int, repeats: int) -> dict:
    """Return one batch's step times, part times, launches per part and finiteness."""
    torch = rank.torch
    short = rank.fits(batch)
    if short:
        return {"batch": batch, "skipped": short}
    mbs = [rank.micro_batch(n) for n in micro_batches(batch, rank.layout)]
    off = PartClock(torch, rank.cuda, mode="off")
    slot = 0
    for _ in range(warmup):
        rank.sync()
        slot = rank.one_step(mbs, slot, off)
    launches, slot = count_launches(rank, mbs, slot)
    eager, slot, _ = time_steps(rank, mbs, slot, repeats, None)
    out = {"batch": batch, "micro_batches": [mb["n"] for mb in mbs], "launches": launches}
    graphed = rank.cuda and rank.step_spec.get("mode", "graph") == "graph"
    if graphed:
        try:
            whole, parted, clock, slot = capture(rank, mbs, slot)
        except Exception as exc:  # a step that cannot be captured says why, and stays eager
            graphed = False
            out["graph_error"] = str(exc).strip().splitlines()[-1][:300] if str(exc) else repr(exc)
    if graphed:
        times, _, exposed = time_steps(rank, mbs, slot, repeats, whole)
        launched, _, _ = time_steps(rank, mbs, slot, repeats, whole, front=False)
        where = profile_folder(batch)
        if where is not None:  # a diagnostic only: the kernels of one replay
            name = f"{rank.layout['layout']}_rank{rank.rank}_b{batch}"
            profile_graph(torch, whole, name, where)
        part_samples = []
        for _ in range(repeats):
            rank.sync()
            parted.replay()
            part_samples.append(clock.collect())
        out.update(
            whole_ms=times,
            eager_ms=eager,
            timing="cuda-graph",
            launch_exposed=exposed,
            launched_ms=launched,
        )
        del whole, parted
    else:
        part_clock, part_samples = PartClock(torch, rank.cuda), []
        for _ in range(repeats):
            rank.sync()
            slot = rank.one_step(mbs, slot, part_clock)
            part_samples.append(part_clock.collect())
        out.update(whole_ms=eager, eager_ms=eager, timing="eager")
    out["parts"] = part_samples
    out["finite"] = all(bool(torch.isfinite(mb["x"]).all().item()) for mb in mbs)
    out["moe_config"] = next((mb["fused"]["source"] for mb in mbs if "fused" in mb), "")
    out["step_kernels"] = rank.kernels_label
    del mbs
    if rank.cuda:
        torch.cuda.empty_cache()
    return out


def count_launches(rank, mbs: list[dict], slot: int) -> tuple[dict[str, int], int]:
    """Return ({part: launches in one step}, next slot) under a LaunchCounter."""
    counter = make_counter()
    rank.sync()
    with counter:
        slot = rank.one_step(mbs, slot, PartClock(rank.torch, rank.cuda, "count", counter))
    return counter.counts, slot


def time_steps(
    rank, mbs: list[dict], slot: int, repeats: int, graph, front: bool = True
) -> tuple[list, int, int]:
    """Return (slowest rank's ms per step, next slot, samples that may hold the launch)."""
    torch = rank.torch
    off = PartClock(torch, rank.cuda, mode="off")
    times, exposed = [], 0
    fronted = front and graph is not None and rank.cuda
    for _ in range(repeats):
        rank.sync()
        if rank.cuda:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            if fronted:
                timing.front()
            start.record()
            if graph is None:
                slot = rank.one_step(mbs, slot, off)
            else:
                graph.replay()
            exposed += int(fronted and start.query())
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            began = time.perf_counter()
            slot = rank.one_step(mbs, slot, off)
            times.append((time.perf_counter() - began) * 1e3)
    slowest = torch.tensor(times, dtype=torch.float64, device=rank.device)
    rank.dist.all_reduce(slowest, op=rank.dist.ReduceOp.MAX)
    return slowest.tolist(), slot, exposed


def capture(rank, mbs: list[dict], slot: int):
    """Return (step graph, timed-parts graph, its clock, next slot) after warm-up."""
    torch = rank.torch
    off = PartClock(torch, True, mode="off")
    side = torch.cuda.Stream(rank.device)
    side.wait_stream(torch.cuda.current_stream(rank.device))
    with torch.cuda.stream(side):
        for _ in range(2):
            slot = rank.one_step(mbs, slot, off)
    torch.cuda.current_stream(rank.device).wait_stream(side)
    rank.sync()
    whole = torch.cuda.CUDAGraph()
    with torch.cuda.graph(whole):
        slot = rank.one_step(mbs, slot, off)
    clock = PartClock(torch, True, mode="graph")
    parted = torch.cuda.CUDAGraph()
    with torch.cuda.graph(parted):
        slot = rank.one_step(mbs, slot, clock)
    rank.sync()
    return whole, parted, clock, slot
