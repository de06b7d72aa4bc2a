"""A format's grouped (MoE) GEMM efficiency at decode on a device, as the hardware file cites it
(`grouped_gemm_efficiency`): the band of the engines' own kernels at a number of tokens per
expert, interpolated in log tokens between cited points and held flat past the ends (said so).

Where a point names the bytes of one expert each end's kernel was timed on (`low_expert_mb`,
`high_expert_mb`) and a layout's expert is another size, each end is scaled to it at a fixed cost
per expert: time = cost + bytes / datasheet, the cost read off the cited time, so a larger expert
streams better. The hardware file says what checks it (the same kernel cited at two sizes)."""

import dataclasses
import math
from dataclasses import dataclass

from tilesweep.settings import HardwareSpec
from tilesweep.settings.hardware_spec import EfficiencyCurve, EfficiencyPoint


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

    def words(self, dtype: str, hardware: str, owner: str = "") -> str:
        """Return the band as a row's `expert GEMMs` item: its middle, ends and their kernels;
        `owner` names the file the curve is read from (default: the hardware's)."""
        ends = f"{self.low:.3g} ({self.low_kernel}), {self.high:.3g} ({self.high_kernel})"
        owner = owner or f"hardware[{hardware}]"
        return (
            f"{dtype}, e_bw {self.middle:.3f} of the datasheet, the geometric "
            f"middle of {owner}.grouped_gemm_efficiency [{ends}] {self.where} "
            f"({self.cite}); tpot_low_ms and tpot_high_ms span the band"
        )


def sizes_words(curve: EfficiencyCurve, band: Band, dtype: str, hardware: str, owner: str) -> str:
    """Return a row's `expert GEMMs` item for a curve of one kernel at two expert sizes."""
    sizes = sorted({mb for pt in curve.points for mb in (pt.low_expert_mb, pt.high_expert_mb)})
    owner = owner or f"hardware[{hardware}]"
    ends = f"{band.low:.3g} ({band.low_kernel}), {band.high:.3g} ({band.high_kernel})"
    return (
        f"{dtype}, e_bw read in log expert size between the sizes {owner}.grouped_gemm_efficiency "
        f"times ({', '.join(f'{mb:.3g}' for mb in sizes)} MB an expert: [{ends}] {band.where}; "
        f"{band.cite}) at each layout's own expert; one kernel, so tpot_low_ms = tpot_high_ms"
    )


def _log_mix(a: float, b: float, w: float) -> float:
    """Return the log-linear mix of two positive values (w = 0: a, w = 1: b)."""
    return math.exp((1 - w) * math.log(a) + w * math.log(b))


def fixed_cost_scaled(e: float, cited_mb: float, expert_mb: float) -> float:
    """Return a kernel's datasheet fraction at `expert_mb` from `e` at `cited_mb` (fixed cost)."""
    return 1.0 / (1.0 + cited_mb / expert_mb * (1.0 / e - 1.0))


def _scaled(pt: EfficiencyPoint, expert_mb: float | None) -> EfficiencyPoint:
    """Return the point with each end scaled to `expert_mb` an expert."""
    if expert_mb is None or not (pt.low_expert_mb and pt.high_expert_mb):
        return pt
    ends = []  # (efficiency at expert_mb, the kernel and how it was read)
    for end in ("low", "high"):
        e, kernel = getattr(pt, end), getattr(pt, f"{end}_kernel")
        cited = getattr(pt, f"{end}_expert_mb")
        if math.isclose(cited, expert_mb):
            ends.append((e, f"{kernel}, timed at {cited:.3g} MB an expert"))
        else:
            words = f"{kernel}, from {cited:.3g} to {expert_mb:.3g} MB an expert at a fixed cost"
            ends.append((fixed_cost_scaled(e, cited, expert_mb), words))
    (low, low_kernel), (high, high_kernel) = min(ends), max(ends)
    ends = {"low": low, "high": high, "low_kernel": low_kernel, "high_kernel": high_kernel}
    return pt.model_copy(update=ends)


def _between(pt: EfficiencyPoint, expert_mb: float) -> EfficiencyPoint:
    """Return the point at `expert_mb`: its two sizes' efficiencies mixed in log size (held at
    the nearer size past them), both ends that one value."""
    (mb_a, e_a, k_a), (mb_b, e_b, k_b) = sorted(
        (getattr(pt, f"{end}_expert_mb"), getattr(pt, end), getattr(pt, f"{end}_kernel"))
        for end in ("low", "high")
    )
    w = min(max(math.log(expert_mb / mb_a) / math.log(mb_b / mb_a), 0.0), 1.0)
    e = _log_mix(e_a, e_b, w)
    kernel = f"{k_a} ({mb_a:.3g} MB) to {k_b} ({mb_b:.3g} MB), read at {expert_mb:.3g} MB"
    return pt.model_copy(update={"low": e, "high": e, "low_kernel": kernel, "high_kernel": kernel})


def sized(curve: EfficiencyCurve) -> bool:
    """Return whether any point of the curve names the expert size its kernels were timed on."""
    return any(pt.low_expert_mb for pt in curve.points)


def band_at(
    curve: EfficiencyCurve, tokens_per_expert: float, expert_mb: float | None = None
) -> Band:
    """Return the band of a curve at `tokens_per_expert` and, where given, `expert_mb` (MB)."""
    sizes = [mb for pt in curve.points for mb in (pt.low_expert_mb, pt.high_expert_mb) if mb]
    if expert_mb is None or not sizes:  # none asked, or none cited: the band as cited
        return _band_over(curve.points, tokens_per_expert)
    if curve.ends == "sizes":  # one kernel at two sizes: read between them
        band = _band_over([_between(pt, expert_mb) for pt in curve.points], tokens_per_expert)
        return dataclasses.replace(band, where=f"{band.where}, {expert_mb:.3g} MB an expert")
    # Held inside the sizes the kernels were timed on, as tokens are inside the cited points.
    use = min(max(expert_mb, min(sizes)), max(sizes))
    band = _band_over([_scaled(pt, use) for pt in curve.points], tokens_per_expert)
    where = f"{band.where}, {expert_mb:.3g} MB an expert"
    if not math.isclose(use, expert_mb):
        where += f" (held at {use:.3g} MB, the nearest size a cited kernel was timed on)"
    return dataclasses.replace(band, where=where)


def _band_over(points: list[EfficiencyPoint], tokens_per_expert: float) -> Band:
    """Return the band of ascending points at `tokens_per_expert`."""
    t = max(float(tokens_per_expert), 1e-9)
    first, last = points[0], points[-1]
    for pt in points:
        if math.isclose(pt.tokens_per_expert, t):
            return _band(pt, pt, 0.0, f"at {t:g} tokens per expert")
    if not first.tokens_per_expert <= t <= last.tokens_per_expert:
        end, side = (first, "below") if t < first.tokens_per_expert else (last, "above")
        held = f"held from {end.tokens_per_expert:g} tokens per expert (none cited {side})"
        return _band(end, end, 0.0, f"at {t:.3g} tokens per expert, {held}")
    for a, b in zip(points, points[1:], strict=False):
        ta, tb = a.tokens_per_expert, b.tokens_per_expert
        if ta < t < tb:
            w = math.log(t / ta) / math.log(tb / ta)
            return _band(a, b, w, f"at {t:.3g} tokens per expert, between {ta:g} and {tb:g}")
    raise AssertionError("unreachable: the points ascend")


def _band(a: EfficiencyPoint, b: EfficiencyPoint, w: float, where: str) -> Band:
    """Return the band mixed between two points (the same point for w = 0)."""
    pick = a if w < 0.5 else b
    cite = a.cite if a is b else f"{a.cite}; {b.cite}"
    low, high = _log_mix(a.low, b.low, w), _log_mix(a.high, b.high, w)
    return Band(low, high, pick.low_kernel, pick.high_kernel, where, cite)


def shaped_timer(curve: EfficiencyCurve, tokens_per_expert: float, end: str, make):
    """Return a part timer with each expert GEMM at the band's `end` for its expert size."""
    made = {}

    def timer(part: dict, hw: HardwareSpec) -> dict:
        mb = part.get("expert_mb") if part["kind"] == "expert_gemm" else None
        if mb not in made:
            made[mb] = make(getattr(band_at(curve, tokens_per_expert, mb), end))
        return made[mb](part, hw)

    return timer
