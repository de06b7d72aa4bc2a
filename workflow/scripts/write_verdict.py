"""Snakemake script: the verdict, the engines' figures, the fit, the question's panel and the
answer card."""

from tilesweep.stages import named_files
from tilesweep.stages.verdict import write_verdict

if __name__ == "__main__":  # spawned children re-import this file
    inputs = named_files(snakemake.input)
    outputs = dict(snakemake.output.items())
    write_verdict(
        snakemake.params.settings,
        inputs,
        outputs,
        snakemake.log[0],
        per_cell=snakemake.params.per_cell,
    )
