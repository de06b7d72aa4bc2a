"""Memory fit per rank: sharded weights + KV cache + a stated runtime reserve vs the GPU memory.

Sharding (one PP stage has tp*ep ranks): attention heads, dense MLP, shared experts, LM head and
embedding (vocab-parallel) are split over TP and replicated over EP; routed experts are split over
tp*ep (whole experts over EP, each expert's matrices over TP). When ep > 1 the EP ranks run
attention data-parallel (DP-attention): each holds the KV cache of ceil(batch/ep) sequences. MLA's
latent cache is replicated across the TP ranks of a group (vLLM/SGLang without DP-attention). A
stage holds the KV cache of all sequences for its own layers. Capacity is the memory CUDA reports
for the device (`memory_cuda_gib`, GiB) where the hardware file cites it, else the datasheet's
`memory_gb` * 1e9 bytes, and each row names which (plan.composition).
"""

import functools
import math

from tilesweep.plan.architecture import (
    bytes_per_weight,
    cached_tokens,
    expert_params,
    group_dtype,
    group_params,
    kv_bytes_per_token_layer,
)
from tilesweep.settings import DeploymentSettings, HardwareSpec, Layout, ModelSettings

_MAX_CONTEXT = 1 << 24
_GIB = 1 << 30


def capacity(hw: HardwareSpec) -> tuple[float, str]:
    """Return (the bytes one GPU holds, where that figure comes from, in words)."""
    if hw.memory_cuda_gib:
        where = f"hardware[{hw.name}].memory_cuda_gib: the total CUDA reports"
        return hw.memory_cuda_gib * _GIB, f"{hw.memory_cuda_gib} GiB ({where})"
    where = f"hardware[{hw.name}].memory_gb: the datasheet, no device figure cited"
    return hw.memory_gb * 1e9, f"{hw.memory_gb} GB ({where})"


def layer_counts(model: ModelSettings, overrides: dict | None = None) -> dict:
    """Return {dense_layers, moe_layers, sliding_layers}, overridden for a depth-reduced model."""
    counts = {"dense_layers": model.dense_layers, "moe_layers": model.moe_layers}
    counts["sliding_layers"] = model.attention.sliding_layers or 0
    return counts | (overrides or {})


def stage_layers(counts: dict, pp: int) -> list[dict]:
    """Return per PP stage {dense, moe, sliding} layer counts (contiguous; dense layers first)."""
    total = counts["dense_layers"] + counts["moe_layers"]
    if pp > total:
        raise ValueError(f"pp={pp}: more stages than the {total} layers")
    sizes = [total // pp + (1 if i < total % pp else 0) for i in range(pp)]
    stages, start = [], 0
    s_frac = counts["sliding_layers"] / total if total else 0.0
    for size in sizes:
        idx = range(start, start + size)
        dense = sum(1 for i in idx if i < counts["dense_layers"])
        sliding = sum(1 for i in idx if math.floor((i + 1) * s_frac) > math.floor(i * s_frac))
        stages.append({"dense": dense, "moe": size - dense, "sliding": sliding})
        start += size
    return stages


def _group_bytes(model: ModelSettings, dep: DeploymentSettings, group: str, tp: int) -> float:
    """Return one layer's bytes of a weight group held by one rank of a TP group."""
    return group_params(model, group, tp) * bytes_per_weight(group_dtype(group, dep))


def rank_weight_bytes(
    model: ModelSettings,
    dep: DeploymentSettings,
    layout: Layout,
    stage: dict,
    first: bool,
    last: bool,
) -> float:
    """Return the weight bytes one rank of a stage holds."""
    tp, ep = layout.tp, layout.ep
    layers = stage["dense"] + stage["moe"]
    held = functools.partial(_group_bytes, model, dep)  # (group, its TP split)
    total = layers * (held("attention", tp) + held("indexer", 1))
    total += stage["dense"] * held("dense_mlp", tp)
    total += stage["moe"] * (held("shared_experts", tp) + held("router", 1))
    expert_bytes = bytes_per_weight(group_dtype("routed_experts", dep))
    total += stage["moe"] * model.routed_experts * expert_params(model) * expert_bytes / (tp * ep)
    table = model.vocab * model.hidden / tp
    if first:
        total += table * 2
    if last and not (model.tied_embeddings and first):
        total += table * bytes_per_weight(group_dtype("lm_head", dep))
    return total


def _needed(model, dep, layout, stages, weights, batch, context_len) -> float:
    """Return the most bytes any stage's rank needs: its weights (`weights`: each stage's
    rank_weight_bytes, independent of batch and context, so computed once), the KV cache of its
    sequences and the reserve."""
    seqs = math.ceil(batch / layout.ep)
    reserve = dep.runtime_reserve_gb * 1e9
    cache = kv_bytes_per_token_layer(model, dep, layout.tp)
    per_token = cache["kv"] + cache["index"]
    kv = []  # the KV-cache bytes one sequence takes on one rank of each stage
    for st in stages:
        full = st["dense"] + st["moe"] - st["sliding"]
        sliding = st["sliding"] * cached_tokens(model, context_len, True) if st["sliding"] else 0
        kv.append(per_token * (full * cached_tokens(model, context_len, False) + sliding))
    return max(
        weight + seqs * per_seq + reserve for weight, per_seq in zip(weights, kv, strict=True)
    )


def _largest(fits, low: int, high: int) -> int:
    """Return the largest value in [low, high] for which fits(value) holds (0 when none)."""
    if not fits(low):
        return 0
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if fits(mid) else (low, mid - 1)
    return low


def memory_fit(
    model: ModelSettings,
    dep: DeploymentSettings,
    hw: HardwareSpec,
    layout: Layout,
    batch: int,
    layer_overrides: dict | None = None,
) -> dict:
    """Return {fits, needed_bytes, short_bytes, capacity_bytes, max_batch_fit, max_context_fit}."""
    stages = stage_layers(layer_counts(model, layer_overrides), layout.pp)
    room, _ = capacity(hw)
    ctx = dep.context_len
    last = len(stages) - 1
    weights = [
        rank_weight_bytes(model, dep, layout, st, i == 0, i == last) for i, st in enumerate(stages)
    ]
    needed = functools.partial(_needed, model, dep, layout, stages, weights)  # (batch, context)
    most = needed(batch, ctx)
    return {
        "fits": most <= room,
        "needed_bytes": most,
        "short_bytes": max(most - room, 0.0),
        "capacity_bytes": room,
        "max_batch_fit": _largest(lambda b: needed(b, ctx) <= room, 1, 1 << 20),
        "max_context_fit": _largest(lambda c: needed(batch, c) <= room, 1, _MAX_CONTEXT),
    }
