"""The composition: one row per layout x batch, each a whole decode step (plan.step_time), the
deployment table the verdict is made of."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import pandas as pd

from tilesweep.columns import VERDICT_COLUMNS
from tilesweep.plan.bound import decide_bound
from tilesweep.plan.engine_profile import EngineProfile, lean
from tilesweep.plan.interconnect import topology_numbers
from tilesweep.plan.memory_fit import capacity, layer_counts, memory_fit, stage_layers
from tilesweep.plan.part_timers import Timer, roofline_timer
from tilesweep.plan.row_inputs import dumps
from tilesweep.plan.sharding import layout_name
from tilesweep.plan.step_time import StepCase, comm_gap_bound, loaded_step, serving_load
from tilesweep.settings import DeploymentSettings, HardwareSpec, Layout, ModelSettings

if TYPE_CHECKING:
    from tilesweep.settings import RootSettings

COLUMNS = VERDICT_COLUMNS


@dataclass(frozen=True)
class Composition:
    """What one deployment table is composed from, resolved: model, deployment, target, layouts."""

    model: ModelSettings
    deployment: DeploymentSettings
    hardware: HardwareSpec
    layouts: list[Layout]


def _inputs(parts: Composition, ic_label: str, timer_label: str) -> dict[str, str]:
    """Return every input of a row and where it comes from, by item (plan.row_inputs)."""
    dep, model, hw = parts.deployment, parts.model, parts.hardware
    sheet = ("memory_bandwidth_gbs", "peak_tflops", "memory_gb")
    items = {k: f"{getattr(hw, k)} (hardware[{hw.name}])" for k in sheet}
    items |= {"memory capacity": capacity(hw)[1], "interconnect": ic_label}
    if "measured on" not in ic_label:
        items["interconnect from"] = f"hardware[{hw.name}].interconnect_model"
    given = ("weight_dtype", "quantized", "kv_dtype", "context_len", "runtime_reserve_gb")
    deployment = {k: getattr(dep, k) for k in given} | {"quantized": ",".join(dep.quantized)}
    return items | {
        "model": f"{model.name} ({model.source})",
        **{k: f"{v} (deployment)" for k, v in deployment.items()},
        "kernel_gap_us": f"{dep.kernel_gap_us} (deployment; only where the fit gives a part "
        "no launch cost)",
        "part times": timer_label,
        "routing": "random top-k (expected distinct experts; EP: the busiest rank)",
    }


def _load_item(load_in: int, load_out: int, prefill: float, hw: HardwareSpec, how: str) -> str:
    """Return the serving load a row carries and what the other requests' prompts add, in words."""
    if not load_in:
        return "decode only (no arriving prompts)"
    cited = hw.prompt_attention  # how a prompt's own attention is charged on this hardware
    words = f"their attention not charged: hardware[{hw.name}] cites no prompt_attention efficiency"
    if cited:
        words = f"their attention at e_math {cited.e_math:g} ({cited.cite})"
    return (
        f"serving, {load_in} in / {load_out} out per request (the other requests' prompts: "
        f"{prefill:.3g} ms a step; {how}; {words})"
    )


def compose_deployment(settings: RootSettings, **how) -> pd.DataFrame:
    """Return one row per layout x batch (COLUMNS) of the settings as they are (no engine or fit
    applied): memory fit, TPOT, tokens/s, split and bound."""
    s = settings
    parts = Composition(s.model, s.deployment, s.hardware, s.grid.layouts)
    return pd.DataFrame(compose_rows(parts, **how), columns=COLUMNS)


# The split's columns (<name>_ms, <name>_share) by the part of the step each holds.
_SPLIT = dict(memory="memory", math="math", comm="communication", other="other", host="host")


def _fit_columns(parts: Composition, layout: Layout, batch: int, engine: str, fit: dict) -> dict:
    """Return a row's identity, load and memory fit columns."""
    model, dep = parts.model, parts.deployment
    load_in, load_out = serving_load(dep)
    return {
        "model": model.name,
        "hardware": parts.hardware.name,
        "layout": layout_name(layout),
        **{k: getattr(layout, k) for k in ("tp", "pp", "ep")},
        "world": layout.tp * layout.pp * layout.ep,
        "batch": batch,
        "context_len": dep.context_len,
        "input_len": load_in,
        "output_len": load_out,
        "engine": engine,
        **{k: getattr(dep, k) for k in ("weight_dtype", "kv_dtype")},
        "fits_memory": "yes" if fit["fits"] else "no",
        "mem_needed_gb": fit["needed_bytes"] / 1e9,
        "mem_short_gb": fit["short_bytes"] / 1e9,
        **{k: fit[k] for k in ("max_batch_fit", "max_context_fit")},
    }


def _speed_columns(step: dict, host_ms: float, batch: int, world: int, floor: float) -> dict:
    """Return a fitting row's speed columns: TPOT, tokens/s, floor, split, bound and source."""
    split = dict(step["split"], host=host_ms)
    tpot = step["tpot_ms"] + host_ms
    verdict = decide_bound(split, step["achieved"])
    comm_gap = verdict["bound"] == "gap (communication unknown)"
    if comm_gap or (math.isnan(tpot) and not verdict["bound"].startswith("gap")):
        # A missing hop (no send/recv figures) is on the path, not in any part; the bound names
        # the collective's missing GPU count and the file it is missing from.
        verdict = {"bound": comm_gap_bound(step["comm_gaps"]), "share": math.nan, "margin": ""}
    return {
        "tpot_ms": tpot,
        "tokens_per_s": batch / tpot * 1e3,
        "tokens_per_s_per_gpu": batch / tpot * 1e3 / world,
        "floor_ms": floor,
        "x_floor": tpot / floor if floor > 0 else math.nan,
        **{f"{column}_ms": split[part] for column, part in _SPLIT.items()},
        **{f"{column}_share": split[part] / tpot for column, part in _SPLIT.items()},
        "peak_part_of_datasheet": step["peak_fraction"],
        **verdict,
        "source": step["source"],
    }


def _host_ms(engine: EngineProfile, case: StepCase, step: dict) -> float:
    """Return the host time one step exposes (EngineProfile.host_for) on its busiest stage."""
    if not engine.eager_launch_ms:
        return engine.host_ms
    stages = stage_layers(layer_counts(case.model, case.layer_overrides), case.layout.pp)
    last = len(stages) - 1
    issued = [engine.issued(st, i == last) for i, st in enumerate(stages)]
    worst = max(range(len(stages)), key=issued.__getitem__)
    gpu = step["stage_ms"][worst] * step["micro_batches"]
    return engine.host_for(gpu, stages[worst], worst == last)


def compose_tpot(parts: Composition, **how) -> list[float]:
    """Return compose_rows' tpot_ms alone (a band end's), without building the table."""
    return [row["tpot_ms"] for row in compose_rows(parts, **how)]


def compose_rows(
    parts: Composition,
    timer: Timer = roofline_timer,
    measured_floors: dict | None = None,
    layer_overrides: dict | None = None,
    engine: EngineProfile | None = None,
    rests: dict[str, str] | None = None,
) -> list[dict]:
    """Return the deployment table's rows (COLUMNS) as dicts, one per layout x batch."""
    rests = rests or {}
    engine = engine or lean()
    load_in, load_out = serving_load(parts.deployment)
    hw, model, dep = parts.hardware, parts.model, parts.deployment
    _, ic_label = topology_numbers(hw)
    bare = dep.model_copy(update={"kernel_gap_us": 0.0})  # the floor's: no per-kernel cost
    rows = []
    for layout in parts.layouts:
        for batch in dep.batches:
            fit = memory_fit(model, dep, hw, layout, batch, layer_overrides)
            row = _fit_columns(parts, layout, batch, engine.name, fit)
            if not fit["fits"]:
                inputs = _inputs(parts, ic_label, "none (does not fit)") | rests
                row |= {c: math.nan for c in COLUMNS if c not in row}
                row |= decide_bound({}, fits=False) | {"source": "model"}
                rows.append(row | {"inputs_json": dumps(inputs)})
                continue
            case = StepCase(model, dep, hw, layout, batch, timer, measured_floors, layer_overrides)
            step, prefill = loaded_step(
                replace(case, extra_parts=engine.extra_parts, prompt=engine.prompt)
            )
            # The step's physical floor: every part at its datasheet roofline, collectives by
            # the interconnect model, no per-kernel cost, over the composed step's path.
            floor = loaded_step(replace(case, dep=bare, timer=roofline_timer))[0]["tpot_ms"]
            host = _host_ms(engine, case, step)
            row |= _speed_columns(step, host, batch, row["world"], floor)
            inputs = _inputs(parts, step["interconnect"], ", ".join(step["part_sources"])) | {
                "kernel list": engine.label,
                "host": engine.host_label,
                "load": _load_item(load_in, load_out, prefill, hw, engine.prompt.words),
            }
            inputs |= {"gaps": ", ".join(step["gaps"])} if step["gaps"] else {}
            rows.append(row | {"prefill_ms": prefill, "inputs_json": dumps(inputs | rests)})
    return rows
