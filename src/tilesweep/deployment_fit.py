"""The fit a verdict composes with: made here on the graphed TP1 step, else the shipped
`deployment.fit_file`, else none; each put on its device's datasheet before it meets a target."""

import json

import pandas as pd

from tilesweep import package_data
from tilesweep.columns import CHECK_COLUMNS
from tilesweep.io import project_path
from tilesweep.plan import attention_table, calibration
from tilesweep.plan.interconnect import fit_measured
from tilesweep.plan.launch_fit import on_datasheet
from tilesweep.settings import HardwareSpec, ModelSettings, RootSettings
from tilesweep.settings.hardware_spec import Topology


def fit_on_datasheet(
    fit: dict | None, label: str, catalog: dict[str, HardwareSpec]
) -> tuple[dict | None, str]:
    """Return (the fit on its device's datasheet, label), or (None, why) without a datasheet."""
    if fit is None:
        return None, label
    device = fit.get("device", "")
    sheet = next((spec for spec in catalog.values() if device in spec.device_names), None)
    if sheet is None:
        return None, (
            f"the fit on {fit.get('device')!r} has no datasheet in conf/hardware (device_names) to "
            "put its efficiencies on the target's: not used"
        )
    fit, how = on_datasheet(fit, sheet)
    return fit, f"{label}; {how}"


def on_gpu(ceilings: dict | None) -> bool:
    """Return whether the device at hand (its measured ceilings) is a GPU."""
    return (ceilings or {}).get("device_kind") == "cuda"


def per_kernel_us(ceilings: dict) -> float | None:
    """Return the measured per-kernel cost of the device at hand in us, or None."""
    launch = (ceilings or {}).get("launch") or {}
    return launch.get("fixed_us" if on_gpu(ceilings) else "eager_us")


def graph_terms(ceilings: dict) -> dict | None:
    """Return the device's measured terms of a graphed fit (light_us, overlap, bw_max), or None."""
    if not on_gpu(ceilings):
        return None
    read, copy = ceilings.get("read_gbs"), ceilings.get("copy_gbs")
    return {
        "light_us": (ceilings.get("launch") or {}).get("graph_us"),
        "overlap": (ceilings.get("overlap") or {}).get("alpha"),
        "bw_max": read / copy if read and copy else None,
    }


def _here(model, hw, ceilings: dict, batches, attention: str, floors=None) -> calibration.Here:
    """Return what a fit or check on the device at hand composes with, from its ceilings."""
    device, table = ceilings.get("device", "none"), attention_table.load(attention)
    cost, terms = per_kernel_us(ceilings), graph_terms(ceilings)
    return calibration.Here(model, hw, device, cost, terms, batches, table, floors)


def _graphed_fit(
    settings, steps, ceilings, hw_here, model: ModelSettings | None = None
) -> dict | None:
    """Return the launch-aware fit on the graphed TP1 step here, with the ceilings it was made
    beside (FIT_CEILINGS), or None."""
    batches, table = settings.deployment.fit_batches, settings.deployment.attention_table
    fit = calibration.step_fit(
        steps, _here(model or settings.model, hw_here, ceilings, batches, table)
    )
    if fit is None:
        return None
    return {**fit, "ceilings": {k: ceilings.get(k) for k in FIT_CEILINGS}}


def verdict_fit(
    settings: RootSettings,
    steps: pd.DataFrame,
    ceilings: dict,
    hw_here: HardwareSpec | None,
    model: ModelSettings | None = None,
):
    """Return (fit, per-kernel cost in us, label) the verdict composes with: made here, else
    shipped in deployment.fit_file, else (None, None, why)."""
    device = (ceilings or {}).get("device", "none")
    if on_gpu(ceilings):
        fit = _graphed_fit(settings, steps, ceilings, hw_here, model)
        if fit is not None:
            return fit, per_kernel_us(ceilings), calibration.fit_label(fit)
    path = settings.deployment.fit_file
    if path and project_path(path).is_file():
        fit = json.loads(project_path(path).read_text())
        shipped = f"shipped as {path}, its costs per kernel and efficiencies"
        if settings.deployment.fit_batches:
            shipped += (
                f"; deployment.fit_batches={settings.deployment.fit_batches} not applied: the "
                f"shipped fit was made at batches {fit.get('fit_batches')}"
            )
        label = calibration.fit_label(fit, f"; {shipped}")
        return dict(fit, shipped=shipped), fit["per_kernel_us"], label
    why = f"no whole step timed in CUDA graphs on {device}" + (
        f" and no deployment.fit_file at {path!r}" if path else ""
    )
    return None, None, why


def fit_record(settings: RootSettings, steps: pd.DataFrame, ceilings: dict) -> dict:
    """Return the fit made here with the sweep's provenance, or {"gap": why}."""
    device = (ceilings or {}).get("device", "none")
    if not on_gpu(ceilings):
        return {"gap": f"no GPU at hand ({device}): no graphed whole step to fit on"}
    hw_here = calibration.device_hardware(ceilings, device, None)
    fit = _graphed_fit(settings, steps, ceilings, hw_here)
    if fit is None:
        return {"gap": f"no TP1 whole step timed in CUDA graphs on {device}, or no per-kernel cost"}
    return fit


DATA_FILES = ("data/columns.yaml",)
# The ceilings a fit carries: its provenance and the device constants the verdict reads from it.
FIT_CEILINGS = package_data.column_lists("tilesweep.deployment_fit")["FIT_CEILINGS"]


def measured_here(
    collective: pd.DataFrame, ceilings: dict
) -> tuple[str, Topology | None, dict, HardwareSpec | None]:
    """Return (the device at hand, its interconnect, its latency floors, its hardware dict)."""
    device = (ceilings or {}).get("device", "none")
    numbers, floors = fit_measured(collective, "nccl" if on_gpu(ceilings) else "gloo")
    hw_here = calibration.device_hardware(ceilings, device, numbers) if ceilings else None
    return device, numbers, floors, hw_here


def check_table(
    steps: pd.DataFrame,
    collective: pd.DataFrame,
    ceilings: dict,
    model: ModelSettings,
    fit_batches: list[int] | None = None,
    attention: str = "",
):
    """Return the check of the method on the device at hand (plan.CHECK_COLUMNS)."""
    if not ceilings or steps.empty:
        return pd.DataFrame(columns=CHECK_COLUMNS)
    _, _, floors, hw_here = measured_here(collective, ceilings)
    return calibration.step_check(
        steps, _here(model, hw_here, ceilings, fit_batches, attention, floors)
    )
