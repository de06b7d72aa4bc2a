"""Snakemake script: account CUTLASS shared memory for one architecture's cells."""

from tilesweep.stages.build import account_cutlass

if __name__ == "__main__":  # spawned children re-import this file
    account_cutlass(
        snakemake.params.cells, snakemake.output.record, snakemake.log[0], snakemake.threads
    )
