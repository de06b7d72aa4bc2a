"""A Triton grouped (MoE) GEMM: each program computes one row block of one expert's output."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit(do_not_specialize=["num_tiles"])
def grouped_gemm(
    a_ptr,  # [tokens, K] activations, rows sorted by expert
    b_ptr,  # [experts, N, K] weights, K contiguous
    c_ptr,  # [tokens, N] output
    a_scale_ptr,  # [tokens] fp32 per-row scale of A (read only when HAS_SCALE)
    b_scale_ptr,  # [experts, N] fp32 per-channel scale of B (read only when HAS_SCALE)
    tile_expert_ptr,  # [num_tiles] int32: the expert each row block belongs to
    tile_start_ptr,  # [num_tiles] int32: first row of the block
    tile_end_ptr,  # [num_tiles] int32: one past the last row of the expert's rows
    num_tiles,
    N,
    K,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    HAS_SCALE: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    if pid_m >= num_tiles:
        return
    expert = tl.load(tile_expert_ptr + pid_m).to(tl.int64)
    row0 = tl.load(tile_start_ptr + pid_m)
    row_end = tl.load(tile_end_ptr + pid_m)
    rows = row0 + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    row_ok = rows < row_end
    col_ok = cols < N
    a_ptrs = a_ptr + rows.to(tl.int64)[:, None] * K + ks[None, :]
    b_ptrs = b_ptr + expert * N * K + cols.to(tl.int64)[None, :] * K + ks[:, None]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs, mask=row_ok[:, None], other=0.0)
        b = tl.load(b_ptrs, mask=col_ok[None, :], other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K
    if HAS_SCALE:
        a_scale = tl.load(a_scale_ptr + rows, mask=row_ok, other=0.0)
        b_scale = tl.load(b_scale_ptr + expert * N + cols, mask=col_ok, other=0.0)
        acc = acc * a_scale[:, None] * b_scale[None, :]
    c_ptrs = c_ptr + rows.to(tl.int64)[:, None] * N + cols[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])
