"""A fused MLA decode attention in Triton (FlashMLA's job): one query token per sequence, every head
against the shared latent cache, in the absorbed form. As flash-decoding: `_split` streams one split
of a sequence's tokens once for BLOCK_H heads with an online softmax (LAT_SPLIT=2 halves the
accumulator's registers, so 64 heads share a program, at twice the scores), `_combine` rescales and
sums the splits. With `indices` (DSA's top tokens) only those rows are read, by index; no scores
matrix is written."""

from __future__ import annotations

from dataclasses import dataclass

import triton
import triton.language as tl

from tilesweep.package_data import data_typed

# Programs to keep in flight (about two per multiprocessor of an H100/H200) before splitting the
# tokens further.
TARGET_PROGRAMS = 264


@triton.jit
def _cols(row_base, row_ok, first, end, BLOCK: tl.constexpr):
    """Return columns first.. first + BLOCK of rows at row_base ([rows, 1]; zeros past end)."""
    cols = first + tl.arange(0, BLOCK)
    return tl.load(
        row_base + cols[None, :], mask=row_ok[:, None] & (cols < end)[None, :], other=0.0
    )


@triton.jit
def _key_rows(
    cache_ptr,
    idx_ptr,
    seq,
    t0,
    stop,
    stride_cn,
    stride_ct,
    stride_in,
    BLOCK_T: tl.constexpr,
    HAS_IDX: tl.constexpr,
):
    """Return the cache rows of a sequence's BLOCK_T tokens from t0 (indexed with HAS_IDX), mask."""
    t = t0 + tl.arange(0, BLOCK_T)
    tmask = t < stop
    row = tl.load(idx_ptr + seq * stride_in + t, mask=tmask, other=0) if HAS_IDX else t
    return cache_ptr + seq * stride_cn + row[:, None].to(tl.int64) * stride_ct, tmask


@triton.jit
def _scores(q_lat, q_rope, k_lat, k_rope, tmask, scale):
    """Return the heads' scores against a block of keys, times scale; -inf off tmask."""
    qk = tl.dot(q_lat, tl.trans(k_lat)) + tl.dot(q_rope, tl.trans(k_rope))
    return tl.where(tmask[None, :], qk * scale, float("-inf"))


@triton.jit
def _online_softmax(m, s, qk):
    """Return (running max, sum, the old sums' rescale, the weights) after a block of scores."""
    m_new = tl.maximum(m, tl.max(qk, 1))
    alpha = tl.exp2(m - m_new)
    p = tl.exp2(qk - m_new[:, None])
    return m_new, s * alpha + tl.sum(p, 1), alpha, p


@triton.jit
def _store_part(
    acc_ptr,
    ml_ptr,
    part,
    acc,
    m,
    s,
    hmask,
    vs,
    LAT: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCK_LAT: tl.constexpr,
):
    """Store a split's partial sums of one latent slice, and (first slice) its max and sum."""
    dv = vs * BLOCK_V + tl.arange(0, BLOCK_V)
    mask = hmask[:, None] & (dv < LAT)[None, :]
    tl.store(acc_ptr + part[:, None] * BLOCK_LAT + dv[None, :], acc, mask=mask)
    if vs == 0:  # every slice has the same max and sum: the first one writes them
        tl.store(ml_ptr + part * 2, m, mask=hmask)
        tl.store(ml_ptr + part * 2 + 1, s, mask=hmask)


@triton.jit
def _split(
    q_ptr,
    qr_ptr,
    cache_ptr,
    idx_ptr,
    acc_ptr,
    ml_ptr,
    heads,
    tokens,
    chunk,
    splits,
    sm_scale,
    stride_qn,
    stride_qh,
    stride_rn,
    stride_rh,
    stride_cn,
    stride_ct,
    stride_in,
    LAT: tl.constexpr,
    LAT_SPLIT: tl.constexpr,
    BLOCK_V: tl.constexpr,
    ROPE: tl.constexpr,
    BLOCK_LAT: tl.constexpr,
    BLOCK_ROPE: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_T: tl.constexpr,
    HAS_IDX: tl.constexpr,
):
    """Stream one split of a sequence's tokens once for BLOCK_H heads and one latent slice."""
    hb = tl.program_id(0) // LAT_SPLIT
    vs = tl.program_id(0) % LAT_SPLIT
    split = tl.program_id(1)
    seq = tl.program_id(2).to(tl.int64)  # seq x cache stride passes 2**31 at 3,641 x 1,024 x 576
    h = hb * BLOCK_H + tl.arange(0, BLOCK_H)
    hmask = h < heads
    q_lat = _cols(q_ptr + seq * stride_qn + h[:, None] * stride_qh, hmask, 0, LAT, BLOCK_LAT)
    q_rope = _cols(qr_ptr + seq * stride_rn + h[:, None] * stride_rh, hmask, 0, ROPE, BLOCK_ROPE)
    m = tl.full((BLOCK_H,), float("-inf"), tl.float32)
    s = tl.zeros((BLOCK_H,), tl.float32)
    acc = tl.zeros((BLOCK_H, BLOCK_V), tl.float32)
    start = split * chunk
    stop = tl.minimum(start + chunk, tokens)
    scale = sm_scale * 1.4426950408889634  # exp2 below
    for t0 in range(start, stop, BLOCK_T):
        kv, tmask = _key_rows(
            cache_ptr, idx_ptr, seq, t0, stop, stride_cn, stride_ct, stride_in, BLOCK_T, HAS_IDX
        )
        k_lat = _cols(kv, tmask, 0, LAT, BLOCK_LAT)
        k_rope = _cols(kv + LAT, tmask, 0, ROPE, BLOCK_ROPE)
        qk = _scores(q_lat, q_rope, k_lat, k_rope, tmask, scale)
        m, s, alpha, p = _online_softmax(m, s, qk)
        # LAT_SPLIT > 1: this program's slice of the same rows (from L1/L2: just read for scores)
        v = k_lat if LAT_SPLIT == 1 else _cols(kv, tmask, vs * BLOCK_V, LAT, BLOCK_V)
        acc = acc * alpha[:, None] + tl.dot(p.to(k_lat.dtype), v)
    part = (seq * splits + split) * heads + h
    _store_part(acc_ptr, ml_ptr, part, acc, m, s, hmask, vs, LAT, BLOCK_V, BLOCK_LAT)


@triton.jit
def _combine(
    acc_ptr,
    ml_ptr,
    out_ptr,
    heads,
    splits,
    stride_on,
    stride_oh,
    LAT: tl.constexpr,
    BLOCK_LAT: tl.constexpr,
    BLOCK_S: tl.constexpr,
):
    head = tl.program_id(0)
    seq = tl.program_id(1).to(tl.int64)
    sp = tl.arange(0, BLOCK_S)
    dl = tl.arange(0, BLOCK_LAT)
    smask = sp < splits
    part = (seq * splits + sp) * heads + head
    m = tl.load(ml_ptr + part * 2, mask=smask, other=float("-inf"))
    s = tl.load(ml_ptr + part * 2 + 1, mask=smask, other=0.0)
    top = tl.max(m, 0)
    w = tl.where(smask & (m > float("-inf")), tl.exp2(m - top), 0.0)
    acc = tl.load(acc_ptr + part[:, None] * BLOCK_LAT + dl[None, :], mask=smask[:, None], other=0.0)
    out = tl.sum(acc * w[:, None], 0) / tl.sum(s * w, 0)
    tl.store(out_ptr + seq * stride_on + head * stride_oh + dl, out, mask=dl < LAT)


@dataclass(frozen=True)
class Config:
    """A launch configuration of `_split`: heads, tokens, latent slices, warps and stages."""

    block_h: int = 16
    block_t: int = 32
    lat_split: int = 1
    num_warps: int = 4
    num_stages: int = 2


# The fastest configuration by (local heads, sequences), measured (data/mla_tuned.yaml says how).
DATA_FILES = ("data/mla_tuned.yaml",)
_FIELDS = tuple[int, int, int, int, int]  # a Config's, in order
_TUNED = data_typed("tilesweep", DATA_FILES[0], "tuned", dict[int, dict[int, _FIELDS]])
TUNED = {heads: {n: Config(*c) for n, c in by.items()} for heads, by in _TUNED.items()}


def choose(heads: int, sequences: int = 1) -> Config:
    """Return the tuned configuration for `heads` query heads per sequence at `sequences`."""
    key = next((k for k in sorted(TUNED) if heads <= k), max(TUNED))
    by_batch = TUNED[key]
    at = max((b for b in by_batch if b <= sequences), default=min(by_batch))
    return by_batch[at]


def plan(sequences: int, heads: int, tokens: int, c: Config | None = None):
    """Return (programs along heads and slices, splits, tokens per split) for TARGET_PROGRAMS."""
    c = c or Config()
    hb = triton.cdiv(heads, c.block_h) * c.lat_split
    most = max(1, triton.cdiv(tokens, c.block_t))
    splits = max(1, min(most, triton.cdiv(TARGET_PROGRAMS, max(1, sequences * hb))))
    chunk = triton.cdiv(triton.cdiv(tokens, splits), c.block_t) * c.block_t
    return hb, triton.cdiv(tokens, chunk), chunk


def _query_parts(query, q_rope, lat: int):
    """Return (absorbed part, rope part) of a query, each of unit stride along its values."""
    if q_rope is None:
        query, q_rope = query[..., :lat], query[..., lat:]
    if query.stride(-1) != 1 or q_rope.stride(-1) != 1:
        raise ValueError("mla_decode: query rows must have unit stride along their values")
    return query, q_rope


def mla_decode(
    torch,
    query,
    cache,
    lat: int,
    sm_scale: float,
    indices=None,
    out=None,
    config: Config | None = None,
    q_rope=None,
):
    """Return the attention output [n, heads, lat] of query over cache (or `indices`' tokens)."""
    query, q_rope = _query_parts(query, q_rope, lat)
    n, heads, _ = query.shape
    rope = q_rope.shape[-1]
    tokens = indices.shape[1] if indices is not None else cache.shape[1]
    c = config or choose(heads, n)
    hb, splits, chunk = plan(n, heads, tokens, c)
    # tl.dot takes operands of at least 16 along each side.
    block_lat = max(16, triton.next_power_of_2(lat))
    block_v = max(16, block_lat // c.lat_split)
    acc = torch.empty((n * splits * heads, block_lat), dtype=torch.float32, device=query.device)
    ml = torch.empty((n * splits * heads, 2), dtype=torch.float32, device=query.device)
    if out is None:
        out = torch.empty((n, heads, lat), dtype=query.dtype, device=query.device)
    idx = indices if indices is not None else cache  # unused pointer when there are no indices
    _split[(hb, splits, n)](
        *(query, q_rope, cache, idx, acc, ml, heads, tokens, chunk, splits, sm_scale),
        *(query.stride(0), query.stride(1), q_rope.stride(0), q_rope.stride(1)),
        *(cache.stride(0), cache.stride(1), indices.stride(0) if indices is not None else 0),
        **dict(LAT=lat, LAT_SPLIT=c.lat_split, BLOCK_V=block_v, ROPE=rope, BLOCK_LAT=block_lat),
        **dict(BLOCK_ROPE=max(16, triton.next_power_of_2(rope)), BLOCK_H=c.block_h),
        **dict(BLOCK_T=c.block_t, HAS_IDX=indices is not None, num_warps=c.num_warps),
        num_stages=c.num_stages,
    )
    # `_combine`: each sequence's and head's splits rescaled and summed into out
    n, heads, _ = out.shape
    _combine[(heads, n)](
        *(acc, ml, out, heads, splits, out.stride(0), out.stride(1)),
        **dict(LAT=lat, BLOCK_LAT=block_lat, BLOCK_S=triton.next_power_of_2(splits), num_warps=4),
    )
    return out


def reference(torch, query, cache, lat: int, sm_scale: float, indices=None):
    """Return the same attention computed with torch ops in fp32 (the check, and the CPU path)."""
    keys = cache
    if indices is not None:
        keys = torch.gather(cache, 1, indices.unsqueeze(-1).expand(-1, -1, cache.shape[-1]))
    scores = torch.bmm(query.float(), keys.float().transpose(1, 2)) * sm_scale
    probs = torch.softmax(scores, dim=-1)
    return torch.bmm(probs, keys[..., :lat].float()).to(query.dtype)
