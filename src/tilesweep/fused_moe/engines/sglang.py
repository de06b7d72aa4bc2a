"""SGLang 0.5.23's own fused-MoE Triton kernel, launched for one expert GEMM as its default Triton
MoE path does (srt/layers/moe/moe_runner/triton_utils/fused_moe.py), bf16, fp8 w8a8 per tensor and
128 x 128 blocks. Always sorted: moe_align_block_size (triton_utils/moe_align_block_size.py) counts
E + 1 buckets, pads each run to BLOCK_SIZE_M and rounds the buffer to 4; EM is the whole buffer
(kernels/ops/moe/fused_moe_triton_kernels.py: invoke_fused_moe_kernel); fp8 swap_ab by
should_enable_swap_ab; no SPLIT_K; PDL on compute capability 9+ (kernels/jit/utils/arch.py). The
layout is made in torch outside the timed call: every align op SGLang dispatches to
(moe_align_small_numel, sgl_kernel's moe_align_block_size) writes the same blocks."""

import triton

from tilesweep.fused_moe.engines.base import Engine, Launch, register
from tilesweep.fused_moe.engines.base import swap_ab as swap_ab_rule
from tilesweep.fused_moe.routing import buffered_blocks

PDL_EARLY_ROWS = 512  # GDC_EARLY when A has at most this many rows (invoke_fused_moe_kernel)
CONFIG_KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M")
LAUNCH_KEYS = ("num_warps", "num_stages")


def buffer_size(pairs: int, block_m: int, experts: int) -> int:
    """Return SGLang's max_num_tokens_padded: the sorted buffer's length for this batch."""
    # vLLM: pairs + E x (BLOCK_SIZE_M - 1), or pairs x BLOCK_SIZE_M below E pairs, not rounded;
    # SGLang counts the expert -1 bucket too and rounds up to 4 (int4 stores).
    size = pairs + (experts + 1) * (block_m - 1)
    if pairs < experts + 1:
        size = pairs * block_m
    return (size + 3) // 4 * 4


def blocks(topk_ids, block_m: int, experts: int):
    """Return (sorted_ids, expert_ids, num_tokens_post_padded) as SGLang 0.5.23 hands them over."""
    size = buffer_size(topk_ids.numel(), block_m, experts)
    # The whole buffer holds the sentinel, as pad_sorted_token_ids=True has sgl_kernel fill it
    # (moe_align_small_numel leaves the part past num_tokens_post_padded unwritten; never read).
    # SGLang leaves expert ids past the used blocks unwritten (torch.empty, pad_expert_ids off);
    # the kernel never reads them (those programs return first). -1 here, as vLLM fills them.
    return buffered_blocks(topk_ids, block_m, experts, size)


def _sm90(device) -> bool:
    """Return whether SGLang's is_sm90_supported holds (CUDA 12.3+, compute capability 9.x)."""
    import torch

    if device.type != "cuda" or torch.version.hip is not None or torch.version.cuda is None:
        return False
    cuda = tuple(int(x) for x in torch.version.cuda.split(".")[:2])
    return torch.cuda.get_device_capability(device)[0] == 9 and cuda >= (12, 3)


def swap_ab(config: dict, device, fp8: bool) -> bool:
    """Return SGLang's swap_ab (fp8 w8a8, SM90, BLOCK_SIZE_M < 64, BLOCK_SIZE_N >= 64)."""
    return swap_ab_rule(config, fp8, _sm90(device))


def pdl(a) -> dict:
    """Return SGLang's PDL arguments (USE_GDC, launch_pdl, GDC_EARLY) on sm_90+, else none."""
    import torch

    if a.device.type != "cuda" or torch.version.hip is not None:
        return {}
    if torch.cuda.get_device_capability(a.device)[0] < 9:
        return {}
    return {"USE_GDC": True, "launch_pdl": True, "GDC_EARLY": a.shape[0] <= PDL_EARLY_ROWS}


def _kernel_config(config: dict) -> dict:
    """Return the config as SGLang passes it (**config); ValueError for keys it cannot take."""
    extra = set(config) - set(CONFIG_KEYS) - set(LAUNCH_KEYS) - {"SPLIT_K"}
    if extra or config.get("SPLIT_K", 1) != 1:
        raise ValueError(f"SGLang's kernel takes no {sorted(extra) or ['SPLIT_K']} (config)")
    return {key: config[key] for key in (*CONFIG_KEYS, *LAUNCH_KEYS) if key in config}


def _scales(a, b, a_scale, b_scale, block_shape, config: dict) -> dict:
    """Return the kernel's scale arguments as invoke_fused_moe_kernel passes them."""
    import torch

    none = {"a_scale_ptr": None, "b_scale_ptr": None, "group_n": 0, "group_k": 0}
    strides = ("stride_asm", "stride_ask", "stride_bse", "stride_bsk", "stride_bsn")
    none.update(dict.fromkeys(strides, 0))
    if a.dtype != torch.float8_e4m3fn:
        if a_scale is not None or b_scale is not None or block_shape is not None:
            raise ValueError("scales or a block shape given for unquantised activations")
        return none
    if b.dtype != torch.float8_e4m3fn or a_scale is None or b_scale is None:
        raise ValueError("fp8 w8a8 needs fp8 weights, an activation scale and a weight scale")
    experts, n, k = b.shape
    out = {**none, "a_scale_ptr": a_scale, "b_scale_ptr": b_scale}
    if block_shape is None:  # per tensor: one scale for A, one per expert for B
        if a_scale.numel() != 1 or tuple(b_scale.shape) != (experts,):
            raise ValueError(f"per-tensor scales: a {tuple(a_scale.shape)}, b {b_scale.shape}")
        return out
    group_n, group_k = block_shape
    want_a = (a.shape[0], triton.cdiv(k, group_k))
    want_b = (experts, triton.cdiv(n, group_n), triton.cdiv(k, group_k))
    if tuple(a_scale.shape) != want_a or tuple(b_scale.shape) != want_b:
        raise ValueError(f"block scales: a {tuple(a_scale.shape)}, b {tuple(b_scale.shape)}")
    # The kernel reads one scale group per K step and per N tile (BLOCK_SIZE_N <= group_n):
    # SGLang's tuner never pairs other sizes with a block shape, and its launch checks nothing.
    bk, bn = config["BLOCK_SIZE_K"], config["BLOCK_SIZE_N"]
    if group_k % bk or (bn < group_n and group_n % bn):
        raise ValueError(f"BLOCK_SIZE_K {bk} / BLOCK_SIZE_N {bn} straddle {block_shape} groups")
    out.update(group_n=group_n, group_k=group_k, stride_asm=a_scale.stride(0))
    out.update(stride_ask=a_scale.stride(1), stride_bse=b_scale.stride(0))
    out.update(stride_bsk=b_scale.stride(2), stride_bsn=b_scale.stride(1))
    return out


@register
class SGLang(Engine):
    """SGLang 0.5.23's default Triton MoE launch: always sorted, the whole buffer as EM."""

    name = "sglang"
    blocks = staticmethod(blocks)

    def arguments(self, launch: Launch, em: int) -> tuple[tuple, dict]:
        """Return SGLang's kernel arguments by name; ValueError for what its kernel cannot take."""
        import torch  # heavy: loaded at the first layout or launch
        import triton.language as tl

        a, b, c, config = launch.a, launch.b, launch.c, launch.config
        fp8 = a.dtype == torch.float8_e4m3fn
        scales = _scales(a, b, launch.a_scale, launch.b_scale, launch.block_shape, config)
        kwargs = {"a_ptr": a, "b_ptr": b, "c_ptr": c}
        # SGLang passes the [M, top_k] weights to both GEMMs; read only under MUL_ROUTED_WEIGHT.
        kwargs |= dict(topk_weights_ptr=launch.topk_weights, sorted_token_ids_ptr=launch.sorted_ids)
        kwargs |= dict(expert_ids_ptr=launch.expert_ids, num_tokens_post_padded_ptr=launch.post_pad)
        kwargs |= {"N": launch.n, "K": launch.k, "EM": em}  # K: B.shape[2] - padded_size, no pad
        kwargs["num_valid_tokens"] = c.shape[0]  # topk_ids.numel(): the routed pairs
        kwargs |= dict(zip(("stride_am", "stride_ak"), a.stride(), strict=True))
        kwargs |= dict(zip(("stride_be", "stride_bn", "stride_bk"), b.stride(), strict=True))
        kwargs |= dict(zip(("stride_cm", "stride_cn"), c.stride()[-2:], strict=True))
        kwargs |= {**scales, "MUL_ROUTED_WEIGHT": launch.topk_weights is not None}
        kwargs["top_k"] = launch.top_k
        # compute_type follows the model's activations (the output), bf16 or else fp16.
        kwargs["compute_type"] = tl.bfloat16 if c.dtype == torch.bfloat16 else tl.float16
        kwargs |= {"use_fp8_w8a8": fp8, "even_Ks": launch.k % config["BLOCK_SIZE_K"] == 0}
        kwargs |= {"swap_ab": swap_ab(config, a.device, fp8), **pdl(a), **_kernel_config(config)}
        return (), kwargs
