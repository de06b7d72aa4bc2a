# Stage 4b: measure a whole decode step of a depth-reduced model per layout that fits here.


rule bench_layout:
    output:
        table=f"{R}/layout/{{layout}}.csv",
    log:
        f"{R}/logs/bench_layout/{{layout}}.log",
    # The step a GPU's fit is made on comes before the other measurements (the verdict reads it);
    # the rest only feed the check, after the answer.
    priority: lambda w: ANSWER_FIRST if w.layout == FIT_LAYOUT else 0
    conda:
        "../envs/tilesweep.yaml"
    # On a CPU the step's ranks take every core; on a GPU it needs two, and the CPU work beside
    # it (builds, launch checks, the CUTLASS accounting) goes on.
    threads: ALL_CORES if GPUS == 0 else 2
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
