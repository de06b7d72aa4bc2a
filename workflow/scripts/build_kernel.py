"""Snakemake script: build one kernel for its architecture with its backend."""

from tilesweep.stages import job
from tilesweep.stages.build import build_kernel

if __name__ == "__main__":  # spawned children re-import this file
    with job(snakemake):
        build_kernel(snakemake.params.cell, snakemake.output.record, snakemake.log[0])
