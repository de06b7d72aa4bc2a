"""The report's sections, each a list of blocks built from the tables."""

from __future__ import annotations

import pandas as pd

from tilesweep import columns, references
from tilesweep.answer_picks import numeric
from tilesweep.answer_rests import collective_words
from tilesweep.plan import row_inputs
from tilesweep.report import headlines
from tilesweep.report.analysis import verdict_pivot
from tilesweep.report.document import TEXTS, Block, Bullets, Code, Figure, Heading, Table, Text
from tilesweep.report.formatting import column, fmt_value, plural

# What a layout's name says (plan.sharding.layout_name), beside the verdict grid.
LAYOUT_WORDS = (
    ("tpT-ppP-epE", "tensor parallel T, pipeline stages P, expert parallel E; T x P x E GPUs"),
)
XEP = (
    "-xep",
    "attention tensor parallel over the layout's GPUs, the MoE layers' whole experts spread "
    "over the same GPUs (expert parallel, as engines run EP)",
)


def verdict_grid(verdict: pd.DataFrame, title: str = "", empty: str = "(no verdict rows)") -> Table:
    """Return the verdict pivot of the given rows (ties worded), with its legend."""
    grid = verdict_pivot(headlines.worded(verdict))
    names = grid["layout"].astype(str) if "layout" in grid else pd.Series(dtype=str)
    words = [*LAYOUT_WORDS, *((XEP,) if names.str.endswith("-xep").any() else ())]
    return Table(
        grid,
        title=title,
        note=TEXTS["verdict_grid_note"],
        empty=empty,
        style="verdict",
        legend=(*words, *headlines.LEGEND.items()) if len(grid) else (),
    )


def summary_blocks(verdict: pd.DataFrame, unasked: str = "") -> list[Block]:
    """Return the verdict at a glance: the grid of fitting layouts, the Pareto figure, `unasked`."""
    fit, never = headlines.fitting_layouts(verdict)
    none = "(no layout fits at any batch)" if len(verdict) else "(no verdict rows)"
    blocks: list[Block] = [verdict_grid(fit, empty=none)]
    line = headlines.never_fits_line(verdict, never)
    blocks += [Text(line)] if line else []
    blocks.append(Figure("pareto"))
    blocks += [Text(unasked)] if unasked else []
    return blocks


def _with_tie(names: list[str]) -> list[str]:
    at = names.index("margin") + 1
    return [*names[:at], "tie", *names[at:]]


def verdict_blocks(verdict: pd.DataFrame) -> list[Block]:
    """Return the verdict section's blocks: what it rests on, the figure and the rows."""
    sources = ", ".join(sorted(verdict["source"].astype(str).unique())) if len(verdict) else ""
    frame = headlines.tie_column(verdict)
    if "tpot_ms" in frame:
        frame = frame.assign(tokens_per_s_per_user=1000.0 / numeric(frame, "tpot_ms"))
    fits = (
        frame["fits_memory"].astype(str) == "yes"
        if "fits_memory" in frame
        else pd.Series(True, index=frame.index)
    )
    key, every = (
        _with_tie(columns.REPORT_KEY_VERDICT_COLUMNS),
        _with_tie(columns.REPORT_VERDICT_COLUMNS),
    )
    first = frame[fits].iloc[0] if fits.any() else None
    inputs = "\n".join(row_inputs.lines(row_inputs.of(first))) if first is not None else ""
    which = (
        f"{first['layout']} at batch {fmt_value(first['batch'])}" if first is not None else "none"
    )
    return [
        Text(TEXTS["verdict_intro"].format(sources=sources or "none")),
        Figure("verdict_split"),
        Table(
            frame[fits],
            key,
            title=f"The {plural(int(fits.sum()), 'layout x batch row')} that fit in memory",
            empty="(no row fits in memory)",
            style="source",
            legend=(
                *headlines.LEGEND.items(),
                ("tokens_per_s_per_user", "1,000 / tpot_ms: one sequence's tokens/s"),
                ("source", "composed: parts at fitted efficiencies; model: roofline alone"),
            ),
        ),
        Table(
            frame[~fits],
            columns.VERDICT_NO_FIT_COLUMNS,
            title=f"The {plural(int((~fits).sum()), 'row')} that do not fit in memory "
            "(no speed verdict)",
            empty="(every row fits)",
            style="source",
            collapsed=True,
        ),
        Table(
            pd.concat([frame[fits], frame[~fits]]),
            every,
            title="Every column of every row, the rows that fit first",
            collapsed=True,
        ),
        Code(f"Inputs of the first row that fits ({which}), and where each comes from", inputs),
    ]


def verdict_collectives(verdict: pd.DataFrame) -> str:
    """Return where the verdict's collectives come from (its first fitting row's inputs)."""
    if verdict.empty or row_inputs.COLUMN not in verdict:
        return "no verdict row names its collectives"
    fits = verdict[column(verdict, "fits_memory", "yes").astype(str) == "yes"]
    rows = fits if len(fits) else verdict
    return collective_words(row_inputs.of(rows.iloc[0])).removeprefix("collectives ")


def check_blocks(check: pd.DataFrame, engines: pd.DataFrame, verdict: pd.DataFrame) -> list[Block]:
    """Return the check section's blocks: the headline, figure, rows and engines' figures."""
    checked = headlines.check_headline(check)
    return [
        Text(TEXTS["check_intro"].format(collectives=verdict_collectives(verdict))),
        *([Bullets([checked])] if checked else []),
        Figure("check_error"),
        Table(check, columns.REPORT_CHECK_COLUMNS, empty="(no measured whole steps)"),
        *engine_blocks(engines),
    ]


def engine_blocks(engines: pd.DataFrame) -> list[Block]:
    """Return the engines' cited figures beside the verdict composed for each, none uncited."""
    if engines.empty:
        return []
    return [
        Heading("Against engines' own figures (cited, not measured here)"),
        Text(TEXTS["engines_intro"]),
        Text(headlines.engine_line(engines)),
        Text(TEXTS["engines_family_note"]),
        Table(references.family_errors(engines), list(references.family_errors(None).columns)),
        Figure("engine_tpot"),
        Table(engines, columns.REPORT_ENGINE_COLUMNS),
    ]
