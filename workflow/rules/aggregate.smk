# Stage 5: join every result into tidy tables, the verdict and the report.


rule aggregate_results:
    input:
        launch=SWEEP.launch_outputs(),
        decode=SWEEP.decode_outputs(),
        collective=SWEEP.collective_outputs(),
        layout=SWEEP.layout_outputs(),
    output:
        launch=f"{R}/tables/launch.csv",
        decode=f"{R}/tables/decode.csv",
        collective=f"{R}/tables/collective.csv",
        verdict=f"{R}/tables/verdict.csv",
        report=f"{R}/report.md",
    log:
        f"{R}/logs/aggregate_results.log",
    params:
        settings=SWEEP.settings_json(),
        code=code_hash(
            "steps/aggregate.py",
            "aggregate.py",
            "verdict.py",
            "report.py",
            "bench/roofline.py",
        ),
    script:
        "../scripts/aggregate_results.py"
