"""The verdict for the deployment the config names: a whole decode step per layout x batch on the
target named by `hardware`, composed from measured parts, and the check of that method.

Each part's time comes from, in order:
1. the device at hand, when it is the target: the part's fraction of roofline measured there;
2. a GPU at hand that is not the target: the fraction of its roofline the same kind of part
   reaches on that GPU (the TP1 whole step at the nearest batch), applied to the target's
   ceilings; the expert GEMMs of an fp8 or nvfp4 deployment take the fraction of roofline of the
   best fp8 kernel of the decode benchmark instead (bf16 efficiency says little about them);
3. otherwise (a CPU at hand, or no such measurement) the target's roofline alone.
Communication: the alpha-beta fitted on the collectives measured here when the device at hand is
the target, else the interconnect model of the target's hardware file. Every row and part says
which: `source` (`composed` or `model`) and `inputs`.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from tilesweep.plan import calibration
from tilesweep.plan.deployment import compose_deployment, derated_timer
from tilesweep.plan.sensitivity import sensitivity, winners
from tilesweep.tables import CHECK_COLUMNS, VERDICT_COLUMNS


def target_spec(settings: dict) -> dict:
    """Return the hardware spec the verdict is for."""
    target = settings["hardware"]
    return settings["catalog"][target] if isinstance(target, str) else target


def at_target(settings: dict, ceilings: dict) -> bool:
    """Return whether the benchmark device is the target the config names."""
    return bool(ceilings) and ceilings.get("catalog_name") == target_spec(settings)["name"]


def _nearest(values: list[int], want: float) -> int:
    """Return the value closest to want (ties: the smaller)."""
    return min(values, key=lambda v: (abs(v - want), v))


def fp8_expert_fraction(decode: pd.DataFrame, tokens_per_expert: float) -> tuple[float, str]:
    """Return (fraction of roofline, label) of the best fp8 decode kernel at the nearest tokens
    per expert (uniform routing), or (NaN, reason)."""
    need = {"status", "dtype", "routing", "frac_roofline", "tokens_per_expert", "time_ms"}
    if decode.empty or not need <= set(decode):
        return float("nan"), "no fp8 decode measurement here"
    ok = decode[
        (decode["status"] == "ok")
        & (decode["dtype"] == "fp8")
        & (decode["routing"] == "uniform")
        & decode["frac_roofline"].notna()
    ]
    if ok.empty:
        return float("nan"), "no fp8 decode measurement here"
    t = _nearest(sorted({int(v) for v in ok["tokens_per_expert"]}), tokens_per_expert)
    at_t = ok[ok["tokens_per_expert"] == t]
    best = at_t.loc[at_t["time_ms"].idxmin()]
    return float(best["frac_roofline"]), f"best fp8 kernel {best['runner']} at t={t}"


def deployment_table(
    settings: dict,
    decode: pd.DataFrame,
    collective: pd.DataFrame,
    steps: pd.DataFrame,
    ceilings: dict,
) -> pd.DataFrame:
    """Return the composed deployment (plan.deployment.COLUMNS) for the target at every batch."""
    model, dep = settings["model"], settings["deployment"]
    device = ceilings.get("device", "none") if ceilings else "none"
    gpu_here = bool(ceilings) and ceilings.get("device_kind") == "cuda"
    here_numbers, here_floors = calibration.measured_interconnect(
        collective, "nccl" if gpu_here else "gloo"
    )
    target = dict(target_spec(settings))
    floors = None
    if at_target(settings, ceilings) and here_numbers:
        fitted = f"fitted on the collectives measured on {device}"
        target["interconnect_model"] = {"default": fitted, "topologies": {fitted: here_numbers}}
        floors = here_floors
    fractions = {}
    if gpu_here and not steps.empty:
        hw_here = calibration.device_hardware(ceilings, device, here_numbers)
        fractions = calibration.part_fractions(steps, model, hw_here)
    frames = []
    for batch in dep["batches"]:
        one = dict(settings, hardware=target, deployment=dict(dep, batches=[batch]))
        frac, notes = {}, []
        if fractions:
            ran = _nearest(sorted(fractions), batch)
            frac = dict(fractions[ran])
            notes.append(
                f"fractions of roofline from the TP1 whole step at batch {ran} on {device}"
            )
        elif not gpu_here:
            notes.append(
                f"the device at hand ({device}) is not a GPU: its fractions of roofline do not "
                "transfer; parts at the target's roofline"
            )
        if dep["weight_dtype"] != "bf16" and frac.get("expert_gemm") is not None:
            per_expert = batch * model["top_k"] / model["routed_experts"]
            f8, label = fp8_expert_fraction(decode, per_expert)
            if f8 == f8:
                frac["expert_gemm"] = f8
                notes.append(f"expert GEMMs ({dep['weight_dtype']}): {label}, x{f8:.2f}")
            else:
                del frac["expert_gemm"]
                notes.append(f"expert GEMMs ({dep['weight_dtype']}): {label}; at roofline")
        timer = derated_timer(frac, device) if frac else None
        kwargs = {"measured_floors": floors}
        if timer is not None:
            kwargs["timer"] = timer
        table = compose_deployment(one, **kwargs)
        if notes:
            table["inputs"] = table["inputs"] + "; " + "; ".join(notes)
        frames.append(table)
    out = pd.concat(frames, ignore_index=True)
    return out.sort_values(["world", "layout", "batch"], kind="stable").reset_index(drop=True)[
        VERDICT_COLUMNS
    ]


def check_table(steps: pd.DataFrame, collective: pd.DataFrame, ceilings: dict, model: dict):
    """Return the check of the method on the device at hand (plan.CHECK_COLUMNS)."""
    if not ceilings or steps.empty:
        return pd.DataFrame(columns=CHECK_COLUMNS)
    backend = "nccl" if ceilings.get("device_kind") == "cuda" else "gloo"
    numbers, floors = calibration.measured_interconnect(collective, backend)
    device = ceilings.get("device", "unknown")
    hw_here = calibration.device_hardware(ceilings, device, numbers)
    return calibration.step_check(steps, model, hw_here, floors, device)


# The brief's layouts of eight GPUs (../shared/BRIEF.md point 1), beside any of the grid's.
BRIEF_LAYOUTS = (
    {"tp": 8, "pp": 1, "ep": 1},
    {"tp": 4, "pp": 2, "ep": 1},
    {"tp": 1, "pp": 1, "ep": 8},
)


def brief_panel(settings: dict, compose: Callable[[dict], pd.DataFrame]) -> dict | None:
    """Return the brief's panel when the deployment is the brief's (GLM-5 on RTX PRO 6000):
    TP8, TP4+PP2, EP8 and the grid's other 8-GPU layouts, composed as the verdict is, the
    winner per batch and the sensitivity band; None otherwise."""
    if settings["model"]["name"] != "glm5" or target_spec(settings)["name"] != "rtx_pro_6000":
        return None
    layouts = [dict(lay) for lay in BRIEF_LAYOUTS]
    for lay in settings["grid"]["layouts"]:
        lay = {k: lay[k] for k in ("tp", "pp", "ep")}
        if lay["tp"] * lay["pp"] * lay["ep"] == 8 and lay not in layouts:
            layouts.append(lay)
    panel = dict(settings, grid=dict(settings["grid"], layouts=layouts))
    rows = compose(panel)
    return {
        "rows": rows,
        "winners": winners(rows, 8),
        "band": sensitivity(panel, compose, world=8),
    }
