"""Snakemake script: write the best tile per batch as fused-MoE config files."""

from tilesweep.stages.tune import tune_configs

if __name__ == "__main__":  # spawned children re-import this file
    outputs = dict(zip(snakemake.params.dtypes, snakemake.output, strict=True))
    tune_configs(snakemake.params.settings, list(snakemake.input), outputs, snakemake.log[0])
