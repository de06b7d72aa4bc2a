"""Stage 5a: join every per-cell result into the measured tables (CSV and Parquet)."""

import os
from datetime import UTC, datetime

import pandas as pd

from tilesweep import backends
from tilesweep.cells import (
    concat_cells,
    content_key,
    read_cell_json,
    write_cell_json,
    write_cell_parquet,
    write_cell_table,
)
from tilesweep.columns import LAUNCH_COLUMNS, TUNE_COLUMNS, Status
from tilesweep.device import catalog_name
from tilesweep.settings import HardwareSpec, RootSettings
from tilesweep.stages import logged

# The per-cell outputs each table joins, and the tables (each also written as Parquet).
TABLES = ("launch", "decode", "collective", "layout", "power", "tune")


def launch_table(paths: list[str]) -> pd.DataFrame:
    """Return the launch table: one row per kernel and target, with provenance columns."""
    frame = pd.DataFrame([read_cell_json(p) for p in paths])
    if frame.empty:
        return pd.DataFrame(columns=LAUNCH_COLUMNS)
    # device, toolchain and commit come from each record, stamped when it was written.
    frame = frame.assign(**{col: None for col in LAUNCH_COLUMNS if col not in frame})
    extra = [c for c in frame.columns if c not in LAUNCH_COLUMNS]
    return (
        frame[LAUNCH_COLUMNS + extra]
        .sort_values(["backend", "target", "dtype", "tile_m", "tile_n", "tile_k", "epilogue"])
        .reset_index(drop=True)
    )


def _launch_outcome(rows: pd.DataFrame) -> tuple[str, object]:
    """Return (measured launch status, shared memory the device saw) for one kernel's rows."""
    statuses = set(rows["status"].astype(str))
    smem = rows["smem_runtime_bytes"].dropna() if "smem_runtime_bytes" in rows else []
    seen = int(smem.iloc[0]) if len(smem) else None
    if Status.OK in statuses or Status.CORRECTNESS in statuses:
        return "launched", seen
    failed = rows[rows["status"] == Status.LAUNCH]
    if not failed.empty:
        return f"failed: {failed['reason'].iloc[0]}", seen
    return "not run", seen


def attach_measured_launch(
    launch: pd.DataFrame, decode: pd.DataFrame, catalog: dict[str, HardwareSpec]
) -> pd.DataFrame:
    """Return the launch table with what a real launch on each target showed."""
    launch = launch.assign(measured_launch=None, measured_smem_bytes=None)
    if decode.empty or "device" not in decode or "runner" not in decode:
        return launch
    # The conf/hardware name of the device that measured each row ('' if none).
    decode = decode.assign(
        target=decode["device"].astype(str).map(lambda d: catalog_name(d, catalog) or "")
    )
    decode = decode[decode["target"] != ""]
    for i, row in launch.iterrows():
        rows = backends.launch_match(row.to_dict(), decode[decode["target"] == row["target"]])
        if rows is not None and not rows.empty:
            launch.at[i, "measured_launch"], launch.at[i, "measured_smem_bytes"] = _launch_outcome(
                rows
            )
    return launch


def arrow_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """Return a copy in which every column of mixed Python types is text, so Parquet accepts it."""
    out = frame.copy()
    for col in out.columns:
        if out[col].dtype != object:
            continue
        kinds = {type(v) for v in out[col].dropna()}
        if len(kinds) > 1:
            out[col] = out[col].map(lambda v: v if v is None or v != v else str(v))
    return out


def measured_when(paths: list[str]) -> str | None:
    """Return when the files were written, 'YYYY-MM-DD HH:MM UTC' or a range; None if none."""
    times = [os.path.getmtime(p) for p in paths if os.path.exists(p)]
    if not times:
        return None
    ends = (
        datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M") for t in (min(times), max(times))
    )
    first, last = ends
    return f"{first} UTC" if first == last else f"{first} to {last} UTC"


def measured_tables(
    settings: RootSettings, inputs: dict[str, list[str]]
) -> dict[str, pd.DataFrame]:
    """Return the measured tables from the per-cell outputs, by name (TABLES)."""
    decode = concat_cells(list(inputs["decode"]))
    launch = attach_measured_launch(launch_table(list(inputs["launch"])), decode, settings.catalog)
    tune = concat_cells(list(inputs.get("tune", [])))
    tune = tune if not tune.empty else pd.DataFrame(columns=TUNE_COLUMNS)
    extra = backends.table_rows(settings, tune)
    return {
        "launch": launch,
        # The engines' kernels sit beside the project's in decode.csv; the verdict reads ours.
        "decode": pd.concat([decode, *extra], ignore_index=True) if extra else decode,
        "collective": concat_cells(list(inputs["collective"])),
        "layout": concat_cells(list(inputs["layout"])),
        "power": concat_cells(list(inputs.get("power", []))),
        "tune": tune,
    }


def write_tables(
    settings_json: str, inputs: dict[str, list[str]], outputs: dict, log_path: str | None = None
) -> None:
    """Write each table (CSV, Parquet) and `provenance`, each with its record."""
    settings = RootSettings.from_json(settings_json)
    with logged(log_path) as log:
        tables = measured_tables(settings, inputs)
        log.info("rows: %s", {n: len(f) for n, f in tables.items()})
        when = {n: w for n in TABLES if (w := measured_when(list(inputs.get(n, []))))}
    write_with_parquet(tables, outputs)  # each with its record: the Snakefile checks it
    write_cell_json(outputs["provenance"], {"measured": when}, inputs=content_key(inputs))


def write_with_parquet(tables: dict, outputs: dict, keyed: str = "", key: str | None = None):
    """Write each table as CSV (and Parquet where asked) with its record; `keyed`'s CSV record
    also holds `key`, its inputs' content key."""
    for name, frame in tables.items():
        write_cell_table(outputs[name], frame, inputs=key if name == keyed else None)
        if outputs.get(f"{name}_parquet"):
            write_cell_parquet(outputs[f"{name}_parquet"], arrow_safe(frame))
