"""Stage 4c: power as evidence. Sustain loads of known bound on the device at hand under NVML
sampling, so a power reading (the brief's 235 W of 600 W, 39% of the limit) can be set against
what each bound draws, instead of read as a verdict on its own."""

from __future__ import annotations

import json

import pandas as pd

from tilesweep.io import write_table
from tilesweep.stages import logged
from tilesweep.tables import POWER_COLUMNS

# The brief's reading: about 235 W of a 600 W limit during decode on the RTX PRO 6000.
BRIEF_POWER_FRAC = 235 / 600


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
    write_table(table_path, frame)
    return frame


def brief_consistency(power: pd.DataFrame, frac: float = BRIEF_POWER_FRAC) -> pd.DataFrame:
    """Return, per measured load, whether the brief's fraction of the power limit lies inside its
    p10..p90 band of measured fractions, and how far outside it lies where it does not."""
    if power.empty or "status" not in power:
        return pd.DataFrame(columns=["load", "expected_bound", "band", "brief", "consistent"])
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
            verdict = f"not consistent: the brief's reading is {gap:.0%} of the limit {side} it"
        rows.append(
            {
                "load": rec["load"],
                "expected_bound": rec["expected_bound"],
                "band": f"{low:.0%}..{high:.0%}" if verdict != "no samples" else "",
                "brief": f"{frac:.0%}",
                "consistent": verdict,
            }
        )
    return pd.DataFrame(rows)
