"""The fused-MoE GEMMs on the device at hand: routed batches, fp32 checks, the torch baseline (on a
CPU under Triton's interpreter in tests only)."""

import math
from dataclasses import dataclass, field

from tilesweep.fused_moe import routing
from tilesweep.fused_moe.space import gemm_shapes, scale_mode
from tilesweep.measure.gemm_case import TOLERANCE as GEMM_TOLERANCE
from tilesweep.measure.gemm_case import rel_error

FP8_MAX = 448.0
# Relative L2 error allowed against the fp32 reference (fp32 operands: the interpreter in tests;
# the output is bf16, whose rounding alone is about 3e-3).
TOLERANCE = {**GEMM_TOLERANCE, "fp32": 1e-2}


@dataclass
class Weights:
    """One problem's expert weights in a dtype or an engine's format, with their scales."""

    dtype: str  # bf16, fp8 (per channel here; per expert in engines/formats.py), fp8_block, fp32
    w: dict  # gemm -> [experts, N, K]
    scale: dict  # gemm -> [experts, N] (fp8 here), [experts] or [experts, N/128, K/128], or None


@dataclass
class Batch:
    """One routed batch of M tokens and the activations of both GEMMs."""

    m: int
    topk_ids: object
    topk_weights: object  # [pairs] fp32
    a: dict  # gemm -> activations (tokens for gate_up, pairs for down)
    a_scale: dict  # gemm -> per-row fp32 scale (fp8) or None
    c: dict  # gemm -> [pairs, N] output
    blocks: dict = field(default_factory=dict)  # (BLOCK_SIZE_M, direct) -> routing blocks
    direct: bool = False
    refs: dict = field(default_factory=dict)  # gemm -> fp32 reference (the same for any config)


def torch_dtype(dtype: str):
    """Return the torch element type of an operand dtype name."""
    import torch

    return {"bf16": torch.bfloat16, "fp8": torch.float8_e4m3fn, "fp32": torch.float32}[dtype]


def _quantize(x, dim: int):
    """Return (fp8 tensor, fp32 scale) of x with one scale per slice along `dim`."""
    import torch

    scale = x.abs().amax(dim=dim).clamp(min=1e-6) / FP8_MAX
    return (x / scale.unsqueeze(dim)).to(torch.float8_e4m3fn), scale.float().contiguous()


def make_weights(problem: dict, dtype: str, device: str, gen) -> Weights:
    """Return fresh random weights (never zeros) for both GEMMs of a problem."""
    import torch

    w, scale = {}, {}
    for gemm, (n, k) in gemm_shapes(problem).items():
        full = torch.randn(problem["experts"], n, k, generator=gen, device=device) / math.sqrt(k)
        if dtype == "fp8":
            w[gemm], scale[gemm] = _quantize(full, 2)
        else:
            w[gemm], scale[gemm] = full.to(torch_dtype(dtype)), None
        del full
    return Weights(dtype, w, scale)


def make_routing(m: int, experts: int, top_k: int, routing: str, alpha: float, device, gen):
    """Return (topk_ids [m, k] int32, topk_weights [m * k] fp32): uniform or Zipf(alpha) routing."""
    import torch

    k = min(top_k, experts)
    if routing == "zipf":
        popularity = 1.0 / torch.arange(1, experts + 1, device=device, dtype=torch.float32) ** alpha
        popularity = popularity[torch.randperm(experts, generator=gen, device=device)]
    else:
        popularity = torch.ones(experts, device=device)
    ids = torch.multinomial(popularity.expand(m, experts), k, replacement=False, generator=gen)
    logits = torch.randn(m, k, generator=gen, device=device)
    return ids.to(torch.int32), torch.softmax(logits, dim=-1).reshape(-1).contiguous()


def make_batch(problem: dict, weights: Weights, m: int, routing: str, alpha, device, gen, direct):
    """Return a routed batch of m tokens with fresh random activations and NaN-poisoned outputs."""
    import torch

    ids, topw = make_routing(m, problem["experts"], problem["top_k"], routing, alpha, device, gen)
    pairs = ids.numel()
    a, a_scale, c = {}, {}, {}
    for gemm, (n, k) in gemm_shapes(problem).items():
        x = torch.randn(m if gemm == "gate_up" else pairs, k, generator=gen, device=device)
        if weights.dtype == "fp8":
            a[gemm], a_scale[gemm] = _quantize(x, 1)
        else:
            a[gemm], a_scale[gemm] = x.to(torch_dtype(weights.dtype)), None
        c[gemm] = torch.full((pairs, n), float("nan"), dtype=torch.bfloat16, device=device)
    return Batch(m, ids, topw, a, a_scale, c, direct=direct)


def blocks(batch: Batch, block_m: int, experts: int, sort: bool = False):
    """Return (and cache) the batch's row blocks for one BLOCK_SIZE_M (direct or sorted)."""
    direct = batch.direct and not sort
    if (block_m, direct) not in batch.blocks:
        batch.blocks[block_m, direct] = (
            routing.direct_blocks(batch.topk_ids, block_m)
            if direct
            else routing.align_blocks(batch.topk_ids, block_m, experts)
        )
    return batch.blocks[block_m, direct]


def fused_call(config: dict, problem: dict, weights: Weights, batch: Batch, gemm: str):
    """Return the call that runs the project's fused-MoE kernel on one GEMM of a batch."""
    scale = scale_mode(weights.dtype)
    blk = blocks(batch, config["BLOCK_SIZE_M"], problem["experts"], bool(config.get("SORT")))
    from tilesweep.fused_moe import kernel as fm  # triton: this module loads without it

    gather, args = gemm == "gate_up", (batch.a[gemm], weights.w[gemm], batch.c[gemm], blk, config)
    given = {"top_k": problem["top_k"], "gather": gather, "scale": scale}
    given.update(topk_weights=None if gather else batch.topk_weights)
    given.update(a_scale=batch.a_scale[gemm], b_scale=weights.scale[gemm])
    return lambda: fm.invoke(*args, **given)


def routed_reference(problem: dict, batch, gemm: str, a, weight, experts: int | None = None):
    """Return one GEMM's fp32 reference from A's fp32 rows and weight(e) ([N, K] fp32); with
    `experts`, only the pairs routed to that many experts (the lowest ids reached), the rest NaN."""
    import torch

    flat = batch.topk_ids.reshape(-1).long()
    rows = torch.arange(flat.numel(), device=flat.device)
    a_rows = rows // problem["top_k"] if gemm == "gate_up" else rows
    shape = (flat.numel(), gemm_shapes(problem)[gemm][0])
    out = torch.full(shape, float("nan"), dtype=torch.float32, device=flat.device)
    reached = torch.unique(flat).tolist()
    for e in reached[:experts] if experts else reached:
        sel = (flat == e).nonzero().squeeze(1)
        out[sel] = a[a_rows[sel]] @ weight(e).t()
    return out * batch.topk_weights[:, None] if gemm == "down" else out


def reference(problem: dict, weights: Weights, batch: Batch, gemm: str):
    """Return the fp32 reference of one GEMM of a batch (dequantised operands)."""
    a, scale = batch.a[gemm].float(), weights.scale[gemm]
    if batch.a_scale[gemm] is not None:
        a = a * batch.a_scale[gemm][:, None]

    def weight(e):
        w = weights.w[gemm][e].float()
        return w if scale is None else w * scale[e][:, None]

    return routed_reference(problem, batch, gemm, a, weight)


def check(config: dict, problem: dict, weights: Weights, batch: Batch) -> tuple[float, str | None]:
    """Return the worse relative error of both GEMMs and why it fails (None: ok)."""
    worst = 0.0
    for gemm in ("gate_up", "down"):
        batch.c[gemm].fill_(float("nan"))
        fused_call(config, problem, weights, batch, gemm)()
        if gemm not in batch.refs:
            batch.refs[gemm] = reference(problem, weights, batch, gemm)
        worst = max(worst, rel_error(batch.c[gemm], batch.refs[gemm]))
    limit = TOLERANCE[weights.dtype]
    if not worst <= limit:
        return worst, f"relative error {worst:.3g} > {limit} against the fp32 reference"
    return worst, None


def baseline_call(problem: dict, weights: Weights, batch: Batch, gemm: str):
    """Return torch's grouped GEMM on the sorted rows (no gather or scatter: in its favour)."""
    import torch

    flat = batch.topk_ids.reshape(-1).long()
    order = torch.argsort(flat, stable=True)
    a_rows = order // problem["top_k"] if gemm == "gate_up" else order
    a = batch.a[gemm][a_rows].contiguous()
    counts = torch.bincount(flat, minlength=problem["experts"])
    offs = torch.cumsum(counts, 0).to(torch.int32)
    b = weights.w[gemm].transpose(1, 2)
    op = baseline_name(weights.dtype).removeprefix("torch")
    grouped = getattr(torch, op, None)
    if grouped is None:
        raise NotImplementedError(f"torch.{op} is not in this torch build")
    if weights.dtype != "fp8":
        return lambda: grouped(a, b, offs=offs)
    a_scale, b_scale = batch.a_scale[gemm][a_rows].contiguous(), weights.scale[gemm]
    return lambda: grouped(a, b, a_scale, b_scale, offs=offs, out_dtype=torch.bfloat16)


def baseline_name(dtype: str) -> str:
    """Return the runner name of the same-dtype torch baseline."""
    return "torch_scaled_grouped_mm" if dtype == "fp8" else "torch_grouped_mm"
