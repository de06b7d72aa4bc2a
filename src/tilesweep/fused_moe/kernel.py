"""A fused-MoE Triton GEMM with the serving engines' launch semantics: over routed pairs sorted by
expert, each run padded to BLOCK_SIZE_M, rows of A gathered in place, row blocks swizzled by
GROUP_SIZE_M (a run-time value: one kernel for every group size), the routing weight applied in the
down GEMM, expert -1 writing zeros, fp8 scales per tensor, channel or block. Variants beyond the
engines': TMA weight loads, PERSISTENT programs per multiprocessor, SPLIT_K partial sums added
atomically in fp32."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# Scale modes (the SCALE constexpr): how fp8 operands are dequantised.
SCALE_MODES = {"none": 0, "tensor": 1, "channel": 2, "block": 3}
# The quantisation group of the block scales (SCALE block): N rows by K columns.
SCALE_GROUP = (128, 128)


@triton.jit
def _tile_coords(tile, em, N, group_m, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr):
    """Return (row block, column block) of a tile, row blocks swizzled in groups of group_m."""
    num_pid_m = tl.cdiv(em, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    in_group = group_m * num_pid_n
    first_m = (tile // in_group) * group_m
    rows_in_group = tl.minimum(num_pid_m - first_m, group_m)
    pid_m = first_m + (tile % in_group) % rows_in_group
    pid_n = (tile % in_group) // rows_in_group
    return pid_m, pid_n


@triton.jit
def _k_blocks(K, BLOCK_SIZE_K: tl.constexpr, SPLIT_K: tl.constexpr):
    """Return (first, end) of the K blocks this program reduces over (its share with SPLIT_K)."""
    k_blocks = tl.cdiv(K, BLOCK_SIZE_K)
    kb_first, kb_end = 0, k_blocks
    if SPLIT_K > 1:  # this program's share of the K blocks
        per_split = tl.cdiv(k_blocks, SPLIT_K)
        kb_first = tl.program_id(1) * per_split
        kb_end = tl.minimum(kb_first + per_split, k_blocks)
    return kb_first, kb_end


@triton.jit
def _operands(
    a_ptrs,
    b_ptrs,
    b_desc,
    b_row,
    kb,
    row_ok,
    K,
    BLOCK_SIZE_K: tl.constexpr,
    EVEN_K: tl.constexpr,
    TMA: tl.constexpr,
):
    """Return the A and B tiles of K block kb (zeros past K and on rows not in use)."""
    if EVEN_K:
        a = tl.load(a_ptrs, mask=row_ok[:, None], other=0.0)
    else:
        k_ok = tl.arange(0, BLOCK_SIZE_K) < K - kb * BLOCK_SIZE_K
        a = tl.load(a_ptrs, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
    if TMA:  # the weight tile through the tensor-memory accelerator (zeros past K)
        b = b_desc.load([b_row, kb * BLOCK_SIZE_K]).T
    elif EVEN_K:
        b = tl.load(b_ptrs)
    else:
        b = tl.load(b_ptrs, mask=k_ok[:, None], other=0.0)
    return a, b


@triton.jit
def _group_scales(
    a_s_ptrs, b_s_ptrs, row_ok, kb, strides, BLOCK_SIZE_K: tl.constexpr, GROUP_K: tl.constexpr
):
    """Return the A row and B column scales of K block kb's quantisation group (SCALE block)."""
    k_group = (kb * BLOCK_SIZE_K) // GROUP_K
    a_s = tl.load(a_s_ptrs + k_group * strides[5], mask=row_ok, other=0.0)
    b_s = tl.load(b_s_ptrs + k_group * strides[8])
    return a_s, b_s


@triton.jit
def _dequantised(acc, ptrs, strides, a_rows, row_ok, expert, offs_bn, SCALE: tl.constexpr):
    """Return acc times its fp8 scales per tensor (SCALE 1) or per row and channel (SCALE 2)."""
    a_scale_ptr, b_scale_ptr = ptrs[3], ptrs[4]
    if SCALE == 1:
        acc = acc * (tl.load(a_scale_ptr) * tl.load(b_scale_ptr + expert))
    if SCALE == 2:
        a_s = tl.load(a_scale_ptr + a_rows * strides[4], mask=row_ok, other=0.0)
        b_s = tl.load(b_scale_ptr + expert * strides[6] + offs_bn * strides[7])
        acc = acc * a_s[:, None] * b_s[None, :]
    return acc


@triton.jit
def _write(acc, c_ptrs, c_mask, ids, row_ok, topk_weights_ptr, mul_routed, SPLIT_K: tl.constexpr):
    """Store a tile, times each pair's routing weight where mul_routed (SPLIT_K > 1: added)."""
    if mul_routed != 0:
        w = tl.load(topk_weights_ptr + ids, mask=row_ok, other=0.0)
        acc = acc * w[:, None]
    if SPLIT_K > 1:  # every step above is linear in the partial sum
        tl.atomic_add(c_ptrs, acc, mask=c_mask, sem="relaxed")
    else:
        tl.store(c_ptrs, acc.to(c_ptrs.dtype.element_ty), mask=c_mask)


@triton.jit
def _row_block(
    ptrs, sizes, strides, pid_m, pid_n, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr
):
    """Return a tile's pairs, which are in use, its output pointers and mask, and its expert."""
    c_ptr, sorted_ids_ptr, expert_ids_ptr = ptrs[2], ptrs[6], ptrs[7]
    offs = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    ids = tl.load(sorted_ids_ptr + offs)
    row_ok = ids < sizes[4]
    offs_n = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + ids.to(tl.int64)[:, None] * strides[3] + offs_n[None, :]
    c_mask = row_ok[:, None] & (offs_n[None, :] < sizes[1])
    expert = tl.load(expert_ids_ptr + pid_m).to(tl.int64)
    return ids, row_ok, offs_n, c_ptrs, c_mask, expert


@triton.jit
def _tile(
    tile,
    ptrs,
    b_desc,
    sizes,
    strides,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
    SCALE: tl.constexpr,
    GROUP_N: tl.constexpr,
    GROUP_K: tl.constexpr,
    EVEN_K: tl.constexpr,
    TMA: tl.constexpr,
    SPLIT_K: tl.constexpr,
):
    """Compute one output tile (or with SPLIT_K > 1 its program's part of the reduction)."""
    num_post_pad, N, em, a_row_div = sizes[0], sizes[1], sizes[3], sizes[5]
    pid_m, pid_n = _tile_coords(tile, em, N, sizes[7], BLOCK_SIZE_M, BLOCK_SIZE_N)
    if pid_m * BLOCK_SIZE_M < num_post_pad:
        ids, row_ok, offs_n, c_ptrs, c_mask, expert = _row_block(
            ptrs, sizes, strides, pid_m, pid_n, BLOCK_SIZE_M, BLOCK_SIZE_N
        )
        if expert == -1:
            if SPLIT_K == 1:  # a split-K workspace starts zeroed
                zeros = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=c_ptrs.dtype.element_ty)
                tl.store(c_ptrs, zeros, mask=c_mask)
        else:
            a_rows = (ids // a_row_div).to(tl.int64)
            # Columns past N wrap round (pointers) or run into the next expert's rows (TMA)
            # instead of being masked: their results are never stored.
            offs_bn = (offs_n % N).to(tl.int64)
            # the fp32 product of the tile's A rows and its expert's B columns over its K blocks
            a_ptr, b_ptr, a_scale_ptr, b_scale_ptr = ptrs[0], ptrs[1], ptrs[3], ptrs[4]
            K, stride_asm, stride_bse, stride_bsn = sizes[2], strides[4], strides[6], strides[7]
            kb_first, kb_end = _k_blocks(K, BLOCK_SIZE_K, SPLIT_K)
            first_k = kb_first * BLOCK_SIZE_K + tl.arange(0, BLOCK_SIZE_K)
            a_ptrs = a_ptr + a_rows[:, None] * strides[0] + first_k[None, :]
            b_ptrs = b_ptr + expert * strides[1] + offs_bn[None, :] * strides[2] + first_k[:, None]
            b_row = (expert * N + pid_n * BLOCK_SIZE_N).to(tl.int32)
            # SCALE block: a row's scales, and a column group's (each K group's at its offset)
            a_s_ptrs = a_scale_ptr + a_rows * stride_asm
            b_s_ptrs = b_scale_ptr + expert * stride_bse + (offs_bn // GROUP_N) * stride_bsn
            acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
            for kb in range(kb_first, kb_end):
                a, b = _operands(
                    a_ptrs, b_ptrs, b_desc, b_row, kb, row_ok, K, BLOCK_SIZE_K, EVEN_K, TMA
                )
                if SCALE == 3:
                    a_s, b_s = _group_scales(
                        a_s_ptrs, b_s_ptrs, row_ok, kb, strides, BLOCK_SIZE_K, GROUP_K
                    )
                    acc += tl.dot(a, b) * a_s[:, None] * b_s[None, :]
                else:
                    acc = tl.dot(a, b, acc)
                a_ptrs += BLOCK_SIZE_K
                b_ptrs += BLOCK_SIZE_K
            acc = _dequantised(acc, ptrs, strides, a_rows, row_ok, expert, offs_bn, SCALE)
            _write(acc, c_ptrs, c_mask, ids, row_ok, ptrs[5], sizes[6], SPLIT_K)


@triton.jit
def _tiles(ptrs, b_desc, sizes, strides, blocks, modes, PERSISTENT: tl.constexpr):
    """Compute this program's output tiles: its own, or (PERSISTENT) every num_programs-th."""
    if PERSISTENT:
        tiles = tl.cdiv(sizes[3], blocks[0]) * tl.cdiv(sizes[1], blocks[1])  # row x column blocks
        for tile in range(tl.program_id(0), tiles, tl.num_programs(0)):
            _tile(tile, ptrs, b_desc, sizes, strides, *blocks, *modes)
    else:
        _tile(tl.program_id(0), ptrs, b_desc, sizes, strides, *blocks, *modes)


@triton.jit(do_not_specialize=["em", "num_valid", "a_row_div", "mul_routed", "group_m"])
def fused_moe_kernel(
    a_ptr,  # [rows, K] activations (tokens for gate/up, pairs for down), K contiguous
    b_ptr,  # [experts, N, K] weights, K contiguous
    b_desc,  # the weights as an [experts * N, K] tensor descriptor (TMA), else b_ptr again
    c_ptr,  # [pairs, N] output, one row per routed pair (SPLIT_K > 1: a zeroed fp32 workspace)
    a_scale_ptr,  # fp32: [1] (tensor), [rows] (channel), [rows, K / GROUP_K] (block)
    b_scale_ptr,  # fp32: [experts] (tensor), [experts, N] (channel), [experts, N/GN, K/GK] (block)
    topk_weights_ptr,  # [pairs] fp32 routing weights (read when mul_routed)
    sorted_ids_ptr,  # [em] int32 pair ids sorted by expert, padded with num_valid
    expert_ids_ptr,  # [em / BLOCK_SIZE_M] int32 expert of each row block (-1: not on this rank)
    num_post_pad_ptr,  # [1] int32 rows of sorted_ids in use
    N,
    K,
    em,
    num_valid,
    a_row_div,
    mul_routed,
    group_m,
    stride_am,
    stride_be,
    stride_bn,
    stride_cm,
    stride_asm,
    stride_ask,
    stride_bse,
    stride_bsn,
    stride_bsk,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
    SCALE: tl.constexpr,
    GROUP_N: tl.constexpr,
    GROUP_K: tl.constexpr,
    EVEN_K: tl.constexpr,
    TMA: tl.constexpr,
    PERSISTENT: tl.constexpr,
    SPLIT_K: tl.constexpr,
):
    """One program per output tile, or (PERSISTENT) programs striding over the tiles."""
    ptrs = (a_ptr, b_ptr, c_ptr, a_scale_ptr, b_scale_ptr, topk_weights_ptr, sorted_ids_ptr)
    ptrs += (expert_ids_ptr,)
    sizes = (tl.load(num_post_pad_ptr), N, K, em, num_valid, a_row_div, mul_routed, group_m)
    strides = (stride_am, stride_be, stride_bn, stride_cm, stride_asm, stride_ask)
    strides += (stride_bse, stride_bsn, stride_bsk)
    # The compile-time parameters travel as tuples written in the call (a tuple assigned to a
    # name would hold tensors, not constexprs): _tile's block shape, then its scale and variant.
    _tiles(
        ptrs,
        b_desc,
        sizes,
        strides,
        (BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K),
        (SCALE, GROUP_N, GROUP_K, EVEN_K, TMA, SPLIT_K),
        PERSISTENT,
    )


# Programs per multiprocessor's worth of the persistent grid on a CPU (Triton's interpreter), so
# that tests see programs stride over several tiles.
INTERPRETER_SMS = 2


def _sm_count(device) -> int:
    """Return the multiprocessors of a device (INTERPRETER_SMS on a CPU)."""
    if device.type != "cuda":
        return INTERPRETER_SMS
    return torch.cuda.get_device_properties(device).multi_processor_count


def weight_descriptor(b, block_n: int, block_k: int):
    """Return a TMA descriptor of [experts, N, K] weights; NotImplementedError if unsupported."""
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor
    except ImportError as exc:
        raise NotImplementedError("this Triton has no tensor descriptors (TMA)") from exc
    flat = b.reshape(b.shape[0] * b.shape[1], b.shape[2])
    return TensorDescriptor.from_tensor(flat, [block_n, block_k])


def invoke(
    a,
    b,
    c,
    blocks,
    config: dict,
    *,
    top_k: int,
    gather: bool,
    topk_weights=None,
    scale: str = "none",
    a_scale=None,
    b_scale=None,
):
    """Launch one fused-MoE GEMM, c[pair] = A[row(pair)] @ B[expert(pair)]^T; return c."""
    sorted_ids, expert_ids, num_post_pad = blocks
    n, k = b.shape[1], b.shape[2]
    bm, bn, bk = config["BLOCK_SIZE_M"], config["BLOCK_SIZE_N"], config["BLOCK_SIZE_K"]
    split_k = max(1, min(config.get("SPLIT_K", 0), triton.cdiv(k, bk)))  # a K block per split
    out = c if split_k == 1 else torch.zeros(c.shape, dtype=torch.float32, device=c.device)
    mode = SCALE_MODES[scale]
    dummy = c  # never read: the scale branches that would read it are compiled out
    a_s = a_scale if a_scale is not None else dummy
    b_s = b_scale if b_scale is not None else dummy
    a_st = a_s.stride() + (0,) * (2 - a_s.dim()) if mode in (2, 3) else (0, 0)
    b_st = b_s.stride() + (0,) * (3 - b_s.dim()) if mode in (1, 2, 3) else (0, 0, 0)
    em = sorted_ids.numel()
    tiles = triton.cdiv(em, bm) * triton.cdiv(n, bn)
    persistent = config.get("PERSISTENT", 0)
    grid = (min(tiles, persistent * _sm_count(c.device)) if persistent else tiles, split_k)
    tma = bool(config.get("TMA", 0))
    desc = weight_descriptor(b, bn, bk) if tma else b
    weights = topk_weights if topk_weights is not None else dummy
    ptrs = (a, b, desc, out, a_s, b_s, weights, sorted_ids, expert_ids, num_post_pad)
    sizes = (n, k, em, c.shape[0], top_k if gather else 1, int(topk_weights is not None))
    strides = (a.stride(0), b.stride(0), b.stride(1), c.stride(0), *a_st[:2], *b_st[:3])
    fused_moe_kernel[grid](
        *ptrs,
        *sizes,
        config.get("GROUP_SIZE_M", 1),
        *strides,
        **dict(BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, SCALE=mode),
        **dict(GROUP_N=SCALE_GROUP[0], GROUP_K=SCALE_GROUP[1], EVEN_K=k % bk == 0, TMA=tma),
        **dict(PERSISTENT=bool(persistent), SPLIT_K=split_k, num_warps=config.get("num_warps", 4)),
        num_stages=config.get("num_stages", 3),
    )
    if split_k > 1:
        c.copy_(out)
    return c
