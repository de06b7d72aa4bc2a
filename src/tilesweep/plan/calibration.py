"""From measurements on the device at hand to the composition's inputs, and the check of it:
`step_fit` fits the TP1 graphed whole steps at two batches only, so every other batch, emulated
rank and layout is a held-out check of `step_check`'s composed prediction."""

import math
from dataclasses import dataclass, replace

import pandas as pd

from tilesweep.columns import CHECK_COLUMNS
from tilesweep.plan import attention_table, engine_profile
from tilesweep.plan.launch_fit import fit_step, launch_timer, parts_as_run, small_kernel_us
from tilesweep.plan.part_timers import roofline_timer
from tilesweep.plan.step_time import StepCase, compose_step
from tilesweep.settings import DeploymentSettings, HardwareSpec, Layout, ModelSettings
from tilesweep.settings.hardware_spec import InterconnectModel, Topology

# The layout whose whole steps a launch-aware fit is made on: one GPU, nothing split.
FIT_LAYOUT = "tp1-pp1-ep1"


def device_hardware(ceilings: dict, device: str, interconnect: Topology | None) -> HardwareSpec:
    """Return the device at hand as a hardware spec holds it, from its measured ceilings."""
    peaks = {k: v for k, v in (ceilings.get("matmul_tflops") or {}).items() if v}
    model = None
    if interconnect:
        topologies = {"measured": interconnect}
        model = InterconnectModel.model_construct(default="measured", topologies=topologies)
    return HardwareSpec.model_construct(
        name=device,
        memory_bandwidth_gbs=ceilings["copy_gbs"],
        peak_tflops=peaks,
        interconnect="measured",
        interconnect_model=model,
    )


@dataclass(frozen=True)
class Here:
    """What a fit or check on the device at hand composes with: the model, the device's hardware
    and name, its per-kernel cost and graph terms, the fit batches, the attention kernel's own
    times and the collectives' measured floors."""

    model: ModelSettings
    hw: HardwareSpec
    device: str
    per_kernel_us: float | None = None
    terms: dict | None = None
    batches: list[int] | None = None  # deployment.fit_batches
    attention: pd.DataFrame | None = None
    floors: dict | None = None
    fits: dict | None = None  # step_check's: timing -> the launch-aware fit (None: no fit)


def _step_case(row: dict, model: ModelSettings, hw: HardwareSpec) -> StepCase:
    """Return a measured step row as a StepCase on `hw`: the model as run, the run's deployment,
    layout and sequences (EP: every rank holds ceil(batch/ep) of them), its layer overrides."""
    ran = {"routed_experts": int(row["routed_experts_run"]), "vocab": int(row["vocab_run"])}
    as_run = model.model_copy(update=ran)
    # The keys a composition reads (the run's files and batches are no part of it).
    dtypes = dict(weight_dtype="bf16", kv_dtype="bf16", quantized=[], compute_dtype="")
    load = dict(context_len=int(row["context_len"]), input_len=0, output_len=0, kernel_gap_us=0.0)
    dep = DeploymentSettings.model_construct(**dtypes, **load, attention="dsa")
    per_stage = {"dense": int(row["dense_layers_run"]), "moe": int(row["moe_layers_run"])}
    per_stage["routing"] = "balanced"  # the measured step routes every expert the same rows
    layout = Layout(tp=int(row["tp"]), pp=int(row["pp"]), ep=int(row["ep"]))
    seqs = row.get("sequences_run")
    seqs = int(seqs) if seqs == seqs and seqs is not None else int(row["batch"])
    return StepCase(as_run, dep, hw, layout, seqs, layer_overrides={"per_stage": per_stage})


def _column(steps: pd.DataFrame, name: str, default) -> pd.Series:
    """Return a column of the steps, `default` where a row (or an older run's table) has none."""
    return steps[name].fillna(default) if name in steps else pd.Series(default, index=steps.index)


def step_fit(steps: pd.DataFrame, here: Here, timing: str = "cuda-graph") -> dict | None:
    """Return the launch-aware fit on the TP1 whole steps timed as `timing` at `here.batches`, or
    None (no such step, no batch asked for measured, or no per-kernel cost)."""
    if steps.empty or "layout" not in steps or here.per_kernel_us is None:
        return None
    ok = steps[
        (steps["layout"] == FIT_LAYOUT)
        & (steps["status"] == "ok")
        & ~_column(steps, "emulated", False).astype(bool)
        & (_column(steps, "kernel_list", engine_profile.LEAN) == engine_profile.LEAN)
        & (_column(steps, "timing", "eager") == timing)
    ]
    if ok.empty:
        return None
    measured = sorted({int(b) for b in ok["batch"]})
    chosen = sorted({measured[0], measured[-1]})
    if here.batches:  # only the batches asked for: one that was not measured is never replaced
        chosen = sorted({int(b) for b in here.batches} & set(measured))
        if not chosen:
            return None
    rows = [r for r in ok.to_dict("records") if int(r["batch"]) in chosen]
    rows = list({int(r["batch"]): r for r in rows}.values())
    model, hw = here.model, here.hw
    parts_of = {}
    for row in rows:
        parts_of[int(row["batch"])] = parts_as_run(_step_case(row, model, hw), 0)
    step = rows[0]["measured_label"]
    labels = dict(device=here.device, layout=FIT_LAYOUT, timing=timing, model=model.name, step=step)
    fit = fit_step(rows, parts_of, hw, here.per_kernel_us, labels, **(here.terms or {}))
    case = _step_case(rows[0], model, hw)
    return attention_table.with_kernel_efficiencies(fit, here.attention, case.model, case.dep)


def fit_label(fit: dict, where: str = "") -> str:
    """Return the label of figures composed from a fit."""
    return f"composed ({fit_words(fit)}{where})"


def fit_words(fit: dict) -> str:
    """Return which fit it is: its device, the step it was made on and at which batches."""
    return (
        f"launch-aware fit on {fit['device']}, {fit['layout']} {fit['timing']} step of "
        f"{fit['model']} at batches {fit['fit_batches']}"
    )


def rank_compute_ms(row: dict, model: ModelSettings, hw: HardwareSpec, timer) -> float:
    """Return the composed compute time of the one rank an emulated step ran (no collectives)."""
    case = _step_case(row, model, hw)
    parts, m = parts_as_run(case, case.layout.pp - 1)
    engine = engine_profile.as_run(row)
    if engine is not None:
        stage = dict(case.layer_overrides["per_stage"], sliding=0)
        parts = parts + engine.extra_parts(stage, True)
    total = 0.0
    for part in parts:
        t = timer(part, hw)
        total += part["count"] * (t["memory_ms"] + t["math_ms"] + t.get("launch_ms", 0.0))
    return m * total


def _composed_label(used: dict, emu: bool, own, engine) -> str:
    """Return the label of a step composed from fit `used` (own: the attention kernel's times)."""
    label = fit_label(used) + ("; one rank's compute, no collectives" if emu else "")
    if own is not None:
        label += "; attention core: the kernel's own time where its tune table has it"
    if engine is not None:
        extra = ", ".join(f"{n:g} {where.replace('_', ' ')}" for where, n in engine.extra.items())
        label += (
            f"; {engine.name}: the fit's kernels for the step's own parts and the "
            f"engine's extra kernels as run ({extra}), "
            f"small kernels: {small_kernel_us(used)[1]}"
        )
    return label


def _composed(ck: Here, row: dict, how: str, emu: bool, ran: tuple) -> tuple:
    """Return (composed ms, label, calibrated-on, gaps) of a measured step from its timing's fit;
    `ran`: the step's (StepCase as run, engine profile)."""
    case, engine = ran
    used = ck.fits.get(how)
    if used is None:
        at = f" at deployment.fit_batches={ck.batches}" if ck.batches else ""
        return math.nan, "", "", [f"no TP1 {how} whole step{at} (or no per-kernel cost) to fit on"]
    own = None  # the kernel's own times were taken in CUDA graphs: never for an eager check
    if how == "cuda-graph":
        own = attention_table.for_device(ck.attention, ck.device, case.model, case.dep)
    timer = launch_timer(used, ck.per_kernel_us, fit_label(used), own)
    label = _composed_label(used, emu, own, engine)
    calibrated = f"{FIT_LAYOUT} at batches {used['fit_batches']} ({how})"
    if emu:
        return rank_compute_ms(row, ck.model, ck.hw, timer), label, calibrated, []
    step = _compose(ck, ran, timer)
    return step["tpot_ms"], label, calibrated, step["gaps"]


def _compose(ck: Here, ran: tuple, timer) -> dict:
    """Return the composed step of a measured step row (`ran`: _composed's) with `timer`."""
    case, engine = ran
    extra = engine.extra_parts if engine is not None else None
    return compose_step(replace(case, timer=timer, measured_floors=ck.floors, extra_parts=extra))


def _fitted_here(ck: Here, row: dict, how: str, emu: bool) -> bool:
    """Return whether a measured step is one its timing's fit was made on (not held out)."""
    used = ck.fits.get(how)
    return (
        used is not None
        and used["model"] == ck.model.name
        and not emu
        and row["layout"] == FIT_LAYOUT
        and int(row["batch"]) in used["fit_batches"]
        and engine_profile.as_run(row) is None
    )


def _check_row(ck: Here, row: dict, how: str, emu: bool) -> dict:
    """Return the check row of one measured step: measured, roofline and composed, with errors."""
    engine = engine_profile.as_run(row)
    ran = (_step_case(row, ck.model, ck.hw), engine)
    layout = ran[0].layout
    raw = _compose(ck, ran, roofline_timer)
    composed, label, calibrated, gaps = _composed(ck, row, how, emu, ran)
    measured = row["step_ms"]
    # An emulated rank has no collectives: its roofline is its compute alone.
    roof = rank_compute_ms(row, ck.model, ck.hw, roofline_timer) if emu else raw["tpot_ms"]
    return {
        "model": ck.model.name,
        **{k: row[k] for k in ("layout", "context_len", "measured_label")},
        **{k: getattr(layout, k) for k in ("tp", "pp", "ep")},
        "batch": int(row["batch"]),
        "kernel_list": engine.name if engine is not None else engine_profile.LEAN,
        "kernels_per_layer": row.get("kernels_per_layer", math.nan),
        "measured_ms": measured,
        **{f"measured_{p}_ms": row[f"step_{p}_ms"] for p in ("p10", "p90")},
        "roofline_ms": roof,
        "roofline_error_pct": 100 * (roof / measured - 1),
        "composed_ms": composed,
        "composed_error_pct": 100 * (composed / measured - 1),
        "calibrated_on": calibrated,
        "held_out": not _fitted_here(ck, row, how, emu),
        "timing": how,
        "composed_label": label,
        "device": ck.device,
        "gaps": "; ".join(dict.fromkeys(list(raw["gaps"]) + list(gaps))),
    }


def step_check(steps: pd.DataFrame, here: Here, fit: dict | None = None) -> pd.DataFrame:
    """Return one row per measured whole step: measured, roofline-only and composed (the
    launch-aware fit on TP1 at two batches; collectives from the measured fit) times for the
    same reduced model, with the errors. Steps timed eagerly are checked against a fit on eager
    steps, labelled so; they never calibrate a verdict. `here.attention`: the attention kernel's
    own times (plan/attention_table), used on `here.device` where they cover a part."""
    if steps.empty or "layout" not in steps:
        return pd.DataFrame(columns=CHECK_COLUMNS)
    if fit is not None:  # a given fit (another model's or run's): only its own rows were fitted
        fits = {"cuda-graph": fit, "eager": None}
        here = replace(here, per_kernel_us=fit["per_kernel_us"])
    else:  # each timing's own fit; the device's graph terms and kernel times for graphed steps
        eager = replace(here, terms=None, attention=None)
        fits = {"cuda-graph": step_fit(steps, here), "eager": step_fit(steps, eager, "eager")}
    ck = replace(here, fits=fits)
    ok = steps["status"] == "ok"
    records = steps[ok].to_dict("records")
    # Rows of older runs have no timing (they were eager) and were never emulated.
    timing = _column(steps, "timing", "eager")[ok]
    emulated = _column(steps, "emulated", False).astype(bool)[ok]
    rows = [_check_row(ck, *r) for r in zip(records, timing, emulated, strict=True)]
    return pd.DataFrame(rows, columns=CHECK_COLUMNS)
