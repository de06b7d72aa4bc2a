"""Part timers: the time of one composed part (its bytes and flops) on a hardware spec, with a
`source` label; a missing peak is a NaN gap with its reason, never another dtype's.

The launch-aware time of a part is written once, here (`part_terms`, `part_ms`):
    launches x per-kernel cost + max(mem, math) + overlap x min(mem, math),
    mem = bytes / (e_bw x bandwidth), math = flops / (e_math x peak)."""

import math
from collections.abc import Callable

import numpy as np

from tilesweep.plan import roofline
from tilesweep.settings import HardwareSpec

ROOFLINE = "model (roofline)"

Timer = Callable[[dict, HardwareSpec], dict]


def roofline_timer(part: dict, hw: HardwareSpec) -> dict:
    """Return {memory_ms, math_ms, roof_memory_ms, roof_math_ms, source, gap} at the roofline."""
    mem = roofline.memory_ms(part["bytes"], hw.memory_bandwidth_gbs)
    peak = hw.peak_tflops.get(part["dtype"])
    out = {"roof_memory_ms": mem, "source": ROOFLINE, "gap": ""}
    if part["flops"] and not peak:
        unknown = dict.fromkeys(("memory_ms", "math_ms", "roof_math_ms"), math.nan)
        return out | unknown | {"gap": f"no peak_tflops.{part['dtype']} for hardware[{hw.name}]"}
    flop = roofline.math_ms(part["flops"], peak) if part["flops"] else 0.0
    bound_mem = mem >= flop
    return out | {
        "memory_ms": mem if bound_mem else 0.0,
        "math_ms": 0.0 if bound_mem else flop,
        "roof_math_ms": flop,
    }


def untimed_timer(timer: Timer, kind: str, why: str) -> Timer:
    """Return `timer` with every part of `kind` a gap naming `why`."""

    def wrapped(part: dict, hw: HardwareSpec) -> dict:
        out = timer(part, hw)
        if part["kind"] == kind:
            out.update(memory_ms=math.nan, math_ms=math.nan, gap=why)
        return out

    return wrapped


def floored_timer(timer: Timer, kind: str, floor_ms: float, why: str) -> Timer:
    """Return `timer` with every part of `kind` at least `floor_ms` (shortfall added to memory)."""

    def wrapped(part: dict, hw: HardwareSpec) -> dict:
        out = timer(part, hw)
        if part["kind"] != kind:
            return out
        short = floor_ms - (out["memory_ms"] + out["math_ms"] + out.get("launch_ms", 0.0))
        if short > 0:
            out = dict(out, memory_ms=out["memory_ms"] + short)
            out["source"] = f"{out['source']}; {why}"
        return out

    return wrapped


def part_terms(roof_memory_ms, roof_math_ms, e_bw, e_math, overlap: float):
    """Return (memory_ms, math_ms): the binding term in full and `overlap` of the other."""
    mem, flop = roof_memory_ms / e_bw, roof_math_ms / e_math
    bound_mem = np.logical_not(flop > mem)
    return np.where(bound_mem, mem, overlap * mem), np.where(bound_mem, overlap * flop, flop)


def part_ms(launches, per_kernel_ms, roof_memory_ms, roof_math_ms, e_bw, e_math, overlap: float):
    """Return a part's launch-aware time in ms: launches x per-kernel cost plus part_terms."""
    memory, flop = part_terms(roof_memory_ms, roof_math_ms, e_bw, e_math, overlap)
    return launches * per_kernel_ms + (memory + flop)
