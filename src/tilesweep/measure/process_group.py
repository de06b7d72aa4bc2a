"""Collective benchmark: the all-reduce, all-to-all and send/recv one decode step needs."""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from pathlib import Path

from tilesweep.plan.messages import BYTES_PER_ELEMENT

# NVLink multicast stays off: on shared hosts it can take GPUs out of service.
SAFE_NCCL_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
# On a GPU, calls of at most this many bytes are timed back to back, this many per sample.
SMALL_MESSAGE_BYTES = 1 << 20
SMALL_MESSAGE_CALLS = 20


def free_port() -> int:
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
            args=(world, free_port(), plan, repeats, warmup, cuda, out),
            nprocs=world,
            join=True,
            start_method="spawn" if cuda else "fork",
        )
        return json.loads(Path(out).read_text())
