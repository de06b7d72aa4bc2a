"""Where each rank sits in a layout: its pipeline stage and its place in its TP and EP groups,
and every TP and EP group as lists of global ranks (the measured step creates them in this order).
"""

from __future__ import annotations


def coords(rank: int, layout: dict) -> dict:
    """Return a rank's pipeline stage and its index inside its TP and EP groups."""
    per_stage = layout["tp"] * layout["ep"]
    local = rank % per_stage
    return {
        "stage": rank // per_stage,
        "ep_index": local // layout["tp"],
        "tp_index": local % layout["tp"],
    }


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
