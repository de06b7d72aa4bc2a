"""Decode benchmark: the model's grouped expert GEMMs at each tokens-per-expert."""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tilesweep.errors import LaunchError
from tilesweep.measure.timing import PowerSampler, summarize, time_cpu, time_gpu
from tilesweep.plan.expert_shapes import tile_schedule, traffic

if TYPE_CHECKING:
    from tilesweep.settings import BenchSettings

# CUfunction_attribute value of CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES (cuda.h): static shared memory.
CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1
# cuda.h's CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK: the driver counts outside the
# function what a cubin shows as static shared memory (Triton's 1,024 B on sm_90).
CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK = 111
# Relative L2 error allowed against the float32 reference, per operand type.
TOLERANCE = {"bf16": 2e-2, "fp8": 8e-2}


@dataclass
class Problem:
    """One set of device buffers for a grouped GEMM."""

    a: object
    b: object
    c: object
    a_scale: object
    b_scale: object
    offsets: list[int]


def make_problem(
    counts: list[int], n: int, k: int, dtype: str, out_dtype, device: str, gen
) -> Problem:
    """Return fresh random buffers (never zeros) for one grouped GEMM."""
    import torch

    tokens, experts = sum(counts), len(counts)
    # Drawn where they live: `gen` is a generator on `device`.
    a = torch.randn(tokens, k, generator=gen, device=device)
    b = torch.randn(experts, n, k, generator=gen, device=device) / math.sqrt(k)
    if dtype == "fp8":
        a_scale = a.abs().amax(dim=1).clamp(min=1e-6) / 448.0
        b_scale = b.abs().amax(dim=2).clamp(min=1e-6) / 448.0
        a = (a / a_scale[:, None]).to(torch.float8_e4m3fn)
        b = (b / b_scale[:, :, None]).to(torch.float8_e4m3fn)
    else:
        a, b = a.to(torch.bfloat16), b.to(torch.bfloat16)
        a_scale = torch.ones(max(tokens, 1), device=device)
        b_scale = torch.ones(experts, n, device=device)
    c = torch.full((tokens, n), float("nan"), dtype=out_dtype, device=device)
    offsets = [0]
    for cnt in counts:
        offsets.append(offsets[-1] + cnt)
    return Problem(a, b, c, a_scale.float().contiguous(), b_scale.float().contiguous(), offsets)


def reference(p: Problem, dtype: str):
    """Return the float32 reference product of a problem."""
    import torch

    out = torch.empty(p.c.shape, dtype=torch.float32, device=p.c.device)
    for e in range(len(p.offsets) - 1):
        lo, hi = p.offsets[e], p.offsets[e + 1]
        if hi > lo:
            a, b = p.a[lo:hi].float(), p.b[e].float()
            if dtype == "fp8":
                a = a * p.a_scale[lo:hi, None]
                b = b * p.b_scale[e][:, None]
            out[lo:hi] = a @ b.t()
    return out


def rel_error(out, ref) -> float:
    """Return ||out - ref|| / ||ref||, or inf when out has unwritten (NaN) elements."""
    import torch

    out = out.float()
    if not torch.isfinite(out).all():
        return float("inf")
    denom = torch.linalg.vector_norm(ref).item() or 1.0
    return torch.linalg.vector_norm(out - ref).item() / denom


def launched_smem(dynamic: int, function: int | None, lib=None) -> dict:
    """Return a launch's dynamic, static, reserved and total shared memory per block (libcuda's
    static size of the function and its reserved shared memory per block)."""
    out = {"smem_runtime_dynamic_bytes": int(dynamic)}
    static, reserved, device = (ctypes.c_int(-1) for _ in range(3))
    try:
        if function is None:
            raise RuntimeError("the launcher returned no loaded function")
        lib = lib if lib is not None else ctypes.CDLL("libcuda.so.1")
        attribute = ctypes.c_int(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)
        rc = lib.cuFuncGetAttribute(ctypes.byref(static), attribute, ctypes.c_void_p(function))
        if rc != 0 or static.value < 0:
            raise RuntimeError(f"cuFuncGetAttribute(SHARED_SIZE_BYTES) returned CUresult {rc}")
        rc = lib.cuCtxGetDevice(ctypes.byref(device))
        if rc == 0:
            attribute = ctypes.c_int(CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK)
            rc = lib.cuDeviceGetAttribute(ctypes.byref(reserved), attribute, device)
        if rc != 0 or reserved.value < 0:
            raise RuntimeError(
                f"cuDeviceGetAttribute(RESERVED_SHARED_MEMORY_PER_BLOCK): CUresult {rc}"
            )
    except (OSError, RuntimeError, AttributeError) as exc:
        unknown = ("smem_runtime_static_bytes", "smem_runtime_reserved_bytes", "smem_runtime_bytes")
        return {
            **out,
            **dict.fromkeys(unknown),
            "smem_runtime_note": f"static shared memory unknown: {exc}",
        }
    return {
        **out,
        "smem_runtime_static_bytes": static.value,
        "smem_runtime_reserved_bytes": reserved.value,
        "smem_runtime_bytes": int(dynamic) + static.value + reserved.value,
    }


def triton_runner(kernel: dict, counts: list[int]) -> Callable[[Problem], object]:
    """Return a call that launches the Triton grouped GEMM on a problem."""
    import torch
    import triton

    # triton (via kernels.triton_grouped_gemm): this module loads without it
    from tilesweep.kernels.triton_grouped_gemm import grouped_gemm

    ex, st, en = tile_schedule(counts, kernel["tile_m"])
    device = "cuda"
    meta = [torch.tensor(v or [0], dtype=torch.int32, device=device) for v in (ex, st, en)]
    num_tiles = len(ex)
    launched = {}

    def call(p: Problem):
        from triton.runtime.errors import OutOfResources

        n, k = p.b.shape[1], p.b.shape[2]
        grid = (max(num_tiles, 1), triton.cdiv(n, kernel["tile_n"]))
        try:
            compiled = grouped_gemm[grid](
                p.a,
                p.b,
                p.c,
                p.a_scale,
                p.b_scale,
                *meta,
                num_tiles,
                n,
                k,
                BLOCK_M=kernel["tile_m"],
                BLOCK_N=kernel["tile_n"],
                BLOCK_K=kernel["tile_k"],
                HAS_SCALE=kernel["dtype"] == "fp8",
                num_warps=kernel["warps"],
                num_stages=kernel["stages"],
            )
        except OutOfResources as exc:  # Triton refused the launch before it reached the device
            raise LaunchError(f"OutOfResources: {exc}") from exc
        if compiled is not None and not launched:
            launched.update(
                launched_smem(compiled.metadata.shared, getattr(compiled, "function", None))
            )
        return p.c

    call.launched = launched
    return call


MAX_ROTATION_SETS = 8


def _rotation_sets(weight_bytes: int, cuda: bool, l2_bytes: int | None) -> int:
    """Return how many buffer sets to rotate so weights come from memory, not L2."""
    if not cuda:
        return 1
    if l2_bytes is None:
        return MAX_ROTATION_SETS
    return max(1, min(MAX_ROTATION_SETS, math.ceil(4 * l2_bytes / max(weight_bytes, 1))))


def sustained_power(fns: list[Callable[[], object]], seconds: float) -> dict:
    """Return the NVML power columns of `fns` replayed round robin for at least `seconds`."""
    import time

    import torch

    if seconds <= 0:
        return {"power_samples": 0, "power_seconds": 0.0}
    with PowerSampler(period_s=0.02) as sampler:
        start, calls = time.perf_counter(), 0
        while time.perf_counter() - start < seconds:
            fns[calls % len(fns)]()
            calls += 1
            if calls % 16 == 0:
                torch.cuda.synchronize()
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
    return {**sampler.summary(), "power_seconds": round(elapsed, 3), "power_calls": calls}


def measure_case(
    make_call: Callable,
    counts: list[int],
    n: int,
    k: int,
    dtype: str,
    out_dtype,
    bench: BenchSettings,
    cuda: bool,
    l2_bytes: int | None,
    gen,
) -> dict:
    """Return timing, correctness and power for one kernel at one routing and batch."""
    device = "cuda" if cuda else "cpu"
    out_bytes = 4 if str(out_dtype).endswith("float32") else 2
    info = traffic(counts, n, k, dtype, out_bytes)
    sets = _rotation_sets(info["weight_bytes"], cuda, l2_bytes)
    problems = [make_problem(counts, n, k, dtype, out_dtype, device, gen) for _ in range(sets)]
    call = make_call()
    call(problems[0])
    err = rel_error(problems[0].c, reference(problems[0], dtype))
    row = {"rel_err": err, "rotation_sets": sets, **info}
    row["smem_runtime_bytes"] = None  # only a runner that reports its launch (Triton) fills it
    row.update(getattr(call, "launched", {}))
    if not err <= TOLERANCE[dtype]:
        return {
            **row,
            "status": "correctness",
            "reason": f"relative error {err:.3g} > {TOLERANCE[dtype]} against fp32 reference",
        }
    fns = [lambda p=p: call(p) for p in problems]
    if cuda:
        samples, method = time_gpu(fns, bench.repeats, bench.warmup)
        row.update(sustained_power(fns, bench.decode_power_seconds))
    else:
        samples = time_cpu(fns[0], bench.cpu_repeats, min(bench.warmup, 1))
        method = "cpu-perf-counter"
    stats = summarize(samples)
    seconds = stats["time_ms"] * 1e-3
    return {
        **row,
        **stats,
        "status": "ok",
        "reason": "",
        "timing": method,
        "tflops": info["flops"] / seconds / 1e12,
        "gbs": info["bytes"] / seconds / 1e9,
    }
