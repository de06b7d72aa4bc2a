"""What bounds a decode step under each layout: memory-bound compute, math-bound compute or
communication, with the numbers that decide it.

A decode step is one pipeline stage's share of the model for one batch: its MoE layers plus the
collectives the layout needs. With pp micro-batches in flight a stage's time is the step time of
the pipeline, so TP4+PP2 and TP8 compare on equal terms.

Two kinds of rows, never mixed:
- `measured`: the layout benchmark ran the step on this machine's devices (results/layout), scaled
  to the stage's layers (and, where a rank ran fewer experts than it holds, to its experts);
- `model`: projected from measured pieces: expert and shared-expert GEMMs from the decode
  benchmark at the per-device shapes, router and element-wise parts from the roofline floor of
  the measured ceilings, collectives from the measured time at that size or the latency/bandwidth
  fit. Every model row lists the measurements it came from in `inputs`.
Where a layout has both, both rows carry the projection error, so a reader knows how far to
trust the model rows of the layouts this machine cannot run.

Calibration: where the single-device layout (tp1-pp1-ep1) was measured at a batch, the ratio of
its measured to its projected compute time (step minus communication) is that batch's
`calibration`. Every other layout's model row gets `calibrated_step_ms`: its projected compute
times that ratio, plus its projected communication. The reference's own rows are not calibrated;
on the other measured layouts `calibrated_error_pct` is a held-out check of the calibration.
The split and the verdict stay those of the uncalibrated model.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tilesweep.plan import roofline
from tilesweep.plan.expert_shapes import expert_ops
from tilesweep.plan.messages import bus_factor, decode_batch, fit_alpha_beta, local_tokens
from tilesweep.plan.sharding import layers_per_stage, step_capable, step_parts
from tilesweep.tables import (
    CALIBRATION_COLUMNS,
    SHARE_COLUMNS,
    VERDICT_COLUMNS,
    Status,
    fastest_runner,
)

SHARES = tuple(SHARE_COLUMNS)
LABELS = {
    "compute_memory_ms": "memory-bound",
    "compute_math_ms": "math-bound",
    "comm_ms": "communication-bound",
}
UNKNOWN = "unknown"  # the verdict where a share is missing or part of the compute has no bound
_GEMMS = {"expert_gate_up": "gate_up", "expert_down": "down"}
_SHARED = {"shared_gate_up": "gate_up", "shared_down": "down"}


def fit_latency_bandwidth(coll: pd.DataFrame) -> dict[tuple[str, int], tuple[float, float]]:
    """Return, per (collective, group), alpha ms and beta bytes/ms of time = alpha + bytes / beta,
    fitted over the median time of every measured size."""
    fits: dict[tuple[str, int], tuple[float, float]] = {}
    if coll.empty or "time_ms" not in coll:
        return fits
    ok = coll[(coll["status"] == Status.OK) & coll["time_ms"].notna()]
    for (kind, group), part in ok.groupby(["collective", "group"]):
        by_size = part.groupby("bytes")["time_ms"].median()
        fits[(kind, int(group))] = fit_alpha_beta(list(by_size.index), list(by_size.values))
    return fits


def decide(values: dict[str, float]) -> dict:
    """Return the verdict of a split: the largest share, the runner-up, their ratio, its share."""
    valid = {k: v for k, v in values.items() if v is not None and not math.isnan(v)}
    total = sum(valid.values())
    ranked = sorted(valid.items(), key=lambda kv: kv[1], reverse=True)
    if not ranked or ranked[0][1] <= 0 or len(valid) < len(values):
        return {"verdict": UNKNOWN, "runner_up": "none", "margin": math.nan, "share": math.nan}
    second = ranked[1] if len(ranked) > 1 else (None, 0.0)
    return {
        "verdict": LABELS[ranked[0][0]],
        "runner_up": LABELS.get(second[0], "none"),
        "margin": ranked[0][1] / second[1] if second[1] > 0 else math.inf,
        "share": ranked[0][1] / total,
    }


def _step_rows(decode: pd.DataFrame, choice: str) -> pd.DataFrame:
    """Return the decode rows a step could use: correct, uniform, bf16, a step-capable runner."""
    if decode.empty or "time_ms" not in decode:
        return pd.DataFrame()
    ok = decode[
        (decode["status"] == Status.OK)
        & (decode["routing"] == "uniform")
        & (decode["dtype"] == "bf16")
        & decode["time_ms"].notna()
        & decode["runner"].map(step_capable)
    ]
    if choice != "best":
        ok = ok[ok["runner"] == choice]
    return ok.assign(per_expert_ms=ok["time_ms"] / ok["experts"]).reset_index(drop=True)


def _shape_rows(rows: pd.DataFrame, model: dict, op: str, tp: int) -> tuple[pd.DataFrame, float]:
    """Return an op's rows at the per-device shape, else at the full shape with factor 1/tp."""
    if rows.empty:
        return rows, 1.0
    n, k = expert_ops(model, tp)[op]
    exact = rows[(rows["op"] == op) & (rows["n"] == n) & (rows["k"] == k)]
    if not exact.empty or tp == 1:
        return exact, 1.0
    n, k = expert_ops(model, 1)[op]
    return rows[(rows["op"] == op) & (rows["n"] == n) & (rows["k"] == k)], 1.0 / tp


def _curve_ms(part: pd.DataFrame, tokens: float) -> float:
    """Return per-expert ms at `tokens` rows: interpolated between measured tokens-per-expert,
    constant below the smallest, proportional above the largest."""
    best = part.groupby("tokens_per_expert")["per_expert_ms"].min().sort_index()
    ts, ms = best.index.to_numpy(float), best.to_numpy(float)
    if tokens >= ts[-1]:
        return float(ms[-1] * tokens / ts[-1])
    return float(np.interp(tokens, ts, ms))


def _ceilings(rows: pd.DataFrame) -> tuple[float, float] | None:
    """Return (matmul TFLOP/s, copy GB/s) measured on the decode device, if the rows carry them."""
    if rows.empty or "ceiling_matmul_tflops" not in rows or "ceiling_copy_gbs" not in rows:
        return None
    peak, bw = rows["ceiling_matmul_tflops"].median(), rows["ceiling_copy_gbs"].median()
    return (peak, bw) if peak == peak and bw == bw else None


def _comm_ms(part: dict, coll: pd.DataFrame, fits: dict) -> tuple[float, str]:
    """Return one collective call's ms and where it came from."""
    kind, n, nbytes = part["collective"], part["group"], part["bytes"]
    if not coll.empty and "time_ms" in coll:
        hit = coll[
            (coll["status"] == Status.OK)
            & (coll["collective"] == kind)
            & (coll["group"] == n)
            & (coll["bytes"] == nbytes)
        ]
        if not hit.empty:
            return float(hit["time_ms"].median()), f"{kind}({n}) {nbytes} B measured"
    groups = sorted(g for k, g in fits if k == kind)
    if not groups:
        return math.nan, f"{kind}({n}) not measured"
    below = [g for g in groups if g <= n]
    g = below[-1] if below else groups[0]
    alpha, beta = fits[(kind, g)]
    scale = bus_factor(kind, n) / bus_factor(kind, g) if g != n else 1.0
    note = f"{kind}({n}) {nbytes} B from the fit over {kind}({g})"
    if g != n:
        note += f", bandwidth term x{scale:.3g} (bus factor), latency unscaled"
    return alpha + scale * nbytes / beta, note


def project(
    layout: dict, model: dict, t: int, rows: pd.DataFrame, coll: pd.DataFrame, fits: dict
) -> dict:
    """Return one model row's split (ms per step on one stage) and the inputs it came from."""
    tp = layout["tp"]
    layers = layers_per_stage(layout, model)
    experts_here = model["routed_experts"] // layout["ep"]
    tokens = local_tokens(layout, model, t)
    ceilings = _ceilings(rows)
    shares = dict.fromkeys((*SHARES, "compute_unknown_ms"), 0.0)
    inputs, missing, powers, unbound = [], [], [], []
    for name, part in step_parts(layout, model, t, experts_here).items():
        times = layers if part["per"] == "layer" else 1
        if part["kind"] == "comm":
            ms, note = _comm_ms(part, coll, fits)
            shares["comm_ms"] += ms * times
            inputs.append(note)
            continue
        op = _GEMMS.get(name) or _SHARED.get(name)
        side = roofline.bound(part["flops"], part["bytes"], *ceilings) if ceilings else None
        if op is None:  # router and element-wise parts: the roofline floor
            if ceilings is None:
                missing.append(name)
                continue
            ms = roofline.floor_ms(part["flops"], part["bytes"], *ceilings)["floor_ms"]
        else:
            shape, factor = _shape_rows(rows, model, op, tp)
            at_t = shape[shape["tokens_per_expert"] == t] if not shape.empty else shape
            if shape.empty or (name in _GEMMS and at_t.empty):
                missing.append(name)
                continue
            if name in _GEMMS:
                rec = fastest_runner(at_t, time="per_expert_ms").iloc[0]
                ms = rec["per_expert_ms"] * factor * experts_here
                side = rec["bound"] if isinstance(rec.get("bound"), str) else side
                used = f"{rec['runner']} t={t}"
                powers.append(_number(rec.get("power_frac")))
            else:
                ms = _curve_ms(shape, tokens) * factor
                used = f"curve at {tokens} tokens"
            scaled = f" x1/{tp} from the full shape" if factor != 1 else ""
            inputs.append(f"{name}: decode {op} {used}{scaled}")
        if side is None:
            unbound.append(name)
        shares[f"compute_{side or 'unknown'}_ms"] += ms * times
    if ceilings:
        inputs.append(f"router and element-wise parts: roofline floor at {ceilings[1]:.4g} GB/s")
    for name in missing:
        shares["compute_memory_ms"] = math.nan
        inputs.append(f"{name}: no decode measurement")
    for name in unbound:
        inputs.append(f"{name}: bound unknown (no ceilings and no bound column)")
    power = [p for p in powers if not math.isnan(p)]
    return {
        **shares,
        "other_ms": 0.0,
        "power_frac": float(np.mean(power)) if power else math.nan,
        "power_source": "decode benchmark" if power else "",
        "device": rows["device"].iloc[0] if not rows.empty and "device" in rows else None,
        "inputs": "; ".join(dict.fromkeys(inputs)),
    }


def _number(value: object) -> float:
    """Return value as a float, NaN when it is missing or not a number."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _measured(steps: pd.DataFrame | None, names: list[str]) -> pd.DataFrame:
    """Return the layout benchmark's correct rows for layouts of the grid."""
    if steps is None or steps.empty or "step_ms" not in steps:
        return pd.DataFrame()
    ok = steps[(steps["status"] == Status.OK) & steps["layout"].isin(names)]
    return ok.copy()


def _measured_row(rec: dict) -> dict:
    """Return one verdict row from a layout-benchmark row."""
    crowded = _number(rec.get("ranks_per_core"))
    crowd = f"; {crowded:.3g} ranks per core (CPU oversubscribed)" if crowded > 1 else ""
    inputs = (
        f"layout step on {int(rec['world'])} {rec.get('backend')} ranks: {rec.get('scaling')}; "
        f"expert GEMMs {rec.get('runner_gate_up')} / {rec.get('runner_down')}; "
        f"as run {rec.get('raw_step_ms'):.4g} ms{crowd}"
    )
    power = _number(rec.get("power_frac"))
    has_power = not math.isnan(power)
    return {
        **{k: rec.get(k) for k in SHARES},
        "compute_unknown_ms": 0.0,
        "other_ms": rec.get("other_ms", 0.0),
        "step_ms": rec["step_ms"],
        "power_frac": power if has_power else math.nan,
        "power_source": "layout step" if has_power else "",
        "device": rec.get("device"),
        "inputs": inputs,
    }


def verdict_table(
    settings: dict,
    decode: pd.DataFrame,
    collective: pd.DataFrame,
    steps: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Return one row per layout, tokens-per-expert and source (measured, model): the step's
    split, its verdict, and the projection error where a layout has both."""
    model = settings["model"]
    rows_ok = _step_rows(decode, settings["bench"].get("layout_runner", "best"))
    fits = fit_latency_bandwidth(collective)
    layouts = {f"tp{x['tp']}-pp{x['pp']}-ep{x['ep']}": x for x in settings["grid"]["layouts"]}
    measured = _measured(steps, list(layouts))
    out = []
    for rec in measured.to_dict("records"):
        out.append(
            {
                "layout": rec["layout"],
                "tokens_per_expert": int(rec["tokens_per_expert"]),
                "source": "measured",
                **_measured_row(rec),
            }
        )
    for name, layout in layouts.items():
        coll = collective[collective["layout"] == name] if "layout" in collective else collective
        for t in settings["grid"]["tokens_per_expert"]:
            split = project(layout, model, t, rows_ok, coll, fits)
            split["step_ms"] = sum(split[k] for k in (*SHARES, "compute_unknown_ms"))
            out.append({"layout": name, "tokens_per_expert": t, "source": "model", **split})
    frame = pd.DataFrame(out)
    for col, key in (("tp", "tp"), ("pp", "pp"), ("ep", "ep")):
        frame[col] = frame["layout"].map(lambda n, key=key: layouts[n][key])
    frame["world"] = frame["tp"] * frame["pp"] * frame["ep"]
    frame["model"] = model["name"]
    frame["batch_tokens"] = [decode_batch(int(t), model) for t in frame["tokens_per_expert"]]
    frame["layers_per_stage"] = [layers_per_stage(layouts[n], model) for n in frame["layout"]]
    decided = pd.DataFrame([_decide_row(r) for r in frame.to_dict("records")])
    frame = pd.concat([frame, decided], axis=1)
    frame = calibrate(_projection_error(frame))
    order = {name: i for i, name in enumerate(layouts)}
    frame["_s"] = (frame["source"] != "measured").astype(int)
    frame["_l"] = frame["layout"].map(order)
    frame = frame.sort_values(["_s", "_l", "tokens_per_expert"]).drop(columns=["_s", "_l"])
    extra = [c for c in frame.columns if c not in VERDICT_COLUMNS]
    return frame[[c for c in VERDICT_COLUMNS if c in frame] + extra].reset_index(drop=True)


def _decide_row(rec: dict) -> dict:
    """Return a row's verdict: `decide` on its shares, unknown where compute has no bound."""
    if _number(rec.get("compute_unknown_ms")) > 0:
        return {"verdict": UNKNOWN, "runner_up": "none", "margin": math.nan, "share": math.nan}
    return decide({k: rec[k] for k in SHARES})


def _projection_error(frame: pd.DataFrame) -> pd.DataFrame:
    """Return the frame with measured and projected step times side by side where both exist."""
    key = ["layout", "tokens_per_expert"]
    meas = frame[frame["source"] == "measured"].set_index(key)["step_ms"]
    proj = frame[frame["source"] == "model"].set_index(key)["step_ms"]
    idx = list(zip(frame["layout"], frame["tokens_per_expert"], strict=True))
    frame["measured_step_ms"] = [meas.get(i, math.nan) for i in idx]
    frame["projected_step_ms"] = [proj.get(i, math.nan) for i in idx]
    frame["projection_error_pct"] = (
        100 * (frame["projected_step_ms"] - frame["measured_step_ms"]) / frame["measured_step_ms"]
    )
    return frame


REFERENCE_LAYOUT = "tp1-pp1-ep1"


def calibrate(frame: pd.DataFrame) -> pd.DataFrame:
    """Return the frame with each batch's calibration from the measured single-device layout,
    the calibrated projection of the other layouts, and its error where they were measured."""
    frame = frame.drop(columns=CALIBRATION_COLUMNS, errors="ignore").copy()
    comm = frame["comm_ms"]  # unmeasured communication leaves the calibrated step a gap
    compute = (frame["step_ms"] - comm).set_axis(frame["tokens_per_expert"])
    ref = (frame["layout"] == REFERENCE_LAYOUT).to_numpy()
    measured = compute[ref & (frame["source"] == "measured").to_numpy()]
    projected = compute[ref & (frame["source"] == "model").to_numpy()]
    ratio = (measured / projected[projected > 0]).dropna()
    factor = frame["tokens_per_expert"].map(ratio).astype(float)
    model = (frame["source"] == "model") & ~ref
    calibrated = ((frame["step_ms"] - comm) * factor + comm).where(model)
    frame["calibration"] = factor.where(model)
    # Both rows of a layout and batch carry its calibrated projection, as with the raw one.
    frame["calibrated_step_ms"] = calibrated.groupby(
        [frame["layout"], frame["tokens_per_expert"]]
    ).transform("max")
    frame["calibrated_error_pct"] = (
        100 * (frame["calibrated_step_ms"] - frame["measured_step_ms"]) / frame["measured_step_ms"]
    )
    return frame
