"""The device's own ceilings, measured: copy and read bandwidth, matrix-product rate per dtype."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from tilesweep.device import catalog_name
from tilesweep.measure.timing import capture_graph, summarize, time_cpu, time_events, time_gpu
from tilesweep.provenance import stamp

if TYPE_CHECKING:
    from tilesweep.settings import HardwareSpec


def _graph_ms(fn, repeats: int) -> tuple[float, str]:
    """Return the median ms of fn in graph replays (eager where it cannot be captured), and how."""
    samples, method = time_gpu([fn], repeats, 2)
    return summarize(samples)["time_ms"], method


def _fastest(ways: dict, cuda: bool, repeats: int, eager: bool = False) -> tuple[float, str]:
    """Return the least median ms of the ways (graphed, and eager if asked, on a GPU) and which."""
    ms = {}
    for name, fn in ways.items():
        if not cuda:
            ms[f"{name} (cpu clock)"] = summarize(time_cpu(fn, repeats, 1))["time_ms"]
            continue
        if eager:
            ms[f"{name} (eager, events)"] = summarize(time_events(fn, repeats))["time_ms"]
        graphed, method = _graph_ms(fn, repeats)
        ms[f"{name} ({method}, events)"] = graphed
    best = min(ms, key=ms.get)
    return ms[best], best


def _copy_gbs(nbytes: int, cuda: bool, repeats: int) -> tuple[float, str]:
    """Return the best copy GB/s (read + written) of eager, graphed and SM copies, and how."""
    import torch

    src = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda" if cuda else "cpu").uniform_()
    dst = torch.empty_like(src)
    ways = {"copy_": lambda: dst.copy_(src), "elementwise": lambda: torch.mul(src, 1.0, out=dst)}
    ms, best = _fastest(ways, cuda, repeats, eager=True)
    return 2 * nbytes / (ms * 1e-3) / 1e9, best


def _read_gbs(nbytes: int, cuda: bool, repeats: int) -> tuple[float, str]:
    """Return the read-only GB/s and how: the faster of torch.sum and a Triton partial sum."""
    import torch

    device = "cuda" if cuda else "cpu"
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).uniform_()
    out = torch.empty((), dtype=torch.float32, device=device)
    ways = {"sum": lambda: torch.sum(src, dim=0, out=out)}
    if cuda:
        # triton (via kernels.stream_read): this module loads without it
        from tilesweep.kernels.stream_read import stream_read

        sms = torch.cuda.get_device_properties(0).multi_processor_count
        partial = torch.empty(4 * sms, dtype=torch.float32, device=device)
        ways["triton stream read"] = lambda: stream_read(src, partial)
    ms, best = _fastest(ways, cuda, repeats)
    return nbytes / (ms * 1e-3) / 1e9, best


def _matmul_tflops(n: int, dtype: str, cuda: bool, repeats: int) -> tuple[float | None, str]:
    """Return (TFLOP/s of an n^3 product, the faster weight layout; '') or (None, why it failed)."""
    import torch

    device = "cuda" if cuda else "cpu"
    if dtype == "fp8":
        if not cuda:
            return None, "fp8 products are measured on CUDA devices only"
        a = torch.randn(n, n, device=device).to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device=device).to(torch.float8_e4m3fn).t()
        one = torch.ones((), device=device)
        calls = [lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)]
    else:
        torch_dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
        a = torch.randn(n, n, device=device, dtype=torch_dtype)
        b = torch.randn(n, n, device=device, dtype=torch_dtype)
        # Both weight layouts: K x N, and N x K read transposed as the decode runs' weights are
        # (torch.matmul(a, w.t())); on some CPUs only the second takes the fast bf16 kernel.
        calls = [lambda: a @ b, lambda: a @ b.t()]
    try:
        best, _ = _fastest(dict(enumerate(calls)), cuda, repeats)
    except Exception as exc:  # e.g. fp8 products on a GPU without fp8 tensor cores: a labelled gap
        text = str(exc).strip().splitlines()
        return None, f"{type(exc).__name__}: {text[0] if text else repr(exc)}"[:300]
    return 2 * n**3 / (best * 1e-3) / 1e12, ""


# Tiny kernels per sample of the per-kernel cost (one graph holds them all).
LAUNCH_KERNELS = 1000


# Output widths of the GEMV chain whose intercept is the per-kernel fixed cost (K = 4096, bf16).
GEMV_WIDTHS = (64, 256, 1024, 4096)
GEMV_CALLS = 50


def _chain_us(x, ws: list, outs: list, calls: int, repeats: int) -> float:
    """Return the us per product of a graphed chain of `calls` x @ w over rotating ws and outs."""
    import torch

    def chain():
        for i in range(calls):
            torch.matmul(x, ws[i % len(ws)], out=outs[i % len(outs)])

    return _graph_ms(chain, repeats)[0] * 1e3 / calls


def _gemv_intercept_us(repeats: int) -> tuple[float, list[dict]]:
    """Return (a graphed bf16 GEMV's fixed us: the intercept over GEMV_WIDTHS, its points)."""
    import numpy as np
    import torch

    k = 4096
    x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
    points = []
    for n in GEMV_WIDTHS:
        ws = [torch.randn(k, n, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
        outs = [torch.empty(1, n, device="cuda", dtype=torch.bfloat16) for _ in ws]
        points.append({"bytes": k * n * 2, "us": _chain_us(x, ws, outs, GEMV_CALLS, repeats)})
    slope, intercept = np.polyfit([p["bytes"] for p in points], [p["us"] for p in points], 1)
    return float(intercept), points


# The overlap probe: bf16 [M x K] @ two alternating K x N weights (past any L2), M near the ridge.
OVERLAP_ROWS = (64, 128, 256, 512)
OVERLAP_KN = 8192
OVERLAP_CALLS = 10


def overlap_alpha(points: list[dict], fixed_us: float) -> float | None:
    """Return the median (us - fixed - max(mem, math)) / min(mem, math), clipped to [0, 1]."""
    alphas = []
    for p in points:
        low, high = sorted((p["mem_us"], p["math_us"]))
        if low > 0:
            alphas.append((p["us"] - fixed_us - high) / low)
    if not alphas:
        return None
    mid = statistics.median(alphas)
    return min(1.0, max(0.0, mid))


def _overlap(repeats: int, read_gbs: float, bf16_tflops: float | None, fixed_us: float) -> dict:
    """Return {alpha, points, method}: memory/math overlap of bf16 products near the ridge."""
    import torch

    if not bf16_tflops:
        return {"alpha": None, "points": [], "method": "no bf16 product rate measured"}
    k = n = OVERLAP_KN
    ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    points = []
    for m in OVERLAP_ROWS:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        outs = [torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in ws]
        us = _chain_us(x, [w.t() for w in ws], outs, OVERLAP_CALLS, repeats)
        nbytes = 2 * (k * n + m * k + m * n)
        points.append(
            {
                "rows": m,
                "us": us,
                "mem_us": nbytes / (read_gbs * 1e9) * 1e6,
                "math_us": 2 * m * k * n / (bf16_tflops * 1e12) * 1e6,
            }
        )
    return {
        "alpha": overlap_alpha(points, fixed_us),
        "points": points,
        "method": f"graphed bf16 products [M x {k}] @ [{k} x {n}], M = {list(OVERLAP_ROWS)}, "
        "two weights alternating; bytes at read_gbs, flops at matmul_tflops.bf16, beyond the "
        "GEMV intercept (launch.fixed_us)",
    }


# The small-kernel probe: dependent elementwise, reduction and copy kernels (as engines run beside
# their GEMMs at decode) on a decode-sized bf16 activation.
SMALL_ROWS, SMALL_WIDTH = 8, 7168
SMALL_KERNELS = 240


def _small_kernel_us(repeats: int) -> float:
    """Return the us of one small graphed decode kernel (an engine list's `extra`)."""
    import torch

    x = torch.randn(SMALL_ROWS, SMALL_WIDTH, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    scale = torch.empty(SMALL_ROWS, SMALL_WIDTH // 128, device="cuda", dtype=torch.bfloat16)
    padded = torch.empty(SMALL_ROWS + 1, SMALL_WIDTH, device="cuda", dtype=torch.bfloat16)
    ops = (
        lambda: torch.nn.functional.silu(x, inplace=False).mul_(0.5),  # 2 kernels
        lambda: torch.amax(x.view(SMALL_ROWS, -1, 128).abs(), dim=2, out=scale),  # 2 kernels
        lambda: y.copy_(x),
        lambda: padded[:SMALL_ROWS].copy_(y),
        lambda: x.add_(y, alpha=1e-3),
    )
    kernels = (2, 2, 1, 1, 1)

    def chain():
        for _ in range(SMALL_KERNELS // sum(kernels)):
            for op in ops:
                op()

    launched = (SMALL_KERNELS // sum(kernels)) * sum(kernels)
    return _graph_ms(chain, repeats)[0] * 1e3 / launched


def _host_loop_us(repeats: int) -> dict:
    """Return the host us a minimal serving loop adds per graphed step (a lower bound)."""
    import time

    import torch

    w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    tok = torch.zeros(1, dtype=torch.long, device="cuda")
    emb = torch.randn(32000, 4096, device="cuda", dtype=torch.bfloat16)
    logits = torch.empty(1, 4096, device="cuda", dtype=torch.bfloat16)

    def step():
        h = emb[tok]
        for _ in range(8):
            h = torch.matmul(h, w)
        logits.copy_(h)

    graph = capture_graph([step])
    gpu, _ = _graph_ms(graph.replay, repeats)
    steps = 200
    samples = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(steps):
            graph.replay()
            nxt = torch.argmax(logits, dim=-1)
            tok.copy_(nxt.view(1) % 32000)
            int(nxt.item())  # the scheduler reads the token: one sync a step
        samples.append((time.perf_counter() - start) * 1e3 / steps)
    loop = summarize(samples)["time_ms"]
    return {
        "host_us": max(0.0, (loop - gpu) * 1e3),
        "loop_us": loop * 1e3,
        "graph_us": gpu * 1e3,
        "method": f"{steps} steps: graph replay, argmax, token to the CPU, next input; loop time "
        "per step less the graph's GPU time (cuda-graph, events)",
    }


def launch_us(cuda: bool, repeats: int) -> dict:
    """Return a kernel's fixed us: `graph_us`, `fixed_us` (GEMV intercept) and `eager_us`."""
    import torch

    device = "cuda" if cuda else "cpu"
    x = torch.zeros(1, device=device)

    def many():
        for _ in range(LAUNCH_KERNELS):
            x.add_(1.0)

    if not cuda:
        eager = summarize(time_cpu(many, repeats, 1))["time_ms"] * 1e3 / LAUNCH_KERNELS
        return {
            "graph_us": None,
            "fixed_us": None,
            "eager_us": eager,
            "method": "cpu clock, one op per launch",
        }
    eager = summarize(time_events(many, repeats))["time_ms"] * 1e3 / LAUNCH_KERNELS
    graph_ms, method = _graph_ms(many, repeats)
    graph = graph_ms * 1e3 / LAUNCH_KERNELS
    fixed, points = _gemv_intercept_us(repeats)
    return {
        "graph_us": graph,
        "fixed_us": fixed,
        "small_us": _small_kernel_us(repeats),
        "eager_us": eager,
        "gemv_points": points,
        "host_loop": _host_loop_us(repeats),
        "method": f"{LAUNCH_KERNELS} one-element additions ({method}, events); fixed: the "
        f"intercept of {GEMV_CALLS}-GEMV graphs, 1 x 4096 @ 4096 x {list(GEMV_WIDTHS)} bf16; "
        f"small: {SMALL_KERNELS} dependent elementwise, reduction and copy kernels on "
        f"{SMALL_ROWS} x {SMALL_WIDTH} bf16 in one graph",
    }


def measure(catalog: dict[str, HardwareSpec]) -> dict:
    """Return measured ceilings of the device at hand, with the datasheet's beside them."""
    import torch

    cuda = torch.cuda.is_available()
    info = stamp()
    if cuda:
        copy_bytes, n, repeats = 2 << 30, 8192, 20
        props = torch.cuda.get_device_properties(0)
        measured_props = {
            "sm_count": props.multi_processor_count,
            "smem_per_block_optin": getattr(props, "shared_memory_per_block_optin", None),
            "smem_per_sm": getattr(props, "shared_memory_per_multiprocessor", None),
            "l2_bytes": getattr(props, "L2_cache_size", None),
            "memory_bytes": props.total_memory,
        }
    else:
        copy_bytes, n, repeats = 256 << 20, 1024, 3
        measured_props = {"threads": torch.get_num_threads()}
    copy_gbs, copy_method = _copy_gbs(copy_bytes, cuda, repeats)
    read_gbs, read_method = _read_gbs(copy_bytes, cuda, repeats)
    products = {d: _matmul_tflops(n, d, cuda, repeats) for d in ("bf16", "fp8", "fp32")}
    ceilings = {
        "copy_gbs": copy_gbs,
        "copy_method": copy_method,
        "read_gbs": read_gbs,
        "read_method": read_method,
        "matmul_tflops": {d: rate for d, (rate, _) in products.items()},
        "matmul_errors": {d: why for d, (rate, why) in products.items() if rate is None},
        "matmul_n": n,
        "copy_bytes": copy_bytes,
        "launch": launch_us(cuda, repeats),
    }
    fixed = ceilings["launch"].get("fixed_us")
    if cuda and fixed is not None:
        ceilings["overlap"] = _overlap(repeats, read_gbs, ceilings["matmul_tflops"]["bf16"], fixed)
    name = catalog_name(info["device"], catalog) if cuda else None
    sheet = catalog.get(name) if name else None
    return {
        **info,
        **ceilings,
        "properties": measured_props,
        "catalog_name": name,
        "datasheet": {
            "copy_gbs": sheet.memory_bandwidth_gbs,
            "matmul_tflops": dict(sheet.peak_tflops),
            "l2_bytes": sheet.l2_bytes,
        }
        if sheet
        else None,
    }
