"""Stage 5b: the verdict from the measured tables, with the engines' figures, fit, panel and answer
card; then its check against the measured whole steps (its own step)."""

import io
import json
from dataclasses import dataclass

import pandas as pd

from tilesweep import answer_card, deployment_fit, deployment_verdict, engine_figures
from tilesweep.cells import concat_cells, content_key, write_cell_bytes
from tilesweep.errors import CellError
from tilesweep.io import concat_tables, read_json
from tilesweep.settings import ModelSettings, RootSettings
from tilesweep.stages import logged, named_files
from tilesweep.stages.tables import write_with_parquet

PANEL = ("rows", "winners", "band")


def _ceilings(inputs: dict[str, list[str]]) -> dict:
    """Return the device's measured ceilings among the inputs, or {}."""
    return read_json(inputs["ceilings"][-1]) if inputs.get("ceilings") else {}


def composer(inputs: dict[str, list[str]], per_cell: bool = False):
    """Return (compose, decode, steps, collective, ceilings) for the verdict."""
    read = concat_cells if per_cell else concat_tables
    decode = read(list(inputs["decode"]))
    if "op" in decode:
        decode = decode[decode["op"] != "whole_moe"].reset_index(drop=True)
    collective = read(list(inputs["collective"]))
    steps = read(list(inputs["layout"]))
    ceilings = _ceilings(inputs)

    def compose(varied: RootSettings) -> pd.DataFrame:
        return deployment_verdict.deployment_table(varied, decode, collective, steps, ceilings)

    return compose, decode, steps, collective, ceilings


def panel_json(panel: dict | None) -> str:
    """Return the question's panel as JSON text: each frame as CSV text, or {} for none."""
    if not panel:
        return "{}\n"
    return json.dumps({k: panel[k].to_csv(index=False) for k in PANEL}, indent=1) + "\n"


def read_panel(path: str) -> dict | None:
    """Return the panel panel_json wrote, or None; an unreadable one raises CellError."""
    saved = read_json(path)
    if not saved:
        return None
    if not isinstance(saved, dict) or not all(isinstance(saved.get(k), str) for k in PANEL):
        raise CellError(f"{path}: not the question's panel (a record of {', '.join(PANEL)})")
    try:
        return {
            k: pd.read_csv(io.StringIO(saved[k])) if saved[k].strip() else pd.DataFrame()
            for k in PANEL
        }
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise CellError(f"{path}: a panel table is not readable ({exc})") from None


@dataclass(frozen=True)
class StepJob:
    """One verdict-step job: settings JSON, inputs, outputs, log, per_cell."""

    settings_json: str
    inputs: dict[str, list[str]]
    outputs: dict
    log_path: str | None = None
    per_cell: bool = False

    @classmethod
    def of(cls, job) -> "StepJob":
        """Return the step job a Snakemake script is given (its `snakemake` object)."""
        return cls(
            job.params.settings,
            named_files(job.input),
            dict(job.output.items()),
            job.log[0],
            job.params.per_cell,
        )

    def read(self, name: str) -> pd.DataFrame:
        """Return one named input's table: joined, or each cell's own output (per_cell)."""
        return (concat_cells if self.per_cell else concat_tables)(list(self.inputs[name]))


def write_verdict(job: StepJob) -> None:
    """Write the verdict, the engines' figures, the fit, the panel and the answer card."""
    settings = RootSettings.from_json(job.settings_json)
    inputs, outputs = job.inputs, job.outputs
    with logged(job.log_path) as log:
        compose, decode, steps, collective, ceilings = composer(inputs, job.per_cell)
        fit = deployment_fit.fit_record(settings, steps, ceilings)
        tables = {
            "verdict": compose(settings),
            "engines": engine_figures.engine_table(settings, decode, collective, steps, ceilings),
        }
        panel = deployment_verdict.question_panel(settings, compose)
        card = answer_card.build(settings, tables["verdict"], engines=tables["engines"])
        log.info("rows: %s; panel: %s", {n: len(f) for n, f in tables.items()}, bool(panel))
    # Each with its record; the verdict's holds its tables' content key (cells.stale_join).
    if outputs.get("fit"):
        write_cell_bytes(outputs["fit"], json.dumps(fit, indent=1, sort_keys=True).encode() + b"\n")
    write_with_parquet(tables, outputs, "verdict", content_key(inputs))
    write_cell_bytes(outputs["panel"], panel_json(panel).encode())
    if outputs.get("card"):
        write_cell_bytes(outputs["card"], answer_card.card_json(card).encode())


def write_check(job: StepJob) -> None:
    """Write the check of the composition against every measured whole step."""
    reads = json.loads(job.settings_json)
    with logged(job.log_path) as log:
        check = deployment_fit.check_table(
            job.read("layout"),
            job.read("collective"),
            _ceilings(job.inputs),
            ModelSettings.model_validate(reads["model"]),
            reads["deployment"]["fit_batches"],
            reads["deployment"]["attention_table"],
        )
        log.info("check rows: %d", len(check))
    write_with_parquet({"check": check}, job.outputs, "check", content_key(job.inputs))
