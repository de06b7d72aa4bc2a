"""The report's sections, each a list of blocks built from the tables: the answer (summary),
the machine that ran the sweep, verdict, check, launch, decode, collectives and provenance (a
tuner's own sections come from its role: Tuner.report_sections)."""

from __future__ import annotations

import json

import pandas as pd

from tilesweep import references
from tilesweep.answer_card import collective_words
from tilesweep.columns import (
    BEST_PER_BATCH_COLUMNS,
    COLLECTIVE_REPORT_COLUMNS,
    DECODE_TARGET_COLUMNS,
    ESTIMATE_COLUMNS,
    FIT_COUNT_COLUMNS,
    LATENCY_FLOOR_COLUMNS,
    LAUNCH_COVERAGE_COLUMNS,
    LAUNCH_FAILURE_COLUMNS,
    NOT_TIMED_COLUMNS,
    PROVENANCE_KEYS,
    REPORT_CHECK_COLUMNS,
    REPORT_ENGINE_COLUMNS,
    REPORT_KEY_VERDICT_COLUMNS,
    REPORT_LAUNCH_COLUMNS,
    REPORT_VERDICT_COLUMNS,
    TOOLCHAIN_KEY,
    VERDICT_NO_FIT_COLUMNS,
)
from tilesweep.report.analysis import (
    best_per_batch,
    decode_targets,
    estimate_errors,
    fit_counts,
    latency_floors,
    launch_coverage,
    launch_failures,
    not_timed,
    ok_rows,
    verdict_pivot,
)
from tilesweep.report.decode_figures import decode_time_caption
from tilesweep.report.document import Block, Bullets, Code, Figure, Heading, Table, Text
from tilesweep.report.formatting import (
    column,
    devices,
    fmt_value,
    numeric,
    plural,
    utc_minute,
)
from tilesweep.report.headlines import (
    check_headline,
    coverage_lines,
    engine_line,
    fitting_layouts,
    launch_headlines,
    legend,
    machine_headlines,
    never_fits_line,
    tie_column,
    worded,
)
from tilesweep.report.launch_figure import LIMITS


def _when(provenance: dict, key: str) -> str:
    """Return ' Measured <when>.' for a section, or nothing when unknown."""
    when = provenance.get("measured", {}).get(key)
    return f" Measured {when}." if when else ""


# What a layout's name says (grid.layout_slug), beside the verdict grid.
LAYOUT_WORDS = (
    ("tpT-ppP-epE", "tensor parallel T, pipeline stages P, expert parallel E; T x P x E GPUs"),
)
XEP = (
    "-xep",
    "attention tensor parallel over the layout's GPUs, the MoE layers' whole experts spread "
    "over the same GPUs (expert parallel, as engines run EP)",
)


def verdict_grid(verdict: pd.DataFrame, title: str = "", empty: str = "(no verdict rows)") -> Table:
    """Return the verdict pivot of the given rows (ties worded), with its legend beside it
    when it has rows."""
    grid = verdict_pivot(worded(verdict))
    names = grid["layout"].astype(str) if "layout" in grid else pd.Series(dtype=str)
    words = [*LAYOUT_WORDS, *((XEP,) if names.str.endswith("-xep").any() else ())]
    return Table(
        grid,
        title=title,
        note="Per layout and batch (concurrent sequences): what bounds one decode step of the "
        "named deployment and by how much, then ms per output token and TPOT over its floor, then "
        "tokens/s per GPU (as in the answer card) and of all the layout's GPUs.",
        empty=empty,
        style="verdict",
        legend=(*words, *legend()) if len(grid) else (),
    )


def summary_blocks(verdict: pd.DataFrame, unasked: str = "") -> list[Block]:
    """Return the verdict at a glance (the answer card above it names the picks): the verdict
    grid of the layouts that fit (those that fit nowhere in one line), the Pareto figure, and
    why the question's panel is absent (`unasked`)."""
    fit, never = fitting_layouts(verdict)
    none = "(no layout fits at any batch)" if len(verdict) else "(no verdict rows)"
    blocks: list[Block] = [verdict_grid(fit, empty=none)]
    line = never_fits_line(verdict, never)
    blocks += [Text(line)] if line else []
    blocks.append(Figure("pareto"))
    blocks += [Text(unasked)] if unasked else []
    return blocks


def machine_blocks(decode: pd.DataFrame, hardware: str) -> list[Block]:
    """Return what the sweep measured on its own machine, kept apart from the deployment's
    verdict: the device, and the fastest decode kernels there with their bound here."""
    lines = machine_headlines(decode)
    return [
        Text(
            f"Measured on {devices(ok_rows(decode))}, the machine that ran the sweep: facts "
            "about its own kernels against its own ceilings. They feed the parts the verdict "
            f"composes for {hardware} (see the check section); they are not that verdict."
        ),
        *([Bullets(lines)] if lines else [Text("(no decode measurement on this machine)")]),
    ]


def verdict_blocks(verdict: pd.DataFrame) -> list[Block]:
    """Return the verdict section's blocks: what it is composed from, the figure, the key
    columns of the rows that fit (with a `tie` column beside the margin), the rows that do not
    fit and every column behind details elements, and the first fitting row's inputs."""
    sources = ", ".join(sorted(verdict["source"].astype(str).unique())) if len(verdict) else ""
    frame = tie_column(verdict)
    if "tpot_ms" in frame:
        frame = frame.assign(tokens_per_s_per_user=1000.0 / numeric(frame, "tpot_ms"))
    fits = (
        frame["fits_memory"].astype(str) == "yes"
        if "fits_memory" in frame
        else pd.Series(True, index=frame.index)
    )
    at = REPORT_KEY_VERDICT_COLUMNS.index("margin") + 1
    key = [*REPORT_KEY_VERDICT_COLUMNS[:at], "tie", *REPORT_KEY_VERDICT_COLUMNS[at:]]
    at = REPORT_VERDICT_COLUMNS.index("margin") + 1
    every = [*REPORT_VERDICT_COLUMNS[:at], "tie", *REPORT_VERDICT_COLUMNS[at:]]
    first = frame[fits].iloc[0] if fits.any() else None
    inputs = str(first["inputs"]) if first is not None and "inputs" in frame else ""
    which = (
        f"{first['layout']} at batch {fmt_value(first['batch'])}" if first is not None else "none"
    )
    return [
        Text(
            "One whole decode step per output token (every layer's attention over its KV cache, "
            "dense and MoE layers, norms, embedding, LM head, and every collective the layout "
            "needs), composed for the target the config names. Memory fit comes first: weights "
            "per rank after sharding, the KV cache and a stated runtime reserve against the "
            f"target's memory. Sources of these rows: {sources or 'none'}."
        ),
        Figure("verdict_split"),
        Table(
            frame[fits],
            key,
            title=f"The {plural(int(fits.sum()), 'layout x batch row')} that fit in memory",
            empty="(no row fits in memory)",
            style="source",
            legend=(
                *legend(),
                ("tokens_per_s_per_user", "1,000 / tpot_ms: one sequence's tokens/s"),
                ("source", "composed: parts at fitted efficiencies; model: roofline alone"),
            ),
        ),
        Table(
            frame[~fits],
            VERDICT_NO_FIT_COLUMNS,
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
        Code(
            f"Inputs of the first row that fits ({which}), and where each comes from",
            inputs.replace("; ", "\n"),
        ),  # fmt: skip
    ]


def verdict_collectives(verdict: pd.DataFrame | None) -> str:
    """Return where the verdict's collectives come from, read from its first fitting row's
    inputs (answer_card.collective_words), or that it has no row that fits."""
    if verdict is None or verdict.empty or "inputs" not in verdict:
        return "no verdict row names its collectives"
    fits = verdict[column(verdict, "fits_memory", "yes").astype(str) == "yes"]
    rows = fits if len(fits) else verdict
    return collective_words(str(rows["inputs"].iloc[0])).removeprefix("collectives ")


def check_blocks(
    check: pd.DataFrame, engines: pd.DataFrame | None = None, verdict: pd.DataFrame | None = None
) -> list[Block]:
    """Return the check section's blocks: how far off in one line, the figure, the
    composed-vs-measured rows, and the engines' own figures beside the composition."""
    checked = check_headline(check)
    return [
        Text(
            "Real decode steps of a depth-reduced model with every layer type at full width, "
            "captured in one CUDA graph on a GPU (as engines run decode; eager on a CPU, "
            "labelled) and timed on the device at hand, against the composition of the same "
            "model from its parts: launches x each part group's cost per kernel plus its "
            "roofline terms over efficiencies, both read on the TP1 step at its two fit batches "
            "only (deployment.fit_batches), so every other batch, every emulated rank (one rank "
            "of a larger layout run alone, collectives left out) and every other layout is held "
            "out; an attention core the kernel's own tune table covers takes its measured time "
            "(deployment.attention_table). The verdict's own collectives: "
            f"{verdict_collectives(verdict)}."
        ),
        *([Bullets([checked])] if checked else []),
        Figure("check_error"),
        Table(check, REPORT_CHECK_COLUMNS, empty="(no measured whole steps)"),
        *engine_blocks(engines),
    ]


def engine_blocks(engines: pd.DataFrame | None) -> list[Block]:
    """Return the engines' own figures (cited in conf/references) beside the verdict composed
    for each: a heading, what the columns mean, and the rows; nothing where none is cited."""
    if engines is None or engines.empty:
        return []
    return [
        Heading("Against engines' own figures (cited, not measured here)"),
        Text(
            "Each row is a time per output token an engine measured and published "
            "(conf/references, source in `cited`), beside this sweep's composition of the same "
            "model, checkpoint formats, layout, concurrency and serving load (input and output "
            "tokens per request) on the engine's GPUs, with the fit the verdict uses and that "
            "engine's own kernel list and host time (conf/engine; `kernel_list`). "
            "composed_over_engine is composed_tpot_ms over engine_tpot_ms (below 1: the "
            "composition is faster than the engine measured); error_pct is that ratio less 1; "
            "engine_over_floor is the engine's TPOT over the composition's roofline floor. "
            "`role` test: no fitted term saw the figure; train: a fitted term was fitted on it."
        ),
        Text(engine_line(engines)),
        Text(
            "The error per family (model x GPU x engine) over the test figures composed: "
            "in_band of figures within 0.75-1.33x, composed/engine's median and range."
        ),
        Table(references.family_errors(engines), list(references.family_errors(None).columns)),
        Figure("engine_tpot"),
        Table(engines, REPORT_ENGINE_COLUMNS),
    ]


def launch_blocks(
    launch: pd.DataFrame, provenance: dict, decode: pd.DataFrame | None = None
) -> list[Block]:
    """Return the launch section's blocks: findings, what it covers of the kernels timed in
    decode (and which timed kernels failed to launch), counts, the figure, per target failures
    and estimates."""
    blocks: list[Block] = [
        Text(
            "Shared memory per block as the compiler (Triton) or CUTLASS's own types account "
            "it, against each target's limits; smem_model_bytes is the hand estimate. Nothing "
            "here ran on the target: kernels are compiled on this host and checked against the "
            f"target's table.{_when(provenance, 'launch')}"
        )
    ]
    coverage = launch_coverage(launch, pd.DataFrame() if decode is None else decode)
    covered = coverage_lines(coverage)
    table = Table(
        coverage,
        LAUNCH_COVERAGE_COLUMNS,
        title="Kernels timed in decode, and whether the launch check has them",
    )
    if launch.empty or "target" not in launch:
        found = [Bullets(covered), table] if covered else []
        return [*blocks, Text("(no launch checks)"), *found]
    blocks += [Bullets(launch_headlines(launch) + covered)]
    blocks += [table] if covered else []
    blocks += [Table(fit_counts(launch), FIT_COUNT_COLUMNS), Figure("launch_smem")]
    errors = estimate_errors(launch)

    for target, part in launch.groupby("target", sort=False):
        rec = {c: part[c].dropna().iloc[0] for c in part.columns if part[c].notna().any()}
        limits = ", ".join(
            f"{label} {fmt_value(rec[col])} B" for col, label, *_ in LIMITS if col in rec
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
            Table(
                part, REPORT_LAUNCH_COLUMNS, title=f"All {plural(len(part), 'row')}", collapsed=True
            ),
        ]
    return blocks


def decode_blocks(decode: pd.DataFrame, provenance: dict) -> list[Block]:
    """Return the decode section's blocks: figures, best per batch, targets, what was not timed."""
    blocks: list[Block] = [
        Text(
            f"Measured on {devices(ok_rows(decode))}. Times are medians (p10..p90 in the "
            "figure); bound is from arithmetic intensity against the ridge point of the "
            f"measured ceilings.{_when(provenance, 'decode')}"
        ),
        Figure("decode_time", decode_time_caption(decode)),
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


def collective_blocks(
    collective: pd.DataFrame,
    provenance: dict,
    decode: pd.DataFrame | None = None,
    verdict: pd.DataFrame | None = None,
) -> list[Block]:
    """Return the collectives section's blocks: the figure, latency floors, every measurement.
    In a GPU run whose collectives ran on the CPU (gloo), they are labelled as such, kept behind
    details elements and left out of the figure: they are not the GPUs' collectives."""
    ok = ok_rows(collective)
    on = f"Measured on {devices(ok)}.{_when(provenance, 'collective')}"
    kinds = set(column(ok, "device_kind", "").dropna().astype(str))
    gpu_run = "cuda" in set(column(ok_rows(decode if decode is not None else pd.DataFrame()),
                                   "device_kind", "").dropna().astype(str))  # fmt: skip
    cpu_only = bool(kinds) and kinds <= {"cpu"}
    floors = latency_floors(collective)
    if gpu_run and cpu_only:
        backends = ", ".join(sorted(set(column(ok, "backend", "").dropna().astype(str))))
        return [
            Text(
                f"Not this GPU run's collectives: these ran on {devices(ok)} over {backends}, "
                "a test of the method only, so the page draws no figure of them. The verdict's "
                f"collectives: {verdict_collectives(verdict)}.{_when(provenance, 'collective')}"
            ),
            Table(
                floors,
                LATENCY_FLOOR_COLUMNS,
                title=f"Latency floor on the CPU ({backends})",
                collapsed=True,
            ),
            Table(
                ok,
                COLLECTIVE_REPORT_COLUMNS,
                title=f"Every timed message on the CPU ({backends})",
                empty="(no measurements)",
                collapsed=True,
            ),
        ]
    return [
        Text(f"{on} The verdict's collectives: {verdict_collectives(verdict)}."),
        Figure("collective_bandwidth"),
        Table(floors, LATENCY_FLOOR_COLUMNS, title="Latency floor"),
        Table(
            ok,
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


def _job_span(frame: pd.DataFrame) -> str:
    """Return when a table's rows were measured from their own job times (job_start_utc to
    job_end_utc, to the minute, UTC), or '' where they carry none."""
    start = pd.to_datetime(column(frame, "job_start_utc"), utc=True, errors="coerce").dropna()
    end = pd.to_datetime(column(frame, "job_end_utc"), utc=True, errors="coerce").dropna()
    if start.empty:
        return ""
    first, last = utc_minute(start.min()), utc_minute(end.max() if not end.empty else start.max())
    return f"{first if first == last else f'{first} to {last}'} (the rows' job times)"


def provenance_blocks(settings, launch, decode, collective, check, provenance) -> list[Block]:
    """Return the provenance section's blocks: devices, versions, when, and the config."""
    measured_on = [ok_rows(decode), ok_rows(collective)]
    rows = [
        {"what": f"measured rows: {k}", "value": _distinct(measured_on, k)} for k in PROVENANCE_KEYS
    ]
    rows.append(
        {"what": f"launch checks: {TOOLCHAIN_KEY}", "value": _distinct([launch], TOOLCHAIN_KEY)}
    )
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
    # A kept example is re-rendered without its run's provenance file: its rows' own job times
    # where they carry them, else a gap that says so (a table without rows has no time to keep).
    gap = "not kept with the tables" if provenance.get("note") else "unknown"
    when = {"decode": _job_span(decode), **when} if _job_span(decode) else when
    when_rows = [
        {
            "figure": name,
            "measured": measured or (gap if not table.empty else "no rows measured"),
            "on": device,
        }
        for name, measured, table, device in (
            (
                "launch_smem",
                when.get("launch"),
                launch,
                "host compiler, checked against target tables",
            ),
            ("decode_time, decode_roofline", when.get("decode"), decode, devices(ok_rows(decode))),
            (
                "collective_bandwidth",
                when.get("collective"),
                collective,
                devices(ok_rows(collective)),
            ),
            ("check_error", layout_when, check, devices(check)),
        )
    ]
    when_rows.append(
        {
            "figure": "verdict_split",
            "measured": "composed at aggregation",
            "on": "none: composed for the target",
        }
    )
    return [
        Table(pd.DataFrame(rows), ["what", "value"]),
        Table(pd.DataFrame(when_rows), title="When each figure was measured (UTC)"),
        # as_dict: the resolved config written out for the reader, as the rules' params hold it
        Code("Resolved config", json.dumps(settings.as_dict(), indent=2, sort_keys=True)),
    ]
