"""Snakemake script: check one kernel against one target's launch limits."""

from tilesweep.stages import job
from tilesweep.stages.launch import check_launch

if __name__ == "__main__":  # spawned children re-import this file
    with job(snakemake):
        check_launch(
            snakemake.params.cell, snakemake.input.build, snakemake.output.record, snakemake.log[0]
        )
