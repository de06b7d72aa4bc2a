"""Snakemake script: replay one kept tuning run's journals into its tune table and config files."""

from tilesweep.fused_moe.tune import replay
from tilesweep.stages import job

if __name__ == "__main__":
    with job(snakemake):
        replay(
            snakemake.input.spec.rsplit("/", 2)[0],
            snakemake.wildcards.dtype,
            snakemake.output.table,
            snakemake.output.configs,
            snakemake.log[0],
        )
