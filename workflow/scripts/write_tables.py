"""Snakemake script: join every per-cell result into the measured tables."""

from tilesweep.stages import job, named_files
from tilesweep.stages.tables import write_tables

if __name__ == "__main__":  # spawned children re-import this file
    with job(snakemake):
        inputs = named_files(snakemake.input)
        outputs = dict(snakemake.output.items())
        write_tables(snakemake.params.settings, inputs, outputs, snakemake.log[0])
