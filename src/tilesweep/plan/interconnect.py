"""Alpha-beta model of the collectives a parallel layout needs, per named interconnect.

Times use nccl-tests' bus-bandwidth convention, so a `busbw_gbs` read off all_reduce_perf or
alltoall_perf output plugs in directly. For n GPUs and a message of `nbytes` bytes per rank:

- all_reduce (ring): 2(n-1) steps of alpha, and 2(n-1)/n * nbytes over the bus bandwidth.
- all_to_all: (n-1) steps of alpha, and (n-1)/n * nbytes over the bus bandwidth.
- send_recv (one hop between two GPUs): one alpha, and nbytes over the bus bandwidth.

Every term grows with n and with nbytes, so more GPUs never means less time, and a larger message
never takes less time. The latency floor of a collective is its time at zero bytes.
"""

from __future__ import annotations

import math

COLLECTIVES = ("all_reduce", "all_to_all", "send_recv")


def _steps_and_wire(collective: str, n: int) -> tuple[int, float]:
    """Return (latency steps, wire-bytes factor) of a collective over n GPUs."""
    if collective not in COLLECTIVES:
        raise ValueError(f"collective={collective!r}: allowed: {', '.join(COLLECTIVES)}")
    if n < 1:
        raise ValueError(f"n={n}: must be at least 1")
    if n == 1:
        return 0, 0.0
    if collective == "all_reduce":
        return 2 * (n - 1), 2 * (n - 1) / n
    if collective == "all_to_all":
        return n - 1, (n - 1) / n
    return 1, 1.0


def topology_numbers(hw: dict, topology: str | None = None) -> tuple[dict | None, str]:
    """Return (per-collective alpha/busbw dict or None, label naming it or the gap's reason)."""
    block = hw.get("interconnect_model")
    if not block:
        return None, f"no interconnect_model in hardware[{hw.get('name')}]"
    name = topology or block["default"]
    if name not in block["topologies"]:
        return None, f"hardware[{hw.get('name')}] has no interconnect topology {name!r}"
    return block["topologies"][name], f"{hw.get('interconnect')}/{name}"


def collective_ms(collective: str, n: int, nbytes: float, numbers: dict | None) -> float:
    """Return the time in ms of one collective (NaN when the interconnect has no numbers)."""
    steps, wire = _steps_and_wire(collective, n)
    if steps == 0:
        return 0.0
    if numbers is None or collective not in numbers:
        return math.nan
    alpha_us, busbw = numbers[collective]["alpha_us"], numbers[collective]["busbw_gbs"]
    return (steps * alpha_us * 1e-6 + wire * max(nbytes, 0.0) / (busbw * 1e9)) * 1e3


def latency_floor_ms(collective: str, n: int, numbers: dict | None) -> float:
    """Return the modelled time in ms of the collective at zero bytes (its latency floor)."""
    return collective_ms(collective, n, 0.0, numbers)


def floored_ms(
    collective: str, n: int, nbytes: float, numbers: dict | None, measured: dict | None = None
) -> tuple[float, str]:
    """Return (time in ms never below the model's or a measured floor, label of what set it)."""
    t = collective_ms(collective, n, nbytes, numbers)
    label = "model"
    floor = (measured or {}).get(collective, {}).get(n)
    if floor is not None and n > 1 and not t >= floor:
        if math.isnan(t):
            return math.nan, "no interconnect model; a measured floor alone is not a time"
        t, label = float(floor), "measured floor"
    return t, label
