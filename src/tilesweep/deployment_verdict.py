"""The verdict for the deployment the config names: a whole decode step per layout x batch on the
target named by `hardware`, composed from measured parts, and the check of that method.

Each part takes launches x per-kernel cost + its roofline terms over fitted efficiencies
(plan.launch_fit), the fit made on, in order:
1. the TP1 whole step timed in CUDA graphs on the GPU at hand (at two batches), applied to the
   target's ceilings, with the per-kernel cost measured here;
2. the fit shipped in `deployment.fit_file` (a kept GPU run's), labelled with where it came from;
3. none: the target's roofline alone, labelled `model`.
The expert GEMMs of an fp8 or nvfp4 deployment take the efficiency of the best fp8 kernel of the
decode benchmark where there is one. A step timed eagerly never calibrates a verdict.
Communication: the fit on the collectives measured here when the device at hand is the target,
else the interconnect model of the target's hardware file. Every row and part says which:
`source` (`composed` or `model`) and `inputs`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pandas as pd

from tilesweep import gpu_archs, question, references
from tilesweep.columns import CHECK_COLUMNS, ENGINE_COLUMNS, VERDICT_COLUMNS
from tilesweep.config import compose_groups
from tilesweep.io import project_path
from tilesweep.plan import (
    attention_table,
    calibration,
    engine_profile,
    grouped_efficiency,
    interconnect,
)
from tilesweep.plan.architecture import deployment_model
from tilesweep.plan.deployment import Composition, compose_parts, serving_load
from tilesweep.plan.launch_fit import launch_timer, on_datasheet, small_kernel_us
from tilesweep.plan.sensitivity import sensitivity, winners
from tilesweep.plan.sharding import layout_name
from tilesweep.plan.step_parts import stage_collectives
from tilesweep.settings import HardwareSpec, Layout, RootSettings


def at_target(settings: RootSettings, ceilings: dict) -> bool:
    """Return whether the benchmark device is the target the config names."""
    return bool(ceilings) and ceilings.get("catalog_name") == settings.hardware.name


def _nearest(values: list[int], want: float) -> int:
    """Return the value closest to want (ties: the smaller)."""
    return min(values, key=lambda v: (abs(v - want), v))


def with_group_bw(fit: dict, group: str, e_bw: float) -> dict:
    """Return the fit with one group's e_bw replaced (the fit itself untouched)."""
    return dict(fit, groups={**fit["groups"], group: dict(fit["groups"][group], e_bw=e_bw)})


def engine_deployment(settings: RootSettings) -> tuple[dict, dict]:
    """Return (the deployment as the engine runs it, the engine's settings), as the plan's plain
    containers: `attention: auto` resolved to the engine's mode on the target's architecture,
    the mean context of a serving load (input_len + output_len / 2) where one is set, and
    `attention_label` saying which."""
    dep = settings.deployment.model_dump(exclude_unset=True)
    engine = settings.engine.model_dump(exclude_unset=True)
    if dep.get("attention", "auto") == "auto":
        mode, why = engine_profile.attention_mode(engine, settings.hardware.arch)
        dep["attention"] = mode
        dep["attention_label"] = f"attention: {mode} ({why})"
    else:
        dep["attention_label"] = f"attention: {dep['attention']} (deployment.attention)"
    i, o = serving_load(dep)
    if i:
        dep["context_len"] = i + o // 2
    return dep, engine


def refusal(settings: RootSettings) -> str | None:
    """Return why the named deployment cannot be composed, in one line naming the fix, or None:
    an engine whose kernel lists lack the model's family, a format the target has no tensor
    cores for, or a grid none of whose layouts the target has collective figures for. The sweep
    and `tilesweep verdict` refuse it before anything runs."""
    dep, engine_conf = engine_deployment(settings)
    model = deployment_model(settings.model.model_dump(exclude_unset=True), dep)
    families = engine_conf.get("families") or {}
    fam = engine_profile.family(model)
    if families and fam not in families:
        have = ", ".join(sorted(families))
        return (
            f"engine={engine_conf['name']}: no kernel list for the {fam} family of "
            f"{model['name']} (it has {have}); use engine=sglang, engine=vllm, or engine=lean for "
            "the project's own step"
        )
    hw = settings.hardware
    math_dtype = dep.get("compute_dtype") or dep["weight_dtype"]
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
    """Return a one-line refusal where deployment.fit_batches is set for a verdict that fits
    nothing (`tilesweep verdict` composes from the shipped fit: it times no step), else None."""
    if not settings.deployment.fit_batches:
        return None
    return (
        f"deployment.fit_batches={settings.deployment.fit_batches}: tilesweep verdict times no "
        f"step and composes from the shipped fit ({settings.deployment.fit_file}); a sweep on a "
        "GPU fits at these batches"
    )


def _collectives_missing(hw: dict, layout: dict, model: dict) -> str:
    """Return the first collective a layout runs that the target's interconnect figures lack (in
    words), or ''."""
    numbers, label = interconnect.topology_numbers(hw, hw.get("topology") or None)
    stage = {"dense": 1, "moe": 1, "sliding": 0}
    needs = [(c["collective"], c["n"]) for c in stage_collectives(model, layout, stage, 1)]
    needs += [("send_recv", 2)] if layout["pp"] > 1 else []
    for collective, n in needs:
        t, why = interconnect.collective_time(collective, n, 0.0, numbers)
        if math.isnan(t):
            return f"{why} ({label})" if numbers is not None else label
    return ""


def _no_collectives(settings: RootSettings, model: dict) -> str | None:
    """Return a one-line refusal where no layout of the grid has the collective figures it runs
    on the target (every row would be a gap), naming the fix; else None."""
    hw = settings.hardware.model_dump(exclude_unset=True)
    if settings.deployment.topology:
        hw["topology"] = settings.deployment.topology
    missing = {}
    for lay in settings.grid.layouts:
        layout = lay.model_dump(exclude_unset=True)
        why = _collectives_missing(hw, layout, model)
        if not why:
            return None
        missing[layout_name(layout)] = why
    name, why = next(iter(missing.items()))
    more = f" (and {len(missing) - 1} more layouts)" if len(missing) > 1 else ""
    return (
        f"hardware={hw['name']}: {name}{more} cannot be composed: {why}; add cited figures to "
        f"conf/hardware/{hw['name']}.yaml interconnect_model, or list a layout it has figures "
        "for in grid.layouts"
    )


def with_engine_allreduce(target: dict, engine: dict | None) -> dict:
    """Return the target with the engine's all-reduce: where the engine runs its one-shot custom
    all-reduce in its CUDA graph, the hardware file's one-shot figures are enabled, on NVLink
    only (vLLM's and SGLang's custom all-reduce needs every pair of GPUs on NVLink beyond two
    GPUs: vllm/distributed/device_communicators/custom_all_reduce.py, full_nvlink; on PCIe they
    fall back to NCCL, and a PCIe one-shot figure in a hardware file is another build's)."""
    if not engine or not engine.get("custom_allreduce"):
        return target
    if "nvlink" not in str(target.get("interconnect", "")):
        return target
    block = target.get("interconnect_model")
    if not block:
        return target
    tops = {}
    for name, top in block["topologies"].items():
        ar = top.get("all_reduce")
        if ar and ar.get("one_shot"):
            ar = dict(ar, one_shot=dict(ar["one_shot"], enabled=True))
            top = dict(top, all_reduce=ar)
        tops[name] = top
    return dict(target, interconnect_model=dict(block, topologies=tops))


def with_topology(target: dict, named: str) -> tuple[dict, list[str], str]:
    """Return (the target with the topology its collectives take, the other topologies its band
    spans, a note naming them): `named` (deployment.topology) alone where given, else the hardware
    file's default with its `plausible` ones beside."""
    block = target.get("interconnect_model")
    if not block:
        return target, [], ""
    if named:
        target = dict(target, interconnect_model=dict(block, default=named))
        return target, [], f"topology: {named} (deployment.topology)"
    others = [t for t in block.get("plausible") or [] if t != block["default"]]
    if not others:
        return target, [], ""
    note = (
        f"topology: {block['default']} (hardware[{target['name']}] default); tpot_low_ms and "
        f"tpot_high_ms also span {', '.join(others)} (deployment.topology names one)"
    )
    return target, others, note


def _span_topologies(
    table: pd.DataFrame, one: Composition, kwargs: dict, ends: dict, target: dict, others: list
) -> None:
    """Widen a composed row's band (tpot_low_ms, tpot_high_ms) over the other topologies its
    host may have: each composed at the band's ends (or its middle where it has no ends); a
    topology with no figures for the row's GPU count adds nothing."""
    block = target["interconnect_model"]
    low = table.get("tpot_low_ms", table["tpot_ms"]).copy()
    high = table.get("tpot_high_ms", table["tpot_ms"]).copy()
    for name in others:
        moved = dict(target, interconnect_model=dict(block, default=name))
        there = Composition(one.model, one.deployment, moved, one.layouts)
        for timer in list(ends.values()) or [None]:
            kw = kwargs if timer is None else dict(kwargs, timer=timer)
            got = compose_parts(there, **kw)["tpot_ms"]
            low = low.where(~(got < low), got)
            high = high.where(~(got > high), got)
    table["tpot_low_ms"], table["tpot_high_ms"] = low, high


# The operand type of the decode rows the verdict reads (fp8_expert_fraction); a sweep's verdict
# waits only for the decode jobs that time it (pipeline.Sweep.answer_decode_outputs).
DECODE_DTYPE = "fp8"


def fp8_expert_fraction(decode: pd.DataFrame, tokens_per_expert: float) -> tuple[float, str]:
    """Return (fraction of roofline, label) of the best fp8 decode kernel at the nearest tokens
    per expert (uniform routing), or (NaN, reason)."""
    need = {"status", "dtype", "routing", "frac_roofline", "tokens_per_expert", "time_ms"}
    if decode.empty or not need <= set(decode):
        return float("nan"), "no fp8 decode measurement here"
    ok = decode[
        (decode["status"] == "ok")
        & (decode["dtype"] == DECODE_DTYPE)
        & (decode["routing"] == "uniform")
        & decode["frac_roofline"].notna()
    ]
    if ok.empty:
        return float("nan"), "no fp8 decode measurement here"
    t = _nearest(sorted({int(v) for v in ok["tokens_per_expert"]}), tokens_per_expert)
    at_t = ok[ok["tokens_per_expert"] == t]
    best = at_t.loc[at_t["time_ms"].idxmin()]
    return float(best["frac_roofline"]), f"best fp8 kernel {best['runner']} at t={t}"


def datasheet_for(device: str, catalog: dict[str, HardwareSpec]) -> dict | None:
    """Return the conf/hardware spec whose `device_names` holds `device` (the name a GPU
    reports), as plain containers, or None where conf/hardware has no such GPU."""
    for spec in catalog.values():
        if device in spec.device_names:
            return spec.model_dump(exclude_unset=True)
    return None


def fit_on_datasheet(
    fit: dict | None, label: str, catalog: dict[str, HardwareSpec]
) -> tuple[dict | None, str]:
    """Return (the fit with its efficiencies as fractions of its device's datasheet, label), or
    (None, why) where the fit's device has no datasheet in conf/hardware (then the verdict is the
    target's roofline alone, labelled; a measured rate is never set against a datasheet)."""
    if fit is None:
        return None, label
    sheet = datasheet_for(fit.get("device", ""), catalog)
    if sheet is None:
        return None, (
            f"the fit on {fit.get('device')!r} has no datasheet in conf/hardware (device_names) to "
            "put its efficiencies on the target's: not used"
        )
    fit, how = on_datasheet(fit, sheet)
    return fit, f"{label}; {how}"


def _fraction_on_datasheet(frac: float, why: str, ceilings: dict) -> tuple[float, str]:
    """Return (a decode kernel's fraction of its measured roofline as a fraction of its device's
    datasheet bandwidth, at most 1, label), or (NaN, why) where the device has no datasheet."""
    if frac != frac:
        return frac, why
    sheet = (ceilings or {}).get("datasheet") or {}
    copy = (ceilings or {}).get("copy_gbs")
    if not sheet.get("copy_gbs") or not copy:
        return math.nan, f"{why}: no datasheet bandwidth for its device, not used"
    return min(1.0, frac * copy / sheet["copy_gbs"]), f"{why} (of the datasheet)"


def per_kernel_us(ceilings: dict) -> float | None:
    """Return the measured per-kernel cost of the device at hand in us: on a GPU the fixed cost
    of a decode-sized kernel inside a CUDA graph (measure.ceilings.launch_us), on the CPU one
    eager op; None where the ceilings have none."""
    launch = (ceilings or {}).get("launch") or {}
    if (ceilings or {}).get("device_kind") == "cuda":
        return launch.get("fixed_us")
    return launch.get("eager_us")


def graph_terms(ceilings: dict) -> dict | None:
    """Return the device's measured terms of a fit on graphed steps (launch_fit.fit_step): the
    cost of an empty kernel inside a CUDA graph (`light_us`), how much of a product's smaller
    roofline term its larger one does not hide (`overlap`), and the read bandwidth over the copy
    bandwidth (`bw_max`); None off a GPU. A term the ceilings lack is None."""
    ceilings = ceilings or {}
    if ceilings.get("device_kind") != "cuda":
        return None
    read, copy = ceilings.get("read_gbs"), ceilings.get("copy_gbs")
    return {
        "light_us": (ceilings.get("launch") or {}).get("graph_us"),
        "overlap": (ceilings.get("overlap") or {}).get("alpha"),
        "bw_max": read / copy if read and copy else None,
    }


def verdict_fit(
    settings: RootSettings,
    steps: pd.DataFrame,
    ceilings: dict,
    hw_here: dict,
    model: dict | None = None,
):
    """Return (fit, per-kernel cost in us, label) the verdict composes with: the launch-aware fit
    on the TP1 step timed in CUDA graphs here (on `model`, the model as deployed; by default the
    settings' own), else the fit shipped in deployment.fit_file, else (None, None, why)."""
    import json

    device = ceilings.get("device", "none") if ceilings else "none"
    if ceilings and ceilings.get("device_kind") == "cuda":
        cost = per_kernel_us(ceilings)
        fit = calibration.step_fit(
            steps,
            model or settings.model.model_dump(exclude_unset=True),
            hw_here,
            cost,
            device,
            terms=graph_terms(ceilings),
            batches=settings.deployment.fit_batches,
            attention=attention_table.load(settings.deployment.attention_table),
        )
        if fit is not None:
            return with_ceilings(fit, ceilings), cost, calibration.fit_label(fit)
    path = settings.deployment.fit_file
    if path and project_path(path).is_file():
        fit = json.loads(project_path(path).read_text())
        where = f"; shipped as {path}, its costs per kernel and efficiencies"
        if settings.deployment.fit_batches:
            where += (
                f"; deployment.fit_batches={settings.deployment.fit_batches} not applied: the "
                f"shipped fit was made at batches {fit.get('fit_batches')}"
            )
        return fit, fit["per_kernel_us"], calibration.fit_label(fit, where)
    why = f"no whole step timed in CUDA graphs on {device}" + (
        f" and no deployment.fit_file at {path!r}" if path else ""
    )
    return None, None, why


def fit_record(settings: RootSettings, steps: pd.DataFrame, ceilings: dict) -> dict:
    """Return the launch-aware fit made here (the graphed TP1 step) with the sweep's provenance,
    or {"gap": why} where none can be made; this is the file `deployment.fit_file` ships."""
    device = ceilings.get("device", "none") if ceilings else "none"
    if not ceilings or ceilings.get("device_kind") != "cuda":
        return {"gap": f"no GPU at hand ({device}): no graphed whole step to fit on"}
    hw_here = calibration.device_hardware(ceilings, device, None)
    cost = per_kernel_us(ceilings)
    fit = calibration.step_fit(
        steps,
        settings.model.model_dump(exclude_unset=True),
        hw_here,
        cost,
        device,
        terms=graph_terms(ceilings),
        batches=settings.deployment.fit_batches,
        attention=attention_table.load(settings.deployment.attention_table),
    )
    if fit is None:
        return {"gap": f"no TP1 whole step timed in CUDA graphs on {device}, or no per-kernel cost"}
    return with_ceilings(fit, ceilings)


# The ceilings a fit carries: its provenance and the device constants the verdict reads from it.
FIT_CEILINGS = (
    "device",
    "driver",
    "torch",
    "triton",
    "commit",
    "copy_gbs",
    "matmul_tflops",
    "launch",
)


def with_ceilings(fit: dict, ceilings: dict) -> dict:
    """Return the fit with the ceilings it was made beside (FIT_CEILINGS)."""
    return {**fit, "ceilings": {k: ceilings.get(k) for k in FIT_CEILINGS}}


def _here(collective: pd.DataFrame, ceilings: dict) -> tuple[str, dict, dict, dict]:
    """Return (the device at hand, its measured interconnect, its latency floors, its hardware
    dict from its ceilings): NCCL rows on a GPU, gloo rows on the CPU."""
    device = ceilings.get("device", "none") if ceilings else "none"
    gpu_here = bool(ceilings) and ceilings.get("device_kind") == "cuda"
    numbers, floors = calibration.measured_interconnect(collective, "nccl" if gpu_here else "gloo")
    hw_here = calibration.device_hardware(ceilings, device, numbers) if ceilings else {}
    return device, numbers, floors, hw_here


def deployment_table(
    settings: RootSettings,
    decode: pd.DataFrame,
    collective: pd.DataFrame,
    steps: pd.DataFrame,
    ceilings: dict,
    fitted: tuple | None = None,
) -> pd.DataFrame:
    """Return the composed deployment (plan.deployment.COLUMNS) for the target at every batch;
    `fitted` is verdict_fit's (fit, per-kernel cost, label) where the caller made it (a fit is
    made on the sweep's own model, never on another config's)."""
    dep, engine_conf = engine_deployment(settings)
    model = deployment_model(settings.model.model_dump(exclude_unset=True), dep)
    engine = engine_profile.profile(engine_conf, model, dep["weight_dtype"], settings.hardware.arch)
    device, here_numbers, here_floors, hw_here = _here(collective, ceilings)
    plain = settings.hardware.model_dump(exclude_unset=True)
    target, spanned, topology_note = with_topology(
        with_engine_allreduce(plain, engine_conf), dep.get("topology", "")
    )
    allreduce = (
        f"all-reduce: {engine.name}'s one-shot custom all-reduce up to its max_bytes "
        f"(hardware[{plain['name']}] one_shot figures, cited), NCCL above"
        if target is not plain
        else "all-reduce: NCCL (the hardware file's figures)"
    )
    floors = None
    if at_target(settings, ceilings) and here_numbers:
        named = f"fitted on the collectives measured on {device}"
        target = dict(
            target, interconnect_model={"default": named, "topologies": {named: here_numbers}}
        )
        floors = here_floors
        allreduce = f"all-reduce: measured here ({device}; NCCL)"
        spanned, topology_note = [], ""
    fit, cost, label = fitted or verdict_fit(settings, steps, ceilings, hw_here, model)
    fit, label = fit_on_datasheet(fit, label, settings.catalog)
    # The attention kernel's own times where the target is the device that measured them.
    table = attention_table.load(settings.deployment.attention_table)
    here = at_target(settings, ceilings)
    own = attention_table.for_device(table, device, model, dep) if here else None
    layouts = [lay.model_dump(exclude_unset=True) for lay in settings.grid.layouts]
    i, o = serving_load(dep)  # the load every row of the table shares (column load)
    load_words = (
        f"serving, {i} in / {o} out per request"
        if i
        else f"decode only, {dep['context_len']} tokens of context"
    )
    frames = []
    for batch in dep["batches"]:
        one = Composition(model, dict(dep, batches=[batch]), target, layouts)
        notes = []
        expert_words = ""  # what the expert GEMMs' efficiency rests on (column expert_efficiency)
        ends = {}  # the TPOT at the ends of a cited efficiency band (tpot_low_ms, tpot_high_ms)
        kwargs = {"measured_floors": floors, "engine": engine}
        if fit is None:
            notes.append(f"parts at the target's roofline: {label}")
        else:
            use = fit
            expert = next(
                (n for n, g in fit["groups"].items() if "expert_gemm" in g["kinds"]), None
            )
            curve = (target.get("grouped_gemm_efficiency") or {}).get(dep["weight_dtype"])
            if curve and expert:
                # The target's own cited band for this format's grouped GEMM at this batch's
                # tokens per expert: never another GPU's or dtype's figure; the row at its
                # geometric middle, the band beside.
                band = grouped_efficiency.band_at(
                    curve, batch * model["top_k"] / model["routed_experts"]
                )
                use = with_group_bw(fit, expert, band.middle)
                expert_words = band.words(dep["weight_dtype"], target["name"])
                notes.append(expert_words)
                ends = {
                    "tpot_low_ms": launch_timer(
                        with_group_bw(fit, expert, band.high), cost, label, own, engine.launches
                    ),
                    "tpot_high_ms": launch_timer(
                        with_group_bw(fit, expert, band.low), cost, label, own, engine.launches
                    ),
                }
            elif dep["weight_dtype"] != "bf16" and expert:
                per_expert = batch * model["top_k"] / model["routed_experts"]
                f8, why = fp8_expert_fraction(decode, per_expert)
                f8, why = _fraction_on_datasheet(f8, why, ceilings)
                if f8 == f8:
                    use = with_group_bw(fit, expert, f8)
                    expert_words = f"expert GEMMs ({dep['weight_dtype']}): {why}, e_bw {f8:.2f}"
                else:
                    expert_words = (
                        f"expert GEMMs ({dep['weight_dtype']}): {why}; the bf16 step's "
                        "efficiency applied to their bytes"
                    )
                notes.append(expert_words)
            kwargs["timer"] = launch_timer(use, cost, label, own, engine.launches)
        table = compose_parts(one, **kwargs)
        for column, timer in ends.items():
            table[column] = compose_parts(one, **dict(kwargs, timer=timer))["tpot_ms"]
        if spanned:
            _span_topologies(table, one, kwargs, ends, target, spanned)
        if topology_note:
            notes.append(topology_note)
        table = table.assign(
            fit_source=label,
            expert_efficiency=expert_words,
            kernel_list=engine.label,
            host_rule=engine.host_label,
            collectives="; ".join(x for x in (allreduce, topology_note) if x),
            load=load_words,
        )
        notes.append(dep["attention_label"])
        notes.append(allreduce)
        if fit is not None and engine.launches is not None:
            notes.append(small_kernel_us(fit)[1])
        if notes:
            table["inputs"] = table["inputs"] + "; " + "; ".join(notes)
        frames.append(table)
    out = pd.concat(frames, ignore_index=True)
    return out.sort_values(["world", "layout", "batch"], kind="stable").reset_index(drop=True)[
        VERDICT_COLUMNS
    ]


def engine_table(
    settings: RootSettings,
    decode: pd.DataFrame,
    collective: pd.DataFrame,
    steps: pd.DataFrame,
    ceilings: dict,
) -> pd.DataFrame:
    """Return one row per engine figure the config cites (conf/references): the engine's
    measured TPOT beside the verdict composed for the same model, layout, batch and context on
    the engine's GPU, with the same fit the sweep's verdict uses (columns.ENGINE_COLUMNS)."""
    figures = references.of(settings).figures
    if not figures:
        return pd.DataFrame(columns=ENGINE_COLUMNS)
    fitted = verdict_fit(settings, steps, ceilings, _here(collective, ceilings)[3])
    rows = []
    groups: dict[tuple, RootSettings] = {}  # one Hydra compose per model x GPU x formats x engine
    for fig in figures:
        key = (fig.model, fig.hardware, fig.deployment, fig.engine_name())
        if key not in groups:
            groups[key] = compose_groups(fig.groups(), FIGURE_BASE)
        one = deployment_table(
            figure_settings(groups[key], fig), decode, collective, steps, ceilings, fitted
        ).iloc[0]
        composed = one["tpot_ms"]
        ratio = composed / fig.tpot_ms
        rows.append(
            {
                "engine": fig.engine,
                "version": fig.version,
                "model": fig.model,
                "hardware": fig.hardware,
                "layout": references.figure_layout_name(fig),
                "batch": fig.batch,
                "input_len": fig.input_len,
                "output_len": fig.output_len,
                "context_len": one["context_len"],
                "weight_dtype": one["weight_dtype"],
                "speculative": fig.speculative,
                "statistic": fig.statistic,
                "role": fig.role,
                "engine_tpot_ms": fig.tpot_ms,
                "composed_tpot_ms": composed,
                "composed_over_engine": ratio,
                "error_pct": 100 * (ratio - 1),
                "in_band": bool(references.BAND[0] <= ratio <= references.BAND[1]),
                "floor_ms": one["floor_ms"],
                "engine_over_floor": fig.tpot_ms / one["floor_ms"],
                "host_ms": one["host_ms"],
                "prefill_ms": one["prefill_ms"],
                "bound": one["bound"],
                "fits_memory": one["fits_memory"],
                "kernel_list": one["kernel_list"],
                "composed_source": one["source"],
                "gap": _gap(one),
                "cited": fig.source,
            }
        )
    table = pd.DataFrame(rows, columns=ENGINE_COLUMNS)
    table["source_check"] = references.source_checks(table)
    return table


# What every cited figure's settings start from (the defaults, no figures of their own, one tile
# and one layout that divide any model); figure_settings sets the figure's layout and load.
FIGURE_BASE = (
    "references=none",
    "grid.tiles=[{m:16,n:16,k:16}]",
    "grid.layouts=[{tp:1,pp:1,ep:1}]",
)


def figure_settings(base: RootSettings, fig: references.Figure) -> RootSettings:
    """Return the settings composing one cited figure: `base` (composed from the overrides of a
    figure of the same model, GPU, formats and engine) with this figure's batch, serving load and
    layout, which its model validated; the same as composing its own overrides."""
    load = (
        {"input_len": fig.input_len, "output_len": fig.output_len}
        if fig.input_len and fig.output_len
        else {"input_len": 0, "output_len": 0, "context_len": fig.context_len}
    )
    dep = base.deployment.model_copy(update={"batches": [fig.batch], **load})
    grid = base.grid.model_copy(update={"layouts": [fig.layout]})
    return base.model_copy(update={"deployment": dep, "grid": grid})


def _between(text: str, start: str, end: str) -> str:
    """Return the part of `text` between `start` and `end` ('' where `start` is absent)."""
    if start not in text:
        return ""
    return text.split(start, 1)[1].split(end, 1)[0]


def _gap(row: pd.Series) -> str:
    """Return why a composed engine row has no time ('' where it has one)."""
    if row["fits_memory"] != "yes":
        return f"does not fit in memory ({row['mem_short_gb']:.3g} GB short per GPU)"
    if row["tpot_ms"] == row["tpot_ms"]:
        return ""
    return _between(str(row["inputs"]), "gaps: ", "; ") or str(row["bound"])


def check_table(
    steps: pd.DataFrame,
    collective: pd.DataFrame,
    ceilings: dict,
    model: dict,
    fit_batches: list[int] | None = None,
    attention: str = "",
):
    """Return the check of the method on the device at hand (plan.CHECK_COLUMNS), the fit made
    on `fit_batches` (deployment.fit_batches), the attention kernel's own times from the table
    at `attention` (deployment.attention_table) where it covers a part."""
    if not ceilings or steps.empty:
        return pd.DataFrame(columns=CHECK_COLUMNS)
    backend = "nccl" if ceilings.get("device_kind") == "cuda" else "gloo"
    numbers, floors = calibration.measured_interconnect(collective, backend)
    device = ceilings.get("device", "unknown")
    hw_here = calibration.device_hardware(ceilings, device, numbers)
    return calibration.step_check(
        steps,
        model,
        hw_here,
        floors,
        device,
        per_kernel_us(ceilings),
        terms=graph_terms(ceilings),
        fit_batches=fit_batches,
        attention=attention_table.load(attention),
    )


def question_panel(
    settings: RootSettings, compose: Callable[[RootSettings], pd.DataFrame]
) -> dict | None:
    """Return the question's panel when a question is configured and the deployment is the one it
    asks about (conf/question): its layouts and the grid's other layouts of as many GPUs, composed
    as the verdict is, the winner per batch and the sensitivity band; None otherwise."""
    asked = question.of(settings)
    if asked is None or not asked.asks_about(settings.model.name, settings.hardware.name):
        return None
    layouts = [{"tp": lay.tp, "pp": lay.pp, "ep": lay.ep} for lay in asked.layouts]
    for lay in settings.grid.layouts:
        lay = {"tp": lay.tp, "pp": lay.pp, "ep": lay.ep}
        if lay["tp"] * lay["pp"] * lay["ep"] == asked.gpus and lay not in layouts:
            layouts.append(lay)
    grid = settings.grid.model_copy(update={"layouts": [Layout(**lay) for lay in layouts]})
    panel = settings.model_copy(update={"grid": grid})
    rows = compose(panel)
    return {
        "rows": rows,
        "winners": winners(rows, asked.gpus),
        "band": sensitivity(panel, compose, world=asked.gpus),
    }
