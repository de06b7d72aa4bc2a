"""Collective benchmark: the all-reduce, all-to-all and send/recv one decode step needs."""

from __future__ import annotations

import json
import math
import os
import socket
import tempfile
import time
from pathlib import Path

# NVLink multicast stays off: on shared hosts it can take GPUs out of service.
SAFE_NCCL_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
BYTES_PER_ELEMENT = 2  # activations travel in bf16
# Messages up to this size give the small-message latency floor.
LATENCY_FLOOR_BYTES = 65536
# On a GPU, calls of at most this many bytes are timed back to back, this many per sample.
SMALL_MESSAGE_BYTES = 1 << 20
SMALL_MESSAGE_CALLS = 20


def decode_batch(tokens_per_expert: int, model: dict) -> int:
    """Return the tokens in one decode step that give each expert this many tokens on average."""
    return max(1, tokens_per_expert * model["routed_experts"] // model["top_k"])


def local_tokens(layout: dict, model: dict, tokens_per_expert: int) -> int:
    """Return the tokens one rank holds: the batch split over ep ranks (data-parallel attention)."""
    return -(-decode_batch(tokens_per_expert, model) // layout["ep"])


def dispatch_rows(layout: dict, model: dict, tokens_per_expert: int) -> int:
    """Return the rows one rank sends in an EP dispatch: local tokens x top_k, padded to ep."""
    rows = local_tokens(layout, model, tokens_per_expert) * model["top_k"]
    return -(-rows // layout["ep"]) * layout["ep"]


def step_messages(layout: dict, model: dict, tokens_per_expert: int) -> list[dict]:
    """Return the collectives of one decode step on one pipeline stage: kind, group size, bytes
    per call and calls per step."""
    hidden = model["hidden"] * BYTES_PER_ELEMENT
    tokens = local_tokens(layout, model, tokens_per_expert)
    layers_per_stage = -(-model["moe_layers"] // layout["pp"])
    msgs = []
    if layout["tp"] > 1:
        # Attention output and MoE output are each all-reduced once per layer.
        msgs.append(
            {
                "collective": "all_reduce",
                "group": layout["tp"],
                "bytes": tokens * hidden,
                "per_step": 2 * layers_per_stage,
            }
        )
    if layout["ep"] > 1:
        # Dispatch and combine: each rank sends its tokens' hidden states to top_k experts.
        msgs.append(
            {
                "collective": "all_to_all",
                "group": layout["ep"],
                "bytes": dispatch_rows(layout, model, tokens_per_expert) * hidden,
                "per_step": 2 * layers_per_stage,
            }
        )
    if layout["pp"] > 1:
        # Each stage hands its activations to the next once per step; stages send concurrently.
        msgs.append(
            {
                "collective": "send_recv",
                "group": 2,
                "bytes": tokens * hidden,
                "per_step": 1,
            }
        )
    return msgs


def sweep_sizes(low: int, high: int, factor: int) -> list[int]:
    """Return message sizes from low to high bytes, each `factor` times the previous."""
    sizes, size = [], max(4, low)
    while size <= high:
        sizes.append(size)
        if factor < 2:
            break
        size *= factor
    return sizes


def bus_factor(collective: str, n: int) -> float:
    """Return nccl-tests' bus-bandwidth factor for a collective over n ranks."""
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective == "all_to_all":
        return (n - 1) / n
    return 1.0


def fit_alpha_beta(sizes: list[float], times_ms: list[float]) -> tuple[float, float]:
    """Return (alpha ms, beta bytes/ms) of time = alpha + bytes / beta, fitted in relative error.

    Each point is weighted by 1 / time, so a 4 KB message counts as much as a 256 MB one.
    With a single size, alpha is its time and beta is infinite.
    """
    import numpy as np

    x, y = np.asarray(sizes, float), np.asarray(times_ms, float)
    if len(np.unique(x)) < 2:
        return (float(y.mean()) if len(y) else math.nan), math.inf
    w = 1.0 / np.maximum(y, 1e-12)
    design = np.stack([np.ones_like(x), x], axis=1) * w[:, None]
    (alpha, slope), *_ = np.linalg.lstsq(design, y * w, rcond=None)
    if slope <= 0:
        return float(y.min()), math.inf
    if alpha < 0:  # no latency term fits: bandwidth only, through the origin
        slope = float(np.sum(w * w * x * y) / np.sum(w * w * x * x))
        alpha = 0.0
    return float(alpha), 1.0 / float(slope)


def _free_port() -> int:
    """Return a free TCP port on the loopback interface."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _time_one(
    dist, torch, kind: str, nbytes: int, group_size: int, repeats: int, warmup: int, cuda: bool
) -> list[float] | None:
    """Return rank 0's per-call times in ms for one collective, or None on ranks outside it.

    On a GPU each sample brackets back-to-back calls with CUDA events (many for small messages,
    as nccl-tests does, so launch gaps do not hide the latency); on the CPU, one call per sample.
    """
    rank, world = dist.get_rank(), dist.get_world_size()
    device = f"cuda:{rank}" if cuda else "cpu"
    n = group_size
    elems = max(n, nbytes // BYTES_PER_ELEMENT)
    elems -= elems % n
    inside = rank < n
    group = dist.new_group(list(range(n))) if n < world else None
    buf = torch.randn(elems, device=device).to(torch.bfloat16)
    out = torch.empty_like(buf)
    calls = SMALL_MESSAGE_CALLS if cuda and nbytes <= SMALL_MESSAGE_BYTES else 1
    samples = []

    def op():
        if kind == "all_reduce":
            dist.all_reduce(buf, group=group)
        elif kind == "all_to_all":
            dist.all_to_all_single(out, buf, group=group)
        elif rank == 0:
            dist.send(buf, dst=1)
        elif rank == 1:
            dist.recv(out, src=0)

    for i in range(warmup + repeats):
        dist.barrier()
        if not inside:
            continue
        if cuda:
            torch.cuda.synchronize(device)
            start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            start.record()
            for _ in range(calls):
                op()
            end.record()
            end.synchronize()
            elapsed = start.elapsed_time(end) / calls
        else:
            t0 = time.perf_counter()
            op()
            elapsed = (time.perf_counter() - t0) * 1e3
        if i >= warmup:
            samples.append(elapsed)
    if group is not None:
        dist.destroy_process_group(group)
    return samples if rank == 0 else None


def init_rank(rank: int, world: int, port: int, cuda: bool):
    """Join this process to the process group (NCCL on GPUs, gloo on the CPU), one GPU or one
    CPU thread per rank, multicast off; return the torch and torch.distributed modules."""
    os.environ.update(SAFE_NCCL_ENV)
    import torch
    import torch.distributed as dist

    if cuda:
        torch.cuda.set_device(rank)
    torch.set_num_threads(1)
    dist.init_process_group(
        "nccl" if cuda else "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
    )
    return torch, dist


def _worker(
    rank: int,
    world: int,
    port: int,
    plan: list[dict],
    repeats: int,
    warmup: int,
    cuda: bool,
    out_path: str,
) -> None:
    """Run every planned collective on one rank; rank 0 writes the samples as JSON."""
    torch, dist = init_rank(rank, world, port, cuda)
    results = []
    for item in plan:
        samples = _time_one(
            dist, torch, item["collective"], item["bytes"], item["group"], repeats, warmup, cuda
        )
        results.append(samples)
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        Path(out_path).write_text(json.dumps(results))


def run_plan(plan: list[dict], world: int, repeats: int, warmup: int, cuda: bool) -> list:
    """Return rank 0's timing samples for each planned collective, run over `world` processes."""
    import torch.multiprocessing as mp

    os.environ.update(SAFE_NCCL_ENV)
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "samples.json")
        # On the CPU, forked ranks skip re-importing torch (seconds each on a busy machine);
        # CUDA cannot be forked, so GPU ranks are spawned.
        mp.start_processes(
            _worker,
            args=(world, _free_port(), plan, repeats, warmup, cuda, out),
            nprocs=world,
            join=True,
            start_method="spawn" if cuda else "fork",
        )
        return json.loads(Path(out).read_text())
