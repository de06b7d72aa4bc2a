"""Stage 5: join every result into the tables, the verdict and the reports (Markdown, HTML)."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from tilesweep import backends, verdict
from tilesweep.hardware import catalog_name
from tilesweep.io import atomic_path, concat_tables, read_json, write_table, write_text
from tilesweep.provenance import git_commit, package_version
from tilesweep.report import contents as report_contents
from tilesweep.report import html as report_html
from tilesweep.report import markdown as report_md
from tilesweep.report.document import FIGURES, ReportData
from tilesweep.stages import logged
from tilesweep.tables import LAUNCH_COLUMNS, TUNE_COLUMNS, Status

INPUTS = ("launch", "decode", "collective", "layout", "power", "tune", "ceilings")
TABLES = ("launch", "decode", "collective", "verdict", "check", "power", "tune")
PARQUET = tuple(f"{name}_parquet" for name in TABLES)
PLOTS = tuple(f"plot_{name}" for name in FIGURES)
OUTPUTS = (*TABLES, "report", "html", *PARQUET, *PLOTS, "fit")
PACKAGE_DIR = Path(__file__).resolve().parents[1]


def launch_table(paths: list[str]) -> pd.DataFrame:
    """Return the launch table: one row per kernel and target, with provenance columns."""
    rows = [json.loads(Path(p).read_text()) for p in paths]
    frame = pd.DataFrame(rows)
    if frame.empty:
        return pd.DataFrame(columns=LAUNCH_COLUMNS)
    # device, toolchain and commit come from each record, stamped when it was written.
    for col in LAUNCH_COLUMNS:
        if col not in frame:
            frame[col] = None
    extra = [c for c in frame.columns if c not in LAUNCH_COLUMNS]
    return (
        frame[LAUNCH_COLUMNS + extra]
        .sort_values(["backend", "target", "dtype", "tile_m", "tile_n", "tile_k", "epilogue"])
        .reset_index(drop=True)
    )


def _measured_on(decode: pd.DataFrame, catalog: dict) -> pd.Series:
    """Return, per decode row, the conf/hardware name of the device that measured it ('' if
    no hardware file lists the device's name)."""
    return decode["device"].astype(str).map(lambda d: catalog_name(d, catalog) or "")


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
    launch: pd.DataFrame, decode: pd.DataFrame, catalog: dict
) -> pd.DataFrame:
    """Return the launch table with what a real launch on the benchmark device showed.

    Where the decode benchmark ran a kernel on a device that is one of the targets (an H200
    for the h200 rows), `measured_launch` says whether it launched (or the device's own error)
    and `measured_smem_bytes` the total shared memory of the launch (dynamic + static, as
    `smem_bytes`): for Triton the dynamic bytes it was launched with plus the driver's static
    attribute of the loaded function, for CUTLASS the SM90 program's SharedStorageSize. Which
    decode rows ran a launch row's kernel is its backend's to say (`Backend.measured_rows`).
    """
    launch = launch.copy()
    launch["measured_launch"] = None
    launch["measured_smem_bytes"] = None
    if decode.empty or "device" not in decode or "runner" not in decode:
        return launch
    decode = decode.assign(target=_measured_on(decode, catalog))
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

    def stamp(t: float) -> str:
        return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M")

    first, last = stamp(min(times)), stamp(max(times))
    return f"{first} UTC" if first == last else f"{first} to {last} UTC"


def write_png(path: str, data: bytes) -> None:
    """Write PNG bytes atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def _with_columns(frame: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """Return the frame, or an empty one with the table's declared columns (a CSV with a
    header, never an empty file)."""
    return frame if not frame.empty else pd.DataFrame(columns=columns)


ENGINE_COLUMNS = [
    "runner", "kernel", "dtype", "op", "n", "experts", "routing", "tokens_per_expert", "tokens",
    "time_ms", "time_p10_ms", "time_p90_ms", "status", "reason", "device", "source",
]  # fmt: skip
ENGINE_KERNELS = {
    "engine": "fused_experts",
    "engine:tuned": "fused_experts, the exported table",
    "engine:default": "fused_experts, the engine's default",
}


def engine_rows(settings: dict, tune: pd.DataFrame) -> pd.DataFrame:
    """Return decode.csv's rows for the engines' own fused-MoE kernels: the tune step's timings
    of each engine's kernel with the exported table and with its default, side by side, where
    it ran; else one skipped row per engine saying why."""
    from tilesweep.measure.engine_moe import installed

    mine = settings.get("backend", {}).get("fused_moe") or {}
    if not mine.get("enabled"):
        return pd.DataFrame(columns=ENGINE_COLUMNS)
    timed = pd.DataFrame()
    if not tune.empty and "runner" in tune:
        timed = tune[tune["runner"].astype(str).str.startswith("engine:")]
    if not timed.empty:
        out = timed.rename(columns={"m": "tokens"}).reindex(columns=ENGINE_COLUMNS)
        out["kernel"] = timed["source"].map(ENGINE_KERNELS).fillna("fused_experts")
        out["op"] = "whole_moe"
        out["source"] = (timed["status"] == Status.OK).map({True: "measured", False: ""})
        return out.reset_index(drop=True)
    rows = []
    for engine in mine.get("engines", []):
        why = (
            f"{engine} is not installed"
            if not installed(engine)
            else "no tuned table to time it with: tune_configs runs on GPU machines only"
        )
        rows.append(
            {"runner": f"engine:{engine}", "kernel": "fused_experts", "op": "whole_moe",
             "status": "skipped", "reason": why, "source": ""}
        )  # fmt: skip
    return pd.DataFrame(rows).reindex(columns=ENGINE_COLUMNS)


def assemble(
    settings: dict,
    measured: dict[str, pd.DataFrame],
    ceilings: dict,
    provenance: dict,
) -> tuple[dict[str, pd.DataFrame], ReportData]:
    """Return every table (the measured ones, the verdict and its check) and the ReportData,
    from the measured tables (launch with its measured-launch columns, decode, collective,
    layout, power) and the ceilings of the device at hand."""
    decode, collective, steps = measured["decode"], measured["collective"], measured["layout"]

    def compose(varied: dict) -> pd.DataFrame:
        return verdict.deployment_table(varied, decode, collective, steps, ceilings)

    tune = _with_columns(measured.get("tune", pd.DataFrame()), TUNE_COLUMNS)
    engines = engine_rows(settings, tune)
    tables = {
        "fit": verdict.fit_record(settings, steps, ceilings),
        "launch": measured["launch"],
        # The engines' own kernels sit beside the project's in decode.csv (timed, or skipped with
        # the reason); the verdict is composed from the project's rows only.
        "decode": pd.concat([decode, engines], ignore_index=True) if len(engines) else decode,
        "collective": collective,
        "verdict": compose(settings),
        "check": verdict.check_table(steps, collective, ceilings, settings["model"]),
        "power": measured["power"],
        "tune": tune,
    }
    data = report_contents.build(
        settings,
        tables["launch"],
        tables["decode"],
        collective,
        tables["verdict"],
        provenance,
        check=tables["check"],
        power=tables["power"],
        tune=tables["tune"],
        panel=verdict.question_panel(settings, compose),
    )
    return tables, data


def aggregate_results(
    settings_json: str, inputs: dict, outputs: dict, log_path: str | None = None
) -> None:
    """Write the tables (CSV and Parquet), the figures and the Markdown and HTML reports.

    Outputs named in OUTPUTS beyond the first five are optional: a caller running the step
    outside Snakemake may leave out Parquet, figure and HTML paths.
    """
    settings = json.loads(settings_json)
    with logged(log_path) as log:
        decode = concat_tables(list(inputs["decode"]))
        launch = attach_measured_launch(
            launch_table(list(inputs["launch"])), decode, settings["catalog"]
        )
        measured = {
            "launch": launch,
            "decode": decode,
            "collective": concat_tables(list(inputs["collective"])),
            "layout": concat_tables(list(inputs["layout"])),
            "power": concat_tables(list(inputs.get("power", []))),
            "tune": concat_tables(list(inputs.get("tune", []))),
        }
        ceilings = {}
        for path in inputs.get("ceilings", []):
            ceilings = read_json(path)
        provenance = {
            "commit": git_commit(str(PACKAGE_DIR)),
            "triton": package_version("triton"),
            "torch": package_version("torch"),
            "nvidia-cutlass": package_version("nvidia-cutlass"),
            "measured": {
                name: when
                for name in ("launch", "decode", "collective", "layout", "power", "tune")
                if (when := measured_when(list(inputs.get(name, []))))
            },
        }
        tables, data = assemble(settings, measured, ceilings, provenance)
        log.info("rows: %s", {n: len(f) for n, f in tables.items() if n != "fit"})
        text = report_md.render(data)
        page = report_html.render(data)
        log.info("html report %d bytes, %d figures", len(page), len(data.figures))
    if outputs.get("fit"):
        write_text(outputs["fit"], json.dumps(tables["fit"], indent=1, sort_keys=True) + "\n")
    for name, frame in tables.items():
        if name == "fit":
            continue
        write_table(outputs[name], frame)
        if outputs.get(f"{name}_parquet"):
            write_table(outputs[f"{name}_parquet"], arrow_safe(frame))
    for name, png in data.figures.items():
        if outputs.get(f"plot_{name}"):
            write_png(outputs[f"plot_{name}"], png)
    write_text(outputs["report"], text)
    if outputs.get("html"):
        write_text(outputs["html"], page)
