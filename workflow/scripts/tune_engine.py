"""Snakemake script: tune and pick config files in one engine's own fused-MoE kernel."""

from tilesweep.fused_moe.engines.search import tune_engine
from tilesweep.stages import job

if __name__ == "__main__":  # spawned children re-import this file
    with job(snakemake):
        tune_engine(
            snakemake.params.settings,
            snakemake.wildcards.engine,
            snakemake.output.summary,
            snakemake.output.configs,
            snakemake.log[0],
        )
