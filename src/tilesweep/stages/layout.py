"""Stage 4b: measure one parallel layout's MoE decode step at every batch that fits here."""

from __future__ import annotations

import json
import os

import pandas as pd

from tilesweep.io import read_json, write_table
from tilesweep.stages import logged


def _machine(world: int, bench: dict) -> tuple[bool, int, str]:
    """Return (on GPUs, devices or processes available, why the layout cannot run or '')."""
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus:
        why = "" if world <= gpus else f"needs {world} GPUs; this machine has {gpus}"
        return True, gpus, why
    cap = bench["collective_world_cap"]
    why = "" if world <= cap else f"needs {world} processes; bench.collective_world_cap is {cap}"
    return False, cap, why


def plan_batches(spec: dict, cuda: bool, decode: pd.DataFrame) -> tuple[list[dict], list[dict]]:
    """Return (batches to run with their runners, batches skipped with the reason)."""
    from tilesweep.plan.sharding import FALLBACK_RUNNER, pick_runner

    bench = spec["bench"]
    cap = None if cuda else bench["layout_cpu_max_tokens_per_expert"]
    choice = bench["layout_runner"]
    run, skipped = [], []
    for t in spec["tokens_per_expert"]:
        if not cuda and choice not in ("best", FALLBACK_RUNNER):
            reason = (
                f"layout_runner {choice} runs on CUDA devices only; the CPU runs {FALLBACK_RUNNER}"
            )
            skipped.append({"tokens_per_expert": t, "status": "unsupported", "reason": reason})
            continue
        if cap is not None and t > cap:
            reason = (
                f"tokens_per_expert {t} is over the CPU cap of {cap} "
                "(bench.layout_cpu_max_tokens_per_expert)"
            )
            skipped.append({"tokens_per_expert": t, "status": "skipped", "reason": reason})
            continue
        runners = {op: pick_runner(decode, op, t, choice) for op in ("gate_up", "down")}
        run.append({"t": t, "runners": runners})
    return run, skipped


def _critical(ranks: list[dict], index: int) -> tuple[list[float], dict, int]:
    """Return the step times of every repeat (slowest rank each), and the parts and rank of the
    median repeat."""
    repeats = len(ranks[0]["batches"][index]["samples"])
    per_repeat = []
    for r in range(repeats):
        slowest = max(ranks, key=lambda rk: rk["batches"][index]["samples"][r]["step"])
        per_repeat.append((slowest["batches"][index]["samples"][r], slowest["rank"]))
    ordered = sorted(per_repeat, key=lambda item: item[0]["step"])
    parts, rank = ordered[len(ordered) // 2]
    return [p["step"] for p, _ in per_repeat], parts, rank


def summarize_batch(ranks: list[dict], index: int, spec: dict, ceilings: dict) -> dict:
    """Return one measured row: the step as run, and scaled to the stage's layers and experts."""
    from tilesweep.measure.timing import summarize
    from tilesweep.plan import roofline
    from tilesweep.plan.messages import local_tokens
    from tilesweep.plan.sharding import layers_per_stage, step_parts

    layout, model = spec["layout"], spec["model"]
    first = ranks[0]
    batch = first["batches"][index]
    t = batch["t"]
    steps, raw, critical = _critical(ranks, index)
    stats = summarize(steps)
    layers = layers_per_stage(layout, model)
    experts_here = model["routed_experts"] // layout["ep"]
    layer_scale = layers / first["layers_run"]
    expert_scale = experts_here / first["experts_run"]
    parts = step_parts(layout, model, t, first["experts_run"])
    peak = ceilings["matmul_tflops"].get("bf16") or ceilings["matmul_tflops"].get("fp32")
    bw = ceilings["copy_gbs"]
    shares = {"compute_memory_ms": 0.0, "compute_math_ms": 0.0, "comm_ms": 0.0}
    row, bounds = {}, {"memory": [], "math": []}
    raw_parts = 0.0
    for name, info in parts.items():
        ms = raw.get(name, 0.0)
        raw_parts += ms
        scaled = ms * (layer_scale if info["per"] == "layer" else 1.0)
        scaled *= expert_scale if info["experts_scaled"] else 1.0
        row[f"part_{name}_ms"] = scaled
        if info["kind"] == "comm":
            shares["comm_ms"] += scaled
            continue
        side = roofline.bound(info["flops"], info["bytes"], peak, bw)
        bounds[side].append(name)
        shares[f"compute_{side}_ms"] += scaled
    other = max(0.0, raw["step"] - raw_parts) * layer_scale
    step_ms = sum(shares.values()) + other
    power = [b["batches"][index]["power"] for b in ranks if b["batches"][index].get("power")]
    watts = [p["power_w"] for p in power if p.get("power_w") is not None]
    fracs = [p["power_frac"] for p in power if p.get("power_frac") is not None]
    finite = all(rk["batches"][index]["finite"] for rk in ranks)
    return {
        "tokens_per_expert": t,
        "local_tokens": local_tokens(layout, model, t),
        "layers_run": first["layers_run"],
        "layers_per_stage": layers,
        "experts_run": first["experts_run"],
        "experts_per_rank": experts_here,
        "layer_scale": layer_scale,
        "expert_scale": expert_scale,
        "scaling": (
            f"{first['layers_run']} of {layers} layers run (x{layer_scale:.4g}); "
            f"{first['experts_run']} of {experts_here} experts per rank run "
            f"(expert GEMMs x{expert_scale:.4g}); collectives at full size"
        ),
        "runner_gate_up": batch["runners"]["gate_up"],
        "runner_down": batch["runners"]["down"],
        **shares,
        "other_ms": other,
        "step_ms": step_ms,
        "raw_step_ms": stats["time_ms"],
        "raw_step_p10_ms": stats["time_p10_ms"],
        "raw_step_p90_ms": stats["time_p90_ms"],
        "repeats": stats["repeats"],
        "critical_rank": critical,
        "memory_parts": ";".join(bounds["memory"]),
        "math_parts": ";".join(bounds["math"]),
        **row,
        "ceiling_copy_gbs": bw,
        "ceiling_matmul_tflops": peak,
        "power_w": sum(watts) / len(watts) if watts else None,
        "power_frac": sum(fracs) / len(fracs) if fracs else None,
        "status": "ok" if finite else "correctness",
        "reason": "" if finite else "non-finite activations after the step",
    }


def bench_layout(
    cell_json: str,
    ceilings_path: str,
    decode_paths: list[str],
    table_path: str,
    log_path: str | None = None,
) -> pd.DataFrame:
    """Measure one layout's decode step at every batch (NCCL on GPUs, gloo on the CPU); write
    and return the table."""
    from tilesweep.io import concat_tables
    from tilesweep.measure.moe_step import run_layout
    from tilesweep.plan.messages import decode_batch
    from tilesweep.provenance import stamp

    spec = json.loads(cell_json)
    layout, model, bench = spec["layout"], spec["model"], spec["bench"]
    world = layout["world"]
    cuda, available, why = _machine(world, bench)
    decode = concat_tables(list(decode_paths))
    ceilings = read_json(ceilings_path)
    cores = os.cpu_count() or 1
    base = {
        "layout": layout["layout"],
        "tp": layout["tp"],
        "pp": layout["pp"],
        "ep": layout["ep"],
        "world": world,
        "model": model["name"],
        "backend": "nccl" if cuda else "gloo",
        "ranks_per_core": None if cuda else world / cores,
        **stamp(),
    }
    with logged(log_path) as log:
        run, skipped = plan_batches(spec, cuda, decode)
        rows = [{**base, **s} for s in skipped]
        if why:
            rows += [
                {**base, "tokens_per_expert": b["t"], "status": "skipped", "reason": why}
                for b in run
            ]
            run = []
        log.info(
            "layout %s on %d %s ranks: %d batches to run, %d skipped",
            layout["layout"],
            world,
            base["backend"],
            len(run),
            len(rows),
        )
        if run:
            worker_spec = {
                "layout": layout,
                "model": model,
                "bench": bench,
                "kernels": spec.get("kernels", {}),
                "experts_run": bench["layout_gpu_experts" if cuda else "layout_cpu_experts"],
                "layers_run": bench["layout_layers"],
                "warmup": bench["warmup"] if cuda else min(bench["warmup"], 1),
                "repeats": bench["repeats"] if cuda else bench["cpu_repeats"],
                "power_seconds": bench["layout_power_seconds"] if cuda else 0.0,
                "batches": run,
            }
            try:
                ranks = run_layout(worker_spec, world, cuda, bench["layout_timeout_s"])
            except Exception as exc:  # a failed or hung layout is a row per batch, not a crash
                status = "timeout" if isinstance(exc, TimeoutError) else "runtime"
                msg = str(exc).strip().splitlines()[-1] if str(exc).strip() else repr(exc)
                log.info("layout %s failed: %s", layout["layout"], msg)
                rows += [
                    {**base, "tokens_per_expert": b["t"], "status": status, "reason": msg}
                    for b in run
                ]
                ranks = []
            for i in range(len(run) if ranks else 0):
                row = {**base, **summarize_batch(ranks, i, worker_spec, ceilings)}
                log.info(
                    "t=%d: step %.3f ms as run, %.1f ms scaled (memory %.1f, math %.1f, comm %.1f)",
                    row["tokens_per_expert"],
                    row["raw_step_ms"],
                    row["step_ms"],
                    row["compute_memory_ms"],
                    row["compute_math_ms"],
                    row["comm_ms"],
                )
                rows.append(row)
    frame = pd.DataFrame(rows)
    frame["batch_tokens"] = [decode_batch(int(t), model) for t in frame["tokens_per_expert"]]
    frame = frame.sort_values("tokens_per_expert").reset_index(drop=True)
    write_table(table_path, frame)
    return frame
