"""SGLang's own fused-MoE Triton kernel (engines.wheels.load; its wheel's paths in sglang.yaml),
launched for one expert GEMM as SGLang 0.5.23's default Triton MoE path launches it (the
fused_experts / _fused_moe_kernel_sequence path of srt/layers/moe/moe_runner/triton_utils/
fused_moe.py), in bf16 (fp16 too), fp8 w8a8 per tensor and fp8 w8a8 with 128 x 128 block scales:

- the layout is always sorted (SGLang has no vLLM-style naive path and its kernel always reads
  sorted_token_ids): moe_align_block_size (srt/layers/moe/moe_runner/triton_utils/
  moe_align_block_size.py) counts E + 1 buckets (the "+1 offset" convention: bucket 0 holds the
  expert -1 pairs of expert parallelism, none here), pads every bucket's run to BLOCK_SIZE_M with
  the sentinel (pairs) and sizes its buffers pairs + (E + 1) x (BLOCK_SIZE_M - 1), or
  pairs x BLOCK_SIZE_M when pairs < E + 1, rounded up to a multiple of 4 (int4 stores); the tiny
  batch path (moe_align_small_numel, kernels/ops/moe/moe_align_small_numel.py, for at most 64
  pairs over more than 63 experts) lays out the same blocks, so it needs no path of its own here;
- EM is the whole sorted buffer (no vLLM-style small-batch cut) and the grid is
  cdiv(EM, BLOCK_SIZE_M) x cdiv(N, BLOCK_SIZE_N) programs, those past num_tokens_post_padded
  returning at once (kernels/ops/moe/fused_moe_triton_kernels.py: invoke_fused_moe_kernel);
- fp8: A already quantised as SGLang's scaled_fp8_quant (one fp32 scale in a 1-element tensor)
  or sglang_per_token_group_quant_fp8 (row-major [rows, cdiv(K, 128)] scales) hands it over,
  weight scales [E] or [E, cdiv(N, 128), cdiv(K, 128)]; swap_ab by should_enable_swap_ab (fp8
  only: SM90, BLOCK_SIZE_M < 64 and BLOCK_SIZE_N >= 64); no MoE padding of K (SGLANG_MOE_PADDING
  off); BLOCK_SIZE_K as the config gives it (SGLang never clamps it to the block shape);
- even_Ks = K % BLOCK_SIZE_K == 0, c_sorted off, no TMA descriptors, no bias, FUSE_* and
  MASK_OUTPUT off, one A output slice, and programmatic dependent launch (USE_GDC, launch_pdl,
  GDC_EARLY = rows of A <= 512) on a device of compute capability 9 or more, as
  is_arch_support_pdl (kernels/jit/utils/arch.py) turns it on; SGLang's kernel has no SPLIT_K.

The layout is made here in torch, once per (batch, BLOCK_SIZE_M) and outside the timed call, as
the tuner's own kernel is timed; SGLang's CUDA alignment ops are not used.
"""

from __future__ import annotations

import triton

from tilesweep.fused_moe.engines.base import Engine, Launch, register
from tilesweep.fused_moe.engines.base import swap_ab as swap_ab_rule
from tilesweep.fused_moe.routing import buffered_blocks

SMALL_NUMEL_LIMIT = 64  # moe_align_small_numel.SMALL_NUMEL_LIMIT
SMALL_BATCH_MAX_BUCKETS = 64  # moe_align_block_size._CUDA_SMALL_BATCH_MAX_BUCKETS
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


def align_op(pairs: int, experts: int) -> str:
    """Return the op SGLang lays a batch out with on CUDA (EP and LoRA off): the one-launch
    Triton moe_align_small_numel, or sgl_kernel's moe_align_block_size: its small-batch kernel
    below 1024 pairs over at most 64 buckets, else its generic one (as the wheel's JIT port,
    kernels/jit/csrc/moe/moe_align_kernel.cu, dispatches; sgl_kernel's source is not in the
    wheel). All write the same blocks; one expert's pairs are in pair order but in the generic
    kernel, whose atomics order them as they land."""
    if pairs <= SMALL_NUMEL_LIMIT and experts + 1 > SMALL_BATCH_MAX_BUCKETS:
        return "moe_align_small_numel"
    if pairs < 1024 and experts + 1 <= 64:
        return "moe_align_block_size (small batch)"
    return "moe_align_block_size"


def blocks(topk_ids, block_m: int, experts: int):
    """Return (sorted_ids, expert_ids, num_tokens_post_padded) as SGLang 0.5.23 hands them to
    the kernel for this batch and BLOCK_SIZE_M (sorted_ids never None: SGLang has no naive
    path)."""
    size = buffer_size(topk_ids.numel(), block_m, experts)
    # The whole buffer holds the sentinel, as pad_sorted_token_ids=True has sgl_kernel fill it
    # (moe_align_small_numel leaves the part past num_tokens_post_padded unwritten; never read).
    # SGLang leaves expert ids past the used blocks unwritten (torch.empty, pad_expert_ids off);
    # the kernel never reads them (those programs return first). -1 here, as vLLM fills them.
    return buffered_blocks(topk_ids, block_m, experts, size)


def _sm90(device) -> bool:
    """Return whether SGLang's is_sm90_supported holds for a device (CUDA, not ROCm; compute
    capability 9.x; CUDA 12.3 or later)."""
    import torch

    if device.type != "cuda" or torch.version.hip is not None or torch.version.cuda is None:
        return False
    cuda = tuple(int(x) for x in torch.version.cuda.split(".")[:2])
    return torch.cuda.get_device_capability(device)[0] == 9 and cuda >= (12, 3)


def swap_ab(config: dict, device, fp8: bool) -> bool:
    """Return SGLang's swap_ab: fp8 w8a8 only, then should_enable_swap_ab (SM90, batch-invariant
    mode off as by default, BLOCK_SIZE_M < 64 and BLOCK_SIZE_N >= 64)."""
    return swap_ab_rule(config, fp8, _sm90(device))


def pdl(a) -> dict:
    """Return SGLang's programmatic-dependent-launch arguments for activations a: USE_GDC,
    launch_pdl and GDC_EARLY on compute capability 9 or more (is_arch_support_pdl), else none."""
    import torch

    if a.device.type != "cuda" or torch.version.hip is not None:
        return {}
    if torch.cuda.get_device_capability(a.device)[0] < 9:
        return {}
    return {"USE_GDC": True, "launch_pdl": True, "GDC_EARLY": a.shape[0] <= PDL_EARLY_ROWS}


def _kernel_config(config: dict) -> dict:
    """Return the config as SGLang passes it (**config): the four block keys and whichever of
    num_warps / num_stages it sets. Raise ValueError for keys SGLang's kernel cannot take."""
    extra = set(config) - set(CONFIG_KEYS) - set(LAUNCH_KEYS) - {"SPLIT_K"}
    if extra or config.get("SPLIT_K", 1) != 1:
        raise ValueError(f"SGLang's kernel takes no {sorted(extra) or ['SPLIT_K']} (config)")
    return {key: config[key] for key in (*CONFIG_KEYS, *LAUNCH_KEYS) if key in config}


def _scales(a, b, a_scale, b_scale, block_shape, config: dict) -> dict:
    """Return the kernel's scale arguments (pointers, strides, group_n / group_k) for the
    format at hand, as invoke_fused_moe_kernel passes them; check the scales' shapes."""
    import torch

    none = {"a_scale_ptr": None, "b_scale_ptr": None, "group_n": 0, "group_k": 0}
    none.update(dict.fromkeys(("stride_asm", "stride_ask", "stride_bse", "stride_bsk"), 0))
    none["stride_bsn"] = 0
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
    out.update(group_n=group_n, group_k=group_k)
    out.update(stride_asm=a_scale.stride(0), stride_ask=a_scale.stride(1))
    out.update(stride_bse=b_scale.stride(0), stride_bsk=b_scale.stride(2))
    out.update(stride_bsn=b_scale.stride(1))
    return out


# The arguments SGLang's launch passes as constants here: no TMA descriptors (a_use_tma off, as
# the TMA down path needs a tuned down config; b_use_tma only from a tuned config file), no bias
# or add mask, no int8 paths, unsorted C, and none of the fused stores.
FIXED = {
    "a_desc": None,
    "b_desc": None,
    "bias_ptr": None,
    "add_mask_ptr": None,
    "stride_bias_e": 0,
    "stride_bias_n": 0,
    "use_int8_w8a8": False,
    "use_int8_w8a16": False,
    "per_channel_quant": False,
    "c_sorted": False,
    "FUSE_ADD_TO_OUTPUT": False,
    "MASK_OUTPUT": False,
    "FUSE_SUM_ALL_REDUCE": False,
    # SGLang: 1 for gate_up (its default), the router's top-k for down; read only by the FUSE_* /
    # MASK_OUTPUT stores, all off, so one value compiles the same kernel.
    "ROUTER_TOPK": 1,
    "FUSE_SWIGLU": False,
    "A_OUTPUT_SLICES": 1,
    "A_OUTPUT_SLICE_WIDTH": 0,
    "A_OUTPUT_SLICE_K": 0,
}


@register
class SGLang(Engine):
    """SGLang 0.5.23's default Triton MoE launch: always sorted, the whole buffer as EM."""

    name = "sglang"

    def blocks(self, topk_ids, block_m: int, experts: int):
        """Return SGLang's layout (blocks)."""
        return blocks(topk_ids, block_m, experts)

    def arguments(self, launch: Launch, em: int) -> tuple[tuple, dict]:
        """Return SGLang's arguments, by name as invoke_fused_moe_kernel passes them; raise
        ValueError for a layout, config or scales SGLang's kernel cannot take."""
        import torch  # heavy: loaded at the first layout or launch
        import triton.language as tl

        a, b, c, config = launch.a, launch.b, launch.c, launch.config
        fp8 = a.dtype == torch.float8_e4m3fn
        scales = _scales(a, b, launch.a_scale, launch.b_scale, launch.block_shape, config)
        kwargs = {
            "a_ptr": a,
            "b_ptr": b,
            "c_ptr": c,
            # SGLang passes the [M, top_k] weights to both GEMMs; read only under MUL_ROUTED_WEIGHT.
            "topk_weights_ptr": launch.topk_weights,
            "sorted_token_ids_ptr": launch.sorted_ids,
            "expert_ids_ptr": launch.expert_ids,
            "num_tokens_post_padded_ptr": launch.post_pad,
            "N": launch.n,
            "K": launch.k,  # B.shape[2] - padded_size, padding off
            "EM": em,
            "num_valid_tokens": c.shape[0],  # topk_ids.numel(): the routed pairs
            "stride_am": a.stride(0),
            "stride_ak": a.stride(1),
            "stride_be": b.stride(0),
            "stride_bk": b.stride(2),
            "stride_bn": b.stride(1),
            "stride_cm": c.stride(-2),
            "stride_cn": c.stride(-1),
            **scales,
            "MUL_ROUTED_WEIGHT": launch.topk_weights is not None,
            "top_k": launch.top_k,
            # compute_type follows the model's activations (the output), bf16 or else fp16.
            "compute_type": tl.bfloat16 if c.dtype == torch.bfloat16 else tl.float16,
            "use_fp8_w8a8": fp8,
            "even_Ks": launch.k % config["BLOCK_SIZE_K"] == 0,
            "swap_ab": swap_ab(config, a.device, fp8),
            **FIXED,
            **pdl(a),
            **_kernel_config(config),
        }
        return (), kwargs
