"""The report's provenance section: devices, versions, when each figure was measured, config."""

from __future__ import annotations

import json

import pandas as pd

from tilesweep.columns import PROVENANCE_KEYS, TOOLCHAIN_KEY
from tilesweep.report.analysis import ok_rows
from tilesweep.report.document import Block, Code, Table
from tilesweep.report.formatting import column, devices, utc_minute


def _distinct(frames: list[pd.DataFrame], key: str) -> str:
    """Return the distinct values of a column across tables, comma-separated, or 'unknown'."""
    values: set[str] = set()
    for frame in frames:
        if key in frame:
            values |= set(frame[key].dropna().astype(str))
    return ", ".join(sorted(values)) or "unknown"


def _job_span(frame: pd.DataFrame) -> str:
    """Return when a table's rows were measured from their job times (UTC, to the minute), or ''."""
    start = pd.to_datetime(column(frame, "job_start_utc"), utc=True, errors="coerce").dropna()
    end = pd.to_datetime(column(frame, "job_end_utc"), utc=True, errors="coerce").dropna()
    if start.empty:
        return ""
    first, last = utc_minute(start.min()), utc_minute(end.max() if not end.empty else start.max())
    return f"{first if first == last else f'{first} to {last}'} (the rows' job times)"


def provenance_blocks(settings, launch, decode, collective, check, provenance) -> list[Block]:
    """Return the provenance section's blocks: devices, versions, when, and the config."""
    measured_on = [ok_rows(decode), ok_rows(collective)]
    rows = [(f"measured rows: {k}", _distinct(measured_on, k)) for k in PROVENANCE_KEYS]
    rows.append((f"launch checks: {TOOLCHAIN_KEY}", _distinct([launch], TOOLCHAIN_KEY)))
    rows += [(f"report built with: {k}", v) for k, v in provenance.items() if k != "measured"]
    when = provenance.get("measured", {})
    layout_when = "; ".join(
        f"{label}: {when[key]}"
        for key, label in (("decode", "decode"), ("layout", "layout steps"))
        if key in when
    )
    # A kept example is re-rendered without its run's provenance file: its rows' own job times
    # where they carry them, else a gap that says so (a table without rows has no time to keep).
    gap = "not kept with the tables" if provenance.get("note") else "unknown"
    when = {"decode": span, **when} if (span := _job_span(decode)) else when

    def row(figure: str, measured: str | None, table: pd.DataFrame, on: str) -> dict:
        measured = measured or (gap if not table.empty else "no rows measured")
        return {"figure": figure, "measured": measured, "on": on}

    compiled = "host compiler, checked against target tables"
    when_rows = [
        row("launch_smem", when.get("launch"), launch, compiled),
        row("decode_time, decode_roofline", when.get("decode"), decode, devices(ok_rows(decode))),
        row(
            "collective_bandwidth", when.get("collective"), collective, devices(ok_rows(collective))
        ),
        row("check_error", layout_when, check, devices(check)),
    ]
    composed = "composed at aggregation"
    when_rows.append(
        {"figure": "verdict_split", "measured": composed, "on": "none: composed for the target"}
    )
    return [
        Table(pd.DataFrame(rows, columns=["what", "value"])),
        Table(pd.DataFrame(when_rows), title="When each figure was measured (UTC)"),
        # as_dict: the resolved config written out for the reader, as the rules' params hold it
        Code("Resolved config", json.dumps(settings.as_dict(), indent=2, sort_keys=True)),
    ]
