"""Collective benchmark: the all-reduce, all-to-all and send/recv one decode step needs."""

from __future__ import annotations

import json
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


def decode_batch(tokens_per_expert: int, model: dict) -> int:
    """Return the tokens in one decode step that give each expert this many tokens on average."""
    return max(1, tokens_per_expert * model["routed_experts"] // model["top_k"])


def step_messages(layout: dict, model: dict, tokens_per_expert: int) -> list[dict]:
    """Return the collectives of one decode step: kind, group size, bytes and count per step."""
    batch = decode_batch(tokens_per_expert, model)
    hidden = model["hidden"] * BYTES_PER_ELEMENT
    layers_per_stage = -(-model["moe_layers"] // layout["pp"])
    msgs = []
    if layout["tp"] > 1:
        # Attention output and MoE output are each all-reduced once per layer.
        msgs.append(
            {
                "collective": "all_reduce",
                "group": layout["tp"],
                "bytes": batch * hidden,
                "per_step": 2 * layers_per_stage,
            }
        )
    if layout["ep"] > 1:
        # Dispatch and combine: each rank sends its tokens' hidden states to top_k experts.
        per_rank = -(-batch // layout["ep"]) * model["top_k"] * hidden
        msgs.append(
            {
                "collective": "all_to_all",
                "group": layout["ep"],
                "bytes": per_rank,
                "per_step": 2 * layers_per_stage,
            }
        )
    if layout["pp"] > 1:
        msgs.append(
            {
                "collective": "send_recv",
                "group": 2,
                "bytes": batch * hidden,
                "per_step": layout["pp"] - 1,
            }
        )
    return msgs


def bus_factor(collective: str, n: int) -> float:
    """Return nccl-tests' bus-bandwidth factor for a collective over n ranks."""
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective == "all_to_all":
        return (n - 1) / n
    return 1.0


def _free_port() -> int:
    """Return a free TCP port on the loopback interface."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _time_one(
    dist, torch, kind: str, nbytes: int, group_size: int, repeats: int, warmup: int, cuda: bool
) -> list[float] | None:
    """Return rank 0's per-call times in ms for one collective, or None on ranks outside it."""
    rank, world = dist.get_rank(), dist.get_world_size()
    device = f"cuda:{rank}" if cuda else "cpu"
    n = group_size
    elems = max(n, nbytes // BYTES_PER_ELEMENT)
    elems -= elems % n
    inside = rank < n
    group = dist.new_group(list(range(n))) if n < world else None
    buf = torch.randn(elems, device=device).to(torch.bfloat16)
    out = torch.empty_like(buf)
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
        start = time.perf_counter()
        op()
        if cuda:
            torch.cuda.synchronize(device)
        if i >= warmup:
            samples.append((time.perf_counter() - start) * 1e3)
    if group is not None:
        dist.destroy_process_group(group)
    return samples if rank == 0 else None


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
        mp.spawn(
            _worker,
            args=(world, _free_port(), plan, repeats, warmup, cuda, out),
            nprocs=world,
            join=True,
        )
        return json.loads(Path(out).read_text())
