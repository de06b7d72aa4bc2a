"""The report's one-line findings: what fits, how the estimate does, the fastest decode, what
bounds each layout, and how far the composition lies from measured whole steps."""

from __future__ import annotations

import pandas as pd

from tilesweep.report.analysis import best_per_batch, estimate_errors, fit_counts, launch_failures
from tilesweep.report.formatting import devices, finite, fmt_value, numeric, verdict_cell


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
        worst = fails.loc[numeric(fails, "overshoot_bytes").fillna(-1).idxmax()]
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
    err = numeric(held, "composed_error_pct").dropna()
    device = devices(check)
    if err.empty:
        return f"No held-out whole step on {device} to check the composition against."
    layouts = ", ".join(dict.fromkeys(held.loc[err.index, "layout"].astype(str)))
    worst = err.abs().max()
    return (
        f"Composed vs measured whole steps on {device} ({layouts}; calibrated on TP1 only): "
        f"{_span(err)}, at most {worst:.0f}% off over {len(err)} points."
    )
