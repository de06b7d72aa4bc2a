"""Loads of known bound sampled by NVML, to set a power reading against (GPU only)."""

import json
import statistics
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

import pandas as pd

from tilesweep.columns import consistency_columns
from tilesweep.measure.process_group import init_rank, run_ranks
from tilesweep.measure.timing import PowerSampler, capture_graph, percentile

# What each load is built to be bound by (the row's `expected_bound`).
LOADS = {
    "idle": "idle",
    "decode_gemm": "memory",
    "math_gemm": "math",
    "launch_loop": "launch",
    "allreduce_small": "communication latency",
    "allreduce_large": "communication bandwidth",
}
COLLECTIVE_LOADS = ("allreduce_small", "allreduce_large")
DECODE_TOKENS = 16  # rows of the decode GEMM and of the small all-reduce message
SMALL_MESSAGE_TOKENS = 16
LARGE_MESSAGE_BYTES = 256 << 20


def quantiles(values: list[float]) -> dict:
    """Return median, p10 and p90 of a list (NaN-free), or Nones when it is empty."""
    if not values:
        return {"median": None, "p10": None, "p90": None}
    p10, p90 = percentile(values, 0.1), percentile(values, 0.9)
    return {"median": statistics.median(values), "p10": p10, "p90": p90}


def sample_row(sampler: PowerSampler, seconds: float) -> dict:
    """Return a load's power columns: watts, limit fraction, SM clock, throttling, samples."""
    power = [s[0] for s in sampler.samples]
    q = quantiles(power)
    limit = sampler.limit_w
    row = {
        "power_samples": len(power),
        "sample_hz": round(len(power) / seconds, 1) if seconds > 0 else None,
        "power_limit_w": limit,
        **{f"power_w_{key}": value for key, value in q.items()},
        "sm_clock_mhz_median": quantiles([s[1] for s in sampler.samples])["median"],
        "throttled_frac": (
            round(sum(1 for s in sampler.samples if s[2]) / len(power), 3) if power else None
        ),
    }
    for key in ("median", "p10", "p90"):
        row[f"power_frac_{key}"] = round(q[key] / limit, 4) if limit and q[key] else None
    return row


def sustain(step: Callable[[], object], seconds: float, sync: Callable[[], None]) -> tuple:
    """Run `step` back to back for `seconds` (checked between calls); return (calls, elapsed s)."""
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step()
        calls += 1
        if calls % 8 == 0:
            sync()
    sync()
    return calls, time.perf_counter() - start


def single_gpu_loads(model: dict, seconds: float, period_s: float) -> list[dict]:
    """Return one measured row per single-GPU load (idle, decode GEMM, math GEMM, launch loop)."""
    import torch

    dev = torch.device("cuda")
    sync = torch.cuda.synchronize
    gen = torch.Generator(device=dev).manual_seed(0)
    hidden = model["hidden"]
    # The decode GEMM's weight: every expert of a layer's gate/up side by side, well past L2.
    n = 2 * model["moe_intermediate"] * min(model["routed_experts"], 64)
    x = torch.randn(DECODE_TOKENS, hidden, device=dev, generator=gen, dtype=torch.bfloat16)
    w = torch.randn(n, hidden, device=dev, generator=gen, dtype=torch.bfloat16)
    y = torch.empty(DECODE_TOKENS, n, device=dev, dtype=torch.bfloat16)
    big = torch.randn(8192, 8192, device=dev, generator=gen, dtype=torch.bfloat16)
    out = torch.empty_like(big)
    tiny = torch.ones(1, device=dev)
    reps = 10
    decode = capture_graph([lambda: torch.matmul(x, w.t(), out=y)] * reps)
    math = capture_graph([lambda: torch.matmul(big, big, out=out)] * reps)
    plans = {
        "idle": (lambda: time.sleep(0.05), None),
        "decode_gemm": (
            decode.replay,
            ("GB/s", reps * (w.numel() * 2 + x.numel() * 2 + y.numel() * 2) / 1e9),
        ),
        "math_gemm": (math.replay, ("TFLOP/s", reps * 2 * 8192**3 / 1e12)),
        "launch_loop": (lambda: tiny.add_(1), ("kernels/s", 1.0)),
    }
    rows = []
    for name, (step, metric) in plans.items():
        sustain(step, min(0.5, seconds), sync)  # warm up: clocks and caches settle
        with PowerSampler(torch.cuda.current_device(), period_s) as sampler:
            calls, elapsed = sustain(step, seconds, sync)
        row = {"load": name, "expected_bound": LOADS[name], "seconds": round(elapsed, 2)}
        if metric is not None:
            unit, per_call = metric
            row.update({"achieved": calls * per_call / elapsed, "achieved_unit": unit})
        rows.append({**row, **sample_row(sampler, elapsed), "status": "ok", "reason": ""})
    return rows


def _collective_worker(rank: int, world: int, port: int, spec: dict, out_dir: str) -> None:
    """Run the two all-reduce loads on one rank; rank 0 samples its GPU and writes the rows."""
    torch, dist = init_rank(rank, world, port, True)
    sync = torch.cuda.synchronize
    small = torch.randn(SMALL_MESSAGE_TOKENS * spec["hidden"], device="cuda", dtype=torch.bfloat16)
    large = torch.randn(LARGE_MESSAGE_BYTES // 2, device="cuda", dtype=torch.bfloat16)
    rows = []
    for name, tensor in (("allreduce_small", small), ("allreduce_large", large)):
        step = lambda t=tensor: dist.all_reduce(t)  # noqa: E731 (bound per load)
        sustain(step, min(0.5, spec["seconds"]), sync)
        dist.barrier()
        with PowerSampler(rank, spec["period_s"]) if rank == 0 else nullcontext() as sampler:
            calls, elapsed = sustain(step, spec["seconds"], sync)
        dist.barrier()
        nbytes = tensor.numel() * 2
        bus = 2 * (world - 1) / world * nbytes * calls / elapsed / 1e9
        if rank == 0:
            rows.append(
                {
                    "load": name,
                    "expected_bound": LOADS[name],
                    "seconds": round(elapsed, 2),
                    "message_bytes": nbytes,
                    "achieved": bus,
                    "achieved_unit": "bus GB/s",
                    **sample_row(sampler, elapsed),
                    "status": "ok",
                    "reason": "",
                }
            )
    dist.destroy_process_group()
    if rank == 0:
        Path(out_dir, "rank0.json").write_text(json.dumps(rows))


def collective_loads(model: dict, seconds: float, period_s: float, gpus: int) -> list[dict]:
    """Return the all-reduce loads' rows over two GPUs, or rows saying why they did not run."""
    if gpus < 2:
        return unsupported(COLLECTIVE_LOADS, f"needs 2 GPUs; this machine has {gpus}")
    spec = {"hidden": model["hidden"], "seconds": seconds, "period_s": period_s}
    return run_ranks(_collective_worker, 2, (spec,), True)[0]


def unsupported(loads, reason: str) -> list[dict]:
    """Return a row per load that cannot run here, with the reason."""
    return [
        {"load": n, "expected_bound": LOADS[n], "status": "unsupported", "reason": reason}
        for n in loads
    ]


def reading_consistency(power: pd.DataFrame, frac: float, reader: str) -> pd.DataFrame:
    """Return per load whether a reading of `frac` lies in its p10..p90 band, and how far."""
    columns = consistency_columns(reader)
    if power.empty or "status" not in power:
        return pd.DataFrame(columns=columns)
    rows = []
    for rec in power[power["status"] == "ok"].to_dict("records"):
        low, high = rec["power_frac_p10"], rec["power_frac_p90"]
        if low is None or high is None or low != low or high != high:
            verdict = "no samples"
        elif low <= frac <= high:
            verdict = "consistent"
        else:
            side = "below" if frac < low else "above"
            gap = (low - frac) if frac < low else (frac - high)
            verdict = f"not consistent: the {reader}'s reading is {gap:.0%} of the limit {side} it"
        band = f"{low:.0%}..{high:.0%}" if verdict != "no samples" else ""
        values = [rec["load"], rec["expected_bound"], band, f"{frac:.0%}", verdict]
        rows.append(dict(zip(columns, values, strict=True)))
    return pd.DataFrame(rows)
