"""A format's grouped (MoE) GEMM efficiency at decode on a device, as the hardware file cites it
(`grouped_gemm_efficiency`): the band of the engines' own kernels at a number of tokens per
expert, interpolated in log tokens between cited points and held flat past the ends (said so)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Band:
    """The efficiency band at one number of tokens per expert and what each end rests on."""

    low: float
    high: float
    low_kernel: str
    high_kernel: str
    where: str  # how the band was read at the asked tokens per expert (a point, between, held)
    cite: str

    @property
    def middle(self) -> float:
        """Return the band's geometric middle, the efficiency a verdict row takes."""
        return math.sqrt(self.low * self.high)

    def words(self, dtype: str, hardware: str) -> str:
        """Return the band for a row's inputs: its middle, its ends and their kernels."""
        ends = f"{self.low:.3g} ({self.low_kernel}), {self.high:.3g} ({self.high_kernel})"
        return (
            f"expert GEMMs ({dtype}): e_bw {self.middle:.3f} of the datasheet, the geometric "
            f"middle of hardware[{hardware}].grouped_gemm_efficiency [{ends}] {self.where} "
            f"({self.cite}); tpot_low_ms and tpot_high_ms span the band"
        )


def _log_mix(a: float, b: float, w: float) -> float:
    """Return the log-linear mix of two positive values (w = 0: a, w = 1: b)."""
    return math.exp((1 - w) * math.log(a) + w * math.log(b))


def band_at(curve: dict, tokens_per_expert: float) -> Band:
    """Return the band of a curve (hardware_spec.EfficiencyCurve as plain containers) at
    `tokens_per_expert` (the batch's routed tokens over the routed experts)."""
    points = curve["points"]
    t = max(float(tokens_per_expert), 1e-9)
    first, last = points[0], points[-1]
    for pt in points:
        if math.isclose(pt["tokens_per_expert"], t):
            return _band(pt, pt, 0.0, f"at {t:g} tokens per expert")
    if t < first["tokens_per_expert"]:
        held = f"held from {first['tokens_per_expert']:g} tokens per expert (none cited below)"
        return _band(first, first, 0.0, f"at {t:.3g} tokens per expert, {held}")
    if t > last["tokens_per_expert"]:
        held = f"held from {last['tokens_per_expert']:g} tokens per expert (none cited above)"
        return _band(last, last, 0.0, f"at {t:.3g} tokens per expert, {held}")
    for a, b in zip(points, points[1:], strict=False):
        ta, tb = a["tokens_per_expert"], b["tokens_per_expert"]
        if ta < t < tb:
            w = math.log(t / ta) / math.log(tb / ta)
            return _band(a, b, w, f"at {t:.3g} tokens per expert, between {ta:g} and {tb:g}")
    raise AssertionError("unreachable: the points ascend")


def _band(a: dict, b: dict, w: float, where: str) -> Band:
    """Return the band mixed between two points (the same point for w = 0)."""
    pick = a if w < 0.5 else b
    cite = a["cite"] if a is b else f"{a['cite']}; {b['cite']}"
    return Band(
        low=_log_mix(a["low"], b["low"], w),
        high=_log_mix(a["high"], b["high"], w),
        low_kernel=pick["low_kernel"],
        high_kernel=pick["high_kernel"],
        where=where,
        cite=cite,
    )
