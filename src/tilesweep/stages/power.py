"""Stage 4c: power as evidence. Sustain loads of known bound on the device at hand under NVML
sampling, so a power reading taken as evidence (the question's, conf/question: the brief's 235 W of
600 W) can be set against what each bound draws, instead of read as a verdict on its own."""

from __future__ import annotations

import json

import pandas as pd

from tilesweep.cells import write_cell_table
from tilesweep.columns import POWER_COLUMNS, consistency_columns
from tilesweep.stages import logged


def measure_power(cell_json: str, table_path: str, log_path: str | None = None) -> pd.DataFrame:
    """Run every load (or record why it cannot run here); write and return the power table."""
    from tilesweep.measure import power_load
    from tilesweep.provenance import gpu_names, stamp

    spec = json.loads(cell_json)
    bench, model = spec["bench"], spec["model"]
    seconds, period = bench["power_seconds"], bench["power_period_s"]
    gpus = len(gpu_names())
    with logged(log_path) as log:
        if gpus == 0:
            rows = [
                {
                    "load": name,
                    "expected_bound": bound,
                    "status": "unsupported",
                    "reason": "no NVIDIA GPU here: there is no board power to read",
                }
                for name, bound in power_load.LOADS.items()
            ]
        else:
            rows = power_load.single_gpu_loads(model, seconds, period)
            rows += power_load.collective_loads(model, seconds, period, gpus)
        for row in rows:
            log.info("%s: %s %s", row["load"], row["status"], row.get("power_frac_median"))
    frame = pd.DataFrame(rows).assign(**stamp())
    frame.loc[frame["status"] != "ok", "source"] = "not measured"
    frame = frame.reindex(columns=[*POWER_COLUMNS, *(c for c in frame if c not in POWER_COLUMNS)])
    write_cell_table(table_path, frame)
    return frame


def reading_consistency(power: pd.DataFrame, frac: float, reader: str) -> pd.DataFrame:
    """Return, per measured load, whether a reading of `frac` of the power limit (the reader's,
    e.g. the brief's) lies inside its p10..p90 band of measured fractions, and how far outside it
    lies where it does not; the reading's column is named after the reader."""
    columns = consistency_columns(reader)
    if power.empty or "status" not in power:
        return pd.DataFrame(columns=columns)
    rows = []
    for rec in power[power["status"] == "ok"].to_dict("records"):
        low, high = rec["power_frac_p10"], rec["power_frac_p90"]
        if low is None or high is None or low != low or high != high:
            verdict = "no samples"
        elif low <= frac <= high:
            verdict = "consistent"
        else:
            side = "below" if frac < low else "above"
            gap = (low - frac) if frac < low else (frac - high)
            verdict = f"not consistent: the {reader}'s reading is {gap:.0%} of the limit {side} it"
        band = f"{low:.0%}..{high:.0%}" if verdict != "no samples" else ""
        values = [rec["load"], rec["expected_bound"], band, f"{frac:.0%}", verdict]
        rows.append(dict(zip(columns, values, strict=True)))
    return pd.DataFrame(rows)
