"""One micro-batch of the measured whole step on a rank: its token buffers, KV caches, the
balanced routing of its rows to the rank's experts, and the expert GEMMs' runner."""

from __future__ import annotations

from tilesweep.measure.step_weights import random_bf16


def moe_config(table: dict, m: int, experts: int) -> tuple[dict, str]:
    """Return (config, where it came from) for a fused-MoE GEMM of M rows: the tuned table's
    nearest batch key (as the engines pick), else the engines' default rules."""
    from tilesweep.fused_moe.space import engine_default, nearest_key

    configs = table.get("configs")
    if configs:
        key = nearest_key([int(k) for k in configs], m)
        return dict(configs[str(key)]), f"{table['source']} at M={key}"
    rules = table.get("rules")
    if not rules:
        raise ValueError("the fused-MoE step runner needs a tuned table or default rules")
    return engine_default(rules, m, experts, "bf16"), f"{table['source']} at M={m}"


def micro_batch(rank, n: int) -> dict:
    """Return the buffers and caches of one micro-batch of n sequences on a StepRank."""
    from tilesweep import backends
    from tilesweep.measure.gemm_case import Problem

    torch, m, layout, dev = rank.torch, rank.model, rank.layout, rank.device
    a, ctx, hidden = m["attention"], rank.step_spec["context_len"], m["hidden"]
    bf16 = torch.bfloat16
    mb = {"n": n, "ids": torch.randint(0, m["vocab"], (n,), device=dev)}
    mb["x"] = torch.empty(n, hidden, dtype=bf16, device=dev)
    mb["h_in"] = random_bf16(torch, (n, hidden), dev, rank.gen)
    mb["caches"] = []
    for _ in rank.layers:
        if a["kind"] == "mla":
            shapes = {"lat": (n, ctx, a["kv_lora_rank"] + a["qk_rope_head_dim"])}
            if a.get("index_topk"):
                shapes["idx"] = (n, ctx, a["index_head_dim"])
        else:
            kvh = max(1, a["kv_heads"] // layout["tp"])
            shapes = {"k": (n, kvh, ctx, a["head_dim"]), "v": (n, kvh, ctx, a["head_dim"])}
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
        offsets = [0]
        for c in counts:
            offsets.append(offsets[-1] + c)
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
        if backends.is_fused_step(runner):
            mb["fused"] = fused_setup(rank, n, slots, counts, experts)
            return mb
        mb["run"] = backends.step_backend(runner).stepper.step_runner(runner, counts, rank.kernels)
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


def fused_setup(rank, n: int, slots: int, counts: list[int], experts: int) -> dict:
    """Return the fused-MoE kernel's routing for one micro-batch: the pairs' experts (fixed,
    balanced), their row blocks (aligned once here: the step's graph replays them), and the
    config the tuned table or the engines' default picks for the GEMMs' M."""
    from tilesweep.fused_moe import kernel as fm

    torch, top_k = rank.torch, rank.model["top_k"]
    if rank.layout["ep"] == 1:  # gate/up gathers each token's rows: M = n tokens, top-k
        pairs, m, k = n * top_k, n, top_k
        ids = (torch.arange(pairs) % experts).view(n, top_k)
    else:  # after the dispatch, one row per pair of this rank's experts: top-k 1
        pairs, m, k = slots, slots, 1
        ids = torch.repeat_interleave(torch.arange(experts), torch.tensor(counts)).view(-1, 1)
    config, source = moe_config(rank.moe_table, m, experts)
    ids = ids.to(rank.device)
    direct = pairs * rank.moe_table.get("sparsity", 4) <= experts
    blocks = (
        fm.direct_blocks(ids, config["BLOCK_SIZE_M"])
        if direct
        else fm.align_blocks(ids, config["BLOCK_SIZE_M"], experts)
    )
    return {"config": config, "source": source, "blocks": blocks, "top_k": k, "pairs": pairs}
