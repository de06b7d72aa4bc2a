"""Latency/bandwidth model of the collectives a parallel layout needs, per named interconnect and
per GPU count, read off nccl-tests (or measured here, `fit_measured`):

    latency_us(n) + wire(n) * nbytes / busbw_gbs(n)

(or, where a figure cites [bytes, us] points, through them inside their range and on at busbw past
the last), with nccl-tests' bus-bandwidth convention: wire = 2(n-1)/n for all_reduce, (n-1)/n for
all_to_all, 1 for send_recv, so a busbw read off all_reduce_perf, alltoall_perf or sendrecv_perf
plugs in. A GPU count without figures is a labelled gap, never derived from another count (a ring at
2 GPUs, NVLS or a tree at 8). An all_reduce's `one_shot` figures (the engines' custom all-reduce)
apply when enabled, up to max_bytes, where faster than NCCL; an engine's own all-reduce takes its
algorithm by size (plan.allreduce)."""

from __future__ import annotations

import math

import pandas as pd

from tilesweep.plan import allreduce
from tilesweep.plan.messages import bus_factor, fit_alpha_beta, interpolated_us
from tilesweep.settings import HardwareSpec
from tilesweep.settings.hardware_spec import AllReduce, Collective, Figures, Topology

COLLECTIVES = ("all_reduce", "all_to_all", "send_recv")
ONE_SHOT = "model: the engine's custom all-reduce"  # the label of a one_shot figure's time


def _check(collective: str, n: int) -> None:
    """Raise ValueError for an unknown collective or fewer than one GPU."""
    if collective not in COLLECTIVES:
        raise ValueError(f"collective={collective!r}: allowed: {', '.join(COLLECTIVES)}")
    if n < 1:
        raise ValueError(f"n={n}: must be at least 1")


def wire_factor(collective: str, n: int) -> float:
    """Return nccl-tests' bus-bandwidth factor of a collective over n GPUs (0 for one GPU)."""
    _check(collective, n)
    return 0.0 if n == 1 else bus_factor(collective, n)


def topology_numbers(hw: HardwareSpec, topology: str | None = None) -> tuple[Topology | None, str]:
    """Return (the topology's per-collective figures or None, label naming it or the gap)."""
    block = hw.interconnect_model
    if not block:
        return None, f"no interconnect_model in hardware[{hw.name}]"
    name = topology or block.default
    if name not in block.topologies:
        return None, f"hardware[{hw.name}] has no interconnect topology {name!r}"
    return block.topologies[name], f"{hw.interconnect}/{name}"


def collective_time(
    collective: str, n: int, nbytes: float, numbers: Topology | None
) -> tuple[float, str]:
    """Return (time in ms of one collective, label: which figures gave it, or the gap's reason)."""
    _check(collective, n)
    if n == 1:
        return 0.0, "one GPU: no collective"
    if numbers is None:
        return math.nan, "no interconnect model"
    block = getattr(numbers, collective)
    if not block:
        return math.nan, f"no {collective} figures in the interconnect model"
    figures = block.by_gpus.get(n)
    if figures is None:
        has = ", ".join(map(str, sorted(block.by_gpus)))
        why = f"no {collective} figures for {n} GPUs (has {has}); another count's are not used"
        return math.nan, why
    nbytes = max(float(nbytes), 0.0)
    ms = _nccl_ms(figures, wire_factor(collective, n), nbytes)
    if collective == "all_reduce":
        engine = allreduce.engine_time(block, n, nbytes, ms)
        if engine is not None:
            return engine
    one_shot = block.one_shot if isinstance(block, AllReduce) else None
    shot = one_shot.by_gpus.get(n) if one_shot and one_shot.enabled else None
    if shot is not None and nbytes <= shot.max_bytes:
        us = interpolated_us(shot.points, nbytes) if shot.points else float(shot.latency_us)
        if us * 1e-3 < ms:
            return us * 1e-3, f"{ONE_SHOT} (<= {shot.max_bytes} B)"
    return ms, "model"


def _nccl_ms(figures: Figures, wire: float, nbytes: float) -> float:
    """Return the time in ms of one collective: through its cited points inside their range (the
    first point's below it), past the last point that point plus the extra bytes at busbw; the
    latency + bytes / busbw line where no points are cited."""
    per_byte_ms = wire / (figures.busbw_gbs * 1e9) * 1e3
    if not figures.points:
        return figures.latency_us * 1e-3 + per_byte_ms * nbytes
    # Each time lowered to the least at any larger size: a message never takes longer than a
    # larger one's cited time (a cited dip, e.g. 24.6 then 24.1 us, is noise).
    least, points = math.inf, []
    for size, us in reversed(figures.points):
        least = min(least, us)
        points.insert(0, (size, least))
    if nbytes <= points[-1][0]:
        return interpolated_us(points, nbytes) * 1e-3
    last_bytes, last_us = points[-1]
    return last_us * 1e-3 + per_byte_ms * (nbytes - last_bytes)


def floored_ms(
    collective: str, n: int, nbytes: float, numbers: Topology | None, measured: dict | None = None
) -> tuple[float, str]:
    """Return (ms never below the model's or a measured floor, label or the gap's reason)."""
    t, label = collective_time(collective, n, nbytes, numbers)
    floor = (measured or {}).get(collective, {}).get(n)
    if math.isnan(t):
        if floor is not None and n > 1:
            return math.nan, f"{label}; a measured floor alone is not a time"
        return math.nan, label
    if floor is not None and n > 1 and t < floor:
        t, label = float(floor), "measured floor"
    return t, label


def fit_measured(collective: pd.DataFrame, backend: str) -> tuple[Topology | None, dict]:
    """Return (figures per collective and GPU count as a topology holds them, or None; floors)
    fitted on the collectives measured over `backend`.

    On nccl only rows timed inside CUDA graphs count (eager NCCL pays a launch per call the engines
    do not); gloo has no graphs, so its eager rows count. A table without `timing` was eager. A
    group size with fewer than two message sizes, or whose time does not grow, has only a floor."""
    by_kind, floors = {}, {}
    needed = {"collective", "group", "bytes", "time_ms", "status", "backend"}
    if collective.empty or not needed <= set(collective.columns):
        return None, floors
    timing = "cuda-graph" if backend == "nccl" else "eager"
    rows = collective[
        (collective["status"] == "ok")
        & collective["time_ms"].notna()
        & (collective["backend"] == backend)
        & collective["collective"].isin(COLLECTIVES)
    ]
    timed = rows["timing"] if "timing" in rows else pd.Series("eager", index=rows.index)
    rows = rows[timed.fillna("eager") == timing]
    for (kind, group), part in rows.groupby(["collective", "group"]):
        n = int(group)
        if n < 2:
            continue
        by_size = part.groupby("bytes")["time_ms"].median()
        floors.setdefault(kind, {})[n] = float(by_size.min())
        if len(by_size) < 2:
            continue
        alpha_ms, beta = fit_alpha_beta(list(by_size.index), list(by_size.values))
        if not math.isfinite(beta):
            continue
        # beta is bytes per ms: algbw in GB/s is beta / 1e6; busbw scales it by the wire factor
        figures = Figures.model_construct(
            latency_us=alpha_ms * 1e3, busbw_gbs=wire_factor(kind, n) * beta / 1e6
        )
        by_kind.setdefault(kind, {})[n] = figures
    if not by_kind:
        return None, floors
    blocks = {
        kind: (AllReduce if kind == "all_reduce" else Collective).model_construct(by_gpus=by_gpus)
        for kind, by_gpus in by_kind.items()
    }
    return Topology.model_construct(**blocks), floors
