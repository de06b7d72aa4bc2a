# Stage 4b: measure a whole decode step of a depth-reduced model per layout that fits here.


rule bench_layout:
    output:
        table=f"{R}/layout/{{layout}}.csv",
    log:
        f"{R}/logs/bench_layout/{{layout}}.log",
    conda:
        "../envs/tilesweep.yaml"
    threads: ALL_CORES
    resources:
        gpu=GPUS,
    params:
        rebuild=rebuild_param(f"{R}/layout/{{layout}}.csv", REBUILDS),
        cell=lambda w: SWEEP.layout_step_cell(w.layout),
        device=DEVICE,
        toolchain=TOOLCHAIN,
        code=SWEEP.rule_code("layout"),
    script:
        "../scripts/bench_layout.py"
