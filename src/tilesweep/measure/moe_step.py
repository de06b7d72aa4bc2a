"""A measured MoE decode step under one parallel layout, one process per device.

Each pipeline stage runs a stack of MoE layers with the model's shapes: router, grouped expert
GEMMs (a decode-benchmark runner), shared expert, and the collectives the layout needs: TP
all-reduce of the attention and MoE outputs, EP all-to-all dispatch and combine, PP send/recv of
the activations. Every part is timed on its own (CUDA events on a GPU, a monotonic clock on the
CPU), and the whole step too.

What is not the real model, on purpose:
- routing is balanced: the router is computed and timed, but every expert receives exactly
  tokens_per_expert rows, so the step matches the grid's batch;
- attention is not computed; its output all-reduce (TP) is;
- the pipeline is in steady state: every stage computes its own micro-batch at once, then hands
  its activations to the next stage;
- a rank may run fewer layers and experts than it holds (`layers_run`, `experts_run`); the step
  table scales the parts up and says by how much.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
import time
from pathlib import Path

from tilesweep.measure.process_group import SAFE_NCCL_ENV, free_port, init_rank
from tilesweep.plan.messages import dispatch_rows, local_tokens
from tilesweep.plan.sharding import (
    ELEMENT_BYTES,
    coords,
    group_ranks,
    layers_per_stage,
    rank_counts,
)


class _Clock:
    """Per-part times of one step: CUDA events on a GPU, perf_counter on the CPU."""

    def __init__(self, torch, cuda: bool, record: bool = True):
        self.torch, self.cuda, self.record = torch, cuda, record
        self.spans: list[tuple[str, object, object]] = []

    def _mark(self):
        if self.cuda:
            event = self.torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    @contextlib.contextmanager
    def part(self, name: str):
        if not self.record:
            yield
            return
        start = self._mark()
        yield
        self.spans.append((name, start, self._mark()))

    def collect(self) -> dict[str, float]:
        """Return ms per part name (summed over layers) and `step`; reset for the next step."""
        if self.cuda:
            self.torch.cuda.synchronize()
        out: dict[str, float] = {}
        for name, start, end in self.spans:
            ms = start.elapsed_time(end) if self.cuda else (end - start) * 1e3
            out[name] = out.get(name, 0.0) + ms
        self.spans = []
        return out


def _fill(tensor, gen, scale: float):
    """Fill a tensor with tiled random values (cheap for GBs of weights) times scale; return it."""
    import torch

    flat = tensor.view(-1)
    block = min(flat.numel(), 1 << 20)
    base = (torch.randn(block, generator=gen) * scale).to(tensor.dtype).to(tensor.device)
    for lo in range(0, flat.numel(), block):
        hi = min(lo + block, flat.numel())
        flat[lo:hi].copy_(base[: hi - lo])
    return tensor


def _make_runner(name: str, counts: list[int], kernels: dict):
    """Return a grouped-GEMM call for a decode-benchmark runner name, from its backend."""
    from tilesweep import backends

    return backends.backend_of(name).step_runner(name, counts, kernels)


def _experts_that_fit(torch, want: int, per_expert_bytes: int, fixed_bytes: int) -> int:
    """Return how many experts' weights fit in 60% of the free GPU memory (at least 1)."""
    free, _ = torch.cuda.mem_get_info()
    budget = 0.6 * free - fixed_bytes
    return max(1, min(want, int(budget // max(per_expert_bytes, 1))))


class _Rank:
    """One rank's weights, groups and buffers; runs and times steps."""

    def __init__(self, torch, dist, rank: int, spec: dict, cuda: bool):
        self.torch, self.dist, self.rank, self.cuda = torch, dist, rank, cuda
        self.layout, self.model, self.bench = spec["layout"], spec["model"], spec["bench"]
        self.kernels = spec.get("kernels", {})
        self.device = torch.device("cuda", rank) if cuda else torch.device("cpu")
        self.at = coords(rank, self.layout)
        self.tp_group = self.ep_group = None
        for kind, lists in group_ranks(self.layout).items():
            for ranks in lists:
                if len(ranks) < 2:
                    continue
                group = dist.new_group(ranks)  # every rank creates every group, in one order
                if rank in ranks:
                    setattr(self, f"{kind}_group", group)
        self._weights(spec)

    def _weights(self, spec: dict) -> None:
        torch, model, layout = self.torch, self.model, self.layout
        hidden, tp = model["hidden"], layout["tp"]
        inter = model["moe_intermediate"] // tp
        shared = model["shared_experts"] * model["moe_intermediate"] // tp
        experts_here = model["routed_experts"] // layout["ep"]
        want = min(spec["experts_run"], experts_here)
        self.layers_run = min(spec["layers_run"], layers_per_stage(layout, model))
        if self.cuda:
            per_expert = 3 * hidden * inter * ELEMENT_BYTES * self.layers_run
            fixed = (3 * hidden * shared + hidden * model["routed_experts"]) * ELEMENT_BYTES
            want = _experts_that_fit(torch, want, per_expert, fixed * self.layers_run + (4 << 30))
        self.experts_run, self.inter, self.shared = want, inter, shared
        gen = torch.Generator().manual_seed(self.bench["seed"] + 1 + self.rank)
        shared_gen = torch.Generator().manual_seed(self.bench["seed"])  # the router is replicated
        bf16, dev = torch.bfloat16, self.device

        def weight(*shape, k, source=gen):
            return _fill(torch.empty(*shape, dtype=bf16, device=dev), source, 1 / math.sqrt(k))

        self.layers = []
        for _ in range(self.layers_run):
            layer = {
                "router": weight(model["routed_experts"], hidden, k=hidden, source=shared_gen),
                "gate_up": weight(want, 2 * inter, hidden, k=hidden),
                "down": weight(want, hidden, inter, k=inter),
            }
            if shared:
                layer["s_gate_up"] = weight(2 * shared, hidden, k=hidden)
                layer["s_down"] = weight(hidden, shared, k=shared)
            self.layers.append(layer)
        self.gen = gen

    def _buffers(self, t: int, runners: dict) -> dict:
        from tilesweep.measure.gemm_case import Problem

        torch, model, layout = self.torch, self.model, self.layout
        bf16, dev, hidden = torch.bfloat16, self.device, model["hidden"]
        tokens = local_tokens(layout, model, t)
        slots = dispatch_rows(layout, model, t)
        counts = rank_counts(layout, model, t)[: self.experts_run]
        rows = sum(counts)
        top = tokens * model["top_k"]
        perm = torch.zeros(slots, dtype=torch.long)
        perm[:top] = torch.arange(top) // model["top_k"]
        b = {
            "tokens": tokens,
            "top": top,
            "x_in": _fill(torch.empty(tokens, hidden, dtype=bf16, device=dev), self.gen, 1.0),
            "h": torch.empty(tokens, hidden, dtype=bf16, device=dev),
            "logits": torch.empty(tokens, model["routed_experts"], dtype=bf16, device=dev),
            "wflat": torch.zeros(slots, dtype=bf16, device=dev),
            "perm": perm.to(dev),
            "send": torch.empty(slots, hidden, dtype=bf16, device=dev),
            "gu": torch.full((rows, 2 * self.inter), float("nan"), dtype=bf16, device=dev),
            "act": torch.empty(rows, self.inter, dtype=bf16, device=dev),
            "expert_out": torch.zeros(slots, hidden, dtype=bf16, device=dev),
            "out": torch.empty(tokens, hidden, dtype=bf16, device=dev),
        }
        ep = layout["ep"] > 1
        b["recv"] = torch.empty_like(b["send"]) if ep else b["send"]
        b["back"] = torch.empty_like(b["expert_out"]) if ep else b["expert_out"]
        if self.shared:
            b["s_gu"] = torch.empty(tokens, 2 * self.shared, dtype=bf16, device=dev)
            b["s_act"] = torch.empty(tokens, self.shared, dtype=bf16, device=dev)
        offsets = [0]
        for c in counts:
            offsets.append(offsets[-1] + c)
        ones_a = torch.ones(max(rows, 1), device=dev)
        b["problems"] = [
            (
                Problem(
                    b["recv"][:rows],
                    layer["gate_up"],
                    b["gu"],
                    ones_a,
                    torch.ones(self.experts_run, 2 * self.inter, device=dev),
                    offsets,
                ),
                Problem(
                    b["act"],
                    layer["down"],
                    b["expert_out"][:rows],
                    ones_a,
                    torch.ones(self.experts_run, hidden, device=dev),
                    offsets,
                ),
            )
            for layer in self.layers
        ]
        b["run_gate_up"] = _make_runner(runners["gate_up"], counts, self.kernels)
        b["run_down"] = _make_runner(runners["down"], counts, self.kernels)
        return b

    def step(self, b: dict, clock: _Clock) -> None:
        """Run one decode step of this rank's stage, recording each part on the clock."""
        torch, dist = self.torch, self.dist
        silu = torch.nn.functional.silu
        top_k, inter, shared = self.model["top_k"], self.inter, self.shared
        with clock.part("step"):
            h = b["h"]
            h.copy_(b["x_in"])
            for layer, (p_gu, p_dn) in zip(self.layers, b["problems"], strict=True):
                if self.tp_group is not None:
                    with clock.part("attn_all_reduce"):
                        dist.all_reduce(h, group=self.tp_group)
                with clock.part("router"):
                    torch.matmul(h, layer["router"].t(), out=b["logits"])
                    top_w, _ = b["logits"].topk(top_k, dim=1)
                    b["wflat"][: b["top"]].copy_(torch.softmax(top_w.float(), dim=1).view(-1))
                with clock.part("permute"):
                    torch.index_select(h, 0, b["perm"], out=b["send"])
                if self.ep_group is not None:
                    with clock.part("dispatch"):
                        dist.all_to_all_single(b["recv"], b["send"], group=self.ep_group)
                with clock.part("expert_gate_up"):
                    b["run_gate_up"](p_gu)
                with clock.part("expert_act"):
                    torch.mul(silu(b["gu"][:, :inter]), b["gu"][:, inter:], out=b["act"])
                with clock.part("expert_down"):
                    b["run_down"](p_dn)
                if self.ep_group is not None:
                    with clock.part("combine"):
                        dist.all_to_all_single(b["back"], b["expert_out"], group=self.ep_group)
                with clock.part("combine_sum"):
                    b["back"].mul_(b["wflat"][:, None])
                    b["out"].zero_()
                    b["out"].index_add_(0, b["perm"], b["back"])
                if shared:
                    with clock.part("shared_gate_up"):
                        torch.matmul(h, layer["s_gate_up"].t(), out=b["s_gu"])
                    with clock.part("shared_act"):
                        torch.mul(
                            silu(b["s_gu"][:, :shared]), b["s_gu"][:, shared:], out=b["s_act"]
                        )
                    with clock.part("shared_down"):
                        b["out"].addmm_(b["s_act"], layer["s_down"].t())
                if self.tp_group is not None:
                    with clock.part("moe_all_reduce"):
                        dist.all_reduce(b["out"], group=self.tp_group)
                h.add_(b["out"])
                h.div_(2.0)  # keeps magnitudes steady over layers and repeats
            if self.layout["pp"] > 1:
                with clock.part("pp_send_recv"):
                    self._hand_on(h, b["x_in"])

    def _hand_on(self, h, x_in) -> None:
        """Send this stage's activations to the next stage and receive the previous stage's."""
        dist, per_stage, stage = self.dist, self.layout["tp"] * self.layout["ep"], self.at["stage"]
        reqs = []
        if stage < self.layout["pp"] - 1:
            reqs.append(dist.isend(h, self.rank + per_stage))
        if stage > 0:
            reqs.append(dist.irecv(x_in, self.rank - per_stage))
        for req in reqs:
            req.wait()

    def _sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()
        self.dist.barrier()

    def run_batch(self, t: int, runners: dict, warmup: int, repeats: int, power_s: float) -> dict:
        """Return the per-repeat part times, correctness and power of one batch on this rank."""
        torch = self.torch
        b = self._buffers(t, runners)
        clock = _Clock(torch, self.cuda)
        for _ in range(warmup):
            self._sync()
            self.step(b, clock)
            clock.collect()
        samples = []
        for _ in range(repeats):
            self._sync()
            self.step(b, clock)
            samples.append(clock.collect())
        finite = bool(torch.isfinite(b["h"]).all().item())
        # Sums of the output and the next input: equal across a TP group, and the next stage's
        # input equals this stage's output, when the collectives moved the data.
        sums = {k: float(b[k].float().sum().item()) for k in ("h", "x_in")}
        result = {"t": t, "runners": runners, "samples": samples, "finite": finite, "sums": sums}
        result["power"] = self._power(b, samples, power_s) if self.cuda else {}
        del b
        if self.cuda:
            torch.cuda.empty_cache()
        return result

    def _power(self, b: dict, samples: list[dict], seconds: float) -> dict:
        """Return power while the step runs back to back for about `seconds` (GPU only)."""
        from tilesweep.measure.timing import PowerSampler

        torch = self.torch
        if seconds <= 0:
            return {}
        step_ms = sorted(s["step"] for s in samples)[len(samples) // 2]
        count = torch.tensor([min(100000, max(1, math.ceil(seconds * 1e3 / step_ms)))])
        count = count.to(self.device)
        self.dist.broadcast(count, 0)  # every rank runs the same number of steps
        self._sync()
        quiet = _Clock(torch, self.cuda, record=False)
        with PowerSampler(index=self.rank) as sampler:
            for _ in range(int(count.item())):
                self.step(b, quiet)
            torch.cuda.synchronize()
        return sampler.summary()


def _worker(rank: int, world: int, port: int, spec: dict, cuda: bool, out_dir: str) -> None:
    """Run every batch of the spec on one rank; write this rank's results as JSON."""
    began = time.perf_counter()
    torch, dist = init_rank(rank, world, port, cuda)
    try:
        me = _Rank(torch, dist, rank, spec, cuda)
        setup_s = time.perf_counter() - began
        batches = []
        for item in spec["batches"]:
            start = time.perf_counter()
            batch = me.run_batch(
                item["t"], item["runners"], spec["warmup"], spec["repeats"], spec["power_seconds"]
            )
            batches.append({**batch, "wall_s": time.perf_counter() - start})
        result = {
            "rank": rank,
            **me.at,
            "experts_run": me.experts_run,
            "layers_run": me.layers_run,
            "setup_s": setup_s,
            "batches": batches,
        }
        me._sync()
    finally:
        dist.destroy_process_group()
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))


def run_layout(spec: dict, world: int, cuda: bool, timeout_s: float) -> list[dict]:
    """Return every rank's results for the spec's batches, run over `world` processes.

    Raises TimeoutError (after killing the ranks) when they run past timeout_s, and
    torch.multiprocessing's ProcessRaisedException when a rank fails.
    """
    import torch.multiprocessing as mp

    os.environ.update(SAFE_NCCL_ENV)
    with tempfile.TemporaryDirectory() as tmp:
        # On the CPU, forked ranks skip re-importing torch (seconds each on a busy machine);
        # CUDA cannot be forked, so GPU ranks are spawned.
        ctx = mp.start_processes(
            _worker,
            args=(world, free_port(), spec, cuda, tmp),
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
                raise TimeoutError(f"layout step ran past {timeout_s:.0f} s; its ranks were killed")
        return [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(world)]
