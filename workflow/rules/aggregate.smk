# Stage 5: join every result into tidy tables (CSV and Parquet), the verdict, the figures
# and the reports: report.md and the self-contained report.html. The figures are also
# registered for `snakemake --report`, captioned from workflow/report/.


rule aggregate_results:
    input:
        launch=SWEEP.launch_outputs(),
        decode=SWEEP.decode_outputs(),
        collective=SWEEP.collective_outputs(),
        layout=SWEEP.layout_outputs(),
        power=[f"{R}/power/power.csv"],
        tune=[p for p in SWEEP.tuned_outputs() if p.endswith(".csv")],
        ceilings=[rules.measure_device.output.record],
        shipped_fit=SWEEP.shipped_fit(),
    output:
        launch=f"{R}/tables/launch.csv",
        fit=f"{R}/tables/fit.json",
        decode=f"{R}/tables/decode.csv",
        collective=f"{R}/tables/collective.csv",
        verdict=f"{R}/tables/verdict.csv",
        check=f"{R}/tables/check.csv",
        power=f"{R}/tables/power.csv",
        tune=f"{R}/tables/tune.csv",
        report=f"{R}/report.md",
        html=report(
            f"{R}/report.html",
            caption="../report/report_html.rst",
            category="Report",
        ),
        launch_parquet=f"{R}/tables/launch.parquet",
        decode_parquet=f"{R}/tables/decode.parquet",
        collective_parquet=f"{R}/tables/collective.parquet",
        verdict_parquet=f"{R}/tables/verdict.parquet",
        check_parquet=f"{R}/tables/check.parquet",
        power_parquet=f"{R}/tables/power.parquet",
        tune_parquet=f"{R}/tables/tune.parquet",
        plot_launch_smem=report(
            f"{R}/plots/launch_smem.png",
            caption="../report/launch_smem.rst",
            category="Launch",
        ),
        plot_decode_time=report(
            f"{R}/plots/decode_time.png",
            caption="../report/decode_time.rst",
            category="Decode",
        ),
        plot_decode_roofline=report(
            f"{R}/plots/decode_roofline.png",
            caption="../report/decode_roofline.rst",
            category="Decode",
        ),
        plot_collective_bandwidth=report(
            f"{R}/plots/collective_bandwidth.png",
            caption="../report/collective_bandwidth.rst",
            category="Collectives",
        ),
        plot_verdict_split=report(
            f"{R}/plots/verdict_split.png",
            caption="../report/verdict_split.rst",
            category="Verdict",
        ),
        plot_check_error=report(
            f"{R}/plots/check_error.png",
            caption="../report/check_error.rst",
            category="Verdict",
        ),
    log:
        f"{R}/logs/aggregate_results.log",
    conda:
        "../envs/tilesweep.yaml"
    params:
        settings=SWEEP.settings_json(),
        code=code_hash("stages/aggregate.py"),
    script:
        "../scripts/aggregate_results.py"
