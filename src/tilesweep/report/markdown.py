"""The Markdown report: what launches, what decodes fastest, what bounds each layout."""

from __future__ import annotations

import math
import numbers

import numpy as np
import pandas as pd


def md_table(frame: pd.DataFrame, columns: list[str], digits: int = 3) -> str:
    """Return a GitHub-style Markdown table of the given columns."""
    cols = [c for c in columns if c in frame.columns]
    if frame.empty or not cols:
        return "_(no rows)_\n"
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for rec in frame[cols].to_dict("records"):
        cells = (fmt_value(rec[c], digits).replace("|", "/") for c in cols)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def fmt_value(v: object, digits: int = 3) -> str:
    """Return a table cell's text: numbers to `digits` significant figures (whole above 1,000,
    with thousands separators), NaN and None empty."""
    if v is None or isinstance(v, bool | np.bool_):
        return "" if v is None else str(v)
    if isinstance(v, numbers.Integral):
        return f"{int(v):,}"
    if isinstance(v, numbers.Real):
        v = float(v)
        if math.isnan(v):
            return ""
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return f"{v:,.0f}" if abs(v) >= 1e3 else f"{v:.{digits}g}"
    return str(v)


def provenance_line(provenance: dict) -> str:
    """Return the provenance as one line: 'key value, ...' (nested mappings flattened)."""
    parts = []
    for key, value in provenance.items():
        if isinstance(value, dict):
            inner = "; ".join(f"{k} {v}" for k, v in value.items())
            parts.append(f"{key}: {inner}")
        else:
            parts.append(f"{key} {value}")
    return ", ".join(parts)


def _launch_section(launch: pd.DataFrame) -> str:
    """Return the launch section: per target, which tiles fit and the estimate's error."""
    out = [
        "## Which kernels launch\n",
        "Shared memory from the compiler (Triton) or CUTLASS's own types, against each "
        "target's limits; `smem_model_bytes` is the brief's hand estimate.\n",
    ]
    cols = [
        "backend",
        "target",
        "dtype",
        "tile_m",
        "tile_n",
        "tile_k",
        "stages",
        "epilogue",
        "smem_bytes",
        "smem_model_bytes",
        "smem_model_error_pct",
        "smem_limit_bytes",
        "fits",
        "blocks_per_sm",
        "status",
        "reason",
        "measured_smem_bytes",
        "measured_launch",
    ]
    out.append(md_table(launch, cols))
    return "\n".join(out)


def _decode_section(decode: pd.DataFrame) -> str:
    """Return the decode section: best runner per batch, against the fastest baseline."""
    out = ["## Decode: expert GEMMs per tokens-per-expert\n"]
    if decode.empty or "time_ms" not in decode:
        return "\n".join(out + ["_(no measurements)_\n"])
    ok = decode[decode["status"] == "ok"]
    device = ", ".join(sorted(decode["device"].dropna().astype(str).unique()))
    out.append(
        f"Measured on: {device}. Times are medians; bound is from arithmetic intensity "
        "against the ridge point of the measured ceilings.\n"
    )
    idx = ok.groupby(["op", "routing", "tokens_per_expert"])["time_ms"].idxmin()
    best = ok.loc[idx]
    cols = [
        "op",
        "routing",
        "tokens_per_expert",
        "runner",
        "time_ms",
        "tflops",
        "gbs",
        "frac_copy_bw",
        "intensity",
        "bound",
    ]
    out.append(md_table(best, cols))
    from tilesweep.report.data import decode_targets

    targets = decode_targets(decode)
    if not targets.empty:
        out.append(
            "Decode targets: the best Triton tile is at least as fast as the fastest torch "
            "baseline at every batch, and reaches 90% of the measured copy bandwidth at 32 "
            "tokens per expert or fewer.\n"
        )
        out.append(md_table(targets, list(targets.columns)))
    skipped = decode[decode["status"] != "ok"]
    if not skipped.empty:
        reasons = skipped.groupby(["runner", "status", "reason"]).size().reset_index(name="rows")
        out.append("Not timed:\n")
        out.append(md_table(reasons, ["runner", "status", "reason", "rows"]))
    return "\n".join(out)


def _collective_section(coll: pd.DataFrame) -> str:
    """Return the collectives section: time and bus bandwidth per message."""
    out = ["## Collectives\n"]
    if coll.empty or "time_ms" not in coll:
        return "\n".join(out + ["_(no measurements)_\n"])
    ok = coll[coll["status"] == "ok"]
    cols = [
        "layout",
        "collective",
        "backend",
        "group",
        "layout_group",
        "bytes",
        "tokens_per_expert",
        "time_ms",
        "algbw_gbs",
        "busbw_gbs",
    ]
    out.append(md_table(ok, cols))
    return "\n".join(out)


def _verdict_section(verdict: pd.DataFrame) -> str:
    """Return the verdict section: per layout and batch, the split and what bounds it."""
    out = [
        "## Verdict: what bounds each layout\n",
        "Per decode step (one pipeline stage's layers, one batch). Compute is scaled from "
        "the single-device decode measurement to each layout's share (`model`); "
        "communication is measured where the machine has the devices, else fitted.\n",
    ]
    cols = [
        "layout",
        "tokens_per_expert",
        "batch_tokens",
        "compute_memory_ms",
        "compute_math_ms",
        "comm_ms",
        "step_ms",
        "verdict",
        "runner_up",
        "margin",
        "source",
    ]
    out.append(md_table(verdict, cols))
    from tilesweep.report.data import PROJECTION_TABLE, projection_errors

    errors = projection_errors(verdict)
    if not errors.empty:
        out += [
            "\n### How far to trust the projections\n",
            "Layouts this machine ran, measured against their projection (`projection_error_pct`)."
            " `calibration` is the measured/projected compute ratio of the single-device layout "
            "at that batch; `calibrated_error_pct` is the error of the projection scaled by it, "
            "on layouts the ratio was not taken from.\n",
            md_table(errors, PROJECTION_TABLE),
        ]
    return "\n".join(out)


def render(
    settings: dict,
    launch: pd.DataFrame,
    decode: pd.DataFrame,
    collective: pd.DataFrame,
    verdict: pd.DataFrame,
    provenance: dict,
) -> str:
    """Return the whole report as Markdown."""
    model = settings["model"]
    head = [
        "# tilesweep report\n",
        f"Model `{model['name']}` (hidden {model['hidden']}, expert intermediate "
        f"{model['moe_intermediate']}, {model['routed_experts']} experts, top-{model['top_k']}); "
        f"targets {', '.join(settings['grid']['targets'])}.\n",
        "Provenance: " + provenance_line(provenance) + "\n",
        "Figures (shared memory per tile, rooflines, collectives, time per layout): "
        "`report.html` beside this file, self-contained.\n",
    ]
    parts = [
        _verdict_section(verdict),
        _launch_section(launch),
        _decode_section(decode),
        _collective_section(collective),
    ]
    return "\n".join(head + parts)
