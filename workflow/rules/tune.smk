# Stage 3b: the project's fused-MoE kernel tuned in the serving engines' conditions (GPU only):
# one job per dtype, exported as vLLM / SGLang config files (see src/tilesweep/stages/tune.py).


rule tune_configs:
    input:
        ceilings=rules.measure_device.output.record,
    output:
        table=f"{R}/tune/{{dtype}}.csv",
        configs=directory(f"{R}/tuned/{{dtype}}"),
    log:
        f"{R}/logs/tune_configs/{{dtype}}.log",
    conda:
        "../envs/tilesweep.yaml"
    threads: ALL_CORES
    resources:
        gpu=min(GPUS, 1),
    params:
        rebuild=rebuild_param(f"{R}/tune/{{dtype}}.csv", REBUILDS),
        settings=SWEEP.tune_settings_json(),
        work=lambda w: f"{R}/tune/.work/{w.dtype}",
        device=DEVICE,
        toolchain=TOOLCHAIN,
        code=SWEEP.rule_code("tune"),
    script:
        "../scripts/tune_configs.py"
