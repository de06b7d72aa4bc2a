# Stage 5b: the verdict composed from the measured tables, its check against the measured whole
# steps, the engines' own figures beside it, the launch-aware fit and the question's panel (from
# a sweep's tables, or a kept example's with --config example=FOLDER).


rule verdict:
    input:
        **STAGE5.verdict_inputs(),
    output:
        **(
            {
                f"{n}_parquet": update(STAGE5.table(n, "parquet"))
                for n in VERDICT_TABLES
            }
            if STAGE5.parquet
            else {}
        ),
        # update(): a failing job leaves the previous verdict in place (Snakemake restores it).
        **{n: update(STAGE5.table(n)) for n in VERDICT_TABLES},
        fit=update(STAGE5.table("fit", "json")),
        panel=update(STAGE5.table("question", "json")),
    log:
        f"{R}/logs/verdict.log",
    conda:
        "../envs/tilesweep.yaml"
    params:
        rebuilds=grid_json(REBUILDS),
        settings=SWEEP.settings_json(),
        code=SWEEP.rule_code("verdict"),
    script:
        "../scripts/write_verdict.py"
