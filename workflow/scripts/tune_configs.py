"""Snakemake script: tune the fused-MoE kernel for one dtype; write its table and config files."""

from tilesweep.fused_moe.tune import tune_fused_moe
from tilesweep.stages import job

if __name__ == "__main__":  # spawned children re-import this file
    with job(snakemake):
        tune_fused_moe(
            snakemake.params.settings,
            snakemake.wildcards.dtype,
            snakemake.input.ceilings,
            snakemake.output.table,
            snakemake.output.configs,
            snakemake.params.work,
            snakemake.log[0],
        )
