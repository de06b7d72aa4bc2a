"""Snakemake script: the verdict, the engines' figures, the fit, the question's panel and the
answer card."""

from tilesweep.stages.verdict import StepJob, write_verdict

if __name__ == "__main__":  # spawned children re-import this file
    write_verdict(StepJob.of(snakemake))
