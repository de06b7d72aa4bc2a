"""One micro-batch on a rank: token buffers, KV caches, balanced routing, the experts' runner."""

from __future__ import annotations

import itertools

from tilesweep import backends
from tilesweep.measure.gemm_case import Problem
from tilesweep.measure.step.weights import random_bf16


def _cache_shapes(a: dict, n: int, ctx: int, tp: int) -> dict[str, tuple]:
    """Return one layer's KV cache shapes for n sequences of ctx tokens."""
    if a["kind"] == "mla":
        shapes = {"lat": (n, ctx, a["kv_lora_rank"] + a["qk_rope_head_dim"])}
        if a.get("index_topk"):
            shapes["idx"] = (n, ctx, a["index_head_dim"])
        return shapes
    kvh = max(1, a["kv_heads"] // tp)
    return {"k": (n, kvh, ctx, a["head_dim"]), "v": (n, kvh, ctx, a["head_dim"])}


def micro_batch(rank, n: int) -> dict:
    """Return the buffers and caches of one micro-batch of n sequences on a StepRank."""
    torch, m, layout, dev = rank.torch, rank.model, rank.layout, rank.device
    a, ctx, hidden = m["attention"], rank.step_spec["context_len"], m["hidden"]
    bf16 = torch.bfloat16
    mb = {"n": n, "ids": torch.randint(0, m["vocab"], (n,), device=dev)}
    mb["x"] = torch.empty(n, hidden, dtype=bf16, device=dev)
    mb["h_in"] = random_bf16(torch, (n, hidden), dev, rank.gen)
    mb["caches"] = []
    for _ in rank.layers:
        shapes = _cache_shapes(a, n, ctx, layout["tp"])
        cache = {key: random_bf16(torch, shape, dev, rank.gen) for key, shape in shapes.items()}
        mb["caches"].append(cache)
    if any(layer["kind"] == "moe" for layer in rank.layers):
        ep, top_k = layout["ep"], m["top_k"]
        experts = m["routed_experts"] // ep
        top = n * top_k
        slots = -(-top // ep) * ep
        perm = torch.zeros(slots, dtype=torch.long)
        perm[:top] = torch.arange(top) // top_k
        base, extra = divmod(slots, experts)  # rows each local expert receives: balanced
        counts = [base + (1 if e < extra else 0) for e in range(experts)]
        offsets = [0, *itertools.accumulate(counts)]
        inter = m["moe_intermediate"] // layout["tp"]
        mb.update(
            perm=perm.to(dev),
            top=top,
            wflat=torch.zeros(slots, dtype=bf16, device=dev),
            send=torch.empty(slots, hidden, dtype=bf16, device=dev),
            gu=torch.empty(slots, 2 * inter, dtype=bf16, device=dev),
            act=torch.empty(slots, inter, dtype=bf16, device=dev),
            expert_out=torch.zeros(slots, hidden, dtype=bf16, device=dev),
        )
        # An emulated EP rank has no all-to-all: its rows stay where they are.
        exchange = rank.ep_group is not None
        mb["recv"] = torch.empty_like(mb["send"]) if exchange else mb["send"]
        mb["back"] = torch.empty_like(mb["expert_out"]) if exchange else mb["expert_out"]
        runner = rank.step_spec["runner"]
        stepper = backends.step_backend(runner).stepper
        if stepper.fused:  # the step runner's own routing and kernel (StepRunner.fused_setup)
            mb["fused"] = stepper.fused_setup(rank, n, slots, counts, experts)
            return mb
        mb["run"] = stepper.step_runner(runner, counts, rank.kernels)
        ones = torch.ones(max(slots, 1), device=dev)
        mb["problems"] = [
            (
                Problem(mb["recv"], layer["e_gate_up"], mb["gu"], ones, None, offsets),
                Problem(mb["act"], layer["e_down"], mb["expert_out"], ones, None, offsets),
            )
            if layer["kind"] == "moe"
            else None
            for layer in rank.layers
        ]
    return mb
