"""Snakemake script: the verdict, its check, the fit and the question's panel."""

from tilesweep.stages import named_files
from tilesweep.stages.verdict import write_verdict

if __name__ == "__main__":  # spawned children re-import this file
    inputs = named_files(snakemake.input)
    outputs = dict(snakemake.output.items())
    write_verdict(snakemake.params.settings, inputs, outputs, snakemake.log[0])
