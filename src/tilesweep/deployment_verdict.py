"""The verdict for the deployment the config names: a whole decode step per layout x batch on the
target, composed from measured parts (the fit: deployment_fit.verdict_fit), and its check.

The expert GEMMs take the target's cited grouped-GEMM band, else the best fp8 decode kernel
measured here. Communication: the collectives measured here when the device at hand is the
target, else the target's hardware file; a step timed eagerly never calibrates a verdict.
Every row says which: `source` and its items in `inputs_json` (plan.row_inputs)."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import pandas as pd

from tilesweep.columns import VERDICT_COLUMNS
from tilesweep.deployment_fit import fit_on_datasheet, measured_here, verdict_fit
from tilesweep.plan import allreduce as engine_allreduce
from tilesweep.plan import (
    attention_table,
    calibration,
    engine_profile,
    grouped_efficiency,
    row_inputs,
)
from tilesweep.plan.architecture import ACT_BYTES, deployment_model
from tilesweep.plan.composition import COLUMNS, Composition, compose_rows, compose_tpot
from tilesweep.plan.launch_fit import launch_timer, small_kernel_us
from tilesweep.plan.padded_experts import applies, padded_timer
from tilesweep.plan.padded_experts import words as padded_words
from tilesweep.plan.part_timers import floored_timer, roofline_timer, untimed_timer
from tilesweep.plan.prompt_load import prompt_load
from tilesweep.plan.sensitivity import sensitivity, winners
from tilesweep.plan.step_time import serving_load
from tilesweep.plan.topology import span_topologies, with_engine_allreduce, with_topology
from tilesweep.settings import DeploymentSettings, Layout, RootSettings
from tilesweep.settings.engine_spec import EngineSettings
from tilesweep.settings.hardware_spec import HardwareSpec, InterconnectModel


def at_target(settings: RootSettings, ceilings: dict) -> bool:
    """Return whether the benchmark device is the target the config names."""
    return bool(ceilings) and ceilings.get("catalog_name") == settings.hardware.name


def with_group_bw(fit: dict, group: str, e_bw: float) -> dict:
    """Return the fit with one group's e_bw replaced (the fit itself untouched)."""
    return dict(fit, groups={**fit["groups"], group: dict(fit["groups"][group], e_bw=e_bw)})


def engine_deployment(settings: RootSettings) -> tuple[DeploymentSettings, str]:
    """Return (the deployment as the engine runs it, its attention in words)."""
    dep = settings.deployment
    if dep.attention == "auto":
        mode, why = engine_profile.attention_mode(settings.engine, settings.hardware.arch)
        label = f"{mode} ({why})"
        also = engine_profile.attention_also(settings.engine, settings.hardware.arch, mode)
        if also is not None:
            label += f"; tpot_low_ms and tpot_high_ms also span {also.mode} ({also.cite})"
    else:
        mode, label = dep.attention, f"{dep.attention} (deployment.attention)"
    i, o = serving_load(dep)
    load = {"context_len": i + o // 2} if i else {}
    return dep.model_copy(update={"attention": mode, **load}), label


# The operand type of the decode rows the verdict reads (fp8_expert_fraction); a sweep's verdict
# waits only for the decode jobs that time it (pipeline.Sweep.answer_decode_jobs).
DECODE_DTYPE = "fp8"


def fp8_expert_fraction(decode: pd.DataFrame, tokens_per_expert: float) -> tuple[float, str]:
    """Return (fraction of roofline, label) of the best fp8 decode kernel, or (NaN, reason)."""
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
    sizes = {int(v) for v in ok["tokens_per_expert"]}  # the nearest (ties: the smaller)
    t = min(sizes, key=lambda v: (abs(v - tokens_per_expert), v))
    at_t = ok[ok["tokens_per_expert"] == t]
    best = at_t.loc[at_t["time_ms"].idxmin()]
    return float(best["frac_roofline"]), f"best fp8 kernel {best['runner']} at t={t}"


def _fraction_on_datasheet(frac: float, why: str, ceilings: dict) -> tuple[float, str]:
    """Return (a kernel's fraction of its device's datasheet, at most 1, label), or (NaN, why)."""
    if frac != frac:
        return frac, why
    sheet = (ceilings or {}).get("datasheet") or {}
    copy = (ceilings or {}).get("copy_gbs")
    if not sheet.get("copy_gbs") or not copy:
        return math.nan, f"{why}: no datasheet bandwidth for its device, not used"
    return min(1.0, frac * copy / sheet["copy_gbs"]), f"{why} (of the datasheet)"


def _collectives(settings, ceilings, engine_conf, dep, here: tuple) -> tuple:
    """Return (target with its collectives, floors or None, all-reduce words, topologies, note)."""
    device, here_numbers, here_floors, _ = here
    plain = settings.hardware
    target, spanned, topology_note = with_topology(
        with_engine_allreduce(
            plain, engine_conf, settings.model.hidden * ACT_BYTES, dep.pcie_allreduce
        ),
        dep.topology,
    )
    allreduce = engine_allreduce.describe(target)
    if at_target(settings, ceilings) and here_numbers:
        named = f"fitted on the collectives measured on {device}"
        block = InterconnectModel.model_construct(default=named, topologies={named: here_numbers})
        target = target.model_copy(update={"interconnect_model": block})
        return target, here_floors, f"measured here ({device}; NCCL)", [], ""
    return target, None, allreduce, spanned, topology_note


def _expert_efficiency(fit, target, dep, model, batch, decode, ceilings, make, engine_conf):
    """Return (the part timer with the expert GEMMs' efficiency at this batch, its words, the
    band's end timers): the engine's own band for the format on the target where its file times
    its kernel (engine.grouped_gemm_efficiency), else the target's own cited band, else the best
    fp8 decode kernel here."""
    dtype = dep.weight_dtype
    expert = next((n for n, g in fit["groups"].items() if "expert_gemm" in g["kinds"]), None)
    own = engine_conf.grouped_gemm_efficiency.get(target.name, {})
    curve = own.get(dtype) or (target.grouped_gemm_efficiency or {}).get(dtype)
    owner = f"engine[{engine_conf.name}]" if dtype in own else ""
    per_expert = batch * model.top_k / model.routed_experts
    if curve and expert:
        band = grouped_efficiency.band_at(curve, per_expert)
        words = band.words(dtype, target.name, owner)
        if curve.ends == "sizes":
            words = grouped_efficiency.sizes_words(curve, band, dtype, target.name, owner)
        elif grouped_efficiency.sized(curve):
            words += (
                "; each layout's expert GEMMs take the band scaled to the bytes of its own "
                "expert at a fixed cost per expert"
            )

        def at(e: float):
            return make(with_group_bw(fit, expert, e))

        shaped = partial(grouped_efficiency.shaped_timer, curve, per_expert, make=at)
        ends = {"tpot_low_ms": shaped(end="high"), "tpot_high_ms": shaped(end="low")}
        return shaped(end="middle"), words, ends
    if dtype == "bf16" or not expert:
        return make(fit), "", {}
    f8, why = fp8_expert_fraction(decode, per_expert)
    f8, why = _fraction_on_datasheet(f8, why, ceilings)
    if f8 == f8:
        return make(with_group_bw(fit, expert, f8)), f"{dtype}, {why}, e_bw {f8:.2f}", {}
    words = f"{dtype}, {why}; the bf16 step's efficiency applied to their bytes"
    return make(fit), words, {}


def _wrap(kwargs: dict, ends: dict, wrap: Callable) -> dict:
    """Wrap the rows' timer (kwargs) in `wrap`; return the band ends' timers wrapped too."""
    kwargs["timer"] = wrap(kwargs.get("timer", roofline_timer))
    return {column: wrap(timer) for column, timer in ends.items()}


def _engine_terms(engine_conf: EngineSettings, arch: str, pairs: int, kwargs: dict, ends: dict):
    """Wrap the rows' timer (kwargs) and the band ends' in the engine's own terms: the parts of
    each kernel it runs from `pairs` routed pairs that no figure times make gaps naming it, and
    each part kind it names a kernel floor for on `arch` takes at least its cited time."""
    for item in engine_conf.untimed:
        if pairs >= item.from_routed_pairs:
            why = (
                f"{item.kernel} from {item.from_routed_pairs} routed pairs ({item.cite}): "
                "no kernel-level figure times it"
            )
            ends = _wrap(kwargs, ends, partial(untimed_timer, kind=item.kind, why=why))
    for item in engine_conf.kernel_floors:
        if item.only_arch and arch not in item.only_arch:
            continue
        floor_ms = sum(item.calls_us) * 1e-3
        calls = " + ".join(f"{us:g}" for us in item.calls_us)
        why = f"{item.kind} at least {calls} us a layer ({item.kernel}; engine.kernel_floors)"
        wrap = partial(floored_timer, kind=item.kind, floor_ms=floor_ms, why=why)
        ends = _wrap(kwargs, ends, wrap)
    return ends


def _padded(
    engine_conf: EngineSettings, hw: HardwareSpec, weight_dtype: str, kwargs: dict, ends: dict
) -> dict:
    """Put the expert parts on the engine's padded path where it takes it (arch, weight format):
    the rows at its measured e_math (else its cited band's middle), the band's ends at its ends."""
    spec = engine_conf.padded_experts
    if not applies(spec, hw.arch, weight_dtype):
        return ends
    base = kwargs.get("timer", roofline_timer)
    low, high = ends.get("tpot_low_ms", base), ends.get("tpot_high_ms", base)
    kwargs["timer"] = padded_timer(base, spec, "middle")
    kwargs["rests"] = {**kwargs.get("rests", {}), "padded expert rows": padded_words(spec, hw.name)}
    return {
        "tpot_low_ms": padded_timer(low, spec, "high"),
        "tpot_high_ms": padded_timer(high, spec, "low"),
    }


def _rests(fit, label: str, engine, attention: str, collectives: dict) -> tuple[dict, dict]:
    """Return what every row rests on beyond its own composition, as items (plan.row_inputs)."""
    if fit is None:
        used = {"parts at the target's roofline": label}
    else:
        used = {"fit": calibration.fit_words(fit)}
        used |= {"fit file": fit["shipped"]} if fit.get("shipped") else {}
    tail = {k: collectives[k] for k in ("topology",) if k in collectives}
    tail |= {"attention": attention, "all-reduce": collectives["all-reduce"]}
    if fit is not None and engine.launches is not None:
        tail["small kernels"] = small_kernel_us(fit)[1]
    return used, tail


def _input_columns(label: str, engine, collectives: dict, dep: DeploymentSettings) -> dict:
    """Return the columns of what every verdict row rests on (fit, kernels, host, collectives,
    the load every row shares)."""
    i, o = serving_load(dep)
    return {
        "fit_source": label,
        "kernel_list": engine.label,
        "host_rule": engine.host_label,
        "collectives": row_inputs.words(collectives),
        "load": f"serving, {i} in / {o} out per request"
        if i
        else f"decode only, {dep.context_len} tokens of context",
    }


def deployment_table(
    settings: RootSettings,
    decode: pd.DataFrame,
    collective: pd.DataFrame,
    steps: pd.DataFrame,
    ceilings: dict,
    fitted: tuple | None = None,
) -> pd.DataFrame:
    """Return the composed deployment (plan.composition.COLUMNS) for the target at every batch;
    `fitted` is verdict_fit's (fit, per-kernel cost, label) where the caller made it (a fit is
    made on the sweep's own model, never on another config's)."""
    dep, attention = engine_deployment(settings)
    engine_conf = settings.engine
    model = deployment_model(settings.model, dep)
    engine = engine_profile.profile(engine_conf, model, dep.weight_dtype, settings.hardware.arch)
    engine.prompt = prompt_load(engine_conf, settings.hardware, dep.weight_dtype, dep.prefill_chunk)
    here = measured_here(collective, ceilings)
    target, floors, allreduce, spanned, topology_note = _collectives(
        settings, ceilings, engine_conf, dep, here
    )
    fit, cost, label = fitted or verdict_fit(settings, steps, ceilings, here[3], model)
    fit, label = fit_on_datasheet(fit, label, settings.catalog)
    own = None  # the attention kernel's own times where the target measured them
    if at_target(settings, ceilings):
        table = attention_table.load(settings.deployment.attention_table)
        own = attention_table.for_device(table, here[0], model, dep)
    layouts = settings.grid.layouts
    collectives = {"all-reduce": allreduce} | ({"topology": topology_note} if topology_note else {})
    columns = _input_columns(label, engine, collectives, dep)
    make = partial(
        launch_timer, per_kernel_us=cost, label=label, kernel_ms=own, launches=engine.launches
    )
    used, tail = _rests(fit, label, engine, attention, collectives)
    every = []  # the rows of every batch
    for batch in dep.batches:
        one = Composition(model, dep.model_copy(update={"batches": [batch]}), target, layouts)
        kwargs = {"measured_floors": floors, "engine": engine}
        expert_words, ends = "", {}  # ends: tpot_low_ms, tpot_high_ms of a cited band
        if fit is not None:
            kwargs["timer"], expert_words, ends = _expert_efficiency(
                fit, target, dep, model, batch, decode, ceilings, make, engine_conf
            )
        expert = {"expert GEMMs": expert_words} if expert_words else {}
        kwargs["rests"] = used | expert | tail
        ends = _engine_terms(engine_conf, settings.hardware.arch, batch * model.top_k, kwargs, ends)
        ends = _padded(engine_conf, settings.hardware, dep.weight_dtype, kwargs, ends)
        rows = compose_rows(one, **kwargs)
        for column, timer in ends.items():
            for row, tpot in zip(rows, compose_tpot(one, **dict(kwargs, timer=timer)), strict=True):
                row[column] = tpot
        if spanned:
            span_topologies(rows, one, kwargs, ends, target, spanned)
        every.extend(row | columns | {"expert_efficiency": expert_words} for row in rows)
    named = dict.fromkeys([*COLUMNS, *columns, "expert_efficiency"])
    out = pd.DataFrame(every, columns=list(named))
    out = out.sort_values(["world", "layout", "batch"], kind="stable").reset_index(drop=True)
    return _span_attention(out, settings, (decode, collective, steps, ceilings, fitted))[
        VERDICT_COLUMNS
    ]


def _span_attention(table: pd.DataFrame, settings: RootSettings, inputs: tuple) -> pd.DataFrame:
    """Return the table with its band widened over the engine's other attention mode."""
    dep = settings.deployment
    if dep.attention != "auto":
        return table
    mode, _ = engine_profile.attention_mode(settings.engine, settings.hardware.arch)
    also = engine_profile.attention_also(settings.engine, settings.hardware.arch, mode)
    if also is None:
        return table
    other = settings.model_copy(
        update={"deployment": dep.model_copy(update={"attention": also.mode})}
    )
    there = deployment_table(other, *inputs)
    low = table["tpot_low_ms"].fillna(table["tpot_ms"])
    high = table["tpot_high_ms"].fillna(table["tpot_ms"])
    for column in ("tpot_low_ms", "tpot_high_ms", "tpot_ms"):
        got = there[column]
        low = low.where(~(got < low), got)
        high = high.where(~(got > high), got)
    return table.assign(tpot_low_ms=low, tpot_high_ms=high)


def question_panel(
    settings: RootSettings, compose: Callable[[RootSettings], pd.DataFrame]
) -> dict | None:
    """Return the question's panel when the deployment is the one it asks about, else None."""
    asked = settings.question.case
    if asked is None or not asked.asks_about(settings.model.name, settings.hardware.name):
        return None
    layouts = [Layout(tp=lay.tp, pp=lay.pp, ep=lay.ep) for lay in asked.layouts]
    for lay in settings.grid.layouts:
        lay = Layout(tp=lay.tp, pp=lay.pp, ep=lay.ep)
        if lay.tp * lay.pp * lay.ep == asked.gpus and lay not in layouts:
            layouts.append(lay)
    grid = settings.grid.model_copy(update={"layouts": layouts})
    panel = settings.model_copy(update={"grid": grid})
    rows = compose(panel)
    return {
        "rows": rows,
        "winners": winners(rows, asked.gpus),
        "band": sensitivity(panel, compose, world=asked.gpus),
    }
