"""Snakemake script: measure the benchmark device's own ceilings."""

from tilesweep.stages import job
from tilesweep.stages.decode import measure_device

if __name__ == "__main__":  # spawned children re-import this file
    with job(snakemake):
        measure_device(
            snakemake.params.catalog, snakemake.output.record, snakemake.log[0], snakemake.threads
        )
