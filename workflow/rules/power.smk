# Stage 4c: power as evidence. Loads of known bound, sustained under NVML sampling.


rule measure_power:
    output:
        table=f"{R}/power/power.csv",
    log:
        f"{R}/logs/measure_power.log",
    conda:
        "../envs/tilesweep.yaml"
    # Takes every GPU: the all-reduce loads run over two, and nothing else may draw power.
    resources:
        gpu=GPUS,
    params:
        rebuild=rebuild_param(f"{R}/power/power.csv", REBUILDS),
        cell=grid_json(
            {
                "bench": {
                    k: getattr(SWEEP.settings.bench, k) for k in POWER_BENCH_KEYS
                },
                "model": {
                    k: getattr(SWEEP.settings.model, k) for k in POWER_MODEL_KEYS
                },
            }
        ),
        device=DEVICE,
        toolchain=TOOLCHAIN,
        code=SWEEP.rule_code("power"),
    script:
        "../scripts/measure_power.py"
