"""The collectives a target's host runs: the engine's all-reduce, the topology and its band."""

from __future__ import annotations

import math

from tilesweep.plan import allreduce
from tilesweep.plan.composition import Composition, compose_tpot
from tilesweep.settings import HardwareSpec
from tilesweep.settings.engine_spec import EngineSettings
from tilesweep.settings.hardware_spec import InterconnectModel


def with_engine_allreduce(
    target: HardwareSpec,
    engine: EngineSettings,
    token_bytes: float | None = None,
    pcie: str = "off",
) -> HardwareSpec:
    """Return the target with the engine's all-reduce on every NVLink topology (plan.allreduce;
    `token_bytes`: one token's hidden state, for an engine that picks by tokens): vLLM's and
    SGLang's custom all-reduce needs full NVLink beyond two GPUs
    (vllm/distributed/device_communicators/custom_all_reduce.py, full_nvlink); on PCIe, the
    one-shot all-reduce a community build runs (`pcie`: deployment.pcie_allreduce)."""
    block = target.interconnect_model
    nvlink = engine.custom_allreduce and "nvlink" in target.interconnect
    if not (block and (nvlink or (pcie != "off" and "pcie" in target.interconnect))):
        return target
    tops = {}
    for name, top in block.topologies.items():
        ar = top.all_reduce
        if ar and ar.one_shot:
            enabled = ar.one_shot.model_copy(update={"enabled": True})
            ar = ar.model_copy(update={"one_shot": enabled})
        if ar and engine.allreduce and nvlink:
            ar = allreduce.EngineAllReduce.of(ar, engine, target.arch, token_bytes)
        tops[name] = top.model_copy(update={"all_reduce": ar}) if ar else top
    return _with_block(target, block.model_copy(update={"topologies": tops}))


def _with_block(target: HardwareSpec, block: InterconnectModel) -> HardwareSpec:
    """Return the target with another interconnect_model."""
    return target.model_copy(update={"interconnect_model": block})


def with_topology(target: HardwareSpec, named: str) -> tuple[HardwareSpec, list[str], str]:
    """Return (the target with its topology, the others its band spans, the `topology` item)."""
    block = target.interconnect_model
    if not block:
        return target, [], ""
    if named:
        target = _with_block(target, block.model_copy(update={"default": named}))
        return target, [], f"{named} (deployment.topology)"
    others = [t for t in block.plausible if t != block.default]
    if not others:
        return target, [], ""
    note = (
        f"{block.default} (hardware[{target.name}] default); tpot_low_ms and "
        f"tpot_high_ms also span {', '.join(others)} (deployment.topology names one)"
    )
    return target, others, note


def span_topologies(
    rows: list[dict], one: Composition, kwargs: dict, ends: dict, target: HardwareSpec, others: list
) -> None:
    """Widen composed rows' bands (tpot_low_ms, tpot_high_ms; where none, from tpot_ms) over the
    other topologies their host may have."""
    block = target.interconnect_model
    for row in rows:
        for column in ("tpot_low_ms", "tpot_high_ms"):
            if math.isnan(row.get(column, math.nan)):
                row[column] = row["tpot_ms"]
    for name in others:
        moved = _with_block(target, block.model_copy(update={"default": name}))
        there = Composition(one.model, one.deployment, moved, one.layouts)
        for timer in list(ends.values()) or [None]:
            kw = kwargs if timer is None else dict(kwargs, timer=timer)
            for row, got in zip(rows, compose_tpot(there, **kw), strict=True):
                row["tpot_low_ms"] = min(row["tpot_low_ms"], got)
                row["tpot_high_ms"] = max(row["tpot_high_ms"], got)
