"""Snakemake script: the check of the composition against every measured whole step."""

from tilesweep.stages import named_files
from tilesweep.stages.verdict import write_check

if __name__ == "__main__":  # spawned children re-import this file
    inputs = named_files(snakemake.input)
    outputs = dict(snakemake.output.items())
    write_check(
        snakemake.params.settings,
        inputs,
        outputs,
        snakemake.log[0],
        per_cell=snakemake.params.per_cell,
    )
