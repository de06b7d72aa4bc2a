"""Snakemake script: join every result into the tables, the verdict and the report."""

from tilesweep.stages.aggregate import INPUTS, OUTPUTS, aggregate_results

if __name__ == "__main__":  # spawned children re-import this file
    inputs = {name: list(getattr(snakemake.input, name)) for name in INPUTS}
    outputs = {name: getattr(snakemake.output, name) for name in OUTPUTS}
    aggregate_results(snakemake.params.settings, inputs, outputs, snakemake.log[0])
