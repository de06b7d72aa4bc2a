"""Stage 4: time one layout's collectives at every decode batch and over message sizes."""

import json

import pandas as pd

from tilesweep.cells import write_cell_table
from tilesweep.columns import Status
from tilesweep.measure.process_group import run_plan
from tilesweep.measure.timing import summarize
from tilesweep.plan.messages import (
    LATENCY_FLOOR_BYTES,
    bus_factor,
    fit_alpha_beta,
    step_messages,
    sweep_sizes,
)
from tilesweep.provenance import cpu_device, stamp
from tilesweep.stages import logged


def plan_layout(spec: dict, world: int, cuda: bool) -> tuple[list[dict], list[dict]]:
    """Return (collectives to time, rows recorded without timing) for one layout."""
    layout, model, bench = spec["layout"], spec["model"], spec["bench"]
    cap = None if cuda else bench["cpu_collective_max_bytes"]
    plan, skipped = [], []
    items = [
        {**msg, "tokens_per_expert": t, "purpose": "step"}
        for t in spec["tokens_per_expert"]
        for msg in step_messages(layout, model, t)
    ]
    kinds = sorted({(m["collective"], m["group"]) for m in items})
    swept = (bench[f"collective_sweep_{k}"] for k in ("min_bytes", "max_bytes", "factor"))
    sizes = sorted(set(sweep_sizes(*swept)) | set(bench["collective_extra_sizes"]))
    sweep = {"per_step": 0, "tokens_per_expert": None, "purpose": "sweep"}
    items += [
        {"collective": kind, "group": group, "bytes": size, **sweep}
        for kind, group in kinds
        for size in sizes
    ]
    for item in items:
        row = {**item, "layout_group": item["group"], "group": min(item["group"], world)}
        why = ""
        if row["group"] < 2:
            why = f"needs {item['group']} devices; this machine has {world}"
        elif cap is not None and item["bytes"] > cap:
            why = f"{item['bytes']:,} B is over the CPU cap of {cap:,} B "
            why += "(bench.cpu_collective_max_bytes)"
        if why:
            skipped.append({**row, "status": "skipped", "reason": why})
        else:
            plan.append(row)
    return plan, skipped


def fit_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """Return the table with, per collective and group, the latency floor and the alpha-beta fit."""
    fits = ("latency_floor_us", "fit_latency_us", "fit_algbw_gbs", "fit_busbw_gbs")
    frame = frame.assign(**dict.fromkeys(fits, float("nan")))
    if "time_ms" not in frame:
        return frame
    ok = frame[(frame["status"] == "ok") & frame["time_ms"].notna()]
    for (kind, group), part in ok.groupby(["collective", "group"]):
        # One time per size: the median over every row (step and sweep) of that size.
        by_size = part.groupby("bytes")["time_ms"].median()
        small = by_size[by_size.index <= LATENCY_FLOOR_BYTES]
        alpha, beta = fit_alpha_beta(list(by_size.index), list(by_size.values))
        algbw = beta * 1e3 / 1e9  # bytes per ms -> GB/s
        where = (frame["collective"] == kind) & (frame["group"] == group)
        frame.loc[where, "latency_floor_us"] = small.min() * 1e3 if len(small) else float("nan")
        frame.loc[where, "fit_latency_us"] = alpha * 1e3
        frame.loc[where, "fit_algbw_gbs"] = algbw
        frame.loc[where, "fit_busbw_gbs"] = algbw * bus_factor(kind, int(group))
    return frame


def _timed_row(item: dict, result: dict) -> dict:
    """Return a collective's statistics and bandwidths, or its status and reason."""
    how = {"timing": result["timing"], "calls_per_replay": result["calls_per_replay"]}
    if result["status"] != "ok":
        return {**how, "status": result["status"], "reason": result["reason"]}
    if not result["samples"]:
        return {**how, "status": Status.RUNTIME, "reason": "rank 0 recorded no samples"}
    stats = summarize(result["samples"])
    algbw = item["bytes"] / (stats["time_ms"] * 1e-3) / 1e9
    return {
        **stats,
        **how,
        "status": Status.OK,
        "reason": "",
        "algbw_gbs": algbw,
        "busbw_gbs": algbw * bus_factor(item["collective"], item["group"]),
    }


# A layout on one device: one row that says it needs no collective.
NO_COLLECTIVE = {
    "collective": "none",
    "group": 1,
    "bytes": 0,
    "per_step": 0,
    "status": "ok",
    "reason": "one device: no collectives",
}


def _timing(bench: dict, cuda: bool) -> dict:
    """Return how run_plan times the collectives (fewer repeats on CPU)."""
    repeats = bench["collective_repeats"] if cuda else max(2, bench["collective_repeats"] // 3)
    return {
        "timing": bench["collective_timing"],
        "max_calls": bench["collective_graph_calls"],
        "fill_ms": bench["collective_graph_fill_ms"],
        "repeats": repeats,
        "warmup": max(1, bench["warmup"]),
        "cuda": cuda,
    }


def bench_collective(cell_json: str, table_path: str, log_path: str | None = None) -> pd.DataFrame:
    """Time one layout's collectives over NCCL (GPUs) or gloo (CPU); write the table."""
    import torch

    spec = json.loads(cell_json)
    layout, bench = spec["layout"], spec["bench"]
    cuda = torch.cuda.is_available() and torch.cuda.device_count() > 1
    available = torch.cuda.device_count() if cuda else bench["collective_world_cap"]
    world = min(layout["world"], available)
    prov = stamp()
    backend = "nccl" if cuda else "gloo"
    if not cuda:  # gloo ranks run on the CPU, also on a machine with one GPU: say so
        prov.update(cpu_device())
    base = {
        "layout": layout["layout"],
        "layout_world": layout["world"],
        "backend": backend,
        "world": world,
        "model": spec["model"]["name"],
    }
    with logged(log_path) as log:
        plan, skipped = plan_layout(spec, world, cuda)
        log.info(
            "layout %s: %d collectives to time over %d %s ranks (%s), %d skipped",
            layout["layout"],
            len(plan),
            world,
            backend,
            bench["collective_timing"] if cuda else "eager",
            len(skipped),
        )
        rows = [{**base, **row, **prov} for row in skipped]
        if plan:
            results = run_plan(plan, world, _timing(bench, cuda))
            for item, result in zip(plan, results, strict=True):
                rows.append({**base, **item, **_timed_row(item, result), **prov})
        if not rows:
            rows.append({**base, **NO_COLLECTIVE, **prov})
        frame = fit_columns(pd.DataFrame(rows))
        # Each collective and group's latency floor and fitted latency and bus bandwidth.
        fitted = frame.drop_duplicates(["collective", "group"]).dropna(subset=["fit_latency_us"])
        for rec in fitted.to_dict("records"):
            said = "%(collective)s(%(group)d): latency floor %(latency_floor_us).1f us, "
            log.info(
                said + "fit alpha %(fit_latency_us).1f us, busbw %(fit_busbw_gbs).2f GB/s", rec
            )
    write_cell_table(table_path, frame)
    return frame
