"""Snakemake script: time one kernel (or the torch baselines) at every decode batch."""

from tilesweep.stages import job
from tilesweep.stages.decode import bench_decode

if __name__ == "__main__":  # spawned children re-import this file
    with job(snakemake):
        bench_decode(
            snakemake.params.cell,
            snakemake.input.ceilings,
            snakemake.output.table,
            snakemake.log[0],
            snakemake.threads,
        )
