"""Stage 5c: the figures (PNG) and the reports (Markdown, self-contained HTML), from the tables."""

from pathlib import Path

import pandas as pd

from tilesweep import answer_card
from tilesweep.cells import content_key, read_cell_bytes, read_cell_json, write_cell_bytes
from tilesweep.errors import CellError
from tilesweep.io import concat_tables
from tilesweep.provenance import git_commit, package_version
from tilesweep.report import contents as report_data
from tilesweep.report import html as report_html
from tilesweep.report import markdown as report_md
from tilesweep.settings import RootSettings
from tilesweep.stages import logged
from tilesweep.stages.verdict import read_panel

PACKAGE_DIR = Path(__file__).resolve().parents[1]
# A kept example is re-rendered from a GPU run's tables, without that run's provenance file.
RERENDERED = "re-rendered from the GPU run's tables; versions above are the renderer's"


# The columns the report reads of each table with rows; one lacking them is refused by file.
NEEDED = {
    "verdict": ("layout", "batch", "fits_memory", "tpot_ms", "bound"),
    "decode": ("status", "time_ms"),
    "launch": ("status",),
    "collective": ("status", "time_ms"),
    "check": ("layout", "batch", "measured_ms", "composed_ms"),
    "engines": ("layout", "batch", "engine_tpot_ms", "composed_tpot_ms"),
    "power": ("status",),
}


RERUN = "rerun the step that writes it"
# The columns of NEEDED that hold numbers, batches and times (a cell of text there is a damaged
# table).
NUMERIC = {c for cols in NEEDED.values() for c in cols if c == "batch" or c.endswith("_ms")}


def _tables(inputs: dict[str, list[str]], names: tuple[str, ...]) -> dict:
    """Return each named table read from its files; raise CellError for a bad one."""
    out = {}
    for name in names:
        paths = list(inputs.get(name, []))
        table = concat_tables(paths)
        where = ", ".join(paths) or name
        if name == "verdict" and paths and table.empty:
            raise CellError(f"{where}: no rows (a verdict has one per layout and batch); rerun it")
        missing = [c for c in NEEDED.get(name, ()) if not table.empty and c not in table]
        if missing:
            raise CellError(f"{where}: no {', '.join(missing)} column; {RERUN}")
        for col in (c for c in NEEDED.get(name, ()) if c in NUMERIC and c in table):
            text = table[col].dropna()
            value = pd.to_numeric(text, errors="coerce")
            # A time (ms) or a batch is finite and not negative: inf is no TPOT.
            odd = value.notna() & ~value.between(0, float("1e300"))
            for what, wrong in (("a number", value.isna()), ("a finite number of at least 0", odd)):
                if wrong.any():
                    shown = text[wrong].iloc[0]
                    shown = repr(shown)[:40] if isinstance(shown, str) else float(shown)
                    raise CellError(f"{where}: {col}={shown} is not {what}; {RERUN}")
        out[name] = table
    return out


def write_figures(inputs: dict[str, list[str]], outputs: dict, log_path: str | None = None) -> None:
    """Draw every report figure from the tables and write each as PNG."""
    with logged(log_path) as log:
        names = ("launch", "decode", "collective", "verdict", "check", "engines", "tune")
        drawn = report_data.draw_figures(*_tables(inputs, names).values())
        log.info("figures: %s", sorted(drawn))
    # Each with its record, holding its tables' content key (cells.stale_join).
    joined = content_key(inputs)
    for name, png in drawn.items():
        write_cell_bytes(outputs[name], png, inputs=joined)


def provenance(inputs: dict[str, list[str]]) -> dict:
    """Return the report's provenance: renderer commit, versions, when measured."""
    out = {"commit": git_commit(str(PACKAGE_DIR))}
    out |= {name: package_version(name) for name in ("triton", "torch", "nvidia-cutlass")}
    saved = [read_cell_json(p) for p in inputs.get("provenance", [])]
    return out | ({"measured": saved[0].get("measured", {})} if saved else {"note": RERENDERED})


def write_report(
    settings_json: str, inputs: dict[str, list[str]], outputs: dict, log_path: str | None = None
) -> None:
    """Write report.md, report.html and answer.json from the tables, the panel and the figures."""
    settings = RootSettings.from_json(settings_json)
    names = ("launch", "decode", "collective", "verdict", "check", "engines", "power", "tune")
    with logged(log_path) as log:
        t = _tables(inputs, names)
        card = answer_card.build(settings, t["verdict"], t["check"], t["engines"])
        given = {
            "figures": {Path(p).stem: read_cell_bytes(p) for p in inputs["figures"]},
            "panel": read_panel(inputs["panel"][0]) if inputs.get("panel") else None,
            "dropins": concat_tables(list(inputs.get("dropins", []))),
            "card": card,
            **{name: t[name] for name in names[4:]},  # check, engines, power, tune
        }
        data = report_data.build(settings, *(t[n] for n in names[:4]), provenance(inputs), **given)
        text, page = report_md.render(data), report_html.render(data)
        log.info("html report %d bytes, %d figures", len(page), len(data.figures))
    joined = content_key(inputs)
    write_cell_bytes(outputs["report"], text.encode(), inputs=joined)  # see write_figures
    write_cell_bytes(outputs["html"], page.encode(), inputs=joined)
    if outputs.get("answer"):
        answer_card.write(card, outputs["answer"])
