"""Snakemake script: the check of the composition against every measured whole step."""

from tilesweep.stages import job
from tilesweep.stages.verdict import StepJob, write_check

if __name__ == "__main__":  # spawned children re-import this file
    with job(snakemake):
        write_check(StepJob.of(snakemake))
