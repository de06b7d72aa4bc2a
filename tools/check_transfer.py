"""Check a shipped launch-aware fit on whole steps it never saw (another model, another run):
compose each measured step of STEPS_CSV with FIT_JSON on the device of CEILINGS_JSON and write the
check table (every row held out). CEILINGS_JSON given as `datasheet` composes each step for the
GPU that ran it from its conf/hardware datasheet instead, the fit's efficiencies put on both
datasheets, as a verdict for a GPU never measured does (step_engine_check.compose_for).
Usage: python tools/check_transfer.py FIT_JSON STEPS_CSV CEILINGS_JSON|datasheet OUT_CSV [--force]
       [overrides]
  e.g. python tools/check_transfer.py docs/examples/h200/fit.json \
       docs/examples/h200/layout_deepseek_v3.csv docs/examples/h200/ceilings.json \
       docs/examples/h200/check_deepseek_v3.csv --force model=deepseek_v3 \
       deployment.attention_table=docs/examples/h200/mla_tune/mla_tune.csv
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from tilesweep.config import compose_settings
from tilesweep.errors import ConfigError, tool_main
from tilesweep.io import check_out_file, read_json, write_table
from tilesweep.measure.step.engine_check import compose_for
from tilesweep.plan import attention_table, calibration


def main() -> int:
    """Write the held-out check of a fit; return the exit status."""
    args = [a for a in sys.argv[1:] if a != "--force"]
    if len(args) < 4:
        raise ConfigError(f"usage: {__doc__.split('Usage: ')[1].splitlines()[0]}")
    fit_path, steps_path, ceilings_path, out = args[:4]
    check_out_file(out, "--force" in sys.argv[1:], "OUT_CSV")
    named = [("FIT_JSON", fit_path), ("STEPS_CSV", steps_path)]
    for name, path in named + (
        [] if ceilings_path == "datasheet" else [("CEILINGS_JSON", ceilings_path)]
    ):
        if not Path(path).is_file():  # a pipe would block the read
            what = (
                "not a plain file (a folder, a pipe or a device)"
                if Path(path).exists()
                else "no such file"
            )
            raise ConfigError(f"{name}={path}: {what}")
    settings = compose_settings(args[4:])
    model = settings.model
    fit = json.loads(Path(fit_path).read_text())
    if not isinstance(fit, dict) or "per_kernel_us" not in fit or "groups" not in fit:
        raise ConfigError(f"FIT_JSON={fit_path}: not a launch-aware fit (no per_kernel_us, groups)")
    steps = pd.read_csv(steps_path)
    need = {"layout", "batch", "status"}
    if not need <= set(steps.columns) or "tp" not in steps.columns:
        raise ConfigError(f"STEPS_CSV={steps_path}: not a whole-step table (layout.csv)")
    table = attention_table.load(settings.deployment.attention_table)
    if ceilings_path == "datasheet":
        check = compose_for(steps, fit, model, settings.catalog, table)
    else:
        ceilings = read_json(ceilings_path)
        if not isinstance(ceilings, dict) or "copy_gbs" not in ceilings:
            raise ConfigError(f"CEILINGS_JSON={ceilings_path}: not a device's ceilings.json")
        device = ceilings.get("device", "unknown")
        hw = calibration.device_hardware(ceilings, device, None)
        here = calibration.Here(model, hw, device, attention=table)
        check = calibration.step_check(steps, here, fit=fit)
    write_table(out, check)
    cols = ["layout", "batch", "measured_ms", "composed_ms", "composed_error_pct", "held_out"]
    print(check[cols].to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(tool_main("check_transfer", main))
