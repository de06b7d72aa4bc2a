# Stage 5b: the verdict composed from the measured tables, the engines' own figures beside it, the
# launch-aware fit, the question's panel and the answer card (the console shows it as soon as this
# step ends); then the check of the composition against every measured whole step (from a sweep's
# tables, or a kept example's with --config example=FOLDER).


rule verdict:
    input:
        **STAGE5.verdict_inputs(),
    output:
        **(
            {
                f"{n}_parquet": update(STAGE5.table(n, "parquet"))
                for n in COMPOSED_TABLES
            }
            if STAGE5.parquet
            else {}
        ),
        # update(): a failing job leaves the previous verdict in place (Snakemake restores it).
        **{n: update(STAGE5.table(n)) for n in COMPOSED_TABLES},
        fit=update(STAGE5.table("fit", "json")),
        panel=update(STAGE5.table("question", "json")),
        card=update(STAGE5.card),
    log:
        f"{R}/logs/verdict.log",
    # The answer first: the verdict and what it reads run before the other measurements.
    priority: ANSWER_FIRST
    conda:
        "../envs/tilesweep.yaml"
    params:
        # Only its own inputs' and outputs' rebuilds rerun it (a launch check cut short by a
        # kill does not: the verdict reads no launch check).
        rebuilds=grid_json(
            rebuilds_of(
                REBUILDS,
                [
                    *(p for ps in STAGE5.verdict_inputs().values() for p in ps),
                    *(
                        STAGE5.table(n, e)
                        for n in COMPOSED_TABLES
                        for e in ("csv", "parquet")
                    ),
                    STAGE5.table("fit", "json"),
                    STAGE5.table("question", "json"),
                    STAGE5.card,
                ],
            )
        ),
        settings=SWEEP.settings_json(),
        per_cell=STAGE5.per_cell,
        code=SWEEP.rule_code("verdict"),
    script:
        "../scripts/write_verdict.py"


rule check_steps:
    input:
        **STAGE5.check_inputs(),
    output:
        **(
            {f"{n}_parquet": update(STAGE5.table(n, "parquet")) for n in CHECK_TABLES}
            if STAGE5.parquet
            else {}
        ),
        **{n: update(STAGE5.table(n)) for n in CHECK_TABLES},
    log:
        f"{R}/logs/check_steps.log",
    conda:
        "../envs/tilesweep.yaml"
    params:
        # Only its own inputs' and outputs' rebuilds rerun it (a new tile's cells do not).
        rebuilds=grid_json(
            rebuilds_of(
                REBUILDS,
                [
                    *(p for ps in STAGE5.check_inputs().values() for p in ps),
                    *(
                        STAGE5.table(n, e)
                        for n in CHECK_TABLES
                        for e in ("csv", "parquet")
                    ),
                ],
            )
        ),
        settings=SWEEP.check_settings_json(),
        per_cell=STAGE5.per_cell,
        code=SWEEP.rule_code("verdict"),
    script:
        "../scripts/check_steps.py"
