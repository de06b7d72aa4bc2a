"""Roofline arithmetic: intensity, ridge point, and which ceiling bounds a kernel."""


def ridge_point(peak_tflops: float, bandwidth_gbs: float) -> float:
    """Return the arithmetic intensity (FLOP/byte) where the math and memory roofs meet."""
    return peak_tflops * 1e12 / (bandwidth_gbs * 1e9)


def bound(flops: float, bytes_moved: float, peak_tflops: float, bandwidth_gbs: float) -> str:
    """Return 'memory' or 'math': which roof is lower at this kernel's intensity."""
    if bytes_moved <= 0:
        return "math"
    return "memory" if flops / bytes_moved < ridge_point(peak_tflops, bandwidth_gbs) else "math"


def memory_ms(bytes_moved: float, bandwidth_gbs: float) -> float:
    """Return the time in ms to move these bytes at this bandwidth (the memory roof)."""
    return bytes_moved / (bandwidth_gbs * 1e9) * 1e3


def math_ms(flops: float, peak_tflops: float) -> float:
    """Return the time in ms to do these flops at this peak (the math roof)."""
    return flops / (peak_tflops * 1e12) * 1e3


def floor_ms(flops: float, bytes_moved: float, peak_tflops: float, bandwidth_gbs: float) -> dict:
    """Return the math time, memory time and their max (the roofline floor), in milliseconds."""
    flop, mem = math_ms(flops, peak_tflops), memory_ms(bytes_moved, bandwidth_gbs)
    return {"math_ms": flop, "memory_ms": mem, "floor_ms": max(flop, mem)}
