"""A read-only Triton kernel (a partial sum a program): the read ceiling's second way."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def stream_read_kernel(src_ptr, partial_ptr, n, per_program, BLOCK: tl.constexpr):
    """Sum elements [pid * per_program, (pid + 1) * per_program) of src into partial[pid]."""
    pid = tl.program_id(0)
    first = pid.to(tl.int64) * per_program
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, per_program, BLOCK):
        offs = first + start + tl.arange(0, BLOCK)
        acc += tl.load(src_ptr + offs, mask=offs < n, other=0.0, eviction_policy="evict_first")
    tl.store(partial_ptr + pid, tl.sum(acc, axis=0))


def stream_read(src, partial, block: int = 4096, num_warps: int = 8):
    """Launch one read of every element of the 1-D src, one program per element of partial."""
    n = src.numel()
    per_program = triton.cdiv(triton.cdiv(n, partial.numel()), block) * block
    stream_read_kernel[(partial.numel(),)](
        src, partial, n, per_program, BLOCK=block, num_warps=num_warps
    )
    return partial
