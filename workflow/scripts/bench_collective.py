"""Snakemake script: time the collectives one parallel layout needs."""

from tilesweep.stages import job
from tilesweep.stages.collective import bench_collective

if __name__ == "__main__":  # spawned children re-import this file
    with job(snakemake):
        bench_collective(snakemake.params.cell, snakemake.output.table, snakemake.log[0])
