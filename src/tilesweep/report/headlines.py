"""The report's words: the answer in one sentence, the tie rule, the badge legend, findings."""

from __future__ import annotations

import itertools
import re
from operator import itemgetter

import pandas as pd

from tilesweep import package_data
from tilesweep.answer_picks import finite, numeric
from tilesweep.answer_rests import spread
from tilesweep.columns import SPLIT_COLUMNS
from tilesweep.plan.bound import KERNEL_LIMITED_BELOW, MIXED_WITHIN
from tilesweep.plan.sensitivity import winners
from tilesweep.references import BAND, corpus_summary
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
    fits = verdict.groupby("layout", sort=False)["fits_memory"].transform(
        lambda s: (s == "yes").any()
    )
    never = list(dict.fromkeys(verdict.loc[~fits, "layout"].astype(str)))
    return verdict[fits], never


def never_fits_line(verdict: pd.DataFrame, never: list[str]) -> str:
    """Return one line naming the layouts that never fit and by how much, or ''."""
    if not never:
        return ""
    parts = []
    for layout in never:
        short = numeric(verdict[verdict["layout"].astype(str) == layout], "mem_short_gb").dropna()
        span = (
            f" ({fmt_value(short.min())} to {fmt_value(short.max())} GB short)"
            if len(short) and short.min() != short.max()
            else (f" ({fmt_value(short.iloc[0])} GB short)" if len(short) else "")
        )
        parts.append(layout + span)
    return f"Fit in memory at no batch, so not in the grid: {', '.join(parts)}."


# ---- the answer ----------------------------------------------------------------------------


def _batches(values: list) -> str:
    """Return a run of batches as words: 'batch 8', 'batches 1 and 8', 'batches 1 to 64'."""
    names = [fmt_value(v) for v in values]
    if len(names) == 1:
        return f"batch {names[0]}"
    return f"batches {names[0]} {'and' if len(names) == 2 else 'to'} {names[-1]}"


def _span(values: list[float], unit: str) -> str:
    """Return the first and last of a run's figures, e.g. '20.9 to 28.6 ms', or one figure."""
    first, last = fmt_value(values[0]), fmt_value(values[-1])
    return f"{first} {unit}" if first == last else f"{first} to {last} {unit}"


def bound_words(rec: dict) -> str:
    """Return what bounds a row in words: 'launch-bound, 4.6x the next part', 'mixed (...)'."""
    bound = str(rec.get("bound") or "bound missing")
    ratio = part_ratio(rec)
    margin = f"{ratio:.2f}x" if bound_tie(rec) else (rec.get("margin") or "")
    if bound == "mixed":
        text = f"mixed (top two parts within {MIXED_WITHIN:g}x: {margin})"
    elif bound == "kernel-limited":
        text = f"kernel-limited (its kernels reach under {KERNEL_LIMITED_BELOW:.0%} of both roofs)"
    elif bound in MARGIN_BOUNDS:
        text = f"{bound}-bound, {margin} the next part"
    else:
        text = bound
    if bound_tie(rec):
        text += f", a tie at the {MIXED_WITHIN:g}x mixed line"
    return text


def _run_words(verdict: pd.DataFrame, winner: str, recs: list[dict], first: bool) -> str:
    """Return one run of batches in words: layout, TPOT, tokens/s, bound and ties."""
    batches = [r["batch"] for r in recs]
    if winner == "none fits":
        return f"no layout fits in memory at {_batches(batches)}"
    rows = [
        verdict[(verdict["layout"] == winner) & (verdict["batch"] == b)].iloc[0].to_dict()
        for b in batches
    ]
    names = {r.get("bound") for r in rows}
    one = len(rows) == 1
    if one:
        bounds = [bound_words(rows[0])]
    elif (
        len(names) == 1
        and names <= set(MARGIN_BOUNDS) - {"mixed"}
        and not any(bound_tie(r) for r in rows)
    ):
        margins = [r.get("margin") or "" for r in rows]
        bounds = [f"{rows[0]['bound']}-bound, {_span(margins, '').strip()} the next part"]
    else:
        bounds = [f"{bound_words(r)} at batch {fmt_value(r['batch'])}" for r in rows]
    ties = [
        f"a tie with {r['runner_up']}"
        + ("" if one else f" at batch {fmt_value(r['batch'])}")
        + f" ({r['lead']} its tokens/s)"
        for r in recs
        if finite(r.get("runner_up_tokens_per_s"))
        and is_tie(r["tokens_per_s"] / r["runner_up_tokens_per_s"], 1.0)
    ]
    floor = _floor_words(rows)
    tpot = _span([r["tpot_ms"] for r in rows], "ms") + (
        f" per output token (TPOT{'; ' + floor if floor else ''})"
        if first
        else (f" ({floor})" if floor else "")
    )
    return (
        f"{winner} ({plural(rows[0]['world'], 'GPU')}) at {_batches(batches)}, {tpot}, "
        f"{_span([r['tokens_per_s'] for r in rows], 'tokens/s')}, " + ", ".join(bounds + ties)
    )


def _floor_words(rows: list[dict]) -> str:
    """Return '3.27x its 4.88 ms roofline floor', or '' where a row has none."""
    ratios = [r.get("x_floor") for r in rows]
    if not all(finite(x) for x in ratios):
        return ""
    floors = _span([r["floor_ms"] for r in rows], "ms")
    return f"{_span(ratios, 'x').replace(' x', 'x')} its {floors} roofline floor"


def how_sure(verdict: pd.DataFrame, check: pd.DataFrame) -> str:
    """Return how sure the verdict is: its source and the check's held-out error."""
    sources = sorted(verdict.loc[verdict["fits_memory"] == "yes", "source"].astype(str).unique())
    if sources == ["model"]:
        return "from the target's roofline alone (source: model): no measured step checks it"
    sure = f"{' and '.join(sources) or 'no'} rows"
    if check.empty or "composed_error_pct" not in check:
        return f"{sure}, unchecked: no whole step was measured to check the composition against"
    held = check[check["held_out"].astype(bool)] if "held_out" in check else check.iloc[0:0]
    largest = _largest_fit_batch(check)
    beyond = held.iloc[0:0]
    if largest is not None and "batch" in held:
        batch = numeric(held, "batch")
        held, beyond = held[batch <= largest], held[batch > largest]
    err = numeric(held, "composed_error_pct").dropna()
    if err.empty:
        return f"{sure}, unchecked: no held-out whole step on {devices(check)}"
    out = (
        f"{sure}; the composition is {spread(err)} off {plural(len(err), 'whole step')} "
        f"measured on {devices(check)} that it was not calibrated on"
    )
    far = numeric(beyond, "composed_error_pct").dropna()
    if not far.empty:
        out += (
            f" up to its largest fit batch ({largest}), and {spread(far)} off "
            f"{plural(len(far), 'whole step')} beyond it (extrapolated)"
        )
    return out + ", per the check table"


def _largest_fit_batch(check: pd.DataFrame) -> int | None:
    """Return the largest batch the check's fit was made on (its `calibrated_on`), if named."""
    found = [
        int(b)
        for text in check.get("calibrated_on", pd.Series(dtype=str)).dropna().astype(str)
        for m in re.finditer(r"at batches \[([\d, ]+)\]", text)
        for b in m.group(1).split(",")
    ]
    return max(found) if found else None


def answer(verdict: pd.DataFrame, check: pd.DataFrame) -> str:
    """Return the report's answer in one sentence, per run of batches, then how sure."""
    if verdict.empty or "tokens_per_s" not in verdict:
        return "No verdict: the deployment table has no rows."

    target = f"{verdict['model'].iloc[0]} on {verdict['hardware'].iloc[0]}"
    # the winners per batch in runs of consecutive batches with one winner
    wins = winners(verdict).to_dict("records")
    runs = [(w, list(recs)) for w, recs in itertools.groupby(wins, key=itemgetter("winner"))]
    if [w for w, _ in runs] == ["none fits"]:
        batches = _batches([r["batch"] for r in runs[0][1]])
        return f"{target}: no layout of the grid fits in memory at {batches}, so none is fastest."
    words = [_run_words(verdict, w, recs, i == 0) for i, (w, recs) in enumerate(runs)]
    return f"{target}, fastest layout: " + "; ".join(words) + f" ({how_sure(verdict, check)})."


def engine_line(engines: pd.DataFrame | None) -> str:
    """Return the composition against engines' own figures in one line, '' where none is cited."""
    got = corpus_summary(engines)
    if not got.get("composed"):
        return ""
    fitted = (
        f"; {got['train_rows']} further figures trained a fitted term and are not counted"
        if got["train_rows"]
        else ""
    )
    gaps = f"; {got['gaps']} not composed (a labelled gap each)" if got["gaps"] else ""
    kept = got["uncontradicted"]
    if got["contradicted"] and kept["composed"]:
        gaps += (
            f"; {got['contradicted']} contradicted by a faster figure of the same deployment at "
            f"a higher concurrency (column source_check), without which {kept['in_band']} of "
            f"{kept['composed']} are within the band, median |error| "
            f"{kept['median_abs_error_pct']:.1f}%"
        )
    return (
        f"Against {got['test_rows']} engine figures no fitted term saw "
        f"({', '.join(got['engines'])} on {', '.join(got['hardware'])}; "
        f"{', '.join(got['models'])}), composed over measured TPOT: {got['in_band']} of "
        f"{got['composed']} within {BAND[0]}-{BAND[1]}x, median |error| "
        f"{got['median_abs_error_pct']:.1f}%, range {got['ratio_min']:.2f}-{got['ratio_max']:.2f}x"
        f"{gaps}{fitted} (every row in the check section)."
    )


# ---- the legend of the badge words -----------------------------------------------------------

# The package data this module reads (rerun_keys.code_hash hashes it with the module).
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
    return (
        f"Composed vs measured whole steps on {device} ({layouts}; calibrated on TP1 only): "
        f"{spread(err)}, at most {err.abs().max():.0f}% off over "
        f"{plural(len(err), 'point')}."
    )
