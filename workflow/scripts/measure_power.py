"""Snakemake script: sustain loads of known bound and sample the device's power."""

from tilesweep.stages import job
from tilesweep.stages.power import measure_power

if __name__ == "__main__":  # spawned children re-import this file
    with job(snakemake):
        measure_power(snakemake.params.cell, snakemake.output.table, snakemake.log[0])
