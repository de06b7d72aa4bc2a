"""From measurements on the device at hand to the composition's inputs, and the check of it.

- `part_fractions`: the fraction of its roofline each kind of part reaches in the measured whole
  step of the single-device layout (TP1) at each batch: the composition's roofline time of the
  part's kind over its measured time. Only TP1 is used, so every other measured layout is a
  held-out check.
- `measured_interconnect`: the latency/bandwidth fit of each collective measured on the device at
  hand, in the interconnect model's terms (alpha per step, bus bandwidth), and its latency floor.
- `step_check`: the composed prediction of the same depth-reduced model as was run, beside each
  measured whole step, with the error; `calibrated` uses the TP1 fractions, `roofline` none.
"""

from __future__ import annotations

import math

import pandas as pd

from tilesweep.plan.deployment import compose_step, derated_timer, roofline_timer, stage_parts
from tilesweep.plan.interconnect import _steps_and_wire
from tilesweep.plan.messages import fit_alpha_beta
from tilesweep.tables import CHECK_COLUMNS

# Which composition part kinds each measured whole-step part covers.
MEASURED_KINDS = {
    "attn_proj": ("attention_proj",),
    "attn_out": ("attention_proj",),
    "attn_index": ("indexer_proj", "indexer"),
    "attn_core": ("attention",),
    "dense_mlp": ("dense_gemm",),
    "shared_expert": ("shared_gemm",),
    "router": ("router",),
    "permute": ("expert_gemm",),
    "expert_gemms": ("expert_gemm",),
    "combine_sum": ("expert_gemm",),
    "norms": ("norm",),
    "embedding": ("embedding",),
    "lm_head": ("lm_head",),
}
# Measured communication parts (timed apart in the step; not compute).
COMM_PARTS = (
    "attn_all_reduce",
    "ffn_all_reduce",
    "dispatch",
    "combine",
    "pp_send_recv",
    "lm_head_gather",
)


def device_hardware(ceilings: dict, device: str, interconnect: dict | None) -> dict:
    """Return a hardware dict for the device at hand from its measured ceilings: copy bandwidth,
    matrix rate per dtype (missing dtypes stay missing), and the measured interconnect."""
    peaks = {k: v for k, v in (ceilings.get("matmul_tflops") or {}).items() if v}
    hw = {
        "name": device,
        "memory_bandwidth_gbs": ceilings["copy_gbs"],
        "peak_tflops": peaks,
        "interconnect": "measured",
    }
    if interconnect:
        hw["interconnect_model"] = {"default": "measured", "topologies": {"measured": interconnect}}
    return hw


def measured_interconnect(collective: pd.DataFrame, backend: str) -> tuple[dict, dict]:
    """Return ({collective: {alpha_us, busbw_gbs, group}}, {collective: {n: floor ms}}) fitted on
    the collectives measured here over `backend` (nccl: the GPUs' interconnect; gloo: the CPU's
    processes), the largest measured group of each, in the model's terms."""
    numbers: dict = {}
    floors: dict = {}
    if collective.empty or "time_ms" not in collective or "backend" not in collective:
        return numbers, floors
    ok = collective[
        (collective["status"] == "ok")
        & collective["time_ms"].notna()
        & (collective["backend"] == backend)
    ]
    for (kind, group), part in ok.groupby(["collective", "group"]):
        n = int(group)
        by_size = part.groupby("bytes")["time_ms"].median()
        floors.setdefault(kind, {})[n] = float(by_size.min())
        if n < 2 or len(by_size) < 2 or n < numbers.get(kind, {}).get("group", 0):
            continue
        alpha_ms, beta = fit_alpha_beta(list(by_size.index), list(by_size.values))
        steps, wire = _steps_and_wire(kind, n)
        numbers[kind] = {
            "alpha_us": alpha_ms * 1e3 / steps,
            "busbw_gbs": wire * beta / 1e6 if math.isfinite(beta) else math.inf,
            "group": n,
        }
    return numbers, floors


def _step_model(row: dict, model: dict) -> tuple[dict, dict, dict]:
    """Return (model as run, deployment of the run, layer overrides) for a measured step row."""
    as_run = dict(model)
    as_run["routed_experts"] = int(row["routed_experts_run"])
    as_run["vocab"] = int(row["vocab_run"])
    dep = {
        "weight_dtype": "bf16",
        "kv_dtype": "bf16",
        "quantized": [],
        "context_len": int(row["context_len"]),
        # The measured parts carry their launch gaps: none is added on top.
        "kernel_gap_us": 0.0,
    }
    per_stage = {"dense": int(row["dense_layers_run"]), "moe": int(row["moe_layers_run"])}
    return as_run, dep, {"per_stage": per_stage}


def part_fractions(steps: pd.DataFrame, model: dict, hw: dict) -> dict[int, dict[str, float]]:
    """Return {batch: {part kind: fraction of roofline}} from the TP1 whole steps."""
    out: dict[int, dict[str, float]] = {}
    if steps.empty or "layout" not in steps:
        return out
    ref = steps[(steps["layout"] == "tp1-pp1-ep1") & (steps["status"] == "ok")]
    for row in ref.to_dict("records"):
        as_run, dep, over = _step_model(row, model)
        stage = over["per_stage"] | {"sliding": 0}
        roof: dict[str, float] = {}
        tp1 = {"tp": 1, "pp": 1, "ep": 1}
        for part in stage_parts(as_run, dep, tp1, stage, row["batch"], True, True):
            t = roofline_timer(part, hw)
            roof[part["kind"]] = roof.get(part["kind"], 0.0) + part["count"] * max(
                t["roof_memory_ms"], t["roof_math_ms"]
            )
        measured: dict[tuple, float] = {}
        for name, kinds in MEASURED_KINDS.items():
            ms = row.get(f"part_{name}_ms")
            if ms is None or math.isnan(ms):
                continue
            measured[kinds] = measured.get(kinds, 0.0) + ms
        fractions = {}
        for kinds, ms in measured.items():
            roof_ms = sum(roof.get(k, 0.0) for k in kinds)
            if ms > 0 and roof_ms > 0:
                fractions.update(dict.fromkeys(kinds, roof_ms / ms))
        out[int(row["batch"])] = fractions
    return out


def step_check(
    steps: pd.DataFrame, model: dict, hw: dict, floors: dict, device: str
) -> pd.DataFrame:
    """Return one row per measured whole step: measured, roofline-only and composed (TP1
    fractions, measured collectives) times for the same reduced model, with the errors."""
    if steps.empty or "layout" not in steps:
        return pd.DataFrame(columns=CHECK_COLUMNS)
    fractions = part_fractions(steps, model, hw)
    rows = []
    for row in steps[steps["status"] == "ok"].to_dict("records"):
        as_run, dep, over = _step_model(row, model)
        layout = {"tp": int(row["tp"]), "pp": int(row["pp"]), "ep": int(row["ep"])}
        batch = int(row["batch"])
        raw = compose_step(as_run, dep, hw, layout, batch, roofline_timer, floors, over)
        frac = fractions.get(batch)
        gaps = list(raw["gaps"])
        composed = math.nan
        if frac:
            step = compose_step(
                as_run, dep, hw, layout, batch, derated_timer(frac, device), floors, over
            )
            composed, gaps = step["tpot_ms"], gaps + step["gaps"]
        else:
            gaps.append(f"no TP1 whole step at batch {batch} to calibrate on")
        measured = row["step_ms"]
        held_out = row["layout"] != "tp1-pp1-ep1"
        rows.append(
            {
                "model": model["name"],
                "layout": row["layout"],
                **layout,
                "batch": batch,
                "context_len": row["context_len"],
                "measured_ms": measured,
                "measured_p10_ms": row["step_p10_ms"],
                "measured_p90_ms": row["step_p90_ms"],
                "roofline_ms": raw["tpot_ms"],
                "roofline_error_pct": 100 * (raw["tpot_ms"] / measured - 1),
                "composed_ms": composed,
                "composed_error_pct": 100 * (composed / measured - 1),
                "calibrated_on": f"tp1-pp1-ep1 at batch {batch}" if frac else "",
                "held_out": held_out,
                "measured_label": row["measured_label"],
                "composed_label": "composed (parts' fractions of roofline from TP1; "
                "collectives from the measured fit)",
                "device": device,
                "gaps": "; ".join(dict.fromkeys(gaps)),
            }
        )
    return pd.DataFrame(rows, columns=CHECK_COLUMNS)
