"""Stage 5: join every result into the tables, the verdict and the reports (Markdown, HTML)."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from tilesweep import aggregate, report, report_html, verdict
from tilesweep.io import atomic_path, write_table, write_text
from tilesweep.provenance import git_commit, package_version
from tilesweep.steps import logged

INPUTS = ("launch", "decode", "collective", "layout")
TABLES = ("launch", "decode", "collective", "verdict")
PARQUET = tuple(f"{name}_parquet" for name in TABLES)
PLOTS = tuple(f"plot_{name}" for name in report_html.FIGURES)
OUTPUTS = ("launch", "decode", "collective", "verdict", "report", "html", *PARQUET, *PLOTS)
PACKAGE_DIR = Path(__file__).resolve().parents[1]


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


def aggregate_results(
    settings_json: str, inputs: dict, outputs: dict, log_path: str | None = None
) -> None:
    """Write the tables (CSV and Parquet), the figures and the Markdown and HTML reports.

    Outputs named in OUTPUTS beyond the first five are optional: a caller running the step
    outside Snakemake may leave out Parquet, figure and HTML paths.
    """
    settings = json.loads(settings_json)
    with logged(log_path) as log:
        launch = aggregate.launch_table(list(inputs["launch"]))
        decode = aggregate.concat_tables(list(inputs["decode"]))
        launch = aggregate.attach_measured_launch(launch, decode)
        collective = aggregate.concat_tables(list(inputs["collective"]))
        steps = aggregate.concat_tables(list(inputs["layout"]))
        table = verdict.verdict_table(settings, decode, collective, steps)
        log.info(
            "launch %d rows, decode %d, collective %d, verdict %d",
            len(launch),
            len(decode),
            len(collective),
            len(table),
        )
        provenance = {
            "commit": git_commit(str(PACKAGE_DIR)),
            "triton": package_version("triton"),
            "torch": package_version("torch"),
            "nvidia-cutlass": package_version("nvidia-cutlass"),
            "measured": {
                name: when
                for name in ("launch", "decode", "collective", "layout")
                if (when := measured_when(list(inputs.get(name, []))))
            },
        }
        text = report.render(settings, launch, decode, collective, table, provenance)
        images = report_html.figures(launch, decode, collective, table)
        page = report_html.render(
            settings, launch, decode, collective, table, provenance, images=images
        )
        log.info("html report %d bytes, %d figures", len(page), len(images))
    frames = {"launch": launch, "decode": decode, "collective": collective, "verdict": table}
    for name, frame in frames.items():
        write_table(outputs[name], frame)
        if outputs.get(f"{name}_parquet"):
            write_table(outputs[f"{name}_parquet"], arrow_safe(frame))
    for name, data in images.items():
        if outputs.get(f"plot_{name}"):
            write_png(outputs[f"plot_{name}"], data)
    write_text(outputs["report"], text)
    if outputs.get("html"):
        write_text(outputs["html"], page)
