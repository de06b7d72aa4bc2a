"""Roofline arithmetic: intensity, ridge point, and which ceiling bounds a kernel."""

from __future__ import annotations


def ridge_point(peak_tflops: float, bandwidth_gbs: float) -> float:
    """Return the arithmetic intensity (FLOP/byte) where the math and memory roofs meet."""
    return peak_tflops * 1e12 / (bandwidth_gbs * 1e9)


def bound(flops: float, bytes_moved: float, peak_tflops: float, bandwidth_gbs: float) -> str:
    """Return 'memory' or 'math': which roof is lower at this kernel's intensity."""
    if bytes_moved <= 0:
        return "math"
    return "memory" if flops / bytes_moved < ridge_point(peak_tflops, bandwidth_gbs) else "math"


def floor_ms(flops: float, bytes_moved: float, peak_tflops: float, bandwidth_gbs: float) -> dict:
    """Return the math time, memory time and their max (the roofline floor), in milliseconds."""
    math_ms = flops / (peak_tflops * 1e12) * 1e3
    memory_ms = bytes_moved / (bandwidth_gbs * 1e9) * 1e3
    return {"math_ms": math_ms, "memory_ms": memory_ms, "floor_ms": max(math_ms, memory_ms)}
