"""Snakemake script: measure one layout's whole decode step at every batch."""

from tilesweep.stages import job
from tilesweep.stages.layout import bench_layout

if __name__ == "__main__":  # spawned children re-import this file
    with job(snakemake):
        bench_layout(snakemake.params.cell, snakemake.output.table, snakemake.log[0])
