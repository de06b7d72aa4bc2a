"""vLLM's own fused-MoE Triton kernel (tilesweep.fused_moe.engine_kernels.load), launched for one
expert GEMM as vLLM 0.33 launches it (fused_moe.py: _prepare_expert_assignment and
invoke_fused_moe_triton_kernel), in bf16, fp8 w8a8 per tensor and fp8 w8a8 with block scales:

- the naive path where M x top_k x 4 <= E: no alignment, one row block per routed pair
  (sorted_token_ids None, expert_ids the routed experts, EM = pairs x BLOCK_SIZE_M);
- else moe_align_block_size's layout: pairs sorted by expert, each expert's run padded to
  BLOCK_SIZE_M with the sentinel, buffers sized pairs + E x (BLOCK_SIZE_M - 1) (fewer pairs than
  experts: pairs x BLOCK_SIZE_M) with expert id -1 past the used blocks, and EM cut to
  M x top_k x BLOCK_SIZE_M when M < BLOCK_SIZE_M (vLLM's small-batch rule);
- SPLIT_K 1, USE_TD off (vLLM's default; never with quantised weights), no bias;
- fp8: SWAP_AB on an SM90 device where BLOCK_SIZE_M < 64 and BLOCK_SIZE_N >= 64 (vLLM's
  enable_swap_ab); a per-tensor activation scale as a 1-element tensor, one weight scale per
  expert; block scales (group_n, group_k = the block shape, BLOCK_SIZE_K cut to the smaller
  side) with strides as vLLM passes them; compute type bf16 (the output's).

The layout is made here in torch, once per (batch, BLOCK_SIZE_M) and outside the timed call, as
the tuner's own kernel is timed; vLLM's CUDA alignment op is not used.
"""

from __future__ import annotations

import triton

from tilesweep.fused_moe.routing import buffered_blocks

SPARSITY = 4  # vLLM's SPARSITY_FACTOR


def vllm_blocks(topk_ids, block_m: int, experts: int):
    """Return (sorted_ids or None, expert_ids, num_post_pad) as vLLM 0.33 hands them to the
    kernel for this batch and BLOCK_SIZE_M."""
    import torch

    pairs, device = topk_ids.numel(), topk_ids.device
    m, top_k = topk_ids.shape
    if m * top_k * SPARSITY <= experts:
        flat = topk_ids.reshape(-1).to(torch.int32)
        return None, flat, torch.tensor([pairs * block_m], dtype=torch.int32, device=device)
    size = pairs + experts * (block_m - 1)
    if pairs < experts:
        size = min(pairs * block_m, size)
    return buffered_blocks(topk_ids, block_m, experts, size)


def swap_ab(config: dict, fp8: bool) -> bool:
    """Return vLLM's SWAP_AB for a launch: fp8 only, on SM90, BLOCK_SIZE_M < 64 <= BLOCK_SIZE_N."""
    import torch

    sm90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
    return fp8 and sm90 and config["BLOCK_SIZE_M"] < 64 and config["BLOCK_SIZE_N"] >= 64


def _scale_strides(a_scale, b_scale) -> tuple[int, ...]:
    """Return (stride_asm, stride_ask, stride_bse, stride_bsk, stride_bsn) as vLLM passes them."""
    if b_scale is None:
        return 0, 0, 0, 0, 0
    two_d = a_scale is not None and a_scale.dim() == 2
    return (
        a_scale.stride(0) if two_d else 0,
        a_scale.stride(1) if two_d else 0,
        b_scale.stride(0),
        b_scale.stride(2) if b_scale.dim() == 3 else 0,
        b_scale.stride(1) if b_scale.dim() >= 2 and b_scale.size(1) > 1 else 0,
    )


blocks = vllm_blocks  # the launchers' common name


def launch(
    kernel,
    a,
    b,
    c,
    blocks,
    config: dict,
    *,
    top_k: int,
    topk_weights=None,
    a_scale=None,
    b_scale=None,
    block_shape=None,
):
    """Launch vLLM's kernel for one GEMM: c[pair] = A[row(pair)] @ B[expert(pair)]^T (scaled
    back for fp8), times the routing weight when topk_weights is given (the down GEMM, top_k 1
    as vLLM calls it)."""
    import torch
    import triton.language as tl

    sorted_ids, expert_ids, post_pad = blocks
    bm = config["BLOCK_SIZE_M"]
    m, pairs = a.shape[0], c.shape[0]
    num_tokens = m * top_k
    if sorted_ids is not None:
        em = sorted_ids.numel()
        if m < bm:
            em = min(em, m * top_k * bm)
    else:
        em = num_tokens * bm
    n, k = b.shape[1], b.shape[2]
    c3 = c.view(pairs // top_k, top_k, n) if top_k > 1 else c.view(pairs, 1, n)
    grid = (triton.cdiv(em, bm) * triton.cdiv(n, config["BLOCK_SIZE_N"]),)
    launch_config = {key: v for key, v in config.items() if key not in ("BLOCK_SIZE_K", "SPLIT_K")}
    fp8 = b.dtype == torch.float8_e4m3fn
    block_k = (
        config["BLOCK_SIZE_K"] if block_shape is None else min(config["BLOCK_SIZE_K"], *block_shape)
    )
    compute = tl.float16 if c.dtype == torch.float16 else tl.bfloat16
    ptrs = (a, b, c3, None, a_scale, b_scale, topk_weights, sorted_ids, expert_ids, post_pad)
    strides = (*a.stride()[:2], b.stride(0), b.stride(2), b.stride(1), *c3.stride()[1:3])
    kernel[grid](
        *ptrs,
        n,
        k,
        em,
        num_tokens,
        *strides,
        *_scale_strides(a_scale, b_scale),
        0,
        0,
        group_n=0 if block_shape is None else block_shape[0],
        group_k=0 if block_shape is None else block_shape[1],
        MUL_ROUTED_WEIGHT=topk_weights is not None,
        top_k=top_k,
        compute_type=compute,
        use_fp8_w8a8=fp8,
        use_int8_w8a8=False,
        use_int8_w8a16=False,
        per_channel_quant=False,
        naive_block_assignment=sorted_ids is None,
        HAS_BIAS=False,
        BLOCK_SIZE_K=block_k,
        SWAP_AB=swap_ab(config, fp8),
        USE_TD=False,
        SPLIT_K=1,
        **launch_config,
    )
    return c
