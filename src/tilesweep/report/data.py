"""Derived tables the reports show: failures, estimate errors, best runner per batch, latency
floors, and one-line headlines. Pure pandas; every function tolerates missing columns."""

from __future__ import annotations

import math

import pandas as pd

from tilesweep.verdict import PROJECTION_COLUMNS, fit_latency_bandwidth

VERDICT_SHORT = {
    "memory-bound": "memory",
    "math-bound": "math",
    "communication-bound": "comm",
}


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
    if frame.empty or "status" not in frame:
        return frame.iloc[0:0] if "status" not in frame else frame
    return frame[frame["status"].astype(str) == "ok"]


def launch_failures(launch: pd.DataFrame) -> pd.DataFrame:
    """Return launch rows that do not fit or whose check failed, with the reason."""
    if launch.empty:
        return launch
    bad = (_col(launch, "fits").astype(str) == "no") | (
        _col(launch, "status", "ok").astype(str) != "ok"
    )
    return launch[bad]


def fit_counts(launch: pd.DataFrame) -> pd.DataFrame:
    """Return, per target and backend, how many kernels fit by default, after opt-in, or not."""
    if launch.empty or "target" not in launch:
        return pd.DataFrame(columns=["target", "backend", "default", "optin", "no", "unknown"])
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
    """Return, per op, routing and tokens-per-expert: the fastest runner, the fastest kernel
    tile (Triton or CUTLASS), the fastest torch baseline, and the baseline's time over the
    tile's (speedup, >1 = the tile is faster)."""
    ok = ok_rows(decode)
    if ok.empty or "time_ms" not in ok:
        return pd.DataFrame()
    ok = ok.assign(
        time_ms=_num(ok, "time_ms"),
        is_tile=~_col(ok, "runner", "").astype(str).str.startswith("torch"),
    )
    rows = []
    keys = ["op", "routing", "tokens_per_expert"]
    for key, part in ok.groupby(keys, sort=True):
        best = part.loc[part["time_ms"].idxmin()]
        row = dict(zip(keys, key, strict=True))
        row.update(
            best_runner=best["runner"],
            time_ms=best["time_ms"],
            tflops=best.get("tflops"),
            gbs=best.get("gbs"),
            frac_copy_bw=best.get("frac_copy_bw"),
            frac_matmul_peak=best.get("frac_matmul_peak"),
            bound=best.get("bound"),
        )
        tiles, base = part[part["is_tile"]], part[~part["is_tile"]]
        tile = tiles.loc[tiles["time_ms"].idxmin()] if not tiles.empty else None
        baseline = base.loc[base["time_ms"].idxmin()] if not base.empty else None
        row["best_tile"] = tile["runner"] if tile is not None else None
        row["tile_ms"] = tile["time_ms"] if tile is not None else math.nan
        row["best_baseline"] = baseline["runner"] if baseline is not None else None
        row["baseline_ms"] = baseline["time_ms"] if baseline is not None else math.nan
        row["speedup_vs_baseline"] = (
            row["baseline_ms"] / row["tile_ms"]
            if tile is not None and baseline is not None
            else math.nan
        )
        rows.append(row)
    return pd.DataFrame(rows)


def not_timed(decode: pd.DataFrame) -> pd.DataFrame:
    """Return, per runner, status and reason, how many decode rows were not timed."""
    if decode.empty or "status" not in decode:
        return pd.DataFrame()
    bad = decode[decode["status"].astype(str) != "ok"]
    if bad.empty:
        return pd.DataFrame()
    return (
        bad.assign(reason=_col(bad, "reason", "").fillna("").astype(str))
        .groupby(["runner", "status", "reason"])
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
        frame = verdict.assign(source=_col(verdict, "source", "model").fillna("model"))
        same: dict[tuple[str, str], list[str]] = {}
        for (layout, source), part in frame.groupby(["layout", "source"], sort=False):
            same.setdefault((source, verdict_by_batch(part)), []).append(str(layout))
        for (source, desc), layouts in same.items():
            lines.append(f"{', '.join(layouts)} ({source}): {desc}.")
        projection = projection_headline(verdict)
        if projection:
            lines.append(projection)
    return lines


PROJECTION_TABLE = ["layout", "tokens_per_expert", *PROJECTION_COLUMNS]


def projection_errors(verdict: pd.DataFrame) -> pd.DataFrame:
    """Return the model rows of layouts that were also measured: how far the projection, raw
    and calibrated, lies from the measurement."""
    if verdict.empty or "measured_step_ms" not in verdict:
        return pd.DataFrame(columns=PROJECTION_TABLE)
    rows = verdict[
        (_col(verdict, "source").astype(str) == "model") & _num(verdict, "measured_step_ms").notna()
    ]
    return rows[[c for c in PROJECTION_TABLE if c in rows]].reset_index(drop=True)


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
    fastest torch baseline and the copy ceiling, and whether each decode target is met."""
    ok = ok_rows(decode)
    if ok.empty or "runner" not in ok:
        return pd.DataFrame()
    ok = ok[_col(ok, "routing", "uniform") == "uniform"]
    rows = []
    for (dtype, op, tokens), part in ok.groupby(["dtype", "op", "tokens_per_expert"]):
        tiles = part[part["runner"].astype(str).str.startswith("triton:")]
        bases = ok[
            (ok["op"] == op)
            & (ok["tokens_per_expert"] == tokens)
            & (ok["dtype"] == dtype)  # the torch baselines are bf16 only
            & ok["runner"].astype(str).str.startswith("torch")
        ]
        if tiles.empty or bases.empty:
            continue
        best = tiles.sort_values("time_ms").iloc[0]
        base = bases.sort_values("time_ms").iloc[0]
        ratio = base["time_ms"] / best["time_ms"]
        copy = best.get("frac_copy_bw")
        copy_target = None
        if tokens <= COPY_TARGET_MAX_TOKENS and copy == copy:
            copy_target = "met" if copy >= COPY_TARGET else f"missed by {COPY_TARGET - copy:.2f}"
        rows.append(
            {
                "dtype": dtype,
                "op": op,
                "tokens_per_expert": tokens,
                "best_tile": str(best["runner"]).removeprefix("triton:"),
                "time_ms": best["time_ms"],
                "frac_copy_bw": copy,
                "fastest_baseline": base["runner"],
                "baseline_ms": base["time_ms"],
                "baseline_over_tile": ratio,
                "vs_baseline": "met"
                if ratio >= BASELINE_TARGET
                else f"missed: {ratio:.2f}x the baseline's speed",
                "copy_90pct": copy_target or "n/a (above 32 tokens)",
            }
        )
    return pd.DataFrame(rows)
