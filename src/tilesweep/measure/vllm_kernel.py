"""vLLM's own fused-MoE Triton kernel (tilesweep.engine_kernels.load), launched for one expert
GEMM as vLLM 0.33 launches it (fused_moe.py: _prepare_expert_assignment and
invoke_fused_moe_triton_kernel), bf16 only:

- the naive path where M x top_k x 4 <= E: no alignment, one row block per routed pair
  (sorted_token_ids None, expert_ids the routed experts, EM = pairs x BLOCK_SIZE_M);
- else moe_align_block_size's layout: pairs sorted by expert, each expert's run padded to
  BLOCK_SIZE_M with the sentinel, buffers sized pairs + E x (BLOCK_SIZE_M - 1) (fewer pairs than
  experts: pairs x BLOCK_SIZE_M) with expert id -1 past the used blocks, and EM cut to
  M x top_k x BLOCK_SIZE_M when M < BLOCK_SIZE_M (vLLM's small-batch rule);
- SPLIT_K 1, USE_TD off (vLLM's default), no bias, SWAP_AB off (fp8 only in vLLM).

The layout is made here in torch, once per (batch, BLOCK_SIZE_M) and outside the timed call, as
the tuner's own kernel is timed; vLLM's CUDA alignment op is not used.
"""

from __future__ import annotations

import triton

from tilesweep.kernels.fused_moe import align_blocks

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
    sorted_ids, expert_ids, post_pad = align_blocks(topk_ids, block_m, experts)
    size = pairs + experts * (block_m - 1)
    if pairs < experts:
        size = min(pairs * block_m, size)
    padded = torch.full((size,), pairs, dtype=torch.int32, device=device)
    padded[: sorted_ids.numel()] = sorted_ids
    ids = torch.full((triton.cdiv(size, block_m),), -1, dtype=torch.int32, device=device)
    ids[: expert_ids.numel()] = expert_ids
    return padded, ids, post_pad


def launch(kernel, a, b, c, blocks, config: dict, *, top_k: int, topk_weights=None):
    """Launch vLLM's kernel for one GEMM: c[pair] = A[row(pair)] @ B[expert(pair)]^T, times the
    routing weight when topk_weights is given (the down GEMM, top_k 1 as vLLM calls it)."""
    import torch

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
    compute = {torch.bfloat16: "bf16", torch.float16: "fp16"}[a.dtype]
    import triton.language as tl

    kernel[grid](
        a,
        b,
        c3,
        None,
        None,
        None,
        topk_weights,
        sorted_ids,
        expert_ids,
        post_pad,
        n,
        k,
        em,
        num_tokens,
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(2),
        b.stride(1),
        c3.stride(1),
        c3.stride(2),
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        MUL_ROUTED_WEIGHT=topk_weights is not None,
        top_k=top_k,
        compute_type=tl.bfloat16 if compute == "bf16" else tl.float16,
        use_fp8_w8a8=False,
        use_int8_w8a8=False,
        use_int8_w8a16=False,
        per_channel_quant=False,
        naive_block_assignment=sorted_ids is None,
        HAS_BIAS=False,
        BLOCK_SIZE_K=config["BLOCK_SIZE_K"],
        SWAP_AB=False,
        USE_TD=False,
        SPLIT_K=1,
        **launch_config,
    )
    return c
