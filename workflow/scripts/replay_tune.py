"""Snakemake script: replay one kept tuning run's journals into its tune table and config files."""

from tilesweep.fused_moe.tune import replay

replay(
    snakemake.input.spec.rsplit("/", 2)[0],
    snakemake.wildcards.dtype,
    snakemake.output.table,
    snakemake.output.configs,
    snakemake.log[0],
)
