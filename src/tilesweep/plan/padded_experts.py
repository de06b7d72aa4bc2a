"""Routed-expert GEMMs an engine runs over worst-case padded rows at decode (engine.padded_experts):
vLLM 0.12.0 on Hopper sizes its DeepGEMM contiguous layout without the CPU's expert counts,
M_sum = round_up(rows + local experts x (align - 1), align), and computes every one of those rows
whatever the batch. Such a part takes

    launches + max(its streamed weights, padded GEMM FLOPs / (e_math x peak)) + its passes,

the weights' time being what the part's own timer composes (the grouped-GEMM band), the passes
the elementwise kernels between the GEMMs over M_sum rows (their bytes at the part's bandwidth).
On a GPU where the engine's GEMMs were measured (spec.measured) a part takes that e_math at its
tokens per local expert and expert shard (plan.grouped_efficiency), the low TPOT the cited
e_math_high where it is faster; elsewhere the cited band's middle, each band end the other end."""

import math

from tilesweep.plan import roofline
from tilesweep.plan.grouped_efficiency import band_at
from tilesweep.plan.part_timers import Timer
from tilesweep.settings import HardwareSpec
from tilesweep.settings.engine_spec import PaddedExperts

KIND = "expert_gemm"


def padded_rows(rows: float, experts_local: float, align: int) -> int:
    """Return the rows the padded path runs: rows plus align - 1 for each local expert, rounded."""
    return math.ceil((math.ceil(rows) + experts_local * (align - 1)) / align) * align


def applies(spec: PaddedExperts | None, arch: str, weight_dtype: str) -> bool:
    """Return whether the engine runs the padded path on this arch for this weight format."""
    return spec is not None and arch in spec.only_arch and weight_dtype in spec.only_for


def e_math_middle(spec: PaddedExperts) -> float:
    """Return the band's middle: the geometric mean of its cited ends."""
    return math.sqrt(spec.e_math_low * spec.e_math_high)


def e_math_at(spec: PaddedExperts, part: dict, hw: HardwareSpec, end: str) -> tuple[float, str]:
    """Return the e_math an expert part takes at `end` (middle: the row's own; high: the fast
    end, the low TPOT; low: the slow end) and what it rests on."""
    curve = spec.measured.get(hw.name)
    if curve is None:
        cited = {"low": spec.e_math_low, "high": spec.e_math_high, "middle": e_math_middle(spec)}
        return cited[end], f"cited band's {end}"
    band = band_at(curve, part["rows"] / part["experts_local"], part["expert_mb"])
    if end == "high" and spec.e_math_high > band.low:
        return spec.e_math_high, f"the fast end, cited: {spec.high_kernel}"
    return band.low, f"measured: engine.padded_experts.measured[{hw.name}], {band.where}"


def padded_timer(timer: Timer, spec: PaddedExperts, end: str = "middle") -> Timer:
    """Return `timer` with each expert part at an MoE TP below spec.below_moe_tp taking the padded
    path at its e_math at `end` of the band (e_math_at; its source says so)."""

    def wrapped(part: dict, hw: HardwareSpec) -> dict:
        out = timer(part, hw)
        if part["kind"] != KIND or "rows" not in part or part["moe_tp"] >= spec.below_moe_tp:
            return out
        peak = hw.peak_tflops.get(part["dtype"])
        if out.get("gap") or not peak:
            return out
        e_math, why = e_math_at(spec, part, hw, end)
        m_sum = padded_rows(part["rows"], part["experts_local"], spec.align)
        gemm_ms = roofline.math_ms(2.0 * m_sum * part["expert_params"], peak) / e_math
        streamed = out["memory_ms"] + out["math_ms"]  # the weights, as the part's own timer has it
        # the fraction of the datasheet bandwidth the part's own timer streams it at (1 where
        # the timer charged it nothing)
        bw = hw.memory_bandwidth_gbs
        roof = out.get("roof_memory_ms") or roofline.memory_ms(part["bytes"], bw)
        e_bw = min(1.0, roof / streamed) if streamed > 0 and roof > 0 else 1.0
        # the bytes one occurrence's passes move over the padded rows
        per_row = sum(
            p.hidden_bytes * part["hidden"] + p.inter_bytes * part["inter_shard"]
            for p in spec.passes
        )
        passes_ms = roofline.memory_ms(m_sum * per_row, bw) / e_bw
        if gemm_ms > streamed:  # the padded GEMMs bind: the weights stream under them
            out = dict(out, memory_ms=passes_ms, math_ms=gemm_ms)
        else:
            out = dict(out, memory_ms=out["memory_ms"] + passes_ms)
        out["source"] = (
            f"{out['source']}; expert GEMMs over {m_sum} padded rows at e_math {e_math:.3f} "
            f"({why}; {spec.kernel}; engine.padded_experts)"
        )
        return out

    return wrapped


def words(spec: PaddedExperts, hardware: str = "") -> str:
    """Return what the padded path rests on on `hardware` (conf name), for a row's inputs."""
    rows = (
        f"{spec.kernel} over round_up(rows + local experts x {spec.align - 1}, {spec.align}) "
        f"rows at an MoE TP below {spec.below_moe_tp}"
    )
    passes = f"{len(spec.passes)} passes over those rows"
    curve = spec.measured.get(hardware)
    if curve is None:
        return (
            f"{rows}, e_math {spec.e_math_low:.2f} ({spec.low_kernel}) to "
            f"{spec.e_math_high:.2f} ({spec.high_kernel}) of the datasheet peak, middle "
            f"{e_math_middle(spec):.2f}; {passes}"
        )
    es = [e for pt in curve.points for e in (pt.low, pt.high)]
    ts = [pt.tokens_per_expert for pt in curve.points]
    return (
        f"{rows}, e_math measured: {min(es):.3f}-{max(es):.3f} of the datasheet peak over "
        f"{ts[0]:g}-{ts[-1]:g} tokens per local expert (held past them) at two expert shards, "
        f"read at each part's own tokens and shard ({curve.source}); tpot_low_ms at the cited "
        f"{spec.e_math_high:.2f} where faster ({spec.high_kernel}); {passes}"
    )
