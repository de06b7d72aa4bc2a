"""Stage 4: time the collectives of one parallel layout at every decode batch."""

from __future__ import annotations

import json

import pandas as pd

from tilesweep.io import write_table
from tilesweep.steps import logged


def plan_layout(spec: dict, world: int, cuda: bool) -> tuple[list[dict], list[dict]]:
    """Return (collectives to time, rows recorded without timing) for one layout."""
    from tilesweep.bench.collective import step_messages

    layout, model, bench = spec["layout"], spec["model"], spec["bench"]
    cap = None if cuda else bench["cpu_collective_max_bytes"]
    plan, skipped = [], []
    items = []
    for t in spec["tokens_per_expert"]:
        for msg in step_messages(layout, model, t):
            items.append({**msg, "tokens_per_expert": t})
    kinds = {(m["collective"], m["group"], m["per_step"]) for m in items}
    for kind, group, _ in sorted(kinds):
        for size in bench["collective_extra_sizes"]:
            items.append(
                {
                    "collective": kind,
                    "group": group,
                    "bytes": size,
                    "per_step": 0,
                    "tokens_per_expert": None,
                }
            )
    for item in items:
        row = {**item, "layout_group": item["group"], "group": min(item["group"], world)}
        if row["group"] < 2:
            skipped.append(
                {
                    **row,
                    "status": "skipped",
                    "reason": f"needs {item['group']} devices; this machine has {world}",
                }
            )
        elif cap is not None and item["bytes"] > cap:
            skipped.append(
                {
                    **row,
                    "status": "skipped",
                    "reason": f"{item['bytes']:,} B is over the CPU cap of {cap:,} B "
                    "(bench.cpu_collective_max_bytes)",
                }
            )
        else:
            plan.append(row)
    return plan, skipped


def bench_collective(cell_json: str, table_path: str, log_path: str | None = None) -> pd.DataFrame:
    """Time one layout's collectives over NCCL (GPUs) or gloo (CPU); write the table."""
    import torch

    from tilesweep.bench.collective import bus_factor, run_plan
    from tilesweep.bench.timing import summarize
    from tilesweep.provenance import stamp

    spec = json.loads(cell_json)
    layout, bench = spec["layout"], spec["bench"]
    cuda = torch.cuda.is_available() and torch.cuda.device_count() > 1
    available = torch.cuda.device_count() if cuda else bench["collective_world_cap"]
    world = min(layout["world"], available)
    prov = stamp()
    backend = "nccl" if cuda else "gloo"
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
            "layout %s: %d collectives to time over %d %s ranks, %d skipped",
            layout["layout"],
            len(plan),
            world,
            backend,
            len(skipped),
        )
        rows = [{**base, **row, **prov} for row in skipped]
        if plan:
            repeats = (
                bench["collective_repeats"] if cuda else max(2, bench["collective_repeats"] // 3)
            )
            samples = run_plan(plan, world, repeats, max(1, bench["warmup"]), cuda)
            for item, times in zip(plan, samples, strict=True):
                stats = summarize(times)
                algbw = item["bytes"] / (stats["time_ms"] * 1e-3) / 1e9
                rows.append(
                    {
                        **base,
                        **item,
                        **stats,
                        "status": "ok",
                        "reason": "",
                        "algbw_gbs": algbw,
                        "busbw_gbs": algbw * bus_factor(item["collective"], item["group"]),
                        **prov,
                    }
                )
        if not rows:
            rows.append(
                {
                    **base,
                    "collective": "none",
                    "group": 1,
                    "bytes": 0,
                    "per_step": 0,
                    "status": "ok",
                    "reason": "one device: no collectives",
                    **prov,
                }
            )
    frame = pd.DataFrame(rows)
    write_table(table_path, frame)
    return frame
