"""Part timers: the time of one composed part (its bytes and flops) on a hardware spec.

Part timers return each part's memory and math time and a `source` label: `roofline_timer` gives
max(bytes/bandwidth, flops/peak) as `model (roofline)`; `plan.launch_fit.launch_timer` adds each
part's launches x its group's measured cost per kernel and divides the roofline terms by fitted
efficiencies (`other` is then the launch time), or takes a kernel's own measured time;
`derated_timer` divides by a fraction of roofline measured for the part's kind. A missing peak
is a NaN gap with its reason, never another dtype's.
"""

from __future__ import annotations

import math
from collections.abc import Callable

ROOFLINE = "model (roofline)"

Timer = Callable[[dict, dict], dict]


def roofline_timer(part: dict, hw: dict) -> dict:
    """Return {memory_ms, math_ms, roof_memory_ms, roof_math_ms, source, gap} at the roofline."""
    mem = part["bytes"] / (hw["memory_bandwidth_gbs"] * 1e9) * 1e3
    peak = hw["peak_tflops"].get(part["dtype"])
    if part["flops"] and not peak:
        gap = f"no peak_tflops.{part['dtype']} for hardware[{hw['name']}]"
        return {
            "memory_ms": math.nan,
            "math_ms": math.nan,
            "roof_memory_ms": mem,
            "roof_math_ms": math.nan,
            "source": ROOFLINE,
            "gap": gap,
        }
    flop = part["flops"] / (peak * 1e12) * 1e3 if part["flops"] else 0.0
    bound_mem = mem >= flop
    return {
        "memory_ms": mem if bound_mem else 0.0,
        "math_ms": 0.0 if bound_mem else flop,
        "roof_memory_ms": mem,
        "roof_math_ms": flop,
        "source": ROOFLINE,
        "gap": "",
    }


def derated_timer(fractions: dict[str, float], device: str) -> Timer:
    """Return a timer dividing a part's roofline time by the fraction measured for its kind."""
    for kind, f in fractions.items():
        # Above 1 is a measured fact too (a part served from cache beats its memory roof).
        if not 0 < f < math.inf:
            raise ValueError(f"fraction of roofline for {kind!r} = {f}: must be positive")

    def timer(part: dict, hw: dict) -> dict:
        out = roofline_timer(part, hw)
        f = fractions.get(part["kind"])
        if f is None:
            return out
        out["memory_ms"] /= f
        out["math_ms"] /= f
        out["source"] = f"composed (x{f:.2f} of roofline, measured on {device})"
        return out

    return timer
