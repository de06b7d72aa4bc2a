"""The expert GEMMs in an engine's weight formats (bf16, fp8 per tensor, fp8 128 x 128 blocks);
activations are quantised outside the timed call, as the engines do it in a separate kernel."""

import math

from tilesweep.fused_moe.case import FP8_MAX, Batch, Weights, make_routing, routed_reference
from tilesweep.fused_moe.space import gemm_shapes

BLOCK = 128  # the block side of fp8_block


def block_shape(fmt: str) -> list[int] | None:
    """Return the engines' block_shape argument of a format."""
    return [BLOCK, BLOCK] if fmt == "fp8_block" else None


def _quantize(x, fmt: str, rows_only: bool = False):
    """Return (fp8 x, fp32 scale) per tensor (per expert), per 128 x 128 tile or per row x 128."""
    import torch

    if fmt == "fp8":
        dims = tuple(range(1, x.dim())) if x.dim() == 3 else tuple(range(x.dim()))
        scale = x.abs().amax(dim=dims).clamp(min=1e-6) / FP8_MAX
        shaped = scale.reshape(-1, *([1] * (x.dim() - 1))) if x.dim() == 3 else scale
        return (x / shaped).to(torch.float8_e4m3fn), scale.float().reshape(-1).contiguous()
    *lead, n, k = x.shape
    rn = 1 if rows_only else BLOCK
    pad_n, pad_k = -n % rn, -k % BLOCK
    padded = torch.nn.functional.pad(x, (0, pad_k, 0, pad_n))
    tiles = padded.reshape(*lead, (n + pad_n) // rn, rn, (k + pad_k) // BLOCK, BLOCK)
    scale = tiles.abs().amax(dim=(-3, -1)).clamp(min=1e-6) / FP8_MAX
    q = (tiles / scale[..., :, None, :, None]).reshape(padded.shape)[..., :n, :k]
    return q.to(torch.float8_e4m3fn).contiguous(), scale.float().contiguous()


def _dequantize(q, scale, fmt: str, rows_only: bool = False):
    """Return the fp32 values an fp8 tensor and its scales stand for."""
    x = q.float()
    if fmt == "fp8":
        return x * (scale.reshape(-1, 1, 1) if x.dim() == 3 else scale)
    rn = 1 if rows_only else BLOCK
    full = scale.repeat_interleave(rn, dim=-2).repeat_interleave(BLOCK, dim=-1)
    return x * full[..., : x.shape[-2], : x.shape[-1]]


def make_weights(problem: dict, fmt: str, device: str, gen, dtype=None) -> Weights:
    """Return fresh random non-zero weights of both GEMMs in a format."""
    import torch

    w, scale = {}, {}
    for gemm, (n, k) in gemm_shapes(problem).items():
        parts = []  # 16 experts at a time: the fp32 draft of all of them can exceed the device
        for first in range(0, problem["experts"], 16):
            count = min(16, problem["experts"] - first)
            full = torch.randn(count, n, k, generator=gen, device=device) / math.sqrt(k)
            parts.append(
                (full.to(dtype or torch.bfloat16), None) if fmt == "bf16" else _quantize(full, fmt)
            )
            del full
        w[gemm] = torch.cat([p[0] for p in parts])
        scale[gemm] = None if fmt == "bf16" else torch.cat([p[1] for p in parts])
    return Weights(fmt, w, scale)


def make_batch(problem, weights: Weights, m, routing, alpha, device, gen, dtype=None):
    """Return a routed batch of m tokens with fresh activations and NaN-poisoned outputs."""
    import torch

    out = dtype or torch.bfloat16
    ids, topw = make_routing(m, problem["experts"], problem["top_k"], routing, alpha, device, gen)
    pairs = ids.numel()
    a, a_scale, c = {}, {}, {}
    for gemm, (n, k) in gemm_shapes(problem).items():
        x = torch.randn(m if gemm == "gate_up" else pairs, k, generator=gen, device=device)
        if weights.dtype == "bf16":
            a[gemm], a_scale[gemm] = x.to(out), None
        else:
            a[gemm], a_scale[gemm] = _quantize(x, weights.dtype, rows_only=True)
        c[gemm] = torch.full((pairs, n), float("nan"), dtype=out, device=device)
    return Batch(m, ids, topw, a, a_scale, c)


def reference(problem: dict, weights: Weights, batch: Batch, gemm: str, experts: int | None = None):
    """Return one GEMM's fp32 reference; with `experts`, only those experts' rows (others NaN)."""
    fmt, a = weights.dtype, batch.a[gemm].float()
    if fmt != "bf16":
        a = _dequantize(batch.a[gemm], batch.a_scale[gemm], fmt, rows_only=True)

    def weight(e):
        w = weights.w[gemm][e]
        return w.float() if fmt == "bf16" else _dequantize(w, weights.scale[gemm][e], fmt)

    return routed_reference(problem, batch, gemm, a, weight, experts)
