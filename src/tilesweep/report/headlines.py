"""The report's words: the tie rule, the engines' figures in one line, the legend, findings."""

import pandas as pd

from tilesweep import package_data
from tilesweep.answer_picks import finite, numeric
from tilesweep.answer_rests import spread
from tilesweep.columns import SPLIT_COLUMNS
from tilesweep.plan.bound import KERNEL_LIMITED_BELOW, MIXED_WITHIN
from tilesweep.references import BAND, corpus_summary
from tilesweep.report.document import TEXTS
from tilesweep.report.formatting import devices, fmt_value, plural

# A ratio within 5% of a threshold it is judged against is a tie: the margin of the top part of
# a step over the next against the `mixed` line (plan/bound.py), and the winning layout's
# tokens/s over the runner-up's against 1 (equal).
TIE_WITHIN = 0.05
# The bounds a margin against the `mixed` line decides (kernel-limited is decided before it).
MARGIN_BOUNDS = ("memory", "math", "communication", "launch", "mixed")


def is_tie(ratio: float, threshold: float, within: float = TIE_WITHIN) -> bool:
    """Return whether a ratio lies within `within` (5%) of the threshold it is judged against."""
    return finite(ratio) and abs(float(ratio) / threshold - 1) <= within + 1e-9


def part_ratio(rec: dict) -> float:
    """Return a row's top part over its next part from its split (else its margin), or NaN."""
    parts = sorted((float(rec[c]) for c in SPLIT_COLUMNS if finite(rec.get(c))), reverse=True)
    # A table from before the host term has the four others: its split is whole without it.
    if all(finite(rec.get(c)) for c in SPLIT_COLUMNS if c != "host_ms"):
        return parts[0] / parts[1] if parts[1] > 0 else float("inf")
    margin = rec.get("margin")
    text = margin[:-1] if isinstance(margin, str) and margin.endswith("x") else ""
    return float(text) if finite(text) else float("nan")


def bound_tie(rec: dict) -> bool:
    """Return whether a row's bound is a tie: it fits, its margin within 5% of the `mixed` line."""
    if rec.get("fits_memory") == "no" or rec.get("bound") not in MARGIN_BOUNDS:
        return False
    return is_tie(part_ratio(rec), MIXED_WITHIN)


def worded(verdict: pd.DataFrame) -> pd.DataFrame:
    """Return the verdict with each tied row's margin written to two decimals and marked `tie`."""
    if verdict.empty or "margin" not in verdict:
        return verdict
    margins = [
        f"{part_ratio(rec):.2f}x tie" if bound_tie(rec) else rec.get("margin")
        for rec in verdict.to_dict("records")
    ]
    return verdict.assign(margin=margins)


def tie_column(verdict: pd.DataFrame) -> pd.DataFrame:
    """Return the verdict with a `tie` column beside its margin ('' where none)."""
    if verdict.empty or "bound" not in verdict:
        return verdict
    ties = [
        f"{part_ratio(rec):.2f}x, within 5% of the {MIXED_WITHIN:g}x mixed line"
        if bound_tie(rec)
        else ""
        for rec in verdict.to_dict("records")
    ]
    at = list(verdict.columns).index("margin") + 1 if "margin" in verdict else len(verdict.columns)
    out = verdict.copy()
    out.insert(at, "tie", ties)
    return out


def fitting_layouts(verdict: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Return (the rows of layouts that fit at some batch, the layouts that fit at no batch)."""
    if verdict.empty or "fits_memory" not in verdict:
        return verdict, []
    fits = (verdict["fits_memory"] == "yes").groupby(verdict["layout"], sort=False).transform("any")
    never = list(dict.fromkeys(verdict.loc[~fits, "layout"].astype(str)))
    return verdict[fits], never


def never_fits_line(verdict: pd.DataFrame, never: list[str]) -> str:
    """Return one line naming the layouts that never fit and by how much, or ''."""
    if not never:
        return ""
    parts = []
    for layout in never:
        short = numeric(verdict[verdict["layout"].astype(str) == layout], "mem_short_gb").dropna()
        ends = dict.fromkeys((short.min(), short.max())) if len(short) else {}
        span = f" ({' to '.join(map(fmt_value, ends))} GB short)" if ends else ""
        parts.append(layout + span)
    return f"Fit in memory at no batch, so not in the grid: {', '.join(parts)}."


# ---- the engines' figures ------------------------------------------------------------------


def engine_line(engines: pd.DataFrame | None) -> str:
    """Return the composition against engines' own figures in one line, '' where none is cited."""
    got = corpus_summary(engines)
    if not got.get("composed"):
        return ""
    fitted = f"; {got['train_rows']} further figures trained a fitted term and are not counted"
    gaps = f"; {got['gaps']} not composed (a labelled gap each)" if got["gaps"] else ""
    kept = got["uncontradicted"]
    if got["contradicted"] and kept["composed"]:
        gaps += TEXTS["engine_contradicted"].format(contradicted=got["contradicted"], **kept)
    words = {key: ", ".join(got[key]) for key in ("engines", "hardware", "models")}
    words |= {"gaps": gaps, "fitted": fitted if got["train_rows"] else ""}
    return TEXTS["engine_line"].format(**(got | words), low=BAND[0], high=BAND[1])


# ---- the legend of the badge words -----------------------------------------------------------

DATA_FILES = ("data/report_texts.yaml",)
# The verdict grid's badge words and what each means, its thresholds filled in.
LEGEND = {
    word: meaning.format(
        mixed=f"{MIXED_WITHIN:g}",
        kernel_limited=f"{KERNEL_LIMITED_BELOW:.0%}",
        tie=f"{TIE_WITHIN:.0%}",
        tie_low=f"{MIXED_WITHIN * (1 - TIE_WITHIN):.2f}",
        tie_high=f"{MIXED_WITHIN * (1 + TIE_WITHIN):.2f}",
    )
    for word, meaning in package_data.data_typed(
        "tilesweep", DATA_FILES[0], "legend", dict[str, str]
    ).items()
}


# ---- findings on the kernels and on the machine that ran the sweep ---------------------------


def check_headline(check: pd.DataFrame) -> str | None:
    """Return one line on composed against measured held-out whole steps, or None."""
    if check.empty or "composed_error_pct" not in check:
        return None
    held = check[check["held_out"].astype(bool)]
    err = numeric(held, "composed_error_pct").dropna()
    device = devices(check)
    if err.empty:
        return f"No held-out whole step on {device} to check the composition against."
    layouts = ", ".join(dict.fromkeys(held.loc[err.index, "layout"].astype(str)))
    points = plural(len(err), "point")
    worst = err.abs().max()
    return TEXTS["check_headline"].format(
        device=device, layouts=layouts, spread=spread(err), worst=worst, points=points
    )
