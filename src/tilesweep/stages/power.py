"""Stage 4c: power as evidence: loads of known bound under NVML, to set a power reading against."""

import json

import pandas as pd

from tilesweep import provenance
from tilesweep.cells import write_cell_table
from tilesweep.columns import POWER_COLUMNS
from tilesweep.measure import power_load
from tilesweep.stages import logged


def measure_power(cell_json: str, table_path: str, log_path: str | None = None) -> pd.DataFrame:
    """Run every load (or record why it cannot run here); write and return the power table."""
    spec = json.loads(cell_json)
    bench, model = spec["bench"], spec["model"]
    seconds, period = bench["power_seconds"], bench["power_period_s"]
    gpus = len(provenance.gpu_names())
    with logged(log_path) as log:
        if gpus == 0:
            why = "no NVIDIA GPU here: there is no board power to read"
            rows = power_load.unsupported(power_load.LOADS, why)
        else:
            rows = power_load.single_gpu_loads(model, seconds, period)
            rows += power_load.collective_loads(model, seconds, period, gpus)
        for row in rows:
            log.info("%s: %s %s", row["load"], row["status"], row.get("power_frac_median"))
    frame = pd.DataFrame(rows).assign(**provenance.stamp())
    frame.loc[frame["status"] != "ok", "source"] = "not measured"
    frame = frame.reindex(columns=[*POWER_COLUMNS, *(c for c in frame if c not in POWER_COLUMNS)])
    write_cell_table(table_path, frame)
    return frame
