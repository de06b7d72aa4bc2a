"""Snakemake script: report.md and report.html from the tables and the figures."""

from tilesweep.stages import job, named_files
from tilesweep.stages.report import write_report

if __name__ == "__main__":  # spawned children re-import this file
    with job(snakemake):
        inputs = named_files(snakemake.input)
        outputs = dict(snakemake.output.items())
        write_report(snakemake.params.settings, inputs, outputs, snakemake.log[0])
