"""Small fused kernels engines run around decode GEMMs (norms, silu_and_mul, top-k, DSA scores)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _store_rms_norm(v, w_ptr, out_ptr, row, cols, c, mask, eps):
    """Store RMSNorm(v) x weight into out's row `row` (inlined into the callers)."""
    inv = 1.0 / tl.sqrt(tl.sum(v * v, 0) / cols + eps)
    w = tl.load(w_ptr + c, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * cols + c, (v * inv * w).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _add_rms_norm(h_ptr, y_ptr, w_ptr, out_ptr, cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    mask = c < cols
    h = tl.load(h_ptr + row * cols + c, mask=mask, other=0.0).to(tl.float32)
    y = tl.load(y_ptr + row * cols + c, mask=mask, other=0.0).to(tl.float32)
    s = (h + y).to(h_ptr.dtype.element_ty)  # the residual stream keeps its dtype, as unfused
    tl.store(h_ptr + row * cols + c, s, mask=mask)
    _store_rms_norm(s.to(tl.float32), w_ptr, out_ptr, row, cols, c, mask, eps)


def add_rms_norm(torch, h, y, weight, eps: float = 1e-6):
    """Add y into h (in place) and return RMSNorm(h) x weight; one launch. h, y: [n, cols]."""
    n, cols = h.shape
    out = torch.empty_like(h)
    if n:
        _add_rms_norm[(n,)](h, y, weight, out, cols, eps, BLOCK=triton.next_power_of_2(cols))
    return out


@triton.jit
def _rms_norm(x_ptr, w_ptr, out_ptr, cols, stride_x, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    mask = c < cols
    v = tl.load(x_ptr + row * stride_x + c, mask=mask, other=0.0).to(tl.float32)
    _store_rms_norm(v, w_ptr, out_ptr, row, cols, c, mask, eps)


def rms_norm(torch, x, weight, eps: float = 1e-6):
    """Return RMSNorm(x) x weight as a new contiguous [n, cols] (any row stride); one launch."""
    n, cols = x.shape
    if x.stride(1) != 1:
        raise ValueError("rms_norm: rows must have unit stride along their columns")
    out = torch.empty((n, cols), dtype=x.dtype, device=x.device)
    if n:
        _rms_norm[(n,)](x, weight, out, cols, x.stride(0), eps, BLOCK=triton.next_power_of_2(cols))
    return out


@triton.jit
def _silu_and_mul(gu_ptr, out_ptr, half, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = c < half
    g = tl.load(gu_ptr + row * 2 * half + c, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(gu_ptr + row * 2 * half + half + c, mask=mask, other=0.0).to(tl.float32)
    act = g / (1.0 + tl.exp(-g)) * u
    tl.store(out_ptr + row * half + c, act.to(out_ptr.dtype.element_ty), mask=mask)


def silu_and_mul(torch, gu, out=None):
    """Return silu(gate) x up of gu = [gate | up] ([n, 2d] -> [n, d]); one launch."""
    n, two = gu.shape
    half = two // 2
    if out is None:
        out = torch.empty((n, half), dtype=gu.dtype, device=gu.device)
    block = min(1024, triton.next_power_of_2(half))
    if n:
        _silu_and_mul[(n, triton.cdiv(half, block))](gu, out, half, BLOCK=block)
    return out


@triton.jit
def _topk_softmax(
    logits_ptr, out_ptr, experts, K: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_K: tl.constexpr
):
    row = tl.program_id(0)
    e = tl.arange(0, BLOCK_E)
    x = tl.load(logits_ptr + row * experts + e, mask=e < experts, other=float("-inf"))
    x = x.to(tl.float32)
    slots = tl.arange(0, BLOCK_K)
    top = tl.full((BLOCK_K,), float("-inf"), tl.float32)
    for i in tl.static_range(K):
        best = tl.max(x, 0)
        top = tl.where(slots == i, best, top)
        first = tl.min(tl.where(x == best, e, BLOCK_E), 0)  # drop one copy of the max only
        x = tl.where(e == first, float("-inf"), x)
    p = tl.exp(top - tl.max(top, 0))
    p = p / tl.sum(p, 0)
    tl.store(out_ptr + row * K + slots, p.to(out_ptr.dtype.element_ty), mask=slots < K)


def topk_softmax(torch, logits, k: int, out):
    """Write the softmax of each row's k largest logits into out ([n * k]); one launch."""
    n, experts = logits.shape
    if n:
        block_e, block_k = triton.next_power_of_2(experts), max(2, triton.next_power_of_2(k))
        _topk_softmax[(n,)](logits, out, experts, K=k, BLOCK_E=block_e, BLOCK_K=block_k)
    return out


@triton.jit
def _index_scores(
    q_ptr,
    k_ptr,
    w_ptr,
    out_ptr,
    heads,
    tokens,
    dim,
    stride_qn,
    stride_qh,
    stride_kn,
    stride_kt,
    stride_wn,
    BLOCK_H: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    seq = tl.program_id(1).to(tl.int64)  # offsets past 2**31 at thousands of sequences
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    h = tl.arange(0, BLOCK_H)
    d = tl.arange(0, BLOCK_D)
    hmask, tmask, dmask = h < heads, t < tokens, d < dim
    q = tl.load(
        q_ptr + seq * stride_qn + h[:, None] * stride_qh + d[None, :],
        mask=hmask[:, None] & dmask[None, :],
        other=0.0,
    )
    k = tl.load(
        k_ptr + seq * stride_kn + t[:, None].to(tl.int64) * stride_kt + d[None, :],
        mask=tmask[:, None] & dmask[None, :],
        other=0.0,
    )
    s = tl.maximum(tl.dot(q, tl.trans(k)), 0.0)
    w = tl.load(w_ptr + seq * stride_wn + h, mask=hmask, other=0.0).to(tl.float32)
    total = tl.sum(s * w[:, None], 0)
    tl.store(out_ptr + seq * tokens + t, total.to(out_ptr.dtype.element_ty), mask=tmask)


def index_scores(torch, iq, keys, weights):
    """Return [n, tokens]: sum over heads of weights x relu(iq . keys); one launch."""
    n, heads, dim = iq.shape
    tokens = keys.shape[1]
    out = torch.empty((n, tokens), dtype=iq.dtype, device=iq.device)
    block_t = 64
    if n:
        _index_scores[(triton.cdiv(tokens, block_t), n)](
            *(iq, keys, weights, out, heads, tokens, dim),
            *(iq.stride(0), iq.stride(1), keys.stride(0), keys.stride(1), weights.stride(0)),
            BLOCK_H=max(16, triton.next_power_of_2(heads)),
            BLOCK_T=block_t,
            BLOCK_D=max(16, triton.next_power_of_2(dim)),
        )
    return out
