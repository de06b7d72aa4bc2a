"""What bounds a decode step under each layout: memory-bound compute, math-bound compute or
communication, with the numbers that decide it.

A decode step here is one pipeline stage's share of the model for one batch: its MoE layers'
expert GEMMs plus the collectives the layout needs. With pp micro-batches in flight a stage's time
is the step time of the pipeline, so TP4+PP2 and TP8 compare on equal terms.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tilesweep.bench.collective import decode_batch, step_messages

SHARES = ("compute_memory_ms", "compute_math_ms", "comm_ms")
LABELS = {
    "compute_memory_ms": "memory-bound",
    "compute_math_ms": "math-bound",
    "comm_ms": "communication-bound",
}


def best_decode(decode: pd.DataFrame) -> pd.DataFrame:
    """Return the fastest correct runner per op and tokens-per-expert (uniform routing)."""
    if decode.empty or "time_ms" not in decode:
        return pd.DataFrame()
    ok = decode[(decode["status"] == "ok") & (decode["routing"] == "uniform")]
    if ok.empty:
        return pd.DataFrame()
    idx = ok.groupby(["op", "tokens_per_expert"])["time_ms"].idxmin()
    return ok.loc[idx].reset_index(drop=True)


def fit_latency_bandwidth(coll: pd.DataFrame) -> dict[tuple[str, int], tuple[float, float]]:
    """Return, per (collective, group), a least-squares fit time_ms = alpha + bytes / beta."""
    fits = {}
    if coll.empty or "time_ms" not in coll:
        return fits
    ok = coll[coll["status"] == "ok"]
    for (kind, group), part in ok.groupby(["collective", "group"]):
        x, y = part["bytes"].to_numpy(float), part["time_ms"].to_numpy(float)
        if len(np.unique(x)) >= 2:
            slope, alpha = np.polyfit(x, y, 1)
            slope = max(slope, 1e-15)
            fits[(kind, int(group))] = (max(alpha, 0.0), 1.0 / slope)
        elif len(x):
            fits[(kind, int(group))] = (float(y.mean()), math.inf)
    return fits


def _comm_time(msg: dict, t: int, coll: pd.DataFrame, fits: dict) -> tuple[float, str]:
    """Return one message's time in ms and where it came from (measured or model)."""
    if not coll.empty and "time_ms" in coll:
        hit = coll[
            (coll["status"] == "ok")
            & (coll["collective"] == msg["collective"])
            & (coll["layout_group"] == msg["group"])
            & (coll["group"] == msg["group"])
            & (coll["bytes"] == msg["bytes"])
        ]
        if not hit.empty:
            return float(hit["time_ms"].median()), "measured"
    candidates = [(g, f) for (k, g), f in fits.items() if k == msg["collective"]]
    if not candidates:
        return math.nan, "missing"
    group, (alpha, beta) = max(candidates)  # the largest group measured
    scale = 1.0
    if group != msg["group"]:
        from tilesweep.bench.collective import bus_factor

        scale = bus_factor(msg["collective"], msg["group"]) / bus_factor(msg["collective"], group)
    return alpha + scale * msg["bytes"] / beta, "model"


def verdict_table(
    settings: dict,
    decode: pd.DataFrame,
    collective: pd.DataFrame,
    steps: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Return one row per layout and tokens-per-expert: the step's split and its verdict.

    `steps` holds measured decode steps per layout (the layout benchmark); not used yet.
    """
    model = settings["model"]
    best = best_decode(decode)
    fits = fit_latency_bandwidth(collective)
    rows = []
    for layout in settings["grid"]["layouts"]:
        tp, pp, ep = layout["tp"], layout["pp"], layout["ep"]
        name = f"tp{tp}-pp{pp}-ep{ep}"
        coll = collective[collective["layout"] == name] if "layout" in collective else collective
        layers = math.ceil(model["moe_layers"] / pp)
        for t in settings["grid"]["tokens_per_expert"]:
            row = {
                "model": model["name"],
                "layout": name,
                "tp": tp,
                "pp": pp,
                "ep": ep,
                "world": tp * pp * ep,
                "tokens_per_expert": t,
                "batch_tokens": decode_batch(t, model),
                "layers_per_stage": layers,
            }
            shares = {"compute_memory_ms": 0.0, "compute_math_ms": 0.0}
            sources, device = [], None
            part = best[best["tokens_per_expert"] == t] if not best.empty else best
            if part.empty:
                row.update(compute_memory_ms=math.nan, compute_math_ms=math.nan)
                sources.append("no decode measurement")
            for rec in part.to_dict("records"):
                experts_here = model["routed_experts"] / ep
                # Memory-bound GEMMs scale with the weight bytes each device streams.
                per_layer = rec["time_ms"] * experts_here / rec["experts"] / tp
                key = "compute_memory_ms" if rec["bound"] == "memory" else "compute_math_ms"
                shares[key] += per_layer * layers
                device = rec.get("device")
                sources.append(f"decode {rec['runner']} {rec['op']} x{rec['experts']} experts")
            comm, comm_src = 0.0, []
            for msg in step_messages(layout, model, t):
                ms, src = _comm_time(msg, t, coll, fits)
                comm += ms * msg["per_step"]
                comm_src.append(f"{msg['collective']}({msg['group']}) {src}")
            row.update(shares)
            row["comm_ms"] = comm
            values = {k: row[k] for k in SHARES}
            valid = {k: v for k, v in values.items() if not math.isnan(v)}
            row["step_ms"] = sum(valid.values()) if valid else math.nan
            ranked = sorted(valid.items(), key=lambda kv: kv[1], reverse=True)
            if ranked and ranked[0][1] > 0:
                row["verdict"] = LABELS[ranked[0][0]]
                second = ranked[1] if len(ranked) > 1 else (None, 0.0)
                row["runner_up"] = LABELS.get(second[0], "none")
                row["margin"] = ranked[0][1] / second[1] if second[1] > 0 else math.inf
                row["share"] = ranked[0][1] / row["step_ms"]
            else:
                row.update(verdict="unknown", runner_up="none", margin=math.nan, share=math.nan)
            # Compute is always scaled from a single-device measurement to the layout's share.
            row["source"] = "model"
            row["device"] = device
            row["inputs"] = "; ".join(sources + comm_src)
            rows.append(row)
    return pd.DataFrame(rows)
