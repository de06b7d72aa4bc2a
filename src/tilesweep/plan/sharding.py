"""The plan of a layout's decode step, without running it: which rank holds what, the parts of
one layer's step with their FLOPs, bytes and messages, and which expert-GEMM runner the step uses.
Pure functions, shared by the layout benchmark (bench/moe_step.py) and the verdict's projections.
"""

from __future__ import annotations

from tilesweep import backends
from tilesweep.plan.messages import dispatch_rows, local_tokens

ELEMENT_BYTES = 2  # weights and activations in bf16
# The runner the step uses where the decode benchmark timed none it can run (and on the CPU).
FALLBACK_RUNNER = "torch_matmul"
# Parts that scale with the number of experts a rank runs; everything else runs at full size.
EXPERT_PARTS = ("expert_gate_up", "expert_act", "expert_down")
COMM_PARTS = ("attn_all_reduce", "dispatch", "combine", "moe_all_reduce", "pp_send_recv")


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


def rank_counts(layout: dict, model: dict, tokens_per_expert: int) -> list[int]:
    """Return the rows each of a rank's experts receives: its dispatch rows split evenly."""
    experts = model["routed_experts"] // layout["ep"]
    rows = dispatch_rows(layout, model, tokens_per_expert)
    base, extra = divmod(rows, experts)
    return [base + (1 if e < extra else 0) for e in range(experts)]


def layers_per_stage(layout: dict, model: dict) -> int:
    """Return the MoE layers on one pipeline stage."""
    return -(-model["moe_layers"] // layout["pp"])


def step_parts(layout: dict, model: dict, tokens_per_expert: int, experts_run: int) -> dict:
    """Return each part of one layer's step on one rank, in execution order: kind (compute or
    comm), FLOPs and bytes moved (compute) or message bytes (comm), and how it scales."""
    tp, ep, e = layout["tp"], layout["ep"], ELEMENT_BYTES
    hidden, experts = model["hidden"], model["routed_experts"]
    tokens = local_tokens(layout, model, tokens_per_expert)
    slots = dispatch_rows(layout, model, tokens_per_expert)
    inter = model["moe_intermediate"] // tp
    shared = model["shared_experts"] * model["moe_intermediate"] // tp
    rows = sum(rank_counts(layout, model, tokens_per_expert)[:experts_run])
    parts: dict[str, dict] = {}

    def gemm(name: str, m: int, n: int, k: int, mats: int = 1) -> None:
        parts[name] = {
            "kind": "compute",
            "flops": 2 * m * n * k,
            "bytes": (mats * n * k + m * k + m * n) * e,
        }

    def stream(name: str, nbytes: int) -> None:
        parts[name] = {"kind": "compute", "flops": 0, "bytes": nbytes}

    def comm(name: str, collective: str, group: int, nbytes: int, per: str = "layer") -> None:
        parts[name] = {"kind": "comm", "collective": collective, "group": group, "bytes": nbytes}
        parts[name]["per"] = per

    if tp > 1:
        comm("attn_all_reduce", "all_reduce", tp, tokens * hidden * e)
    gemm("router", tokens, experts, hidden)
    stream("permute", 2 * slots * hidden * e)
    if ep > 1:
        comm("dispatch", "all_to_all", ep, slots * hidden * e)
    gemm("expert_gate_up", rows, 2 * inter, hidden, experts_run)
    stream("expert_act", 3 * rows * inter * e)
    gemm("expert_down", rows, hidden, inter, experts_run)
    if ep > 1:
        comm("combine", "all_to_all", ep, slots * hidden * e)
    stream("combine_sum", 3 * slots * hidden * e)
    if shared:
        gemm("shared_gate_up", tokens, 2 * shared, hidden)
        stream("shared_act", 3 * tokens * shared * e)
        gemm("shared_down", tokens, hidden, shared)
    if tp > 1:
        comm("moe_all_reduce", "all_reduce", tp, tokens * hidden * e)
    if layout["pp"] > 1:
        comm("pp_send_recv", "send_recv", 2, tokens * hidden * e, per="step")
    for name, part in parts.items():
        part.setdefault("per", "layer")
        part["experts_scaled"] = name in EXPERT_PARTS
    return parts


def step_capable(runner: str) -> bool:
    """Return whether a decode-benchmark runner can run inside the step (its backend says)."""
    return backends.step_capable(runner)


def pick_runner(decode, op: str, tokens_per_expert: int, choice: str) -> str:
    """Return the expert-GEMM runner for one op and batch: `choice` itself, or for `best` the
    fastest correct bf16 runner the decode benchmark timed there (torch_matmul if none)."""
    if choice != "best":
        return choice
    if decode is None or decode.empty or "time_ms" not in decode:
        return FALLBACK_RUNNER
    rows = decode[
        (decode["status"] == "ok")
        & (decode["routing"] == "uniform")
        & (decode["op"] == op)
        & (decode["tokens_per_expert"] == tokens_per_expert)
        & (decode["dtype"] == "bf16")
        & decode["runner"].map(step_capable)
    ]
    if rows.empty:
        return FALLBACK_RUNNER
    return str(rows.loc[rows["time_ms"].idxmin(), "runner"])
