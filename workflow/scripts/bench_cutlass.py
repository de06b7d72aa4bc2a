"""Snakemake script: run the CUTLASS SM90 FP8 grouped GEMM program at every decode batch."""

from tilesweep.stages.decode import bench_cutlass

if __name__ == "__main__":  # spawned children re-import this file
    bench_cutlass(
        snakemake.params.cell, snakemake.input.ceilings, snakemake.output.table, snakemake.log[0]
    )
