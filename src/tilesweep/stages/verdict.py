"""Stage 5b: the verdict, composed from the measured tables, its check against the measured
whole steps, the engines' own figures beside the verdict composed for each, the launch-aware fit
it used, and the question's panel when one is configured."""

from __future__ import annotations

import io
import json

import pandas as pd

from tilesweep import deployment_verdict
from tilesweep.cells import content_key, write_cell_bytes, write_cell_parquet, write_cell_table
from tilesweep.io import concat_tables, read_json, read_json_named
from tilesweep.stages import logged
from tilesweep.stages.tables import arrow_safe

PANEL = ("rows", "winners", "band")


def composer(inputs: dict[str, list[str]]):
    """Return (compose, decode, steps, collective, ceilings): compose(settings) gives the verdict
    rows from the measured tables (the project's own decode rows, not the engines' whole-MoE
    ones)."""
    decode = concat_tables(list(inputs["decode"]))
    if "op" in decode:
        decode = decode[decode["op"] != "whole_moe"].reset_index(drop=True)
    collective = concat_tables(list(inputs["collective"]))
    steps = concat_tables(list(inputs["layout"]))
    ceilings = {}
    for path in inputs.get("ceilings", []):
        ceilings = read_json_named(path)

    def compose(varied: dict) -> pd.DataFrame:
        return deployment_verdict.deployment_table(varied, decode, collective, steps, ceilings)

    return compose, decode, steps, collective, ceilings


def panel_json(panel: dict | None) -> str:
    """Return the question's panel as JSON text: each frame as CSV text, or {} for none."""
    if not panel:
        return "{}\n"
    return json.dumps({k: panel[k].to_csv(index=False) for k in PANEL}, indent=1) + "\n"


def read_panel(path: str) -> dict | None:
    """Return the panel panel_json wrote (frames read back as every table is), or None."""
    saved = read_json(path)
    if not saved:
        return None
    return {k: pd.read_csv(io.StringIO(saved[k])) if saved[k].strip() else pd.DataFrame()
            for k in PANEL}  # fmt: skip


def write_verdict(
    settings_json: str, inputs: dict[str, list[str]], outputs: dict, log_path: str | None = None
) -> None:
    """Write the verdict, its check and the engines' figures beside it (CSV, and Parquet where
    asked), the fit (JSON) and the question's panel (JSON)."""
    settings = json.loads(settings_json)
    with logged(log_path) as log:
        compose, decode, steps, collective, ceilings = composer(inputs)
        fit = deployment_verdict.fit_record(settings, steps, ceilings)
        tables = {
            "verdict": compose(settings),
            "check": deployment_verdict.check_table(
                steps,
                collective,
                ceilings,
                settings["model"],
                settings["deployment"].get("fit_batches"),
                settings["deployment"].get("attention_table", ""),
            ),  # fmt: skip
            "engines": deployment_verdict.engine_table(
                settings, decode, collective, steps, ceilings
            ),
        }
        panel = deployment_verdict.question_panel(settings, compose)
        log.info("rows: %s; panel: %s", {n: len(f) for n, f in tables.items()}, bool(panel))
    # Each with its record (the Snakefile checks them); the verdict's also holds the content key
    # of the tables it was composed from (cells.stale_join).
    joined = content_key([p for paths in inputs.values() for p in paths])
    if outputs.get("fit"):
        write_cell_bytes(
            outputs["fit"], (json.dumps(fit, indent=1, sort_keys=True) + "\n").encode()
        )
    for name, frame in tables.items():
        write_cell_table(outputs[name], frame, inputs=joined if name == "verdict" else None)
        if outputs.get(f"{name}_parquet"):
            write_cell_parquet(outputs[f"{name}_parquet"], arrow_safe(frame))
    write_cell_bytes(outputs["panel"], panel_json(panel).encode())
