"""Why the named deployment cannot be composed, in one line naming the fix, before anything runs."""

import math

from tilesweep import gpu_archs
from tilesweep.deployment_verdict import engine_deployment
from tilesweep.plan import attention_table, engine_profile, interconnect
from tilesweep.plan.architecture import deployment_model
from tilesweep.plan.sharding import layout_name
from tilesweep.plan.step_parts import stage_collectives
from tilesweep.settings import HardwareSpec, Layout, ModelSettings, RootSettings


def refusal(settings: RootSettings) -> str | None:
    """Return why the named deployment cannot be composed, in one line naming the fix, or None."""
    dep, _ = engine_deployment(settings)
    engine_conf = settings.engine
    model = deployment_model(settings.model, dep)
    families = engine_conf.families
    fam = engine_profile.family(model)
    if families and fam not in families:
        have = ", ".join(sorted(families))
        return (
            f"engine={engine_conf.name}: no kernel list for the {fam} family of "
            f"{model.name} (it has {have}); use engine=sglang, engine=vllm, or engine=lean for "
            "the project's own step"
        )
    hw = settings.hardware
    gap = engine_profile.arch_gap(engine_conf, model, hw.arch)
    if gap:
        return (
            f"hardware={hw.name}, engine={engine_conf.name}: {gap}; use a GPU of those, or "
            "engine=lean for the project's own step"
        )
    math_dtype = dep.compute_dtype or dep.weight_dtype
    runs = gpu_archs.tensor_dtypes(hw.arch, hw.cc)
    if hw.peak_tflops.get(math_dtype) is None or math_dtype not in runs:
        fp8 = hw.peak_tflops.get("fp8") and "fp8" in runs and math_dtype != "fp8"
        fix = "deployment=fp8_all" if fp8 else "deployment=bf16"
        why = (
            f"{hw.arch} has no {math_dtype} tensor cores (conf/architectures.yaml)"
            if math_dtype not in runs
            else f"peak_tflops.{math_dtype} is not set in conf/hardware/{hw.name}.yaml"
        )
        return (
            f"hardware={hw.name} has no {math_dtype} peak ({why}): use {fix}, or "
            "deployment.compute_dtype=bf16 for weights dequantised in the kernel"
        )
    return _no_collectives(settings, model)


def unused_fit_batches(settings: RootSettings) -> str | None:
    """Return a refusal where deployment.fit_batches is set for `tilesweep verdict`, else None."""
    if not settings.deployment.fit_batches:
        return None
    return (
        f"deployment.fit_batches={settings.deployment.fit_batches}: tilesweep verdict times no "
        f"step and composes from the shipped fit ({settings.deployment.fit_file}); a sweep on a "
        "GPU fits at these batches"
    )


def unused_attention_table(settings: RootSettings) -> str | None:
    """Return a refusal where deployment.attention_table is set for `tilesweep verdict`."""
    path = settings.deployment.attention_table
    if not path:
        return None
    table = attention_table.load(path)
    devices = sorted({str(d) for d in table["device"]}) if table is not None else []
    measured = f"measured on {', '.join(devices)}" if devices else "with no case that ran"
    return (
        f"deployment.attention_table={path!r} ({measured}): tilesweep verdict measures nothing, "
        f"so the table would go unused for hardware={settings.hardware.name} (it is read only "
        'on the device that measured it, in a sweep there); set deployment.attention_table=""'
    )


def _collectives_missing(
    hw: HardwareSpec, topology: str, layout: Layout, model: ModelSettings
) -> str:
    """Return the first collective a layout runs that the target's figures lack, or ''."""
    numbers, label = interconnect.topology_numbers(hw, topology or None)
    stage = {"dense": 1, "moe": 1, "sliding": 0}
    needs = [(c["collective"], c["n"]) for c in stage_collectives(model, layout, stage, 1)]
    needs += [("send_recv", 2)] if layout.pp > 1 else []
    for collective, n in needs:
        t, why = interconnect.collective_time(collective, n, 0.0, numbers)
        if math.isnan(t):
            return f"{why} ({label})" if numbers is not None else label
    return ""


def _no_collectives(settings: RootSettings, model: ModelSettings) -> str | None:
    """Return a refusal where no layout of the grid has its collective figures, else None."""
    hw, topology = settings.hardware, settings.deployment.topology
    missing = {}
    for layout in settings.grid.layouts:
        why = _collectives_missing(hw, topology, layout, model)
        if not why:
            return None
        missing[layout_name(layout)] = why
    name, why = next(iter(missing.items()))
    more = f" (and {len(missing) - 1} more layouts)" if len(missing) > 1 else ""
    return (
        f"hardware={hw.name}: {name}{more} cannot be composed: {why}; add cited figures to "
        f"conf/hardware/{hw.name}.yaml interconnect_model, or list a layout it has figures "
        "for in grid.layouts"
    )
