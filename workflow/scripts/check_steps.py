"""Snakemake script: the check of the composition against every measured whole step."""

from tilesweep.stages.verdict import StepJob, write_check

if __name__ == "__main__":  # spawned children re-import this file
    write_check(StepJob.of(snakemake))
