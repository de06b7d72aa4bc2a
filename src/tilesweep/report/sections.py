"""The report's sections, each a list of blocks built from the tables; the question's own
(conf/question) weigh its readings: power and its panel."""

import pandas as pd

from tilesweep import columns, package_data, references
from tilesweep.answer_picks import numeric
from tilesweep.answer_rests import collective_words
from tilesweep.measure.power_load import reading_consistency
from tilesweep.plan import row_inputs
from tilesweep.plan.sensitivity import changes
from tilesweep.report import headlines
from tilesweep.report.analysis import verdict_pivot
from tilesweep.report.document import TEXTS, Block, Bullets, Code, Figure, Heading, Table, Text
from tilesweep.report.formatting import column, fmt_value, plural, whole
from tilesweep.settings.question_group import Question


def verdict_grid(verdict: pd.DataFrame, title: str = "", empty: str = "(no verdict rows)") -> Table:
    """Return the verdict pivot of the given rows (ties worded), with its legend."""
    grid = verdict_pivot(headlines.worded(verdict))
    names = grid["layout"].astype(str) if "layout" in grid else pd.Series(dtype=str)
    words = [("tpT-ppP-epE", TEXTS["layout_words"])]
    words += [("-xep", TEXTS["layout_words_xep"])] if names.str.endswith("-xep").any() else []
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
    fits = column(frame, "fits_memory", "yes").astype(str) == "yes"
    key, every = map(
        _with_tie, (columns.REPORT_KEY_VERDICT_COLUMNS, columns.REPORT_VERDICT_COLUMNS)
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


_LISTS = package_data.column_lists("tilesweep.report.sections")
TILE_TRUTH_COLUMNS, TILE_FINDING_NEEDS = _LISTS["TILE_TRUTH_COLUMNS"], _LISTS["TILE_FINDING_NEEDS"]


def _judged(power: pd.DataFrame, asked: Question | None) -> pd.DataFrame:
    if asked is None or asked.power is None:
        return pd.DataFrame()
    return reading_consistency(power, asked.power.fraction, asked.name)


def power_blocks(power: pd.DataFrame, asked: Question | None) -> list[Block]:
    """Return the power section's blocks: each load's draw, what the question's reading fits."""
    text = TEXTS["power_intro"]
    reading = asked.power if asked is not None else None
    if reading is not None:
        text += " " + TEXTS["power_reading"].format(name=asked.name, r=reading)
    blocks: list[Block] = [
        Text(text),
        Table(power, columns.REPORT_POWER_COLUMNS, empty="(no power table)"),
    ]
    judged = _judged(power, asked)
    if not judged.empty:
        blocks.append(
            Table(
                judged,
                title=f"Which bounds draw {reading.fraction:.0%} of the limit here",
                note=TEXTS["power_judged_note"].format(name=asked.name),
            )
        )
    return blocks


def question_blocks(
    asked: Question, panel: dict, launch: pd.DataFrame, power: pd.DataFrame
) -> list[Block]:
    """Return the question's panel: layouts, winner per batch, sensitivity, tiles, power."""
    rows = panel["rows"]
    sources = ", ".join(sorted(rows["source"].astype(str).unique())) if len(rows) else "none"
    blocks: list[Block] = [
        Text(TEXTS["question_intro"].format(setting=asked.setting, sources=sources)),
        verdict_grid(rows, "Bound and speed per layout and batch"),
        Table(panel["winners"], columns.WINNER_COLUMNS, title="Which layout wins, and by how much"),
        Bullets(changes(panel["band"], panel["winners"])),
        Table(
            panel["band"],
            title="Each interconnect and bandwidth input at half and at double",
            collapsed=True,
        ),
    ]
    truth = tile_launch_truth(launch, asked) if asked.tiles else pd.DataFrame()
    if not truth.empty:
        blocks.append(Table(truth, title=asked.tiles.title, note=asked.tiles.note))
        blocks.append(Bullets(tile_failure_findings(launch, asked)))
    judged = _judged(power, asked).to_dict("records")
    said = [f"{r['load']} ({r['expected_bound']}): {r['consistent']}." for r in judged]
    return blocks + ([Bullets(said)] if said else [])


def _asked_rows(launch: pd.DataFrame, asked: Question) -> tuple[pd.DataFrame, dict]:
    """Return the asked tiles' launch rows, each `tile` named ('128x128x64'), and what ran."""
    tiles = asked.tiles
    ran = {f"{t.m}x{t.n}x{t.k}": t.ran for t in tiles.shapes}
    rows = launch[(launch["backend"] == tiles.backend) & (launch["target"] == asked.hardware)]
    shapes = rows[["tile_m", "tile_n", "tile_k"]].itertuples(index=False)
    rows = rows.assign(tile=["x".join(str(int(v)) for v in shape) for shape in shapes])
    return rows[rows["tile"].isin(ran)], ran


def tile_launch_truth(launch: pd.DataFrame, asked: Question) -> pd.DataFrame:
    """Return the question's tiles on its hardware, and whether each reproduces its failure."""
    need = {"backend", "target", "tile_m", "tile_n", "tile_k", "smem_bytes", "fits"}
    if launch.empty or not need <= set(launch):
        return pd.DataFrame()
    rows, ran = _asked_rows(launch, asked)
    if rows.empty:
        return pd.DataFrame()
    reproduces = f"reproduces_{asked.name}_failure"
    over = f"no: over the opt-in limit, but the {asked.name} saw it run"
    said = [
        (over if ran.get(t) else "yes: over the opt-in limit")
        if f == "no"
        else ("no" if f in ("default", "optin") else f"unknown ({s})")
        for t, f, s in zip(rows["tile"], rows["fits"], rows["status"], strict=True)
    ]
    out = rows.assign(**{reproduces: said})
    cols = [*TILE_TRUTH_COLUMNS, reproduces, "reason"]
    return (
        out[[c for c in cols if c in out]].sort_values(["tile", "epilogue"]).reset_index(drop=True)
    )


def _stages(asked: str) -> str:
    return "auto stages" if asked == "auto" else f"{asked} stages asked"


def _over_limit(row: dict, auto: dict | None, ran: bool | None, name: str) -> str:
    sizes = {"smem": int(row["smem_bytes"]), "over": int(row["overshoot_bytes"])}
    outcome = TEXTS[f"tile_ran_{str(ran).lower()}"].format(name=name)
    limit = int(row["smem_limit_bytes"])
    asked = _stages(str(whole(row["stages_requested"])))
    combination = f"{row['tile']}, {row['epilogue']} epilogue, {asked}"
    said = TEXTS["tile_over"].format(combination=combination, limit=limit, outcome=outcome, **sizes)
    if auto is not None and row["asked"] != "auto":
        optin = " after opt-in" if auto["fits"] == "optin" else ""
        more = "tile_auto_over" if auto["fits"] == "no" else "tile_auto_fits"
        stages = int(auto["stages"]) if auto["fits"] != "no" else None
        said += TEXTS[more].format(smem=int(auto["smem_bytes"]), stages=stages, optin=optin)
    return said + "."


def _settings_matched(rows: pd.DataFrame, ran: dict[str, bool], name: str) -> str | None:
    """Return which setting matches every tile the question saw run or fail, or the closest ones."""
    if not ran:
        return None
    tally = []
    for (epilogue, asked), group in rows.groupby(["epilogue", "asked"], sort=True):
        fits = {t: f != "no" for t, f in zip(group["tile"], group["fits"], strict=True)}
        if set(ran) <= set(fits):
            missed = [t for t in ran if fits[t] != ran[t]]
            tally.append((len(ran) - len(missed), f"{epilogue} epilogue, {_stages(asked)}", missed))
    if not tally:
        return None
    best = max(score for score, _, _ in tally)
    closest = [(label, missed) for score, label, missed in tally if score == best]
    names = "; ".join(label for label, _ in closest)
    misses = "; ".join(f"{label} (misses {', '.join(missed)})" for label, missed in closest)
    said = "settings_matched" if best == len(ran) else "settings_closest"
    return TEXTS[said].format(seen=len(ran), name=name, names=names, best=best, misses=misses)


def tile_failure_findings(launch: pd.DataFrame, asked: Question) -> list[str]:
    """Return the question's tile findings, one sentence each, from the launch rows."""
    need = set(TILE_FINDING_NEEDS)
    if launch.empty or not need <= set(launch) or not asked.tiles:
        return []
    rows, ran = _asked_rows(launch, asked)
    rows = rows[rows["fits"].isin(["default", "optin", "no"])]  # checked: no build failure
    if rows.empty:
        return []
    rows = rows.assign(asked=[str(whole(v)) for v in rows["stages_requested"]])
    rows = rows.sort_values(["tile", "epilogue", "asked"])
    records = rows.to_dict("records")
    auto = {(r["tile"], r["epilogue"]): r for r in records if r["asked"] == "auto"}
    said = [
        _over_limit(r, auto.get((r["tile"], r["epilogue"])), ran.get(r["tile"]), asked.name)
        for r in records
        if r["fits"] == "no"
    ]
    over = {r["tile"] for r in records if r["fits"] == "no"}
    for tile, saw in ran.items():
        if saw is False and tile not in over and tile in set(rows["tile"]):
            said.append(TEXTS["tile_all_fit"].format(tile=tile, name=asked.name))
    matched = _settings_matched(rows, {t: v for t, v in ran.items() if v is not None}, asked.name)
    return said + ([matched] if matched else [])
