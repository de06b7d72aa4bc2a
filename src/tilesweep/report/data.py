"""What both reports show, built once: `build` turns the tables into one `ReportData` (sections of
headings, tables, figures and text), and report/markdown.py and report/html.py only render it, so
the two cannot disagree. Below it, the derived tables: failures, estimate errors, the fastest
runner per batch, latency floors and one-line headlines (pure pandas; a missing column is shown
as missing, never filled with a neighbouring value)."""

from __future__ import annotations

import json
import math
import numbers
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tilesweep.tables import (
    BEST_PER_BATCH_COLUMNS,
    BEST_PER_BATCH_KEYS,
    COLLECTIVE_REPORT_COLUMNS,
    DECODE_TARGET_COLUMNS,
    ESTIMATE_COLUMNS,
    FIT_COUNT_COLUMNS,
    LATENCY_FLOOR_COLUMNS,
    LAUNCH_FAILURE_COLUMNS,
    NOT_TIMED_COLUMNS,
    PROJECTION_TABLE_COLUMNS,
    REPORT_LAUNCH_COLUMNS,
    REPORT_VERDICT_COLUMNS,
    SHARE_COLUMNS,
    Status,
    fastest_runner,
)
from tilesweep.verdict import fit_latency_bandwidth

VERDICT_SHORT = {
    "memory-bound": "memory",
    "math-bound": "math",
    "communication-bound": "comm",
}


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


def _col(frame: pd.DataFrame, name: str, default: object = None) -> pd.Series:
    """Return a column, or a column of `default` when the table lacks it."""
    if name in frame:
        return frame[name]
    return pd.Series(default, index=frame.index, dtype=object)


def _num(frame: pd.DataFrame, name: str) -> pd.Series:
    """Return a column as floats (NaN where absent or not a number)."""
    return pd.to_numeric(_col(frame, name), errors="coerce").astype(float)


def ok_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Return the rows whose status is ok."""
    if "status" not in frame:
        return frame.iloc[0:0]
    return frame[frame["status"].astype(str) == Status.OK]


def launch_failures(launch: pd.DataFrame) -> pd.DataFrame:
    """Return launch rows that do not fit or whose check failed (a missing status included)."""
    if launch.empty:
        return launch
    status = _col(launch, "status").map(_status_text)
    bad = (_col(launch, "fits").astype(str) == "no") | (status != Status.OK)
    return launch[bad].assign(status=status[bad])


def _status_text(value: object) -> str:
    """Return a recorded status as text, `missing` where none was recorded."""
    return Status.MISSING if value is None or value != value or value == "" else str(value)


def fit_counts(launch: pd.DataFrame) -> pd.DataFrame:
    """Return, per target and backend, how many kernels fit by default, after opt-in, or not;
    a kernel without a `fits` value is counted, labelled, as unknown."""
    if launch.empty or "target" not in launch:
        return pd.DataFrame(columns=FIT_COUNT_COLUMNS)
    counts = (
        launch.assign(fits=_col(launch, "fits", "unknown").fillna("unknown").astype(str))
        .groupby(["target", "backend", "fits"])
        .size()
        .unstack("fits", fill_value=0)
    )
    for col in ("default", "optin", "no", "unknown"):
        if col not in counts:
            counts[col] = 0
    return counts[["default", "optin", "no", "unknown"]].reset_index()


def estimate_errors(launch: pd.DataFrame) -> pd.DataFrame:
    """Return the hand estimate against the compiler's or CUTLASS's number, per kernel that has
    both."""
    if launch.empty or "smem_model_bytes" not in launch:
        return pd.DataFrame()
    rows = launch[_num(launch, "smem_model_bytes").notna() & _num(launch, "smem_bytes").notna()]
    rows = rows.copy()
    actual = _num(rows, "smem_bytes")
    model = _num(rows, "smem_model_bytes")
    rows["smem_model_error_bytes"] = model - actual
    rows["smem_model_error_pct"] = (model - actual) / actual * 100
    return rows


def best_per_batch(decode: pd.DataFrame) -> pd.DataFrame:
    """Return, per dtype, op, routing and tokens-per-expert: the fastest runner, the fastest
    kernel tile (Triton or CUTLASS), the fastest torch baseline of that dtype, and the
    baseline's time over the tile's (speedup, >1 = the tile is faster)."""
    keys = [k for k in BEST_PER_BATCH_KEYS if k in decode]
    if decode.empty or "runner" not in decode or not keys:
        return pd.DataFrame(columns=BEST_PER_BATCH_COLUMNS)
    best = fastest_runner(decode, by=keys).rename(columns={"runner": "best_runner"})
    if best.empty:
        return pd.DataFrame(columns=BEST_PER_BATCH_COLUMNS)
    baseline = decode["runner"].astype(str).str.startswith("torch")
    for rows, name, ms in (
        (~baseline, "best_tile", "tile_ms"),
        (baseline, "best_baseline", "baseline_ms"),
    ):
        fastest = fastest_runner(decode[rows], by=keys)[[*keys, "runner", "time_ms"]]
        best = best.merge(
            fastest.rename(columns={"runner": name, "time_ms": ms}), on=keys, how="left"
        )
    best["speedup_vs_baseline"] = best["baseline_ms"] / best["tile_ms"]
    return best[[c for c in BEST_PER_BATCH_COLUMNS if c in best]]


def not_timed(decode: pd.DataFrame) -> pd.DataFrame:
    """Return, per runner, dtype, status and reason, how many decode rows were not timed."""
    if decode.empty or "status" not in decode:
        return pd.DataFrame()
    status = decode["status"].map(_status_text)
    bad = decode[status != Status.OK].assign(status=status)
    if bad.empty:
        return pd.DataFrame(columns=NOT_TIMED_COLUMNS)
    keys = [c for c in NOT_TIMED_COLUMNS[:-2] if c in bad] + ["reason"]
    return (
        bad.assign(reason=_col(bad, "reason", "").fillna("").astype(str))
        .groupby(keys, dropna=False)
        .size()
        .reset_index(name="rows")
    )


def latency_floors(collective: pd.DataFrame) -> pd.DataFrame:
    """Return per collective and group: the latency floor (median time of the smallest message),
    the least-squares latency and bandwidth of time = latency + bytes / bandwidth, and the peak
    bus bandwidth."""
    ok = ok_rows(collective)
    if ok.empty or "time_ms" not in ok:
        return pd.DataFrame()
    ok = ok[ok["collective"].astype(str) != "none"]
    if ok.empty:
        return pd.DataFrame()
    fits = fit_latency_bandwidth(ok)
    rows = []
    for (kind, group), part in ok.groupby(["collective", "group"], sort=True):
        alpha, beta = fits.get((kind, int(group)), (math.nan, math.nan))
        size = _num(part, "bytes")
        rows.append(
            {
                "collective": kind,
                "group": int(group),
                "backend": ", ".join(sorted(part["backend"].astype(str).unique())),
                "smallest_bytes": size.min(),
                "floor_ms": _num(part[size == size.min()], "time_ms").median(),
                "latency_ms": alpha,
                "fitted_gbs": beta / 1e6 if math.isfinite(beta) else math.nan,
                "peak_busbw_gbs": _num(part, "busbw_gbs").max(),
            }
        )
    return pd.DataFrame(rows)


def verdict_cell(row: dict) -> str:
    """Return a compact verdict of one row: 'memory x3.1' (the winner and its margin)."""
    short = VERDICT_SHORT.get(str(row.get("verdict")), str(row.get("verdict")))
    margin = row.get("margin")
    try:
        margin = float(margin)
    except (TypeError, ValueError):
        return short
    if math.isnan(margin):
        return short
    return f"{short} x{margin:.3g}" if math.isfinite(margin) else f"{short} only"


def headlines(launch: pd.DataFrame, decode: pd.DataFrame, verdict: pd.DataFrame) -> list[str]:
    """Return one-sentence findings: what fits per target, how the estimate does, the fastest
    decode at the smallest and largest batch, and what bounds each layout."""
    lines = []
    counts = fit_counts(launch)
    for target, part in counts.groupby("target", sort=False):
        total = int(part[["default", "optin", "no", "unknown"]].to_numpy().sum())
        lines.append(
            f"{target}: of {total} kernels, {int(part['default'].sum())} fit by default, "
            f"{int(part['optin'].sum())} only after opt-in, {int(part['no'].sum())} do not fit"
            + (f", {int(part['unknown'].sum())} unknown" if part["unknown"].sum() else "")
            + "."
        )
    fails = launch_failures(launch)
    if not fails.empty:
        worst = fails.loc[_num(fails, "overshoot_bytes").fillna(-1).idxmax()]
        lines.append(
            f"Largest miss: {worst.get('target')} {worst.get('kernel')}: {worst['reason']}."
        )
    errors = estimate_errors(launch)
    if not errors.empty:
        pct = errors["smem_model_error_pct"].dropna()
        if not pct.empty:
            lines.append(
                f"Hand shared-memory estimate vs the compiler/CUTLASS: median error "
                f"{pct.median():+.0f}% (from {pct.min():+.0f}% to {pct.max():+.0f}%, "
                f"{len(pct)} kernels)."
            )
    best = best_per_batch(decode)
    if not best.empty:
        uniform = best[best["routing"].astype(str) == "uniform"]
        uniform = uniform if not uniform.empty else best
        for op, part in uniform.groupby("op", sort=False):
            ends = part.sort_values("tokens_per_expert").iloc[[0, -1]].drop_duplicates()
            for rec in ends.to_dict("records"):
                frac = rec.get("frac_copy_bw")
                frac_txt = f", {frac:.0%} of measured copy bandwidth" if finite(frac) else ""
                lines.append(
                    f"Decode {op}, {int(rec['tokens_per_expert'])} tokens per expert: fastest "
                    f"{rec['best_runner']}, {rec['time_ms']:.3g} ms{frac_txt}, "
                    f"{rec.get('bound') or 'unknown'}-bound."
                )
    if not verdict.empty and "verdict" in verdict and "layout" in verdict:
        frame = verdict.assign(source=_col(verdict, "source").fillna("source missing"))
        same: dict[tuple[str, str], list[str]] = {}
        for (layout, source), part in frame.groupby(["layout", "source"], sort=False):
            same.setdefault((source, verdict_by_batch(part)), []).append(str(layout))
        for (source, desc), layouts in same.items():
            lines.append(f"{', '.join(layouts)} ({source}): {desc}.")
        projection = projection_headline(verdict)
        if projection:
            lines.append(projection)
    return lines


def projection_errors(verdict: pd.DataFrame) -> pd.DataFrame:
    """Return the model rows of layouts that were also measured: how far the projection, raw
    and calibrated, lies from the measurement."""
    if verdict.empty or "measured_step_ms" not in verdict:
        return pd.DataFrame(columns=PROJECTION_TABLE_COLUMNS)
    rows = verdict[
        (_col(verdict, "source").astype(str) == "model") & _num(verdict, "measured_step_ms").notna()
    ]
    return rows[[c for c in PROJECTION_TABLE_COLUMNS if c in rows]].reset_index(drop=True)


def _span(values: pd.Series) -> str:
    """Return the range of percentages, e.g. '-12% to +3%', or one figure when they agree."""
    low, high = f"{values.min():+.0f}%", f"{values.max():+.0f}%"
    return low if low == high else f"{low} to {high}"


def projection_headline(verdict: pd.DataFrame) -> str | None:
    """Return one line on the projection error, raw and calibrated, or None without one."""
    errors = projection_errors(verdict)
    raw = _num(errors, "projection_error_pct").dropna()
    if raw.empty:
        return None
    layouts = errors["layout"].nunique()
    line = (
        f"Projection vs measurement on {layouts} measured layout{'s' * (layouts != 1)}: "
        f"{_span(raw)}"
    )
    held_out = _num(errors, "calibrated_error_pct").dropna()
    if not held_out.empty:
        points = len(held_out)
        line += (
            f"; calibrated by the measured single-device step, {_span(held_out)} on the "
            f"{points} point{'s' * (points != 1)} it was not taken from"
        )
    return line + "."


def verdict_by_batch(part: pd.DataFrame) -> str:
    """Return which verdict holds at which tokens-per-expert, e.g. 'memory-bound at 1-4 tokens
    per expert, math-bound at 8-256'."""
    part = part.sort_values("tokens_per_expert")
    runs: list[list] = []
    for rec in part.to_dict("records"):
        t = rec["tokens_per_expert"]
        t = int(t) if finite(t) and float(t).is_integer() else t
        if runs and runs[-1][0] == rec["verdict"]:
            runs[-1][2] = t
        else:
            runs.append([rec["verdict"], t, t])
    parts = [f"{v} at {a}" if a == b else f"{v} at {a}-{b}" for v, a, b in runs]
    return ", ".join(parts) + " tokens per expert"


def finite(value: object) -> bool:
    """Return whether value is a finite number."""
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


BASELINE_TARGET = 1.0  # the best tile is at least as fast as the fastest torch baseline
COPY_TARGET = 0.90  # ... and reaches 90% of the measured copy bandwidth at small batches
COPY_TARGET_MAX_TOKENS = 32


def decode_targets(decode: pd.DataFrame) -> pd.DataFrame:
    """Return, per dtype, op and batch (uniform routing), the best Triton tile against the
    fastest torch baseline of that dtype and the copy ceiling, and whether each decode target
    is met."""
    if decode.empty or "runner" not in decode:
        return pd.DataFrame(columns=DECODE_TARGET_COLUMNS)
    uniform = decode[_col(decode, "routing") == "uniform"]
    runner = uniform["runner"].astype(str)
    keys = ["dtype", "op", "tokens_per_expert"]
    tiles = fastest_runner(uniform[runner.str.startswith("triton:")], by=keys)
    bases = fastest_runner(uniform[runner.str.startswith("torch")], by=keys)
    if tiles.empty or bases.empty:
        return pd.DataFrame(columns=DECODE_TARGET_COLUMNS)
    both = tiles.merge(bases[[*keys, "runner", "time_ms"]], on=keys, suffixes=("", "_base"))
    ratio = both["time_ms_base"] / both["time_ms"]
    copy = _num(both, "frac_copy_bw")
    small = both["tokens_per_expert"] <= COPY_TARGET_MAX_TOKENS
    copy_target = [
        "n/a (above 32 tokens)"
        if not s
        else ("met" if c >= COPY_TARGET else f"missed by {COPY_TARGET - c:.2f}")
        if c == c
        else "n/a (no copy ceiling)"
        for s, c in zip(small, copy, strict=True)
    ]
    out = both[keys].assign(
        best_tile=both["runner"].astype(str).str.removeprefix("triton:"),
        time_ms=both["time_ms"],
        frac_copy_bw=copy,
        fastest_baseline=both["runner_base"],
        baseline_ms=both["time_ms_base"],
        baseline_over_tile=ratio,
        vs_baseline=[
            "met" if r >= BASELINE_TARGET else f"missed: {r:.2f}x the baseline's speed"
            for r in ratio
        ],
        copy_90pct=copy_target,
    )
    return out[DECODE_TARGET_COLUMNS].reset_index(drop=True)


# ---- one ReportData, rendered by both reports -----------------------------------------------

SECTIONS = (
    ("summary", "Summary"),
    ("launch", "Which kernels launch"),
    ("decode", "Decode: expert GEMMs against tokens per expert"),
    ("collectives", "Collectives"),
    ("layouts", "Verdict per layout: where a decode step's time goes"),
    ("provenance", "Provenance"),
)
# Every figure: its file name under plots/, its alt text and its caption.
FIGURES = {
    "launch_smem": (
        "shared memory per kernel and target",
        "Bars: shared memory per block (colour: fits by default / after opt-in / not); hatched: "
        "the part outside CUTLASS's mainloop (epilogue and the rest); diamonds: the hand "
        "estimate; lines: default, opt-in and per-SM limits. One panel per target.",
    ),
    "decode_time": (
        "decode time and bandwidth against tokens per expert",
        "Time per grouped GEMM and achieved bandwidth against tokens per expert, one row of "
        "panels per dtype and group of at most eight runners; the dashed red line is the "
        "measured copy bandwidth.",
    ),
    "decode_roofline": (
        "decode roofline",
        "Achieved TFLOPS against arithmetic intensity on the measured roofline, per dtype and "
        "group of runners; the top axis gives the tokens per expert of each gate_up point.",
    ),
    "collective_bandwidth": (
        "collective bus bandwidth and time against message size",
        "Bus bandwidth and time against message size per collective and group size; dotted: the "
        "latency floor (the smallest message's time). The table also gives the least-squares "
        "fit time = latency + bytes / bandwidth.",
    ),
    "layouts": (
        "time split per layout and batch",
        "Memory-bound compute, math-bound compute and communication per decode step; solid bars "
        "are measured, hatched pale bars projected (model).",
    ),
}
PROVENANCE_KEYS = ("device", "driver", "cuda_runtime", "torch", "triton", "cutlass", "commit")


@dataclass(frozen=True)
class Text:
    """A paragraph of plain text."""

    text: str


@dataclass(frozen=True)
class Bullets:
    """A list of one-line findings."""

    items: list[str]


@dataclass(frozen=True)
class Heading:
    """A sub-heading inside a section."""

    text: str


@dataclass(frozen=True)
class Table:
    """A table: the frame, the columns shown (those present), and how it is introduced.

    `style` names how the HTML page marks rows: "source" (measured vs model) or "verdict" (the
    summary pivot, cells coloured by verdict); Markdown renders every style the same way.
    """

    frame: pd.DataFrame
    columns: list[str] | None = None
    title: str = ""
    note: str = ""
    empty: str = "(no rows)"
    collapsed: bool = False
    style: str = ""

    def shown(self) -> list[str]:
        """Return the columns this table shows: those asked for that the frame has."""
        return [c for c in (self.columns or list(self.frame.columns)) if c in self.frame.columns]


@dataclass(frozen=True)
class Figure:
    """One of FIGURES, by name."""

    name: str

    @property
    def alt(self) -> str:
        """Return the figure's alt text."""
        return FIGURES[self.name][0]

    @property
    def caption(self) -> str:
        """Return the figure's caption."""
        return FIGURES[self.name][1]


@dataclass(frozen=True)
class Code:
    """A block of preformatted text under a title (collapsed in HTML)."""

    title: str
    text: str


Block = Text | Bullets | Heading | Table | Figure | Code


@dataclass(frozen=True)
class Section:
    """One section of the report: key and title from SECTIONS, and its blocks in order."""

    key: str
    title: str
    blocks: list[Block]


@dataclass(frozen=True)
class ReportData:
    """Everything both reports show: title, intro, sections and the figures' PNG bytes."""

    title: str
    intro: str
    provenance: dict
    sections: list[Section]
    figures: dict[str, bytes] = field(default_factory=dict)

    def tables(self) -> list[Table]:
        """Return every table of the report, in order."""
        return [b for s in self.sections for b in s.blocks if isinstance(b, Table)]

    def figure_names(self) -> list[str]:
        """Return the names of the figures the sections show, in order."""
        return [b.name for s in self.sections for b in s.blocks if isinstance(b, Figure)]


def draw_figures(
    launch: pd.DataFrame, decode: pd.DataFrame, collective: pd.DataFrame, verdict: pd.DataFrame
) -> dict[str, bytes]:
    """Return every report figure as PNG bytes, by name (the names in FIGURES)."""
    from tilesweep.report import figures as plots

    return {
        "launch_smem": plots.png(plots.launch_smem(launch)),
        "decode_time": plots.png(plots.decode_time(decode)),
        "decode_roofline": plots.png(plots.decode_roofline(decode)),
        "collective_bandwidth": plots.png(
            plots.collective_bandwidth(collective, latency_floors(collective))
        ),
        "layouts": plots.png(plots.layout_split(verdict)),
    }


def devices(frame: pd.DataFrame) -> str:
    """Return the distinct devices a table's rows were measured on, or 'unknown device'."""
    if frame.empty or "device" not in frame:
        return "unknown device"
    names = sorted(frame["device"].dropna().astype(str).unique())
    return ", ".join(names) or "unknown device"


def _when(provenance: dict, key: str) -> str:
    """Return ' Measured <when>.' for a section, or nothing when unknown."""
    when = provenance.get("measured", {}).get(key)
    return f" Measured {when}." if when else ""


def verdict_pivot(verdict: pd.DataFrame) -> pd.DataFrame:
    """Return one row per model, layout and source, one column per tokens-per-expert; a cell is
    'verdict x margin' and, on its second line, the memory / math / comm ms that decide it."""
    if verdict.empty or "verdict" not in verdict:
        return pd.DataFrame()
    frame = verdict.assign(
        model=_col(verdict, "model").fillna("model missing"),
        source=_col(verdict, "source").fillna("source missing"),
    )
    batches = sorted(frame["tokens_per_expert"].dropna().unique())
    rows = []
    for (model, layout, source), part in frame.groupby(["model", "layout", "source"], sort=False):
        row = {"model": model, "layout": layout, "source": source}
        by_t = {r["tokens_per_expert"]: r for r in part.to_dict("records")}
        for t in batches:
            rec = by_t.get(t)
            row[pivot_column(t)] = None if rec is None else _pivot_cell(rec)
        rows.append(row)
    return pd.DataFrame(rows)


def pivot_column(tokens: object) -> str:
    """Return the pivot's column name for a tokens-per-expert value, e.g. '16 tok/expert'."""
    t = float(tokens)
    return f"{int(t) if t.is_integer() else t:g} tok/expert"


def _pivot_cell(rec: dict) -> str:
    """Return one pivot cell: the compact verdict, a newline, the three shares in ms."""
    numbers = " / ".join(fmt_value(rec.get(k)) or "-" for k in SHARE_COLUMNS)
    if finite(rec.get("other_ms")) and rec["other_ms"] > 0:
        numbers += f" (+ other {fmt_value(rec['other_ms'])})"
    if finite(rec.get("compute_unknown_ms")) and rec["compute_unknown_ms"] > 0:
        numbers += f" (+ bound unknown {fmt_value(rec['compute_unknown_ms'])})"
    return f"{verdict_cell(rec)}\n{numbers} ms"


def _summary(launch, decode, verdict) -> list[Block]:
    """Return the summary's blocks: headlines and the verdict pivot."""
    return [
        Bullets(headlines(launch, decode, verdict)),
        Table(
            verdict_pivot(verdict),
            note="What bounds one decode step, per model, layout and tokens per expert: the "
            "largest of memory-bound compute, math-bound compute and communication, its margin "
            "over the runner-up, and the three times (ms) that decide it. Hatched rows (HTML) "
            "are projected (source = model), plain rows measured. Cell: verdict x margin over "
            "the runner-up; below: memory-bound / math-bound / communication ms per step.",
            empty="(no verdict rows)",
            style="verdict",
        ),
    ]


def _launch(launch: pd.DataFrame, provenance: dict) -> list[Block]:
    """Return the launch section's blocks: counts, the figure, per target failures, estimates."""
    blocks: list[Block] = [
        Text(
            "Shared memory per block as the compiler (Triton) or CUTLASS's own types account "
            "it, against each target's limits; smem_model_bytes is the hand estimate. Nothing "
            "here ran on the target: kernels are compiled on this host and checked against the "
            f"target's table.{_when(provenance, 'launch')}"
        )
    ]
    if launch.empty or "target" not in launch:
        return [*blocks, Text("(no launch checks)")]
    blocks += [Table(fit_counts(launch), FIT_COUNT_COLUMNS), Figure("launch_smem")]
    errors = estimate_errors(launch)
    from tilesweep.report.figures import LIMITS

    for target, part in launch.groupby("target", sort=False):
        rec = {c: part[c].dropna().iloc[0] for c in part.columns if part[c].notna().any()}
        limits = ", ".join(
            f"{label} {fmt_value(rec[col])} B" for col, label, _ in LIMITS if col in rec
        )
        fails = launch_failures(part)
        blocks += [
            Heading(f"{target} ({rec.get('arch', 'arch missing')})"),
            Text(f"Limits: {limits or 'none recorded'}."),
            Table(
                fails,
                LAUNCH_FAILURE_COLUMNS,
                title="What fails and why",
                empty="Every kernel fits on this target.",
            ),
            Table(
                errors[errors["target"] == target] if not errors.empty else errors,
                ESTIMATE_COLUMNS,
                title="Hand estimate against the compiler's or CUTLASS's number",
            ),
            Table(part, REPORT_LAUNCH_COLUMNS, title=f"All {len(part)} rows", collapsed=True),
        ]
    return blocks


def _decode(decode: pd.DataFrame, provenance: dict) -> list[Block]:
    """Return the decode section's blocks: figures, best per batch, targets, what was not timed."""
    blocks: list[Block] = [
        Text(
            f"Measured on {devices(ok_rows(decode))}. Times are medians (p10..p90 in the "
            "figure); bound is from arithmetic intensity against the ridge point of the "
            f"measured ceilings.{_when(provenance, 'decode')}"
        ),
        Figure("decode_time"),
        Figure("decode_roofline"),
        Table(
            best_per_batch(decode),
            BEST_PER_BATCH_COLUMNS,
            title="Best per batch, and the best tile against the baselines",
            note="Per dtype: a tile is compared with the torch baselines of its own dtype.",
            empty="(no measurements)",
        ),
    ]
    targets = decode_targets(decode)
    if not targets.empty:
        blocks.append(
            Table(
                targets,
                DECODE_TARGET_COLUMNS,
                title="Decode targets",
                note="The best Triton tile at each batch is at least as fast as the fastest "
                "torch baseline; at 32 tokens per expert or fewer it also reaches 90% of the "
                "measured copy bandwidth. Misses say by how much.",
            )
        )
    skipped = not_timed(decode)
    if not skipped.empty:
        blocks.append(Table(skipped, NOT_TIMED_COLUMNS, title="Not timed"))
    return blocks


def _collectives(collective: pd.DataFrame, provenance: dict) -> list[Block]:
    """Return the collectives section's blocks: the figure, latency floors, every measurement."""
    return [
        Text(f"Measured on {devices(ok_rows(collective))}.{_when(provenance, 'collective')}"),
        Figure("collective_bandwidth"),
        Table(latency_floors(collective), LATENCY_FLOOR_COLUMNS, title="Latency floor"),
        Table(
            ok_rows(collective),
            COLLECTIVE_REPORT_COLUMNS,
            title="Every timed message",
            empty="(no measurements)",
            collapsed=True,
        ),
    ]


def _layouts(verdict: pd.DataFrame) -> list[Block]:
    """Return the layouts section's blocks: the split figure, the verdict rows, the projections."""
    extra = [c for c in verdict.columns if "err" in c and c not in REPORT_VERDICT_COLUMNS]
    return [
        Text(
            "Per decode step (one pipeline stage's layers, one batch). Compute is scaled from "
            "the single-device decode measurement to each layout's share (model); "
            "communication is measured where the machine has the devices, else fitted."
        ),
        Figure("layouts"),
        Table(verdict, REPORT_VERDICT_COLUMNS + extra, style="source"),
        Table(
            projection_errors(verdict),
            PROJECTION_TABLE_COLUMNS,
            title="How far to trust the projections",
            note="Layouts this machine ran, measured against their projection "
            "(projection_error_pct). calibration is the measured/projected compute ratio of "
            "the single-device layout at that batch; calibrated_error_pct is the error of the "
            "projection scaled by it, on layouts the ratio was not taken from.",
            empty="(no layout was both measured and projected)",
        ),
    ]


def _distinct(frames: list[pd.DataFrame], key: str) -> str:
    """Return the distinct values of a column across tables, comma-separated, or 'unknown'."""
    values: set[str] = set()
    for frame in frames:
        if key in frame:
            values |= set(frame[key].dropna().astype(str))
    return ", ".join(sorted(values)) or "unknown"


def _provenance(settings, launch, decode, collective, verdict, provenance) -> list[Block]:
    """Return the provenance section's blocks: devices, versions, when, and the config."""
    measured_on = [ok_rows(decode), ok_rows(collective)]
    rows = [
        {"what": f"measured rows: {k}", "value": _distinct(measured_on, k)} for k in PROVENANCE_KEYS
    ]
    rows.append({"what": "launch checks: toolchain", "value": _distinct([launch], "toolchain")})
    rows += [
        {"what": f"report built with: {k}", "value": v}
        for k, v in provenance.items()
        if k != "measured"
    ]
    when = provenance.get("measured", {})
    layout_when = "; ".join(
        f"{label}: {when[key]}"
        for key, label in (("decode", "decode"), ("layout", "layout steps"))
        if key in when
    )
    when_rows = [
        {"figure": name, "measured": measured or "unknown", "on": device}
        for name, measured, device in (
            ("launch_smem", when.get("launch"), "host compiler, checked against target tables"),
            ("decode_time, decode_roofline", when.get("decode"), devices(ok_rows(decode))),
            ("collective_bandwidth", when.get("collective"), devices(ok_rows(collective))),
            ("layouts", layout_when, devices(verdict)),
        )
    ]
    return [
        Table(pd.DataFrame(rows), ["what", "value"]),
        Table(pd.DataFrame(when_rows), title="When each figure was measured (UTC)"),
        Code("Resolved config", json.dumps(settings, indent=2, sort_keys=True, default=str)),
    ]


def build(
    settings: dict,
    launch: pd.DataFrame,
    decode: pd.DataFrame,
    collective: pd.DataFrame,
    verdict: pd.DataFrame,
    provenance: dict,
    figures: dict[str, bytes] | None = None,
) -> ReportData:
    """Return the one ReportData both reports render; figures are drawn unless given.

    `provenance` may hold 'measured': {section: when} beside versions and the commit.
    """
    model = settings.get("model", {})
    targets = ", ".join(settings.get("grid", {}).get("targets", [])) or "none"
    hardware = settings.get("hardware", {}).get("name", "hardware missing")
    intro = (
        f"Model {model.get('name', '?')} (hidden {model.get('hidden')}, expert intermediate "
        f"{model.get('moe_intermediate')}, {model.get('routed_experts')} experts, "
        f"top-{model.get('top_k')}); projected onto {hardware}; launch targets {targets}."
    )
    blocks = {
        "summary": _summary(launch, decode, verdict),
        "launch": _launch(launch, provenance),
        "decode": _decode(decode, provenance),
        "collectives": _collectives(collective, provenance),
        "layouts": _layouts(verdict),
        "provenance": _provenance(settings, launch, decode, collective, verdict, provenance),
    }
    drawn = dict(figures or {})
    if any(name not in drawn for name in FIGURES):
        drawn = {**draw_figures(launch, decode, collective, verdict), **drawn}
    return ReportData(
        title=f"tilesweep report: {model.get('name', '?')}",
        intro=intro,
        provenance=provenance,
        sections=[Section(key, title, blocks[key]) for key, title in SECTIONS],
        figures=drawn,
    )
