# Stage 5c: the figures (PNG, registered for `snakemake --report`, captioned from
# workflow/report/) and the reports: report.md and the self-contained report.html.


rule figures:
    input:
        launch=STAGE5.measured["launch"],
        decode=STAGE5.measured["decode"],
        collective=STAGE5.measured["collective"],
        verdict=rules.verdict.output.verdict,
        check=rules.verdict.output.check,
    output:
        **{
            name: report(
                update(str(STAGE5.plots / f"{name}.png")),
                caption=f"../report/{name}.rst",
                category=FIGURE_CATEGORIES[name],
            )
            for name in FIGURE_CATEGORIES
        },
    log:
        f"{R}/logs/figures.log",
    conda:
        "../envs/tilesweep.yaml"
    params:
        rebuilds=grid_json(REBUILDS),
        code=SWEEP.rule_code("report"),
    script:
        "../scripts/draw_figures.py"


rule report:
    input:
        launch=STAGE5.measured["launch"],
        decode=STAGE5.measured["decode"],
        collective=STAGE5.measured["collective"],
        power=STAGE5.measured["power"],
        tune=STAGE5.measured["tune"],
        verdict=rules.verdict.output.verdict,
        check=rules.verdict.output.check,
        engines=rules.verdict.output.engines,
        panel=rules.verdict.output.panel,
        figures=list(rules.figures.output),
        provenance=STAGE5.provenance,
    output:
        report=update(str(STAGE5.reports / "report.md")),
        html=report(
            update(str(STAGE5.reports / "report.html")),
            caption="../report/report_html.rst",
            category="Report",
        ),
    log:
        f"{R}/logs/report.log",
    conda:
        "../envs/tilesweep.yaml"
    params:
        settings=SWEEP.settings_json(),
        code=SWEEP.rule_code("report"),
    script:
        "../scripts/write_report.py"
