# Stage 5a: join every per-cell result into the measured tables (CSV and Parquet).


rule tables:
    input:
        **SWEEP.table_inputs(),
    output:
        # update(): a failing job leaves the previous tables in place (Snakemake restores them).
        **{name: update(STAGE5.table(name)) for name in MEASURED_TABLES},
        **{f"{n}_parquet": update(STAGE5.table(n, "parquet")) for n in MEASURED_TABLES},
        provenance=update(STAGE5.provenance[0]),
    log:
        f"{R}/logs/tables.log",
    conda:
        "../envs/tilesweep.yaml"
    params:
        rebuilds=grid_json(REBUILDS),
        settings=SWEEP.settings_json(),
        code=SWEEP.rule_code("tables"),
    script:
        "../scripts/write_tables.py"
