"""Snakemake script: the verdict, the engines' figures, the fit, the question's panel and the
answer card."""

from tilesweep.stages import job
from tilesweep.stages.verdict import StepJob, write_verdict

if __name__ == "__main__":  # spawned children re-import this file
    with job(snakemake):
        write_verdict(StepJob.of(snakemake))
