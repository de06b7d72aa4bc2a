# Stage 5c: the figures (PNG, registered for `snakemake --report`, captioned from
# workflow/report/) and the reports: report.md and the self-contained report.html, both opened by
# the answer card, which is also written as answer.json.


rule figures:
    input:
        **STAGE5.figure_inputs(),
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
        **STAGE5.report_inputs(),
    output:
        report=update(str(STAGE5.reports / "report.md")),
        # The answer card both reports open with, and the console's last lines.
        answer=update(str(STAGE5.reports / "answer.json")),
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
        rebuilds=grid_json(REBUILDS),
        settings=SWEEP.settings_json(),
        code=SWEEP.rule_code("report"),
    script:
        "../scripts/write_report.py"
