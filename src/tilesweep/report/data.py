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
    REPORT_CHECK_COLUMNS,
    REPORT_LAUNCH_COLUMNS,
    REPORT_POWER_COLUMNS,
    REPORT_VERDICT_COLUMNS,
    TUNE_SUMMARY_COLUMNS,
    TUNE_TARGET_COLUMNS,
    WINNER_COLUMNS,
    Status,
    fastest_runner,
)


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
    from tilesweep.plan.messages import fit_alpha_beta

    rows = []
    for (kind, group), part in ok.groupby(["collective", "group"], sort=True):
        by_size = part.groupby("bytes")["time_ms"].median()
        alpha, beta = fit_alpha_beta(list(by_size.index), list(by_size.values))
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


def verdict_cell(rec: dict) -> str:
    """Return a compact verdict of one deployment row: 'memory 4.2x' (the bound and its margin
    over the next part), or 'does not fit (26 GB short)'."""
    if rec.get("fits_memory") == "no":
        return f"does not fit ({fmt_value(rec.get('mem_short_gb'))} GB short)"
    margin = rec.get("margin")
    margin = margin if isinstance(margin, str) else ""
    return f"{rec.get('bound', 'bound missing')} {margin}".strip()


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
    lines += verdict_headlines(verdict)
    return lines


def verdict_headlines(verdict: pd.DataFrame) -> list[str]:
    """Return per batch the fastest layout that fits, its lead and its bound, and the layouts
    that fit at no batch."""
    if verdict.empty or "tokens_per_s" not in verdict:
        return []
    from tilesweep.plan.sensitivity import winners

    lines = []
    target = f"{verdict['model'].iloc[0]} on {verdict['hardware'].iloc[0]}"
    for rec in winners(verdict).to_dict("records"):
        if rec["winner"] == "none fits":
            lines.append(f"{target}, batch {rec['batch']}: no layout fits in memory.")
            continue
        row = verdict[(verdict["layout"] == rec["winner"]) & (verdict["batch"] == rec["batch"])]
        row = row.iloc[0].to_dict()
        lead = (
            f", {rec['lead']} the tokens/s of {rec['runner_up']}"
            if finite(rec.get("runner_up_tokens_per_s"))
            else ""
        )
        lines.append(
            f"{target}, batch {rec['batch']}: {rec['winner']} is fastest "
            f"({fmt_value(row['tpot_ms'])} ms per token, {fmt_value(rec['tokens_per_s'])} "
            f"tokens/s{lead}); {verdict_cell(row)} ({row['source']})."
        )
    never = [
        layout
        for layout, part in verdict.groupby("layout", sort=False)
        if (part["fits_memory"] == "no").all()
    ]
    if never:
        lines.append(f"Fit at no batch: {', '.join(never)}.")
    return lines


def _span(values: pd.Series) -> str:
    """Return the range of percentages, e.g. '-12% to +3%', or one figure when they agree."""
    low, high = f"{values.min():+.0f}%", f"{values.max():+.0f}%"
    return low if low == high else f"{low} to {high}"


def check_headline(check: pd.DataFrame) -> str | None:
    """Return one line on how far composed whole steps lie from measured ones, on the layouts
    the calibration was not taken from, or None without any."""
    if check.empty or "composed_error_pct" not in check:
        return None
    held = check[check["held_out"].astype(bool)]
    err = _num(held, "composed_error_pct").dropna()
    device = devices(check)
    if err.empty:
        return f"No held-out whole step on {device} to check the composition against."
    layouts = ", ".join(dict.fromkeys(held.loc[err.index, "layout"].astype(str)))
    worst = err.abs().max()
    return (
        f"Composed vs measured whole steps on {device} ({layouts}; calibrated on TP1 only): "
        f"{_span(err)}, at most {worst:.0f}% off over {len(err)} points."
    )


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
    ("brief", "The brief's question: TP8, TP4+PP2 or EP8 for GLM-5 on eight RTX PRO 6000"),
    ("summary", "Summary"),
    ("verdict", "Verdict for the deployment: where a decode step's time goes"),
    ("check", "How far to trust the composition: measured whole steps"),
    ("power", "Power as evidence"),
    ("launch", "Which kernels launch"),
    ("decode", "Decode: expert GEMMs against tokens per expert"),
    ("tune", "Fused-MoE kernel tuned in the engines' conditions"),
    ("collectives", "Collectives"),
    ("provenance", "Provenance"),
)
# Every figure: its file name under plots/, its alt text and its caption.
FIGURES = {
    "verdict_split": (
        "step split per layout and batch",
        "Time per output token split into memory-bound parts, math-bound parts, communication "
        "and launch (kernels x their measured fixed cost), per layout and batch of the named "
        "deployment, as composed (see each row's source).",
    ),
    "check_error": (
        "composed against measured whole steps",
        "Measured whole decode steps of the depth-reduced model on the device at hand (median, "
        "p10..p90 band) against the composition of the same model from its parts (calibrated "
        "on TP1 only) and against the roofline alone.",
    ),
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
    launch: pd.DataFrame,
    decode: pd.DataFrame,
    collective: pd.DataFrame,
    verdict: pd.DataFrame,
    check: pd.DataFrame,
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
        "verdict_split": plots.png(plots.verdict_split(verdict)),
        "check_error": plots.png(plots.check_error(check)),
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
    """Return one row per layout, one column per batch; a cell is the bound and its margin (or
    why it does not fit) and, on its second line, ms per token and tokens/s."""
    if verdict.empty or "bound" not in verdict:
        return pd.DataFrame()
    batches = sorted(verdict["batch"].dropna().unique())
    rows = []
    for (layout, world), part in verdict.groupby(["layout", "world"], sort=False):
        row = {"layout": layout, "GPUs": world}
        by_batch = {r["batch"]: r for r in part.to_dict("records")}
        for batch in batches:
            rec = by_batch.get(batch)
            if rec is None:
                row[f"batch {batch}"] = None
                continue
            cell = verdict_cell(rec)
            if finite(rec.get("tpot_ms")):
                cell += (
                    f"\n{fmt_value(rec['tpot_ms'])} ms/token, "
                    f"{fmt_value(rec['tokens_per_s'])} tok/s"
                )
            row[f"batch {batch}"] = cell
        rows.append(row)
    return pd.DataFrame(rows)


def _summary(launch, decode, verdict, check) -> list[Block]:
    """Return the summary's blocks: headlines and the verdict pivot."""
    lines = headlines(launch, decode, verdict)
    checked = check_headline(check)
    if checked:
        lines.append(checked)
    return [
        Bullets(lines),
        Table(
            verdict_pivot(verdict),
            note="What bounds one decode step of the named deployment, per layout and batch "
            "(concurrent sequences): the part (memory, math, communication, launch: kernels x "
            "their measured fixed cost) that takes most of the step, its margin over the next "
            "one (mixed: within 1.2x; "
            "kernel-limited: under 50% of both roofs), then ms per output token and tokens/s. "
            "A layout that does not fit in memory gets no speed verdict.",
            empty="(no verdict rows)",
            style="verdict",
        ),
    ]


def _verdict(verdict: pd.DataFrame) -> list[Block]:
    """Return the verdict section's blocks: what it is composed from, the figure, the rows."""
    sources = ", ".join(sorted(verdict["source"].astype(str).unique())) if len(verdict) else ""
    inputs = verdict["inputs"].iloc[0] if len(verdict) and "inputs" in verdict else ""
    return [
        Text(
            "One whole decode step per output token (every layer's attention over its KV cache, "
            "dense and MoE layers, norms, embedding, LM head, and every collective the layout "
            "needs), composed for the target the config names. Memory fit comes first: weights "
            "per rank after sharding, the KV cache and a stated runtime reserve against the "
            f"target's memory. Sources of these rows: {sources or 'none'}."
        ),
        Figure("verdict_split"),
        Table(verdict, REPORT_VERDICT_COLUMNS, style="source"),
        Code("Inputs of the first row, and where each comes from", inputs.replace("; ", "\n")),
    ]


def _check(check: pd.DataFrame) -> list[Block]:
    """Return the check section's blocks: the figure and the composed-vs-measured rows."""
    return [
        Text(
            "Real decode steps of a depth-reduced model with every layer type at full width, "
            "captured in one CUDA graph on a GPU (as engines run decode; eager on a CPU, "
            "labelled) and timed on the device at hand, against the composition of the same "
            "model from its parts: launches x the measured per-kernel cost plus each part "
            "group's roofline terms over efficiencies fitted on the TP1 step at its smallest "
            "and largest batch only, so every other batch, every emulated rank (one rank of a "
            "larger layout run alone, collectives left out) and every other layout is held "
            "out; collectives come from the fit on collectives timed in CUDA graphs here."
        ),
        Figure("check_error"),
        Table(check, REPORT_CHECK_COLUMNS, empty="(no measured whole steps)"),
    ]


def _power(power: pd.DataFrame) -> list[Block]:
    """Return the power section's blocks: each load's draw against the limit, and what the
    brief's 39% of the limit is consistent with."""
    from tilesweep.stages.power import BRIEF_POWER_FRAC, brief_consistency

    blocks: list[Block] = [
        Text(
            "Loads of known bound, each sustained for a few seconds on the device at hand "
            "under NVML sampling: the fraction of the enforced power limit they draw (p10, "
            "median, p90). The brief read about 235 W of 600 W "
            f"({BRIEF_POWER_FRAC:.0%}) during decode and took it to mean 'not "
            "communication-bound'."
        ),
        Table(power, REPORT_POWER_COLUMNS, empty="(no power table)"),
    ]
    judged = brief_consistency(power)
    if not judged.empty:
        blocks.append(
            Table(
                judged,
                title=f"Which bounds draw {BRIEF_POWER_FRAC:.0%} of the limit here",
                note="Consistent: the brief's fraction lies inside the load's p10..p90 band on "
                "this device. A fraction of the limit on another GPU is a lead, not proof.",
            )
        )
    return blocks


def _brief(panel: dict, launch: pd.DataFrame, power: pd.DataFrame) -> list[Block]:
    """Return the brief's panel: its 8-GPU layouts, the winner per batch, what would change
    the answer, what power can tell, and the SM120 launch truth of its tiles."""
    from tilesweep.plan.sensitivity import changes

    rows = panel["rows"]
    sources = ", ".join(sorted(rows["source"].astype(str).unique())) if len(rows) else "none"
    blocks: list[Block] = [
        Text(
            "GLM-5 in the deployment's format on eight RTX PRO 6000 over PCIe: TP8, TP4+PP2 "
            f"and EP8 at each batch, composed (sources: {sources}); inputs and their sources "
            "are in the verdict section."
        ),
        Table(pivot_of(rows), title="Bound and speed per layout and batch", style="verdict"),
        Table(panel["winners"], WINNER_COLUMNS, title="Which layout wins, and by how much"),
        Bullets(changes(panel["band"], panel["winners"])),
        Table(
            panel["band"],
            title="Each interconnect and bandwidth input at half and at double",
            collapsed=True,
        ),
    ]
    truth = sm120_launch_truth(launch)
    if not truth.empty:
        blocks.append(
            Table(
                truth,
                title="The brief's tiles on SM120 (NVFP4): which reproduce its initialize failure",
                note="From CUTLASS's own types (SharedStorageSize) against the RTX PRO 6000's "
                "101,376 B opt-in limit: a tile over it passes can_implement and fails "
                "initialize, as the brief saw.",
            )
        )
    from tilesweep.stages.power import brief_consistency

    judged = brief_consistency(power)
    if not judged.empty:
        blocks.append(
            Bullets(
                [
                    f"{r['load']} ({r['expected_bound']}): {r['consistent']}."
                    for r in judged.to_dict("records")
                ]
            )
        )
    return blocks


def pivot_of(rows: pd.DataFrame) -> pd.DataFrame:
    """Return the verdict pivot of some verdict rows (the brief's panel uses its 8-GPU rows)."""
    return verdict_pivot(rows)


SM120_BRIEF_TILES = {(128, 128, 128), (128, 128, 256), (128, 256, 128), (256, 128, 128)}


def sm120_launch_truth(launch: pd.DataFrame) -> pd.DataFrame:
    """Return the brief's four tiles on the RTX PRO 6000 (CUTLASS NVFP4): epilogue, stage
    count asked and chosen, shared memory, limit, and whether it reproduces the brief's
    initialize failure (over the opt-in limit)."""
    need = {"backend", "target", "tile_m", "tile_n", "tile_k", "smem_bytes", "fits"}
    if launch.empty or not need <= set(launch):
        return pd.DataFrame()
    rows = launch[(launch["backend"] == "cutlass") & (launch["target"] == "rtx_pro_6000")]
    tiles = list(zip(rows["tile_m"], rows["tile_n"], rows["tile_k"], strict=True))
    rows = rows[[tuple(int(v) for v in tile) in SM120_BRIEF_TILES for tile in tiles]]
    if rows.empty:
        return pd.DataFrame()
    out = rows.assign(
        tile=[
            f"{m}x{n}x{k}"
            for m, n, k in zip(rows["tile_m"], rows["tile_n"], rows["tile_k"], strict=True)
        ],
        reproduces_brief_failure=[
            "yes: over the opt-in limit"
            if f == "no"
            else ("no" if f in ("default", "optin") else f"unknown ({s})")
            for f, s in zip(rows["fits"], rows["status"], strict=True)
        ],
    )
    cols = [
        "tile", "dtype", "epilogue", "stages_requested", "stages", "smem_bytes",
        "smem_limit_bytes", "overshoot_bytes", "fits", "reproduces_brief_failure", "reason",
    ]  # fmt: skip
    return (
        out[[c for c in cols if c in out]].sort_values(["tile", "epilogue"]).reset_index(drop=True)
    )


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


def _distinct(frames: list[pd.DataFrame], key: str) -> str:
    """Return the distinct values of a column across tables, comma-separated, or 'unknown'."""
    values: set[str] = set()
    for frame in frames:
        if key in frame:
            values |= set(frame[key].dropna().astype(str))
    return ", ".join(sorted(values)) or "unknown"


def _provenance(settings, launch, decode, collective, check, provenance) -> list[Block]:
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
            ("check_error", layout_when, devices(check)),
            ("verdict_split", "composed at aggregation", "none: composed for the target"),
        )
    ]
    return [
        Table(pd.DataFrame(rows), ["what", "value"]),
        Table(pd.DataFrame(when_rows), title="When each figure was measured (UTC)"),
        Code("Resolved config", json.dumps(settings, indent=2, sort_keys=True, default=str)),
    ]


def _tune(tune: pd.DataFrame) -> list[Block]:
    """Return the tuning section's blocks: per batch, the tuned config against each engine
    default and the torch baseline (both GEMMs summed), and why configs could not run."""
    if tune.empty:
        return [
            Text(
                "Not tuned: the fused-MoE kernel is tuned on a GPU machine only (rule "
                "tune_configs), and this sweep ran none."
            )
        ]
    summary = tune_summary(tune)
    failed = tune[tune["status"] != Status.OK].groupby(["dtype", "source", "status"]).size()
    blocks: list[Block] = [
        Text(
            "The project's fused-MoE kernel (kernels/fused_moe.py: routed pairs gathered through "
            "sorted, block-padded ids over all of a rank's experts, GROUP_SIZE_M swizzle, routing "
            "weights in the down GEMM, a direct path for tiny batches) tuned over the engines' "
            "own search space at their batch keys, measured on the device at hand. Times are "
            "gate/up + down (ms, median of CUDA-graph replays); 'x vLLM' is the vLLM default "
            "config's time over the tuned config's time on the same kernel and routed batch; "
            "'x torch' is the same-dtype torch grouped GEMM's time (rows pre-sorted, so its "
            "gather is free) over the tuned kernel's; copy fraction is the fewest bytes over "
            "the time, over the measured copy bandwidth (bytes read plus written), read "
            "fraction the same over the measured read-only bandwidth. 'best' is the fastest "
            "config once the project's variants beyond the engines' space (TMA weight loads, "
            "a persistent grid, split-K, tiny batches sorted by expert) may be picked, one config "
            "per batch for every routing; 'fastest' is the fastest config timed at that batch "
            "and routing, of any source. Variants are never exported, as the engines' kernels "
            "cannot run them."
        ),
        Table(
            tune_targets(summary),
            TUNE_TARGET_COLUMNS,
            title="Against the tuning targets, per problem and routing",
            note="Each figure is the lowest over its range. x vLLM: at every batch timed, and at "
            "M >= 1,024 (tuned, then best); read fraction for 1.15x: the highest fraction of the "
            "measured read-only bandwidth that 1.15x over the vLLM default would need at M >= "
            "1,024; x torch: the best config, then the fastest, at 1-256 tokens per expert; copy "
            "fraction: the tuned config, then the fastest, at 32 tokens per expert or fewer, and "
            "from 1 to 32.",
        ),
        Table(summary, TUNE_SUMMARY_COLUMNS, title="Tuned config per batch", empty="(none)"),
    ]
    if len(failed):
        frame = failed.rename("rows").reset_index()
        note = "screen: configs of the space that could not run (reasons in tune.csv); engine: "
        note += "the engine runner where the engine is not installed"
        blocks.append(Table(frame, list(frame.columns), title="Rows without a time", note=note))
    return blocks


def tune_targets(summary: pd.DataFrame) -> pd.DataFrame:
    """Return one row per (dtype, problem, routing) of a tune summary: the lowest speed-up over
    the vLLM default at every batch timed and at M >= 1,024 (tuned and best), the highest
    fraction of the read-only bandwidth that 1.15x over that default needs at M >= 1,024 (above
    1: no kernel that reads each touched expert's weights once gets there), the lowest best
    speed-up over torch at 1-256 tokens per expert, and the lowest copy fraction at 32 tokens
    per expert or fewer (and from 1 to 32); the same two for the fastest config timed at each
    batch and routing (the project's kernel at its best there)."""
    keys = ["dtype", "experts", "n", "routing"]
    rows = []
    for key, group in summary.groupby(keys):
        tpe = group["tokens_per_expert"]
        big = group[group["m"] >= 1024]
        decode = group[(tpe >= 1) & (tpe <= 256)]
        small = group[tpe <= 32]
        rows.append(
            {
                **dict(zip(keys, key, strict=True)),
                "x_vllm_min": group["x_vllm"].min(),
                "x_vllm_min_m1024": big["x_vllm"].min(),
                "best_x_vllm_min_m1024": big["best_x_vllm"].min(),
                # The read fraction 1.15x over the vLLM default needs (same bytes, 1.15x less time)
                "read_fraction_for_1_15x_m1024": (
                    big["read_fraction"] * 1.15 / big["x_vllm"]
                ).max(),
                "best_x_torch_min_tpe_1_256": decode["best_x_torch"].min(),
                "fastest_x_torch_min_tpe_1_256": decode["fastest_x_torch"].min(),
                **{
                    f"{prefix}copy_fraction_min_tpe_{span}": part[f"{prefix}copy_fraction"].min()
                    for prefix in ("", "fastest_")
                    for span, part in (
                        ("32", small),
                        ("1_32", small[small["tokens_per_expert"] >= 1]),
                    )
                },
            }
        )
    return pd.DataFrame(rows, columns=TUNE_TARGET_COLUMNS)


# Tune-table columns a summary carries for a picked config, and their names after its prefix
# ("" keeps the column's own name).
_BEST_COLUMNS = {"config": "config", "over_vllm_default": "x_vllm", "over_baseline": "x_torch"}


def _fastest_per_point(rows: pd.DataFrame, keys: list[str], prefix: str, columns: dict):
    """Return the fastest of `rows` per `keys` (ties: the smaller config), with `columns`
    renamed to prefix + their new name."""
    first = rows.sort_values([*keys, "time_ms", "config"]).drop_duplicates(keys)
    names = {col: prefix + (new or col) for col, new in columns.items()}
    return first[[*keys, *columns]].rename(columns=names)


def tune_summary(tune: pd.DataFrame) -> pd.DataFrame:
    """Return one row per (dtype, problem, batch, routing): the tuned config, its time, its
    speed-ups over the engine defaults and the baseline, and its copy fraction."""
    picked = tune[(tune["tuned"] == True) & (tune["op"] == "both")]  # noqa: E712
    if picked.empty:
        return pd.DataFrame(columns=TUNE_SUMMARY_COLUMNS)
    out = picked.rename(
        columns={
            "over_vllm_default": "x_vllm",
            "over_vllm_legacy_default": "x_vllm_legacy",
            "over_sglang_default": "x_sglang",
            "over_baseline": "x_torch",
        }
    )
    keys = ["dtype", "experts", "n", "routing", "m"]
    # A tuned config that is also an engine's default is timed under both names: the faster
    # row, as the pick took the faster of its times.
    out = out.sort_values([*keys, "time_ms"]).drop_duplicates(keys)
    if "best" in tune.columns:  # tables written before the variants have no best pick
        best = tune[(tune["best"] == True) & (tune["op"] == "both")]  # noqa: E712
        out = out.merge(_fastest_per_point(best, keys, "best_", _BEST_COLUMNS), on=keys, how="left")
    # The fastest config timed at each batch and routing, of any source (the engines' space,
    # their defaults, the project's variants): the project's kernel at its best on that batch.
    timed = tune[
        (tune["op"] == "both")
        & (tune["status"] == Status.OK)
        & (tune["runner"] == "fused_moe")
        & tune["source"].ne("screen")
    ]
    fastest = _fastest_per_point(timed, keys, "fastest_", {**_BEST_COLUMNS, "copy_fraction": ""})
    out = out.merge(fastest, on=keys, how="left")
    return out.reindex(columns=TUNE_SUMMARY_COLUMNS)


def build(
    settings: dict,
    launch: pd.DataFrame,
    decode: pd.DataFrame,
    collective: pd.DataFrame,
    verdict: pd.DataFrame,
    provenance: dict,
    figures: dict[str, bytes] | None = None,
    check: pd.DataFrame | None = None,
    power: pd.DataFrame | None = None,
    panel: dict | None = None,
    tune: pd.DataFrame | None = None,
) -> ReportData:
    """Return the one ReportData both reports render; figures are drawn unless given. The
    brief's section is there when `panel` is (the deployment is the brief's).

    `provenance` may hold 'measured': {section: when} beside versions and the commit.
    """
    check = pd.DataFrame() if check is None else check
    power = pd.DataFrame() if power is None else power
    model = settings.get("model", {})
    dep = settings.get("deployment", {})
    targets = ", ".join(settings.get("grid", {}).get("targets", [])) or "none"
    hardware = settings.get("hardware", {}).get("name", "hardware missing")
    intro = (
        f"Deployment: {model.get('name', '?')} with {dep.get('weight_dtype', '?')} weights and "
        f"{dep.get('kv_dtype', '?')} KV cache, context {dep.get('context_len', '?')}, on "
        f"{hardware}; launch targets {targets}."
    )
    blocks = {
        "brief": _brief(panel, launch, power) if panel else [],
        "summary": _summary(launch, decode, verdict, check),
        "verdict": _verdict(verdict),
        "check": _check(check),
        "power": _power(power),
        "launch": _launch(launch, provenance),
        "decode": _decode(decode, provenance),
        "tune": _tune(pd.DataFrame() if tune is None else tune),
        "collectives": _collectives(collective, provenance),
        "provenance": _provenance(settings, launch, decode, collective, check, provenance),
    }
    drawn = dict(figures or {})
    if any(name not in drawn for name in FIGURES):
        drawn = {**draw_figures(launch, decode, collective, verdict, check), **drawn}
    return ReportData(
        title=f"tilesweep report: {model.get('name', '?')} on {hardware}",
        intro=intro,
        provenance=provenance,
        sections=[Section(key, title, blocks[key]) for key, title in SECTIONS if blocks[key]],
        figures=drawn,
    )
