"""Planted faults: real kernels that crash or never finish, to prove a sweep survives them.

Benchmark jobs named `fault-oob` or `fault-hang` (used by the tests, never by a default grid) run
these instead of a GEMM. On a GPU they are Triton kernels: one writes far outside its buffer (an
illegal memory access), one spins forever. On the CPU the same faults are a write to an unmapped
address (a segmentation fault) and an endless loop.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _oob_write(ptr, offset):
    tl.store(ptr + offset + tl.arange(0, 16), tl.zeros((16,), dtype=tl.float32))


@triton.jit
def _spin(flag_ptr):
    while tl.load(flag_ptr, volatile=True) == 0:
        pass


def _gpu_fault(kind: str):
    """Return a call that launches a faulting Triton kernel."""
    import torch

    buf = torch.zeros(16, device="cuda")

    def call(_problem):
        if kind == "oob":
            _oob_write[(1,)](buf, 1 << 40)
        else:
            _spin[(1,)](buf)
        torch.cuda.synchronize()

    return call


def _cpu_fault(kind: str):
    """Return a call that crashes the process or never returns."""

    def call(_problem):
        if kind == "oob":
            import ctypes

            ctypes.memset(1, 0, 64)  # write to an unmapped page: SIGSEGV
        while True:
            pass

    return call


def runner(kind: str, cuda: bool):
    """Return the planted fault `kind` (oob or hang) for the device at hand."""
    if kind not in ("oob", "hang"):
        raise ValueError(f"unknown planted fault {kind!r}")
    return _gpu_fault(kind) if cuda else _cpu_fault(kind)
