"""The HTML report: one self-contained page (inline CSS, PNG figures as base64, no scripts and
no network) with the summary, launch limits, decode rooflines, collectives, layouts and where
every number came from."""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Callable, Iterable

import pandas as pd

from tilesweep.report import data as summary
from tilesweep.report import figures as plots
from tilesweep.report.markdown import fmt_value
from tilesweep.verdict import COLUMNS as VERDICT_TABLE

SECTIONS = (
    ("summary", "Summary"),
    ("launch", "Which kernels launch"),
    ("decode", "Decode"),
    ("collectives", "Collectives"),
    ("layouts", "Layouts"),
    ("provenance", "Provenance"),
)
FIGURES = ("launch_smem", "decode_time", "decode_roofline", "collective_bandwidth", "layouts")

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;
max-width:1200px;padding:0 1.2em 3em;color:#222}
h1{margin:.8em 0 .2em}h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:2em}
nav a{margin-right:1em}figure{margin:1em 0}figure img{max-width:100%;height:auto;
border:1px solid #eee}figcaption{color:#555;font-size:.9em}
table{border-collapse:collapse;margin:.6em 0 1.2em;font-size:.85em}
th,td{border:1px solid #ddd;padding:.25em .5em;text-align:right;vertical-align:top}
th{background:#f4f4f4;text-align:center}td{white-space:nowrap}td.text{text-align:left}
td.wrap{white-space:normal;min-width:20em}
tr.src-model td{background:repeating-linear-gradient(135deg,#fff,#fff 6px,#f3f3f3 6px,
#f3f3f3 12px);color:#555;font-style:italic}
tr.src-measured td{background:#fff}
td.v-memory{background:#dce6f8}td.v-math{background:#fbe1d2}td.v-comm{background:#dff3dd}
td.v-unknown{background:#eee}td small{display:block;color:#555;font-size:.85em}
.badge{display:inline-block;padding:0 .4em;border-radius:3px;font-size:.8em;font-style:normal}
.badge.model{background:#eee;border:1px dashed #888}.badge.measured{background:#333;color:#fff}
.muted{color:#666}details{margin:.5em 0}pre{background:#f7f7f7;padding:.8em;overflow:auto;
font-size:.8em;max-height:30em}.scroll{overflow-x:auto}ul.headlines li{margin:.2em 0}
"""

LAUNCH_COLUMNS = [
    "backend",
    "kernel",
    "dtype",
    "tile_m",
    "tile_n",
    "tile_k",
    "stages",
    "epilogue",
    "smem_bytes",
    "smem_model_bytes",
    "smem_limit_bytes",
    "overshoot_bytes",
    "fits",
    "status",
    "reason",
]
FAILURE_COLUMNS = [
    "backend",
    "kernel",
    "smem_bytes",
    "smem_limit_bytes",
    "overshoot_bytes",
    "fits",
    "status",
    "reason",
]
ESTIMATE_COLUMNS = [
    "backend",
    "tile_m",
    "tile_n",
    "tile_k",
    "stages",
    "epilogue",
    "smem_model_bytes",
    "smem_bytes",
    "smem_model_error_pct",
    "smem_model_error_bytes",
    "mainloop_smem_bytes",
    "epilogue_smem_bytes",
    "measured_smem_bytes",
    "measured_launch",
    "source",
]
# The verdict table's columns, less the layout's factors and the long provenance text.
VERDICT_COLUMNS = [
    c
    for c in VERDICT_TABLE
    if c not in {"tp", "pp", "ep", "world", "layers_per_stage", "power_source", "inputs"}
]
PROVENANCE_KEYS = ("device", "driver", "cuda_runtime", "torch", "triton", "cutlass", "commit")
WRAP_COLUMNS = {"reason", "inputs"}
TEXT_COLUMNS = {"reason", "kernel", "runner", "best_runner", "best_tile", "best_baseline"}


def esc(value: object) -> str:
    """Return value as HTML-escaped text."""
    return html.escape(str(value), quote=True)


def img(png: bytes, alt: str) -> str:
    """Return an <img> element holding the PNG inline as base64."""
    data = base64.b64encode(png).decode("ascii")
    return f'<img alt="{esc(alt)}" src="data:image/png;base64,{data}">'


def figure(png: bytes, alt: str, caption: str) -> str:
    """Return a <figure> with the inline image and its caption."""
    return f"<figure>{img(png, alt)}<figcaption>{esc(caption)}</figcaption></figure>"


def table(
    frame: pd.DataFrame,
    columns: Iterable[str] | None = None,
    row_class: Callable[[dict], str] | None = None,
    digits: int = 3,
) -> str:
    """Return an HTML table of the given columns (those present), every cell escaped."""
    cols = [c for c in (columns or frame.columns) if c in frame.columns]
    if frame.empty or not cols:
        return '<p class="muted">(no rows)</p>'
    head = "".join(f"<th>{esc(c)}</th>" for c in cols)
    body = []
    for rec in frame[cols].to_dict("records"):
        cls = f' class="{esc(row_class(rec))}"' if row_class else ""
        cells = []
        for c in cols:
            text = esc(fmt_value(rec[c], digits))
            if c == "source" and str(rec[c]) in ("model", "measured"):
                text = f'<span class="badge {rec[c]}">{text}</span>'
            kind = ' class="text"' if c in TEXT_COLUMNS or isinstance(rec[c], str) else ""
            kind = ' class="text wrap"' if c in WRAP_COLUMNS else kind
            cells.append(f"<td{kind}>{text}</td>")
        body.append(f"<tr{cls}>{''.join(cells)}</tr>")
    return (
        f'<div class="scroll"><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def figures(
    launch: pd.DataFrame, decode: pd.DataFrame, collective: pd.DataFrame, verdict: pd.DataFrame
) -> dict[str, bytes]:
    """Return every report figure as PNG bytes, by name (the names in FIGURES)."""
    return {
        "launch_smem": plots.png(plots.launch_smem(launch)),
        "decode_time": plots.png(plots.decode_time(decode)),
        "decode_roofline": plots.png(plots.decode_roofline(decode)),
        "collective_bandwidth": plots.png(
            plots.collective_bandwidth(collective, summary.latency_floors(collective))
        ),
        "layouts": plots.png(plots.layout_split(verdict)),
    }


def _when(measured: dict, key: str) -> str:
    """Return ' Measured <when>.' for a section, or nothing when unknown."""
    when = measured.get(key)
    return f" Measured {when}." if when else ""


def _devices(frame: pd.DataFrame) -> str:
    """Return the distinct devices a table's rows were measured on."""
    if frame.empty or "device" not in frame:
        return "unknown device"
    names = sorted(frame["device"].dropna().astype(str).unique())
    return ", ".join(names) or "unknown device"


def _summary(
    settings: dict, launch: pd.DataFrame, decode: pd.DataFrame, verdict: pd.DataFrame
) -> str:
    """Return the summary section: headlines and the verdict per model, layout and batch."""
    out = ['<section id="summary"><h2>Summary</h2>']
    lines = summary.headlines(launch, decode, verdict)
    if lines:
        out.append('<ul class="headlines">' + "".join(f"<li>{esc(x)}</li>" for x in lines))
        out.append("</ul>")
    out.append(
        "<p>What bounds one decode step, per model, layout and tokens per expert: the largest "
        "of memory-bound compute, math-bound compute and communication, its margin over the "
        "runner-up, and the three times (ms) that decide it. Hatched rows are projected "
        "(<code>source = model</code>), plain rows measured.</p>"
    )
    out.append(_verdict_pivot(verdict))
    out.append("</section>")
    return "".join(out)


def _verdict_pivot(verdict: pd.DataFrame) -> str:
    """Return a table: one row per model, layout and source; one column per tokens-per-expert."""
    if verdict.empty or "verdict" not in verdict:
        return '<p class="muted">(no verdict rows)</p>'
    frame = verdict.copy()
    if "source" not in frame:
        frame["source"] = "model"
    if "model" not in frame:
        frame["model"] = ""
    batches = sorted(frame["tokens_per_expert"].dropna().unique())
    head = "<th>model</th><th>layout</th><th>source</th>" + "".join(
        f"<th>{esc(fmt_value(t))} tok/expert</th>" for t in batches
    )
    body = []
    for (model, layout, source), part in frame.groupby(["model", "layout", "source"], sort=False):
        by_t = {r["tokens_per_expert"]: r for r in part.to_dict("records")}
        cells = [
            f'<td class="text">{esc(model)}</td><td class="text">{esc(layout)}</td>'
            f'<td class="text"><span class="badge {esc(source)}">{esc(source)}</span></td>'
        ]
        for t in batches:
            rec = by_t.get(t)
            if rec is None:
                cells.append("<td></td>")
                continue
            short = summary.VERDICT_SHORT.get(str(rec.get("verdict")), "unknown")
            numbers = " / ".join(
                fmt_value(rec.get(k)) or "-"
                for k in ("compute_memory_ms", "compute_math_ms", "comm_ms")
            )
            if summary.finite(rec.get("other_ms")) and rec["other_ms"] > 0:
                numbers += f" (+ other {fmt_value(rec['other_ms'])})"
            title = (
                f"step {fmt_value(rec.get('step_ms'))} ms; memory / math / comm ms: {numbers}; "
                f"runner-up {rec.get('runner_up')}"
            )
            cells.append(
                f'<td class="v-{short}" title="{esc(title)}">{esc(summary.verdict_cell(rec))}'
                f"<small>{esc(numbers)} ms</small></td>"
            )
        body.append(f'<tr class="src-{esc(source)}">{"".join(cells)}</tr>')
    return (
        f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
        '<p class="muted">Cell: verdict x margin over the runner-up; below: memory-bound / '
        "math-bound / communication ms per step.</p>"
    )


def _launch(launch: pd.DataFrame, measured: dict) -> str:
    """Return the launch section: per target, the shared-memory chart, failures and estimates."""
    out = [
        '<section id="launch"><h2>Which kernels launch</h2>',
        "<p>Shared memory per block as the compiler (Triton) or CUTLASS's own types account it, "
        "against each target's limits. Nothing here ran on the target: kernels are compiled on "
        f"this host and checked against the target's table.{esc(_when(measured, 'launch'))}</p>",
    ]
    if launch.empty or "target" not in launch:
        return "".join(out + ['<p class="muted">(no launch checks)</p></section>'])
    out.append(table(summary.fit_counts(launch)))
    errors = summary.estimate_errors(launch)
    for target, part in launch.groupby("target", sort=False):
        rec = {c: part[c].dropna().iloc[0] for c in part.columns if part[c].notna().any()}
        limits = ", ".join(
            f"{label} {fmt_value(rec[col])} B" for col, label, _ in plots.LIMITS if col in rec
        )
        out.append(
            f"<h3>{esc(target)} ({esc(rec.get('arch', ''))})</h3><p>Limits: {esc(limits)}.</p>"
        )
        out.append(
            figure(
                plots.png(plots.launch_smem(part)),
                f"shared memory per kernel on {target}",
                "Bars: shared memory per block (colour: fits by default / after opt-in / not); "
                "hatched: the part outside CUTLASS's mainloop (epilogue and the rest); "
                "diamonds: the hand estimate; lines: default, opt-in and per-SM limits.",
            )
        )
        fails = summary.launch_failures(part)
        out.append("<h4>What fails and why</h4>")
        out.append(
            table(fails, FAILURE_COLUMNS)
            if not fails.empty
            else '<p class="muted">Every kernel fits on this target.</p>'
        )
        out.append("<h4>Hand estimate against the compiler's or CUTLASS's number</h4>")
        part_err = errors[errors["target"] == target] if not errors.empty else errors
        out.append(table(part_err, ESTIMATE_COLUMNS))
        out.append(f"<details><summary>All {len(part)} rows</summary>")
        out.append(table(part, LAUNCH_COLUMNS + ["blocks_per_sm", "regs"]) + "</details>")
    out.append("</section>")
    return "".join(out)


def _decode(decode: pd.DataFrame, images: dict, measured: dict) -> str:
    """Return the decode section: time, bandwidth and roofline plots, best tile per batch."""
    out = [
        '<section id="decode"><h2>Decode: expert GEMMs against tokens per expert</h2>',
        f"<p>Measured on {esc(_devices(summary.ok_rows(decode)))}. Medians with p10..p90; "
        "bound from arithmetic intensity against the ridge point of the measured ceilings."
        f"{esc(_when(measured, 'decode'))}</p>",
        figure(
            images["decode_time"],
            "decode time and bandwidth against tokens per expert",
            "Time per grouped GEMM and achieved bandwidth against tokens per expert, per "
            "runner; the dashed red line is the measured copy bandwidth.",
        ),
        figure(
            images["decode_roofline"],
            "decode roofline",
            "Achieved TFLOPS against arithmetic intensity on the measured roofline; "
            "labels are tokens per expert.",
        ),
        "<h3>Best per batch, and the best tile against the baselines</h3>",
        table(summary.best_per_batch(decode)),
    ]
    targets = summary.decode_targets(decode)
    if not targets.empty:
        out += [
            "<h3>Decode targets</h3><p>The best Triton tile at each batch is at least as fast as "
            "the fastest torch baseline; at 32 tokens per expert or fewer it also reaches 90% of "
            "the measured copy bandwidth. Misses say by how much.</p>",
            table(targets),
        ]
    skipped = summary.not_timed(decode)
    if not skipped.empty:
        out += ["<h3>Not timed</h3>", table(skipped)]
    out.append("</section>")
    return "".join(out)


def _collectives(collective: pd.DataFrame, images: dict, measured: dict) -> str:
    """Return the collectives section: bus bandwidth against message size, latency floors."""
    out = [
        '<section id="collectives"><h2>Collectives</h2>',
        f"<p>Measured on {esc(_devices(summary.ok_rows(collective)))}."
        f"{esc(_when(measured, 'collective'))}</p>",
        figure(
            images["collective_bandwidth"],
            "collective bus bandwidth and time against message size",
            "Bus bandwidth and time against message size per collective and group size; "
            "dotted: the latency floor (the smallest message's time). The table also gives "
            "the least-squares fit time = latency + bytes / bandwidth.",
        ),
        "<h3>Latency floor</h3>",
        table(summary.latency_floors(collective)),
        "</section>",
    ]
    return "".join(out)


def _layouts(verdict: pd.DataFrame, images: dict) -> str:
    """Return the layouts section: stacked time split per layout and batch, and the rows."""
    cols = VERDICT_COLUMNS + [c for c in verdict.columns if "err" in c and c not in VERDICT_COLUMNS]
    return "".join(
        [
            '<section id="layouts"><h2>Layouts: where a decode step\'s time goes</h2>',
            figure(
                images["layouts"],
                "time split per layout and batch",
                "Memory-bound compute, math-bound compute and communication per decode step; "
                "solid bars are measured, hatched pale bars projected (model).",
            ),
            table(verdict, cols, row_class=lambda r: f"src-{r.get('source', 'model')}"),
            "</section>",
        ]
    )


def _distinct(frames: Iterable[pd.DataFrame], key: str) -> str:
    """Return the distinct values of a column across tables, comma-separated."""
    values: set[str] = set()
    for frame in frames:
        if key in frame:
            values |= set(frame[key].dropna().astype(str))
    return ", ".join(sorted(values)) or "unknown"


def _provenance(
    settings: dict,
    launch: pd.DataFrame,
    decode: pd.DataFrame,
    collective: pd.DataFrame,
    verdict: pd.DataFrame,
    provenance: dict,
) -> str:
    """Return the provenance section: devices, versions, commits, when, and the config."""
    measured_on = [summary.ok_rows(decode), summary.ok_rows(collective)]
    rows = [
        {"what": f"measured rows: {k}", "value": _distinct(measured_on, k)} for k in PROVENANCE_KEYS
    ]
    rows.append({"what": "launch checks: toolchain", "value": _distinct([launch], "toolchain")})
    for key, value in provenance.items():
        if key == "measured":
            continue
        rows.append({"what": f"report built with: {key}", "value": value})
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
            (
                "decode_time, decode_roofline",
                when.get("decode"),
                _devices(summary.ok_rows(decode)),
            ),
            (
                "collective_bandwidth",
                when.get("collective"),
                _devices(summary.ok_rows(collective)),
            ),
            ("layouts", layout_when, _devices(verdict)),
        )
    ]
    config = json.dumps(settings, indent=2, sort_keys=True, default=str)
    return "".join(
        [
            '<section id="provenance"><h2>Provenance</h2>',
            table(pd.DataFrame(rows)),
            "<h3>When each figure was measured (UTC)</h3>",
            table(pd.DataFrame(when_rows)),
            "<details><summary>Resolved config</summary>",
            f"<pre>{esc(config)}</pre></details></section>",
        ]
    )


def render(
    settings: dict,
    launch: pd.DataFrame,
    decode: pd.DataFrame,
    collective: pd.DataFrame,
    verdict: pd.DataFrame,
    provenance: dict,
    images: dict[str, bytes] | None = None,
) -> str:
    """Return the whole report as one self-contained HTML page.

    `images` are the figures by name (see `figures`); missing ones are drawn here.
    `provenance` may hold 'measured': {section: when} beside versions and the commit.
    """
    images = dict(images or {})
    if any(name not in images for name in FIGURES):
        images = {**figures(launch, decode, collective, verdict), **images}
    measured = provenance.get("measured", {})
    model = settings.get("model", {})
    grid = settings.get("grid", {})
    title = f"tilesweep report: {model.get('name', '?')}"
    nav = "".join(f'<a href="#{key}">{esc(label)}</a>' for key, label in SECTIONS)
    intro = (
        f"Model <b>{esc(model.get('name', '?'))}</b> (hidden {esc(model.get('hidden'))}, expert "
        f"intermediate {esc(model.get('moe_intermediate'))}, {esc(model.get('routed_experts'))} "
        f"experts, top-{esc(model.get('top_k'))}); projected onto "
        f"<b>{esc(settings.get('hardware', {}).get('name', '?'))}</b>; launch targets "
        f"{esc(', '.join(grid.get('targets', [])))}."
    )
    body = [
        _summary(settings, launch, decode, verdict),
        _launch(launch, measured),
        _decode(decode, images, measured),
        _collectives(collective, images, measured),
        _layouts(verdict, images),
        _provenance(settings, launch, decode, collective, verdict, provenance),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
        f"<header><h1>{esc(title)}</h1><p>{intro}</p><nav>{nav}</nav></header>"
        + "".join(body)
        + "</body></html>\n"
    )
