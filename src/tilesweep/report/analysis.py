"""The tables the report derives from the sweep's (pure pandas; a missing column is shown as
missing, never filled with a neighbouring value)."""

import math

import pandas as pd

from tilesweep import backends, columns
from tilesweep.answer_picks import finite, numeric
from tilesweep.plan.messages import fit_alpha_beta
from tilesweep.report.formatting import column, distinct, fmt_value, status_text, verdict_cell


def _own_kernel(runner: str) -> bool:
    """Return whether a runner is one of the project's own kernels (the launch check's)."""
    try:
        return backends.runner_kind(runner) in ("tile", "program")
    except ValueError:
        return False


def short_runner(runner: str) -> str:
    """Return a runner's name without its backend prefix where it names a grid kernel."""
    return (
        backends.runner_kernel(runner) if backends.runner_kind(runner) == "tile" else None
    ) or runner


def ok_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Return the rows whose status is ok."""
    return frame[column(frame, "status", "").astype(str) == columns.Status.OK]


def launch_failures(launch: pd.DataFrame) -> pd.DataFrame:
    """Return launch rows that do not fit or whose check failed (a missing status included)."""
    if launch.empty:
        return launch
    status = column(launch, "status").map(status_text)
    bad = (column(launch, "fits").astype(str) == "no") | (status != columns.Status.OK)
    return launch[bad].assign(status=status[bad])


def fit_counts(launch: pd.DataFrame) -> pd.DataFrame:
    """Return per target and backend how many kernels fit by default, after opt-in, or not."""
    if launch.empty or "target" not in launch:
        return pd.DataFrame(columns=columns.FIT_COUNT_COLUMNS)
    counts = (
        launch.assign(fits=column(launch, "fits", "unknown").fillna("unknown").astype(str))
        .groupby(["target", "backend", "fits"])
        .size()
        .unstack("fits", fill_value=0)
    )
    return counts.reindex(columns=["default", "optin", "no", "unknown"], fill_value=0).reset_index()


def estimate_errors(launch: pd.DataFrame) -> pd.DataFrame:
    """Return the hand estimate against the compiler's or CUTLASS's number, per kernel."""
    if launch.empty or "smem_model_bytes" not in launch:
        return pd.DataFrame()
    actual, model = numeric(launch, "smem_bytes"), numeric(launch, "smem_model_bytes")
    errors = {
        "smem_model_error_bytes": model - actual,
        "smem_model_error_pct": (model - actual) / actual * 100,
    }
    return launch.assign(**errors)[model.notna() & actual.notna()]


def best_per_batch(decode: pd.DataFrame) -> pd.DataFrame:
    """Return per dtype, op, routing and tokens per expert the fastest runner, tile and baseline."""
    keys = [k for k in columns.BEST_PER_BATCH_KEYS if k in decode]
    if decode.empty or "runner" not in decode or not keys:
        return pd.DataFrame(columns=columns.BEST_PER_BATCH_COLUMNS)
    best = columns.fastest_runner(decode, by=keys).rename(columns={"runner": "best_runner"})
    if best.empty:
        return pd.DataFrame(columns=columns.BEST_PER_BATCH_COLUMNS)
    baseline = decode["runner"].astype(str).map(backends.runner_kind) == "baseline"
    for rows, name, ms in (
        (~baseline, "best_tile", "tile_ms"),
        (baseline, "best_baseline", "baseline_ms"),
    ):
        fastest = columns.fastest_runner(decode[rows], by=keys)[[*keys, "runner", "time_ms"]]
        best = best.merge(
            fastest.rename(columns={"runner": name, "time_ms": ms}), on=keys, how="left"
        )
    best["speedup_vs_baseline"] = best["baseline_ms"] / best["tile_ms"]
    return best[[c for c in columns.BEST_PER_BATCH_COLUMNS if c in best]]


def not_timed(decode: pd.DataFrame) -> pd.DataFrame:
    """Return, per runner, dtype, status and reason, how many decode rows were not timed."""
    if decode.empty or "status" not in decode:
        return pd.DataFrame()
    status = decode["status"].map(status_text)
    bad = decode[status != columns.Status.OK].assign(status=status)
    if bad.empty:
        return pd.DataFrame(columns=columns.NOT_TIMED_COLUMNS)
    keys = [c for c in columns.NOT_TIMED_COLUMNS[:-2] if c in bad] + ["reason"]
    return (
        bad.assign(reason=column(bad, "reason", "").fillna("").astype(str))
        .groupby(keys, dropna=False)
        .size()
        .reset_index(name="rows")
    )


def latency_floors(collective: pd.DataFrame) -> pd.DataFrame:
    """Return per collective and group the latency floor, the alpha-beta fit and the peak busbw."""
    ok = ok_rows(collective)
    ok = ok[column(ok, "collective", "").astype(str) != "none"] if "time_ms" in ok else ok[:0]
    if ok.empty:
        return pd.DataFrame()
    rows = []
    for (kind, group), part in ok.groupby(["collective", "group"], sort=True):
        by_size = part.groupby("bytes")["time_ms"].median()
        alpha, beta = fit_alpha_beta(list(by_size.index), list(by_size.values))
        size = numeric(part, "bytes")
        rows.append(
            {
                "collective": kind,
                "group": int(group),
                "backend": ", ".join(sorted(part["backend"].astype(str).unique())),
                "smallest_bytes": size.min(),
                "floor_ms": numeric(part[size == size.min()], "time_ms").median(),
                "latency_ms": alpha,
                "fitted_gbs": beta / 1e6 if math.isfinite(beta) else math.nan,
                "peak_busbw_gbs": numeric(part, "busbw_gbs").max(),
            }
        )
    return pd.DataFrame(rows)


BASELINE_TARGET = 1.0  # the best tile is at least as fast as the fastest torch baseline
COPY_TARGET = 0.90  # ... and reaches 90% of the measured copy bandwidth at small batches
COPY_TARGET_MAX_TOKENS = 32


def decode_targets(decode: pd.DataFrame) -> pd.DataFrame:
    """Return per dtype, op and batch the best Triton tile against its targets, met or not."""
    if decode.empty or "runner" not in decode:
        return pd.DataFrame(columns=columns.DECODE_TARGET_COLUMNS)
    uniform = decode[column(decode, "routing") == "uniform"]
    keys = ["dtype", "op", "tokens_per_expert"]
    kinds = uniform["runner"].astype(str).map(backends.runner_kind)
    tiles = columns.fastest_runner(uniform[kinds == "tile"], by=keys)
    bases = columns.fastest_runner(uniform[kinds == "baseline"], by=keys)
    if tiles.empty or bases.empty:
        return pd.DataFrame(columns=columns.DECODE_TARGET_COLUMNS)
    both = tiles.merge(bases[[*keys, "runner", "time_ms"]], on=keys, suffixes=("", "_base"))
    ratio = both["time_ms_base"] / both["time_ms"]
    copy = numeric(both, "frac_copy_bw")
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
        best_tile=both["runner"].astype(str).map(short_runner),
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
    return out[columns.DECODE_TARGET_COLUMNS].reset_index(drop=True)


def verdict_pivot(verdict: pd.DataFrame) -> pd.DataFrame:
    """Return one row per layout, one column per batch: bound, margin, ms per token, tokens/s."""
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
                cell += f"\n{fmt_value(rec['tpot_ms'])} ms/token"
                if finite(rec.get("x_floor")):
                    cell += f", {rec['x_floor']:.1f}x floor"
                if finite(rec.get("tokens_per_s_per_gpu")):
                    cell += f"\n{fmt_value(rec['tokens_per_s_per_gpu'])} tok/s/GPU "
                    cell += f"({fmt_value(rec['tokens_per_s'])} all GPUs)"
                else:
                    cell += f"\n{fmt_value(rec['tokens_per_s'])} tok/s all GPUs"
            row[f"batch {batch}"] = cell
        rows.append(row)
    return pd.DataFrame(rows)


def launch_coverage(launch: pd.DataFrame, decode: pd.DataFrame) -> pd.DataFrame:
    """Return per project kernel timed in decode whether the launch table holds it, and how."""
    if decode.empty or "runner" not in decode:
        return pd.DataFrame(columns=columns.LAUNCH_COVERAGE_COLUMNS)
    checked = set()
    if not launch.empty and {"backend", "kernel"} <= set(launch.columns):
        checked = set(launch["backend"].astype(str) + ":" + launch["kernel"].astype(str))
    runners = decode[decode["runner"].astype(str).map(_own_kernel)]
    status = column(runners, "status").map(status_text)
    rows = []
    for runner, part in runners.groupby(runners["runner"].astype(str), sort=True):
        st = status[part.index]
        failed = part[st == columns.Status.LAUNCH]
        reasons = column(failed, "reason", "").dropna().astype(str)
        smem = numeric(failed if len(failed) else part, "smem_runtime_bytes").dropna()
        rows.append(
            {
                "runner": runner,
                "backend": runner.split(":", 1)[0],
                "in_launch_check": "yes" if runner in checked else "no",
                "device": distinct([part], "device"),
                "rows_timed": int((st == columns.Status.OK).sum()),
                "rows_failed_launch": len(failed),
                "smem_runtime_bytes": smem.max() if len(smem) else float("nan"),
                "reason": reasons.iloc[0] if len(reasons) else "",
            }
        )
    out = pd.DataFrame(rows, columns=columns.LAUNCH_COVERAGE_COLUMNS)
    return out[(out["rows_timed"] + out["rows_failed_launch"]) > 0].reset_index(drop=True)
