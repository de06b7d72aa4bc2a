"""Check a shipped launch-aware fit on whole steps it never saw (another model, another run):
compose each measured step of STEPS_CSV with FIT_JSON on the device of CEILINGS_JSON and write the
check table (every row held out). CEILINGS_JSON given as `datasheet` composes each step for the
GPU that ran it from its conf/hardware datasheet instead, the fit's efficiencies put on both
datasheets, as a verdict for a GPU never measured does (step_engine_check.compose_for).
Usage: python tools/check_transfer.py FIT_JSON STEPS_CSV CEILINGS_JSON|datasheet OUT_CSV [overrides]
  e.g. python tools/check_transfer.py docs/examples/h200/fit.json \
       docs/examples/h200/layout_deepseek_v3.csv docs/examples/h200/ceilings.json \
       docs/examples/h200/check_deepseek_v3.csv model=deepseek_v3 \
       deployment.attention_table=docs/examples/h200/mla_tune/mla_tune.csv
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from tilesweep.config import compose_settings
from tilesweep.io import read_json, write_table
from tilesweep.measure.step_engine_check import compose_for
from tilesweep.plan import attention_table, calibration


def main() -> int:
    """Write the held-out check of a fit; return the exit status."""
    fit_path, steps_path, ceilings_path, out = sys.argv[1:5]
    settings = compose_settings(sys.argv[5:])
    model = settings.model.model_dump(exclude_unset=True)
    fit = json.loads(Path(fit_path).read_text())
    steps = pd.read_csv(steps_path)
    table = attention_table.load(settings.deployment.attention_table)
    if ceilings_path == "datasheet":
        check = compose_for(steps, fit, model, settings.catalog, table)
    else:
        ceilings = read_json(ceilings_path)
        device = ceilings.get("device", "unknown")
        hw = calibration.device_hardware(ceilings, device, None)
        check = calibration.step_check(steps, model, hw, {}, device, fit=fit, attention=table)
    write_table(out, check)
    cols = ["layout", "batch", "measured_ms", "composed_ms", "composed_error_pct", "held_out"]
    print(check[cols].to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
