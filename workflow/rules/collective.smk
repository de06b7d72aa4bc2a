# Stage 4: time the collectives each parallel layout needs for one decode step.


rule bench_collective:
    output:
        table=f"{R}/collective/{{layout}}.csv",
    log:
        f"{R}/logs/bench_collective/{{layout}}.log",
    # The verdict reads it: before the measurements the answer does not need.
    priority: ANSWER_FIRST
    conda:
        "../envs/tilesweep.yaml"
    # On a CPU the gloo ranks take every core, so no other job perturbs their timings.
    threads: ALL_CORES if GPUS == 0 else 2
    resources:
        gpu=GPUS,
    params:
        rebuild=rebuild_param(f"{R}/collective/{{layout}}.csv", REBUILDS),
        cell=lambda w: SWEEP.collective_cell(w.layout),
        device=DEVICE,
        toolchain=TOOLCHAIN,
        code=SWEEP.rule_code("collective"),
    script:
        "../scripts/bench_collective.py"
