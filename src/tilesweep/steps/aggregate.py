"""Stage 5: join every result into the tables, the verdict and the report."""

from __future__ import annotations

import json

from tilesweep import aggregate, report, verdict
from tilesweep.io import write_table, write_text
from tilesweep.provenance import git_commit, package_version
from tilesweep.steps import logged

INPUTS = ("launch", "decode", "collective", "layout")
OUTPUTS = ("launch", "decode", "collective", "verdict", "report")


def aggregate_results(
    settings_json: str, inputs: dict, outputs: dict, log_path: str | None = None
) -> None:
    """Write launch, decode, collective and verdict tables and the Markdown report."""
    settings = json.loads(settings_json)
    with logged(log_path) as log:
        launch = aggregate.launch_table(list(inputs["launch"]))
        decode = aggregate.concat_tables(list(inputs["decode"]))
        collective = aggregate.concat_tables(list(inputs["collective"]))
        steps = aggregate.concat_tables(list(inputs["layout"]))
        table = verdict.verdict_table(settings, decode, collective, steps)
        log.info(
            "launch %d rows, decode %d, collective %d, verdict %d",
            len(launch),
            len(decode),
            len(collective),
            len(table),
        )
        provenance = {
            "commit": git_commit(),
            "triton": package_version("triton"),
            "torch": package_version("torch"),
            "nvidia-cutlass": package_version("nvidia-cutlass"),
        }
        text = report.render(settings, launch, decode, collective, table, provenance)
    write_table(outputs["launch"], launch)
    write_table(outputs["decode"], decode)
    write_table(outputs["collective"], collective)
    write_table(outputs["verdict"], table)
    write_text(outputs["report"], text)
