"""vLLM 0.33's own fused-MoE Triton kernel, launched for one expert GEMM as fused_moe.py
(_prepare_expert_assignment, invoke_fused_moe_triton_kernel) does: the naive path where M x top_k x
4 <= E, else moe_align_block_size's sorted layout with EM cut to M x top_k x BLOCK_SIZE_M below
BLOCK_SIZE_M tokens; SPLIT_K 1, USE_TD off; fp8 SWAP_AB by enable_swap_ab on SM90. The layout is
made in torch outside the timed call."""

from tilesweep.fused_moe.engines.base import Engine, Launch, register, swap_ab
from tilesweep.fused_moe.routing import buffered_blocks

SPARSITY = 4  # vLLM's SPARSITY_FACTOR


def vllm_blocks(topk_ids, block_m: int, experts: int):
    """Return (sorted_ids or None, expert_ids, num_post_pad) as vLLM 0.33 hands them over."""
    import torch  # heavy: loaded at the first layout or launch

    pairs, device = topk_ids.numel(), topk_ids.device
    m, top_k = topk_ids.shape
    if m * top_k * SPARSITY <= experts:
        flat = topk_ids.reshape(-1).to(torch.int32)
        return None, flat, torch.tensor([pairs * block_m], dtype=torch.int32, device=device)
    size = pairs + experts * (block_m - 1)
    if pairs < experts:
        size = min(pairs * block_m, size)
    return buffered_blocks(topk_ids, block_m, experts, size)


def _sm90() -> bool:
    """Return whether the current device is SM90 (vLLM's enable_swap_ab asks so)."""
    import torch  # heavy: loaded at the first layout or launch

    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def _scale_strides(a_scale, b_scale) -> tuple[int, ...]:
    """Return (stride_asm, stride_ask, stride_bse, stride_bsk, stride_bsn) as vLLM passes them."""
    if b_scale is None:
        return 0, 0, 0, 0, 0
    a_st = a_scale.stride() if a_scale is not None and a_scale.dim() == 2 else (0, 0)
    bsk = b_scale.stride(2) if b_scale.dim() == 3 else 0
    bsn = b_scale.stride(1) if b_scale.dim() >= 2 and b_scale.size(1) > 1 else 0
    return (*a_st, b_scale.stride(0), bsk, bsn)


@register
class VLLM(Engine):
    """vLLM 0.33's launch: the naive path for sparse batches, the small-batch EM cut, SPLIT_K 1."""

    name = "vllm"
    blocks = staticmethod(vllm_blocks)

    def padded_rows(self, launch: Launch) -> int:
        """Return vLLM's EM (the sorted buffer, cut below BLOCK_SIZE_M tokens; naive: pairs)."""
        bm, m = launch.config["BLOCK_SIZE_M"], launch.a.shape[0]
        if launch.sorted_ids is None:
            return m * launch.top_k * bm
        em = launch.sorted_ids.numel()
        return min(em, m * launch.top_k * bm) if m < bm else em

    def arguments(self, launch: Launch, em: int) -> tuple[tuple, dict]:
        """Return vLLM's arguments, positional as invoke_fused_moe_triton_kernel passes them."""
        import torch  # heavy: loaded at the first layout or launch
        import triton.language as tl

        a, b, c, config, top_k = launch.a, launch.b, launch.c, launch.config, launch.top_k
        pairs, shape = c.shape[0], launch.block_shape
        c3 = c.view(pairs // top_k, top_k, launch.n) if top_k > 1 else c.view(pairs, 1, launch.n)
        fp8 = b.dtype == torch.float8_e4m3fn
        block_k = config["BLOCK_SIZE_K"] if shape is None else min(config["BLOCK_SIZE_K"], *shape)
        args = (
            *(a, b, c3, None, launch.a_scale, launch.b_scale, launch.topk_weights),
            *(launch.sorted_ids, launch.expert_ids, launch.post_pad),
            *(launch.n, launch.k, em, a.shape[0] * top_k),
            *(a.stride(0), a.stride(1), b.stride(0), b.stride(2), b.stride(1)),
            *(c3.stride(1), c3.stride(2), *_scale_strides(launch.a_scale, launch.b_scale), 0, 0),
        )
        group_n, group_k = (0, 0) if shape is None else shape
        routed = launch.topk_weights is not None
        kwargs = dict(group_n=group_n, group_k=group_k, MUL_ROUTED_WEIGHT=routed, top_k=top_k)
        kwargs["compute_type"] = tl.float16 if c.dtype == torch.float16 else tl.bfloat16
        kwargs |= {"use_fp8_w8a8": fp8, "naive_block_assignment": launch.sorted_ids is None}
        kwargs |= {"BLOCK_SIZE_K": block_k, "SWAP_AB": swap_ab(config, fp8, _sm90())}
        kwargs |= {key: v for key, v in config.items() if key not in ("BLOCK_SIZE_K", "SPLIT_K")}
        return args, kwargs

    def whole_moe_calls(self, problem: dict, weights, batch, tuned: dict, dtype: str) -> dict:
        """Return {label: call} of vLLM's fused_experts, tuned and default (bf16 only)."""
        # vllm, where installed (the engine runner's rows say so where it is not)
        from vllm.model_executor.layers.fused_moe import fused_experts, override_config
        from vllm.model_executor.layers.fused_moe.fused_moe import get_default_config

        if dtype != "bf16":
            raise NotImplementedError("the engine runner times vLLM's bf16 path only")
        x = batch.a["gate_up"]
        w1, w2 = weights.w["gate_up"], weights.w["down"]
        ids = batch.topk_ids
        topw = batch.topk_weights.view(ids.shape)
        m, k = x.shape
        default = get_default_config(m, problem["experts"], problem["n"], k, problem["top_k"], None)

        def run(config):
            def call():
                with override_config(config):
                    return fused_experts(x, w1, w2, topw, ids)

            return call

        return {"tuned": run(tuned), "default": run(default)}
