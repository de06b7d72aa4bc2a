"""Snakemake script: build one backend's cells for one architecture in one batch job."""

from tilesweep.stages import job
from tilesweep.stages.build import build_batch

if __name__ == "__main__":  # spawned children re-import this file
    with job(snakemake):
        build_batch(
            snakemake.params.cells, snakemake.output.record, snakemake.log[0], snakemake.threads
        )
