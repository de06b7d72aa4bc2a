"""Snakemake script: draw every report figure from the tables."""

from tilesweep.stages import job, named_files
from tilesweep.stages.report import write_figures

if __name__ == "__main__":  # spawned children re-import this file
    with job(snakemake):
        inputs = named_files(snakemake.input)
        write_figures(inputs, dict(snakemake.output.items()), snakemake.log[0])
