"""What one rank of a pipeline stage runs for one micro-batch: parts with bytes and flops, and
collectives. Sharding is memory_fit's; the MoE split Layout.moe_split's."""

import functools
import math

import numpy as np

from tilesweep.plan.architecture import (
    ACT_BYTES,
    attention_core,
    bytes_per_weight,
    expert_params,
    group_dtype,
    group_params,
    linears,
    math_dtype,
)
from tilesweep.plan.sharding import gathers
from tilesweep.settings import DeploymentSettings, Layout, ModelSettings


def make_part(name: str, kind: str, nbytes: float, flops: float, dtype: str, count, **more) -> dict:
    """Return one compute part: what it reads and computes, in which dtype, how many times."""
    return dict(name=name, kind=kind, bytes=nbytes, flops=flops, dtype=dtype, count=count, **more)


def _collective(name: str, collective: str, n: int, nbytes: float, count: int) -> dict:
    """Return one collective a rank runs: over n ranks, of nbytes each time, count times."""
    return {"name": name, "collective": collective, "n": n, "bytes": nbytes, "count": count}


def _linear_part(model, dep, group, tp, rows, kind, count) -> dict | None:
    """Return the part reading one group's weights (sharded over TP) for `rows` tokens."""
    entries = linears(model).get(group, [])
    if not entries or not count:
        return None
    params = group_params(model, group, tp)
    acts = sum(i + o / (tp if split else 1) for _, i, o, split in entries)
    nbytes = params * bytes_per_weight(group_dtype(group, dep)) + rows * acts * ACT_BYTES
    return make_part(group, kind, nbytes, 2.0 * rows * params, math_dtype(group, dep), count)


def _merged(part: dict | None, extra: dict | None) -> dict | None:
    """Return `part` with `extra`'s bytes and flops added (math at `part`'s dtype)."""
    if part is None or extra is None:
        return part or extra
    return dict(part, bytes=part["bytes"] + extra["bytes"], flops=part["flops"] + extra["flops"])


# Kernels an EP rank runs beside the expert GEMMs, per MoE layer, that a rank holding every
# expert does not: it gathers its sent rows in routing order (one), and weights and scatter-adds
# the rows that come back into a zeroed output (three, where one sum suffices without EP). The
# fused-MoE kernel gathers and sums in place only when every expert is local (measure/step/moe).
EP_PERMUTE_LAUNCHES = 3

# Routings sampled for the expected busiest EP rank (fixed seed: the same answer every run); fewer
# for large batches, whose busiest rank varies less.
ROUTING_SAMPLES = 256


@functools.lru_cache(maxsize=4096)
def busiest_rank(experts: int, top_k: int, ep: int, tokens: int) -> tuple[float, float]:
    """Return (distinct experts, routed rows) of the busiest of `ep` ranks, expected over up to
    ROUTING_SAMPLES uniform top-k routings."""
    if tokens <= 0:
        return 0.0, 0.0
    if ep == 1:
        return experts * (1 - (1 - top_k / experts) ** tokens), float(tokens * top_k)
    rng = np.random.default_rng(0)
    per_rank = experts // ep
    samples = max(16, min(ROUTING_SAMPLES, 2_000_000 // (tokens * experts)))
    if tokens * top_k >= 16 * experts:
        # Every expert of every rank is hit (all but e^-16 of the time): only the rows vary.
        # Each token's top_k distinct picks fall into the ranks as a multivariate
        # hypergeometric draw, sampled per token without a key per expert (32x less work).
        hits = rng.multivariate_hypergeometric([per_rank] * ep, top_k, size=(samples, tokens))
        rows = hits.sum(axis=1)
        return float(per_rank), float(rows.max(axis=1).mean())
    picks = _distinct_picks(rng, samples * tokens, experts, top_k)
    slot = np.arange(samples).repeat(tokens)[:, None] * experts + picks
    hits = np.bincount(slot.ravel(), minlength=samples * experts)
    by_rank = hits.reshape(samples, ep, per_rank)
    rows = by_rank.sum(axis=2)
    distinct = (by_rank > 0).sum(axis=2)
    worst = rows.argmax(axis=1)
    pick = np.arange(samples)
    return float(distinct[pick, worst].mean()), float(rows[pick, worst].mean())


def _distinct_picks(rng: np.random.Generator, n: int, experts: int, top_k: int) -> np.ndarray:
    """Return n uniform top-k routings, each `top_k` distinct experts: draws with a repeat are
    drawn again (uniform over the distinct ones; O(top_k) a token, not O(experts))."""
    picks = rng.integers(0, experts, (n, top_k))
    while True:
        ordered = np.sort(picks, axis=1)
        again = (ordered[:, 1:] == ordered[:, :-1]).any(axis=1)
        if not again.any():
            return picks
        picks[again] = rng.integers(0, experts, (int(again.sum()), top_k))


def _attention_parts(
    model: ModelSettings, dep: DeploymentSettings, stage: dict, s: int, heads: float
) -> list[dict]:
    """Return the attention core's parts (and DSA indexer's) over a rank's s sequences."""
    parts = []
    layers = stage["dense"] + stage["moe"]
    for sliding, count in ((False, layers - stage["sliding"]), (True, stage["sliding"])):
        if not count:
            continue
        core = attention_core(model, dep, heads, sliding)
        name = "attention_sliding" if sliding else "attention"
        # MLA and GQA are different kernels, never one fit
        kind = "attention" if model.attention.kind == "mla" else "attention_gqa"
        # What the attention kernel's own table (plan/attention_table) is keyed by.
        shape = {"heads": heads, "sequences": s, "tokens": core["attended"]}
        nbytes, flops = s * core["kv_bytes"], s * core["flops"]
        parts.append(make_part(name, kind, nbytes, flops, dep.kv_dtype, count, **shape))
        if core["index_flops"]:
            nbytes, flops = s * core["index_bytes"], s * core["index_flops"]
            parts.append(make_part("indexer_score", "indexer", nbytes, flops, dep.kv_dtype, count))
    return parts


def _expert_parts(
    model: ModelSettings, dep: DeploymentSettings, layout: Layout, stage: dict, micro: int, s: int
) -> list[dict]:
    """Return the routed experts' part on one rank and the EP permutation around it."""
    h, e, k = model.hidden, model.routed_experts, model.top_k
    # MoE TP (split: each expert's matrices) x MoE EP (spread: whole experts) over the
    # stage's tp*ep ranks; each EP rank runs the rows of the micro-batch routed to it.
    split, spread = layout.moe_split()
    if stage.get("routing") == "balanced":  # as a measured step routes: equal rows per expert
        rows = micro * k / spread
        active = min(e / spread, rows)
    else:  # EP: every layer waits for its most loaded rank (expected, random routing)
        active, rows = busiest_rank(e, k, spread, micro)
    w = expert_params(model) / split
    dtype = group_dtype("routed_experts", dep)
    act_per_row = (2 * h + 2 * model.moe_intermediate / split) * ACT_BYTES
    nbytes = active * w * bytes_per_weight(dtype) + rows * act_per_row
    more = {"expert_mb": w * bytes_per_weight(dtype) / 1e6}  # one expert's slice a rank reads
    # what an engine's padded expert path sizes its rows by (plan.padded_experts)
    more |= {"rows": rows, "experts_local": e / spread, "moe_tp": split, "expert_params": w}
    more |= {"hidden": h, "inter_shard": model.moe_intermediate / split}
    flops, moe = 2.0 * rows * w, stage["moe"]
    math_at = math_dtype("routed_experts", dep)
    parts = [make_part("routed_experts", "expert_gemm", nbytes, flops, math_at, moe, **more)]
    if spread > 1:  # sent rows permuted in, returned rows weighted and scattered back
        sent = s * k  # this rank's tokens' rows, out and back
        # gather (read, write), weight (read, write), scatter-add (read); zero and accumulate
        # the output (write, read, write)
        nbytes, flops = (5 * sent + 3 * s) * h * ACT_BYTES, 2.0 * sent * h
        permute = make_part("ep_permute", "expert_permute", nbytes, flops, "bf16", moe)
        parts.append(permute | {"launches": EP_PERMUTE_LAUNCHES})
    return parts


def _edge_parts(
    model: ModelSettings, dep: DeploymentSettings, tp: int, s: int, first: bool, last: bool
) -> list[dict]:
    """Return the embedding of a first stage and the LM head of a last one, for s sequences."""
    h = model.hidden
    parts = []
    if first:
        parts.append(make_part("embedding", "embedding", 2 * s * h * ACT_BYTES, 0.0, "bf16", 1))
    if last:
        w = model.vocab * h / tp
        nbytes = w * bytes_per_weight(group_dtype("lm_head", dep))
        nbytes += s * (h + model.vocab / tp) * ACT_BYTES
        math_at = math_dtype("lm_head", dep)
        parts.append(make_part("lm_head", "lm_head", nbytes, 2.0 * s * w, math_at, 1))
    return parts


def stage_parts(
    model: ModelSettings,
    dep: DeploymentSettings,
    layout: Layout,
    stage: dict,
    micro: int,
    first: bool,
    last: bool,
) -> list[dict]:
    """Return the compute parts one rank of a stage runs for one micro-batch (count = repeats)."""
    tp, ep, h = layout.tp, layout.ep, model.hidden
    s = math.ceil(micro / ep)  # sequences whose attention this rank runs
    layers = stage["dense"] + stage["moe"]
    heads = model.attention.heads / tp
    parts = [
        # The DSA indexer's projections (whole on every TP rank) run inside the attention's
        # merged GEMMs (x_proj, qlat_proj in measure/step/weights): one part, their kernels.
        _merged(
            _linear_part(model, dep, "attention", tp, s, "attention_proj", layers),
            _linear_part(model, dep, "indexer", 1, s, "attention_proj", layers),
        ),
        _linear_part(model, dep, "dense_mlp", tp, s, "dense_gemm", stage["dense"]),
        _linear_part(model, dep, "shared_experts", tp, s, "shared_gemm", stage["moe"]),
        _linear_part(model, dep, "router", 1, s, "router", stage["moe"]),
    ]
    parts += _attention_parts(model, dep, stage, s, heads)
    parts += _expert_parts(model, dep, layout, stage, micro, s) if stage["moe"] else []
    parts.append(make_part("norms", "norm", 2 * 2 * s * h * ACT_BYTES, 0.0, "fp32", layers))
    parts += _edge_parts(model, dep, tp, s, first, last)
    return [p for p in parts if p is not None]


def stage_collectives(
    model: ModelSettings, layout: Layout, stage: dict, micro: int, first: bool = False
) -> list[dict]:
    """Return the collectives one rank of a stage runs for one micro-batch (count = repeats); a MoE
    split another way than DP attention gathers and scatters (one all-reduce of it) instead."""
    tp, ep, h = layout.tp, layout.ep, model.hidden
    s = math.ceil(micro / ep)
    layers = stage["dense"] + stage["moe"]
    gather = gathers(layout) and stage["moe"]
    out = []
    reduces = 2 * layers + (1 if first else 0) - (stage["moe"] if gather else 0)
    if tp > 1 and reduces:
        out.append(_collective("tp_all_reduce", "all_reduce", tp, s * h * ACT_BYTES, reduces))
    if gather:
        nbytes = micro * h * ACT_BYTES
        out.append(_collective("moe_gather_scatter", "all_reduce", tp * ep, nbytes, stage["moe"]))
    elif ep > 1 and stage["moe"]:
        nbytes = s * model.top_k * h * ACT_BYTES
        out.append(_collective("ep_all_to_all", "all_to_all", ep, nbytes, 2 * stage["moe"]))
    return out
