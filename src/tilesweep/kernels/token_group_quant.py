"""Per-token-group fp8 quantisation in Triton (SGLang's and vLLM's per_token_group_quant_fp8)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _token_group_quant(x_ptr, q_ptr, s_ptr, cols, groups, fmax, eps, GROUP: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    g = tl.program_id(1)
    c = g * GROUP + tl.arange(0, GROUP)
    mask = c < cols
    x = tl.load(x_ptr + row * cols + c, mask=mask, other=0.0).to(tl.float32)
    scale = tl.maximum(tl.max(tl.abs(x), 0), eps) / fmax
    q = tl.clamp(x / scale, -fmax, fmax)
    tl.store(q_ptr + row * cols + c, q.to(q_ptr.dtype.element_ty), mask=mask)
    tl.store(s_ptr + row * groups + g, scale)


def token_group_quant(torch, x, group: int = 128, eps: float = 1e-10, out_dtype=None):
    """Return (fp8 values, fp32 scales per group) (`out_dtype`: for the CPU)."""
    n, cols = x.shape
    groups = triton.cdiv(cols, group)
    fp8 = torch.float8_e4m3fn
    q = torch.empty((n, cols), dtype=out_dtype or fp8, device=x.device)
    scales = torch.empty((n, groups), dtype=torch.float32, device=x.device)
    if n:
        _token_group_quant[(n, groups)](
            x, q, scales, cols, groups, torch.finfo(fp8).max, eps, GROUP=group
        )
    return q, scales
