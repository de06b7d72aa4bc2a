"""The report's sections on what the sweep measured on its own machine, apart from the verdict,
and its provenance: devices, versions, when each figure was measured, the config."""

import json

import pandas as pd

from tilesweep import columns
from tilesweep.answer_picks import finite, numeric
from tilesweep.report import analysis
from tilesweep.report.decode_figures import decode_time_caption
from tilesweep.report.document import TEXTS, Block, Bullets, Code, Figure, Heading, Table, Text
from tilesweep.report.formatting import column, devices, distinct, fmt_value, plural, utc_minute
from tilesweep.report.machine_figures import LIMITS
from tilesweep.report.sections import verdict_collectives


def machine_blocks(decode: pd.DataFrame, hardware: str) -> list[Block]:
    """Return what the sweep measured on its own machine: the device and its fastest kernels."""
    lines = machine_headlines(decode)
    return [
        Text(TEXTS["machine_intro"].format(devices=_on(decode), hardware=hardware)),
        *([Bullets(lines)] if lines else [Text("(no decode measurement on this machine)")]),
    ]


def launch_blocks(launch: pd.DataFrame, provenance: dict, decode: pd.DataFrame) -> list[Block]:
    """Return the launch section's blocks: findings, coverage, counts, figure, failures."""
    blocks: list[Block] = [Text(TEXTS["launch_intro"].format(when=_when(provenance, "launch")))]
    coverage = analysis.launch_coverage(launch, decode)
    covered = coverage_lines(coverage)
    table = Table(
        coverage,
        columns.LAUNCH_COVERAGE_COLUMNS,
        title="Kernels timed in decode, and whether the launch check has them",
    )
    if launch.empty or "target" not in launch:
        found = [Bullets(covered), table] if covered else []
        return [*blocks, Text("(no launch checks)"), *found]
    blocks += [Bullets(launch_headlines(launch) + covered)]
    blocks += [table] if covered else []
    blocks += [Table(analysis.fit_counts(launch), columns.FIT_COUNT_COLUMNS), Figure("launch_smem")]
    errors = analysis.estimate_errors(launch)

    for target, part in launch.groupby("target", sort=False):
        rec = {c: part[c].dropna().iloc[0] for c in part.columns if part[c].notna().any()}
        limits = ", ".join(
            f"{label} {fmt_value(rec[col])} B" for col, label, *_ in LIMITS if col in rec
        )
        fails = analysis.launch_failures(part)
        blocks += [
            Heading(f"{target} ({rec.get('arch', 'arch missing')})"),
            Text(f"Limits: {limits or 'none recorded'}."),
            Table(
                fails,
                columns.LAUNCH_FAILURE_COLUMNS,
                title="What fails and why",
                empty="Every kernel fits on this target.",
            ),
            Table(
                errors[errors["target"] == target] if not errors.empty else errors,
                columns.ESTIMATE_COLUMNS,
                title="Hand estimate against the compiler's or CUTLASS's number",
            ),
            Table(
                part,
                columns.REPORT_LAUNCH_COLUMNS,
                title=f"All {plural(len(part), 'row')}",
                collapsed=True,
            ),
        ]
    return blocks


def decode_blocks(decode: pd.DataFrame, provenance: dict) -> list[Block]:
    """Return the decode section's blocks: figures, best per batch, targets, what was not timed."""
    blocks: list[Block] = [
        Text(TEXTS["decode_intro"].format(devices=_on(decode), when=_when(provenance, "decode"))),
        Figure("decode_time", decode_time_caption(decode)),
        Figure("decode_roofline"),
        Table(
            analysis.best_per_batch(decode),
            columns.BEST_PER_BATCH_COLUMNS,
            title="Best per batch, and the best tile against the baselines",
            note="Per dtype: a tile is compared with the torch baselines of its own dtype.",
            empty="(no measurements)",
        ),
    ]
    targets = analysis.decode_targets(decode)
    if not targets.empty:
        blocks.append(
            Table(
                targets,
                columns.DECODE_TARGET_COLUMNS,
                title="Decode targets",
                note=TEXTS["decode_targets_note"],
            )
        )
    skipped = analysis.not_timed(decode)
    if not skipped.empty:
        blocks.append(Table(skipped, columns.NOT_TIMED_COLUMNS, title="Not timed"))
    return blocks


def collective_blocks(
    collective: pd.DataFrame, provenance: dict, decode: pd.DataFrame, verdict: pd.DataFrame
) -> list[Block]:
    """Return the collectives section's blocks (gloo rows in a GPU run labelled, kept apart)."""
    ok = analysis.ok_rows(collective)
    kinds = set(column(ok, "device_kind", "").dropna().astype(str))
    gpu_run = "cuda" in set(column(analysis.ok_rows(decode), "device_kind", "").dropna())
    on_cpu, when, collectives = "", _when(provenance, "collective"), verdict_collectives(verdict)
    if gpu_run and kinds and kinds <= {"cpu"}:
        backends = distinct([ok], "backend")
        on_cpu = f" on the CPU ({backends})"
        words = {"devices": devices(ok), "backends": backends, "when": when}
        head = [Text(TEXTS["cpu_collectives"].format(collectives=collectives, **words))]
    else:
        head = [
            Text(f"Measured on {devices(ok)}.{when} The verdict's collectives: {collectives}."),
            Figure("collective_bandwidth"),
        ]
    return [
        *head,
        Table(
            analysis.latency_floors(collective),
            columns.LATENCY_FLOOR_COLUMNS,
            title=f"Latency floor{on_cpu}",
            collapsed=bool(on_cpu),
        ),
        Table(
            ok,
            columns.COLLECTIVE_REPORT_COLUMNS,
            title=f"Every timed message{on_cpu}",
            empty="(no measurements)",
            collapsed=True,
        ),
    ]


def launch_headlines(launch: pd.DataFrame) -> list[str]:
    """Return one-sentence findings on the kernels against their targets' limits."""
    lines = []
    counts = analysis.fit_counts(launch)
    for target, part in counts.groupby("target", sort=False):
        n = {fit: int(part[fit].sum()) for fit in ("default", "optin", "no", "unknown")}
        kernels, unknown = plural(sum(n.values()), "kernel"), n.pop("unknown")
        unknown = f", {unknown} unknown" if unknown else ""
        lines.append(
            TEXTS["launch_counts"].format(target=target, kernels=kernels, unknown=unknown, **n)
        )
    fails = analysis.launch_failures(launch)
    if not fails.empty:
        worst = fails.loc[numeric(fails, "overshoot_bytes").fillna(-1).idxmax()]
        lines.append(
            f"Largest miss: {worst.get('target')} {worst.get('kernel')}: "
            f"{str(worst['reason']).rstrip('.')}."
        )
    errors = analysis.estimate_errors(launch)
    if not errors.empty:
        pct = errors["smem_model_error_pct"].dropna()
        if not pct.empty:
            span = {"median": pct.median(), "low": pct.min(), "high": pct.max()}
            lines.append(TEXTS["estimate_error"].format(kernels=plural(len(pct), "kernel"), **span))
    return lines


def machine_headlines(decode: pd.DataFrame) -> list[str]:
    """Return one-sentence findings on the fastest decode kernels of the sweep's machine."""
    lines = []
    best = analysis.best_per_batch(decode)
    if best.empty:
        return lines
    uniform = best[best["routing"].astype(str) == "uniform"]
    uniform = uniform if not uniform.empty else best
    keys = ["op", "dtype"] if "dtype" in uniform else ["op"]
    for key, part in uniform.groupby(keys, sort=False):
        op, dtype = (key[0], key[1]) if len(keys) == 2 else (key[0], "")
        ends = part.sort_values("tokens_per_expert").iloc[[0, -1]].drop_duplicates()
        of = f" {dtype} kernel" if dtype else ""
        for rec in ends.to_dict("records"):
            frac = rec.get("frac_copy_bw")
            said = f", {frac:.0%} of this machine's copy bandwidth" if finite(frac) else ""
            if finite(frac) and frac > 1:  # a read-only kernel outruns the copy's read+write
                said += " (a read-mostly kernel can pass the copy kernel's rate)"
            words = {"op": op, "dtype": f" ({dtype})" if dtype else "", "of": of, "frac": said}
            tokens = int(rec["tokens_per_expert"])
            words |= {"tokens": f"{tokens} token{'' if tokens == 1 else 's'}"}
            words |= {"bound": rec.get("bound") or "unknown"}
            lines.append(TEXTS["machine_fastest"].format(**(rec | words)))
    return lines


def coverage_lines(coverage: pd.DataFrame) -> list[str]:
    """Return what the launch check covers of the kernels timed in decode, in words."""
    if coverage.empty:
        return []
    lacking = coverage[coverage["in_launch_check"] != "yes"]
    n = len(coverage)
    if lacking.empty:
        lines = [f"The launch check covers all {plural(n, 'kernel')} timed in decode."]
    else:
        where = ", ".join(sorted(set(lacking["device"].astype(str))))
        runners, kernels = ", ".join(lacking["runner"].astype(str)), plural(n, "kernel")
        said = {"covered": n - len(lacking), "lacking": len(lacking), "runners": runners}
        lines = [TEXTS["coverage_lacking"].format(kernels=kernels, where=where, **said)]
    for rec in coverage[coverage["rows_failed_launch"] > 0].to_dict("records"):
        # Said beside the launch check's own counts ('0 do not fit'): whether they hold it.
        counted = (
            "the launch check holds it too"
            if rec["in_launch_check"] == "yes"
            else "not a kernel of the launch check, so not in its counts above"
        )
        rows, reason = plural(rec["rows_failed_launch"], "row"), rec["reason"] or "reason missing"
        said = {"rows": rows, "counted": counted, "reason": reason.rstrip(".")}
        lines.append(TEXTS["coverage_failed"].format(**(rec | said)))
    return lines


def _when(provenance: dict, key: str) -> str:
    when = provenance.get("measured", {}).get(key)
    return f" Measured {when}." if when else ""


def _job_span(frame: pd.DataFrame) -> str:
    """Return when a table's rows were measured from their job times (UTC, to the minute), or ''."""
    start = pd.to_datetime(column(frame, "job_start_utc"), utc=True, errors="coerce").dropna()
    end = pd.to_datetime(column(frame, "job_end_utc"), utc=True, errors="coerce").dropna()
    if start.empty:
        return ""
    first, last = utc_minute(start.min()), utc_minute(end.max() if not end.empty else start.max())
    return f"{first if first == last else f'{first} to {last}'} (the rows' job times)"


def _on(frame: pd.DataFrame) -> str:
    return devices(analysis.ok_rows(frame))


def provenance_blocks(settings, launch, decode, collective, check, provenance) -> list[Block]:
    """Return the provenance section's blocks: devices, versions, when, and the config."""
    measured_on = [analysis.ok_rows(decode), analysis.ok_rows(collective)]
    rows = [(f"measured rows: {k}", distinct(measured_on, k)) for k in columns.PROVENANCE_KEYS]
    rows.append(
        (f"launch checks: {columns.TOOLCHAIN_KEY}", distinct([launch], columns.TOOLCHAIN_KEY))
    )
    rows = [(what, value or "unknown") for what, value in rows]
    rows += [(f"report built with: {k}", v) for k, v in provenance.items() if k != "measured"]
    when = provenance.get("measured", {})
    layout_when = "; ".join(
        f"{label}: {when[key]}"
        for key, label in (("decode", "decode"), ("layout", "layout steps"))
        if key in when
    )
    # A kept example is re-rendered without its run's provenance file: its rows' own job times
    # where they carry them, else a gap that says so (a table without rows has no time to keep).
    gap = "not kept with the tables" if provenance.get("note") else "unknown"
    when = {"decode": span, **when} if (span := _job_span(decode)) else when
    compiled = "host compiler, checked against target tables"
    when_rows = [
        {"figure": figure, "measured": measured or (gap if not table.empty else "no rows measured")}
        | {"on": on}
        for figure, measured, table, on in (
            ("launch_smem", when.get("launch"), launch, compiled),
            ("decode_time, decode_roofline", when.get("decode"), decode, _on(decode)),
            ("collective_bandwidth", when.get("collective"), collective, _on(collective)),
            ("check_error", layout_when, check, devices(check)),
        )
    ]
    composed = {"measured": "composed at aggregation", "on": "none: composed for the target"}
    when_rows.append({"figure": "verdict_split", **composed})
    return [
        Table(pd.DataFrame(rows, columns=["what", "value"])),
        Table(pd.DataFrame(when_rows), title="When each figure was measured (UTC)"),
        # as_dict: the resolved config written out for the reader, as the rules' params hold it
        Code("Resolved config", json.dumps(settings.as_dict(), indent=2, sort_keys=True)),
    ]
