"""The fused-MoE step runner's micro-batch: its routing and the config its tuned table picks."""

from __future__ import annotations

from tilesweep.fused_moe import routing
from tilesweep.fused_moe.space import engine_default, nearest_key


def moe_config(table: dict, m: int, experts: int) -> tuple[dict, str]:
    """Return (config, where it came from): the tuned table's nearest key, else default rules."""
    configs = table.get("configs")
    if configs:
        key = nearest_key([int(k) for k in configs], m)
        return dict(configs[str(key)]), f"{table['source']} at M={key}"
    rules = table.get("rules")
    if not rules:
        raise ValueError("the fused-MoE step runner needs a tuned table or default rules")
    return engine_default(rules, m, experts, "bf16"), f"{table['source']} at M={m}"


def fused_setup(rank, n: int, slots: int, counts: list[int], experts: int) -> dict:
    """Return one micro-batch's routing, row blocks, config and kernel call (`invoke`)."""
    from tilesweep.fused_moe import kernel as fm  # triton: this module loads without it

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
        routing.direct_blocks(ids, config["BLOCK_SIZE_M"])
        if direct
        else routing.align_blocks(ids, config["BLOCK_SIZE_M"], experts)
    )
    return {
        "config": config,
        "source": source,
        "blocks": blocks,
        "top_k": k,
        "pairs": pairs,
        "invoke": fm.invoke,
    }
