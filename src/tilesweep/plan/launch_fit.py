"""The launch-aware composition (plan.part_timers.part_ms) and its fit on a measured whole step.

`launches` is the kernels a part launches (counted in the measured step); the per-kernel cost is
measured on the device: each group's kernels at the smallest fit batch, never below an empty
kernel in a CUDA graph (kernel_cost_us). Each group's two efficiencies are fitted at a few
batches only (deployment.fit_batches), the device's value where a term never binds (noted);
groups not measured take the device-wide pair. `overlap` is the device's, measured (0.03 on an
H200: bf16 products of 64 to 512 rows hide the smaller term almost entirely). e_bw never exceeds
the device's measured read bandwidth (`e_bw_max`): past it a part's small-batch time is its
kernels' cost, not a faster stream. A part whose own kernel was timed on the target
(attention_table) takes that time. The fit is plain data (JSON), shipped to other targets."""

import math

import numpy as np

from tilesweep import package_data
from tilesweep.plan.engine_profile import EXTRA
from tilesweep.plan.pair_fit import fit_pair, predict_ms
from tilesweep.plan.part_timers import part_terms, roofline_timer
from tilesweep.plan.step_parts import stage_parts
from tilesweep.plan.step_time import StepCase
from tilesweep.settings import HardwareSpec

DATA_FILES = ("data/plan.yaml",)
# The composition's groups of part kinds: {kinds: the measured whole-step parts that cover them}.
_GROUPS = package_data.data_typed("tilesweep", DATA_FILES[0], "launch_groups", dict[str, list[str]])
GROUPS = {tuple(kinds.split("+")): names for kinds, names in _GROUPS.items()}
# Which composition part kinds each measured whole-step part covers.
MEASURED_KINDS = {name: kinds for kinds, names in GROUPS.items() for name in names}
POOLED = "device-wide"


def attribution(row: dict) -> float:
    """Return the graphed step's time over the sum of its parts (1 where either is missing): the
    parts say where the time goes; the whole step says how much there is."""
    parts = [v for k, v in row.items() if k.startswith("part_") and k.endswith("_ms")]
    parts = [v for v in parts if v is not None and not math.isnan(v)]
    step = row.get("step_ms")
    if not parts or step is None or math.isnan(step) or sum(parts) <= 0:
        return 1.0
    return float(step) / sum(parts)


def observe(row: dict, parts: list[dict], hw: HardwareSpec, repeats: int = 1) -> dict[str, dict]:
    """Return per group {ms, launches, roof_memory_ms, roof_math_ms, occurrences} of a step row."""
    roof: dict[str, dict] = {}
    for part in parts:
        t = roofline_timer(part, hw)
        acc = roof.setdefault(part["kind"], {"mem": 0.0, "math": 0.0, "count": 0})
        acc["mem"] += repeats * part["count"] * t["roof_memory_ms"]
        acc["math"] += repeats * part["count"] * (t["roof_math_ms"] or 0.0)
        acc["count"] += repeats * part["count"]
    out = {}
    scale = attribution(row)
    for kinds, names in GROUPS.items():
        ms = [row.get(f"part_{n}_ms") for n in names]
        ms = [scale * m for m in ms if m is not None and not math.isnan(m)]
        count = sum(roof.get(k, {}).get("count", 0) for k in kinds)
        if not ms or not count:
            continue
        counted = (row.get(f"launches_{n}") for n in names)
        launches = sum(c for c in counted if c is not None and not math.isnan(c))
        # Only the kinds this model has: a fit on MLA attention never stands for GQA's kernel.
        seen = [k for k in kinds if roof.get(k, {}).get("count", 0)]
        out["+".join(seen)] = {
            "kinds": seen,
            "ms": float(sum(ms)),
            "launches": float(launches),
            "roof_memory_ms": sum(roof.get(k, {}).get("mem", 0.0) for k in kinds),
            "roof_math_ms": sum(roof.get(k, {}).get("math", 0.0) for k in kinds),
            "occurrences": count,
        }
    return out


def kernel_cost_us(
    observations: list[dict], floor_us: float, e_bw: float, e_math: float, overlap: float = 0.0
) -> float:
    """Return a group's cost per launch at the smallest fit batch, never below `floor_us`.

    Neither device constant is a kernel's cost in a step. An empty kernel (about 1.1 us on an
    H200) does no DRAM round trip; a norm, a top-k or a cache write of one sequence does: 6-11 us
    each. The GEMV chain's intercept (about 5.2 us) is more than a streaming GEMM's own cost in the
    step (3-4 us); adding it in full made one TP8 rank's projections a third too slow."""
    small = min(observations, key=lambda o: o["roof_memory_ms"] + o["roof_math_ms"])
    if not small["launches"]:
        return floor_us
    memory, flop = part_terms(small["roof_memory_ms"], small["roof_math_ms"], e_bw, e_math, overlap)
    work = float(memory + flop)
    return max(floor_us, 1e3 * (small["ms"] - work) / small["launches"])


def _observations(rows: list[dict], parts_of: dict, hw: HardwareSpec) -> tuple[dict, list[dict]]:
    """Return ({group: its observations per fit batch}, the device-wide observations)."""
    by_group: dict[str, list[dict]] = {}
    pooled = []
    keys = ("ms", "launches", "roof_memory_ms", "roof_math_ms")
    for row in rows:
        parts, repeats = parts_of[int(row["batch"])]
        obs = observe(row, parts, hw, repeats)
        for name, o in obs.items():
            by_group.setdefault(name, []).append(o)
        pooled.append({key: sum(o[key] for o in obs.values()) for key in keys})
    return by_group, pooled


def _group_fit(
    observations: list[dict], floor_us: float, pooled: tuple, lap: float, bw_max: float | None
) -> dict:
    """Return one group's fit: efficiencies, launches per occurrence, cost per launch and errors."""
    cost_us = kernel_cost_us(observations, floor_us, *pooled, lap)
    per_kernel_ms = cost_us * 1e-3
    g_bw, g_math, g_note = fit_pair(observations, per_kernel_ms, pooled, lap, bw_max)
    launches = [o["launches"] / o["occurrences"] for o in observations]
    return {
        "kinds": observations[0]["kinds"],
        "e_bw": g_bw,
        "e_math": g_math,
        "launches_per_occurrence": float(np.median(launches)),
        "per_kernel_us": cost_us,
        "floor_kernel_us": floor_us,
        "note": g_note,
        "fit_error_pct": [
            100 * (predict_ms(o, g_bw, g_math, per_kernel_ms, lap) / o["ms"] - 1)
            for o in observations
        ],
    }


def fit_step(
    rows: list[dict],
    parts_of: dict,
    hw: HardwareSpec,
    per_kernel_us: float,
    labels: dict,
    light_us: float | None = None,
    overlap: float | None = None,
    bw_max: float | None = None,
) -> dict:
    """Return the fit (JSON-able) of the measured rows (one per fit batch): per group of part kinds
    its efficiencies and launches per occurrence, and the device-wide pair (module docstring)."""
    lap = overlap or 0.0
    by_group, pooled = _observations(rows, parts_of, hw)
    e_bw, e_math, note = 1.0, 1.0, "no rows"
    if pooled:
        e_bw, e_math, note = fit_pair(pooled, per_kernel_us * 1e-3, None, lap, bw_max)
    floor_us = light_us if light_us is not None else per_kernel_us
    groups = {
        name: _group_fit(observations, floor_us, (e_bw, e_math), lap, bw_max)
        for name, observations in sorted(by_group.items())
    }
    # What the efficiencies are fractions of: the fit device's figures as `hw` gave them.
    reference = dict(memory_bandwidth_gbs=hw.memory_bandwidth_gbs, peak_tflops=dict(hw.peak_tflops))
    return {
        **labels,
        "reference": reference,
        "fit_batches": sorted(int(r["batch"]) for r in rows),
        "per_kernel_us": per_kernel_us,
        "light_kernel_us": light_us,
        "overlap": lap,
        "e_bw_max": bw_max,
        "groups": groups,
        POOLED: {"e_bw": e_bw, "e_math": e_math, "note": note},
    }


# The dtype the fit's whole steps ran in (measure/whole_step): its math efficiency is a fraction
# of the device's rate in this dtype.
FIT_DTYPE = "bf16"


def on_datasheet(fit: dict, datasheet: HardwareSpec) -> tuple[dict, str]:
    """Return (the fit with every efficiency a fraction of the fit device's datasheet, label).

    No efficiency exceeds 1: a decode step reads its weights from HBM, so no part of a verdict
    runs above its target's datasheet, whatever a cached small part did on the fit device."""
    ref = fit.get("reference")  # {memory_bandwidth_gbs, peak_tflops} the fit was made against
    ds_bw, ds_math = datasheet.memory_bandwidth_gbs, datasheet.peak_tflops.get(FIT_DTYPE)
    if not ref or not ds_bw:
        raise ValueError(
            f"the fit on {fit.get('device')} records no reference bandwidth, or its device has "
            "no datasheet bandwidth: its efficiencies cannot be put on the target's datasheet"
        )
    k_bw = ref["memory_bandwidth_gbs"] / ds_bw
    ref_math = (ref.get("peak_tflops") or {}).get(FIT_DTYPE)
    k_math = ref_math / ds_math if ref_math and ds_math else 1.0

    def scaled(e: dict) -> dict:
        return dict(e, e_bw=min(1.0, e["e_bw"] * k_bw), e_math=min(1.0, e["e_math"] * k_math))

    out = dict(fit, groups={n: scaled(g) for n, g in fit["groups"].items()})
    out[POOLED] = scaled(fit[POOLED])
    if fit.get("e_bw_max"):
        out["e_bw_max"] = min(1.0, fit["e_bw_max"] * k_bw)
    out["reference"] = {
        "memory_bandwidth_gbs": ds_bw,
        "peak_tflops": dict(datasheet.peak_tflops),
        "datasheet_of": datasheet.name,
    }
    label = (
        f"efficiencies as fractions of the datasheet on both ends ({fit.get('device')}: measured "
        f"copy {ref['memory_bandwidth_gbs']:.0f} of {ds_bw:.0f} GB/s"
        + (f", {FIT_DTYPE} {ref_math:.0f} of {ds_math:.0f} TFLOP/s" if ref_math and ds_math else "")
        + "), at most 1"
    )
    return out, label


def small_kernel_us(fit: dict) -> tuple[float, str]:
    """Return (us of one small decode kernel in a CUDA graph on the fit's device, label)."""
    launch = (fit.get("ceilings") or {}).get("launch") or {}
    if launch.get("small_us"):
        return launch["small_us"], "measured probe (ceilings launch.small_us)"
    if fit.get("light_kernel_us"):
        return fit["light_kernel_us"], "an empty kernel's graphed time (lower)"
    return fit["per_kernel_us"], "the fit's per-kernel cost"


def launch_timer(
    fit: dict, per_kernel_us: float, label: str, kernel_ms=None, launches: dict | None = None
):
    """Return a part timer applying a fit: launches x per-kernel cost plus roofline terms over
    efficiencies; `kernel_ms` a part's own measured time, `launches` an engine's list's counts."""
    by_kind = {k: g for g in fit["groups"].values() for k in g["kinds"]}
    pooled = fit[POOLED]
    cost_ms = per_kernel_us * 1e-3
    lap = fit.get("overlap") or 0.0  # a fit made before the overlap was measured: the max

    def timer(part: dict, hw: HardwareSpec) -> dict:
        out = roofline_timer(part, hw)
        group = by_kind.get(part["kind"])
        e = group or pooled
        if "e_math" in part:  # a cited kernel efficiency the part carries (a prompt's attention)
            e = dict(pooled, e_math=part["e_math"])
        roofs = (out["roof_memory_ms"], out["roof_math_ms"]) if not out["gap"] else (math.nan,) * 2
        memory, flop = part_terms(*roofs, e["e_bw"], e["e_math"], lap)
        out["memory_ms"], out["math_ms"] = float(memory), float(flop)
        # A part no measured group covers (an EP rank's permutation, absent from the TP1 step
        # the fit is made on) counts the kernels the composition knows it runs.
        n = group["launches_per_occurrence"] if group else part.get("launches", 0.0)
        if launches is not None and part["kind"] in launches:
            n = launches[part["kind"]]
        cost = group.get("per_kernel_us", per_kernel_us) * 1e-3 if group else cost_ms
        if part["kind"] == EXTRA:  # an engine's small kernel: a small kernel's graphed cost
            cost = small_kernel_us(fit)[0] * 1e-3
        out["launch_ms"] = n * cost
        out["source"] = label if group else f"{label}; {part['kind']}: the device-wide fit"
        if "e_math" in part:
            out["source"] = f"{label}; {part['kind']}: its cited e_math, the device-wide e_bw"
        own = kernel_ms(part) if kernel_ms is not None and not out["gap"] else None
        if own is not None:  # the kernel's own time: memory-bound by the roofline's reading
            out.update(memory_ms=own, math_ms=0.0, launch_ms=0.0)
            out["source"] = f"{label}; {part['kind']}: the kernel's own measured time"
        return out

    return timer


def parts_as_run(case: StepCase, stage: int):
    """Return (the parts one rank of `stage` runs per micro-batch, micro-batches) of a step
    (its layer overrides' `per_stage` on every stage)."""
    pp, batch = case.layout.pp, case.batch
    m = min(pp, batch)
    micro = math.ceil(batch / m)
    st = dict(case.layer_overrides["per_stage"], sliding=0)
    first, last = stage == 0, stage == pp - 1
    return stage_parts(case.model, case.dep, case.layout, st, micro, first, last), m
