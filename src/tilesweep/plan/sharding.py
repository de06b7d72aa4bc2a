"""Where each rank sits in a layout (its stage, TP and EP group), whether a layout gathers tokens
before its MoE layers, and its name."""

from tilesweep.settings import Layout


def coords(rank: int, layout: dict) -> dict:
    """Return a rank's pipeline stage and its index inside its TP and EP groups."""
    tp, per_stage = layout["tp"], layout["tp"] * layout["ep"]
    local = rank % per_stage
    return {"stage": rank // per_stage, "ep_index": local // tp, "tp_index": local % tp}


def group_ranks(layout: dict) -> dict[str, list[list[int]]]:
    """Return every TP group and every EP group as lists of global ranks, in creation order."""
    tp, ep, pp = layout["tp"], layout["ep"], layout["pp"]
    per_stage = tp * ep
    groups: dict[str, list[list[int]]] = {"tp": [], "ep": []}
    for stage in range(pp):
        base = stage * per_stage
        for e in range(ep):
            groups["tp"].append([base + e * tp + i for i in range(tp)])
        for i in range(tp):
            groups["ep"].append([base + e * tp + i for e in range(ep)])
    return groups


def gathers(layout: Layout) -> bool:
    """Return whether a stage gathers every DP-attention group's tokens before its MoE layers
    (attention DP with MoE TP other than attention TP, as SGLang's DP attention runs)."""
    return layout.ep > 1 and layout.moe_split()[0] != layout.tp


def layout_name(layout: Layout) -> str:
    """Return a layout's name: tp4-pp2-ep1, tp8-pp1-ep1-xep, tp4-pp1-ep1-moe2x2 ..."""
    tp, ep = layout.tp, layout.ep
    name = f"tp{tp}-pp{layout.pp}-ep{ep}"
    moe_tp, moe_ep = layout.moe_split()
    if moe_tp == tp:
        return name
    return name + ("-xep" if ep == 1 and moe_tp == 1 else f"-moe{moe_tp}x{moe_ep}")
