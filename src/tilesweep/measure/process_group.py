"""Collective benchmark: the all-reduce, all-to-all and send/recv one decode step needs."""

import json
import math
import os
import socket
import statistics
import tempfile
import time
from pathlib import Path

from tilesweep.columns import COLLECTIVE_TIMINGS, Status
from tilesweep.measure import timing
from tilesweep.plan.messages import BYTES_PER_ELEMENT

# NVLink multicast stays off: on shared hosts it can take GPUs out of service.
SAFE_NCCL_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
# Eager timing on a GPU: calls of at most this many bytes are timed back to back, this many per
# sample, so launch gaps do not hide the latency (as nccl-tests does).
SMALL_MESSAGE_BYTES = 1 << 20
SMALL_MESSAGE_CALLS = 20


def free_port() -> int:
    """Return a free TCP port on the loopback interface."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _one_line(exc: BaseException) -> str:
    """Return an exception as one line: its type and its first line."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".strip()


def _agree(dist, cpu_group, value):
    """Return every rank's value over gloo, so a failed capture never strands the others."""
    values = [None] * dist.get_world_size()
    dist.all_gather_object(values, value, group=cpu_group)
    return values


def _graph_times(dist, torch, op, inside: bool, cpu_group, plan: dict) -> dict:
    """Return rank 0's {samples, calls_per_replay, status, reason} of op in CUDA graphs."""
    rank = dist.get_rank()

    def capture(calls: int):
        """Return (graph, '') of `calls` ops, or (None, every rank's failure)."""
        graph, error = None, ""
        if inside:
            try:
                graph = timing.capture_graph([op] * calls, capture_error_mode="thread_local")
            except Exception as exc:  # any capture failure becomes the row's reason
                error = f"rank {rank}: {_one_line(exc)}"
        failures = [e for e in _agree(dist, cpu_group, error) if e]
        if failures:
            return None, "CUDA-graph capture failed on " + "; ".join(failures)
        return graph, ""

    if inside:
        for _ in range(
            max(1, plan["warmup"])
        ):  # eager calls first: NCCL connects before the capture
            op()
        torch.cuda.synchronize()
    graph, error = capture(1)
    calls = 0
    if not error:
        if inside:  # size the replay from a few one-call replays
            one = statistics.median(timing.time_events(graph.replay, 3))
            calls = timing.calls_to_fill(one, plan["fill_ms"], plan["max_calls"])
        calls = max(_agree(dist, cpu_group, calls))  # every rank captures the same count
        if calls > 1:
            graph = None
            graph, error = capture(calls)
    dist.barrier()
    out = {"samples": [], "calls_per_replay": calls, "status": Status.OK, "reason": ""}
    if error:
        out.update(status=Status.RUNTIME, reason=error, calls_per_replay=0)
    elif inside:
        out["samples"] = [ms / calls for ms in timing.time_events(graph.replay, plan["repeats"])]
    if inside:
        torch.cuda.synchronize()
    del graph
    return out


def _eager_times(
    dist, torch, op, inside: bool, device: str, calls: int, repeats: int, warmup: int
) -> list[float]:
    """Return eager ms per call over `repeats` samples, ranks meeting at a barrier before each."""
    samples = []
    for i in range(warmup + repeats):
        dist.barrier()
        if not inside:
            continue
        if device.startswith("cuda"):
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
    return samples


def _time_one(dist, torch, item: dict, plan: dict, cpu_group) -> dict | None:
    """Return rank 0's {samples, timing, calls_per_replay, status, reason} for op."""
    kind, nbytes, n = item["collective"], item["bytes"], item["group"]
    rank, world, cuda = dist.get_rank(), dist.get_world_size(), plan["cuda"]
    device = f"cuda:{rank}" if cuda else "cpu"
    elems = max(n, nbytes // BYTES_PER_ELEMENT)
    elems -= elems % n
    inside = rank < n
    group = dist.new_group(list(range(n))) if n < world else None
    buf = torch.randn(elems, device=device).to(torch.bfloat16)
    out = torch.empty_like(buf)

    def op():
        if kind == "all_reduce":
            dist.all_reduce(buf, group=group)
        elif kind == "all_to_all":
            dist.all_to_all_single(out, buf, group=group)
        elif rank == 0:
            dist.send(buf, dst=1)
        elif rank == 1:
            dist.recv(out, src=0)

    timing = plan["timing"] if cuda else "eager"
    if timing == "cuda-graph":
        result = _graph_times(dist, torch, op, inside, cpu_group, plan)
    else:
        calls = SMALL_MESSAGE_CALLS if cuda and nbytes <= SMALL_MESSAGE_BYTES else 1
        samples = _eager_times(
            dist, torch, op, inside, device, calls, plan["repeats"], plan["warmup"]
        )
        result = {"samples": samples, "calls_per_replay": calls, "status": Status.OK, "reason": ""}
    if group is not None:
        dist.destroy_process_group(group)
    return {**result, "timing": timing} if rank == 0 else None


def init_rank(rank: int, world: int, port: int, cuda: bool):
    """Join the process group (NCCL or gloo); return torch and torch.distributed."""
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


def _worker(rank: int, world: int, port: int, items: list[dict], plan: dict, out_dir: str) -> None:
    """Run every planned collective on one rank; rank 0 writes the results as JSON."""
    torch, dist = init_rank(rank, world, port, plan["cuda"])
    # Ranks agree on graph captures over the CPU, outside the NCCL communicators being captured.
    graphs = plan["cuda"] and plan["timing"] == "cuda-graph"
    cpu_group = dist.new_group(backend="gloo") if graphs else None
    results = [_time_one(dist, torch, item, plan, cpu_group) for item in items]
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        Path(out_dir, "rank0.json").write_text(json.dumps(results))


def run_ranks(
    worker, world: int, args: tuple, cuda: bool, timeout_s: float = math.inf, writers: int = 1
) -> list:
    """Return the JSON ranks 0..writers-1 wrote as rank{r}.json (a missing one raises), `world`
    processes running worker(rank, world, port, *args, out_dir); kill all past timeout_s."""
    import torch.multiprocessing as mp

    os.environ.update(SAFE_NCCL_ENV)
    with tempfile.TemporaryDirectory() as tmp:
        # On the CPU, forked ranks skip re-importing torch (seconds each on a busy machine);
        # CUDA cannot be forked, so GPU ranks are spawned.
        ctx = mp.start_processes(
            worker,
            args=(world, free_port(), *args, tmp),
            nprocs=world,
            join=False,
            start_method="spawn" if cuda else "fork",
        )
        deadline = time.monotonic() + timeout_s
        while not ctx.join(timeout=1.0):
            if time.monotonic() > deadline:
                for proc in ctx.processes:
                    if proc.is_alive():
                        proc.kill()
                raise TimeoutError(f"whole step ran past {timeout_s:.0f} s; its ranks were killed")
        return [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(writers)]


def run_plan(items: list[dict], world: int, plan: dict) -> list[dict]:
    """Return rank 0's _time_one result for each planned collective, run over `world` processes
    (`plan`: timing, max_calls, fill_ms, repeats, warmup, cuda)."""
    if plan["timing"] not in COLLECTIVE_TIMINGS:
        raise ValueError(f"timing={plan['timing']!r}: allowed: {', '.join(COLLECTIVE_TIMINGS)}")
    return run_ranks(_worker, world, (items, plan), plan["cuda"])[0]
