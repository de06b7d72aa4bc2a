# Stage 3b: the project's fused-MoE kernel tuned in the serving engines' conditions (GPU only):
# one job per dtype; its picks go to tune/project_kernel/<dtype>/ for the whole step's runner,
# never named or laid out as an engine's file (see src/tilesweep/fused_moe/tune.py).


rule tune_configs:
    input:
        ceilings=rules.measure_device.output.record,
    output:
        table=f"{R}/tune/{{dtype}}.csv",
        configs=directory(SWEEP.project_kernel_dir("{dtype}")),
    log:
        f"{R}/logs/tune_configs/{{dtype}}.log",
    wildcard_constraints:
        dtype="[a-z0-9]+",
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


# The engines' own kernels: config files searched and picked in vLLM's and SGLang's fused-MoE
# kernels (GPU only; see src/tilesweep/fused_moe/engine_stage.py), one job per engine: the exported
# files, the only ones under tuned/.
rule tune_engine:
    input:
        ceilings=rules.measure_device.output.record,
    output:
        summary=f"{R}/tune/engine_{{engine}}.csv",
        configs=directory(f"{R}/tuned/engine_{{engine}}"),
    log:
        f"{R}/logs/tune_engine/{{engine}}.log",
    wildcard_constraints:
        engine="[a-z]+",
    conda:
        "../envs/tilesweep.yaml"
    threads: ALL_CORES
    resources:
        gpu=min(GPUS, 1),
    params:
        rebuild=rebuild_param(f"{R}/tune/engine_{{engine}}.csv", REBUILDS),
        settings=SWEEP.tune_settings_json(),
        device=DEVICE,
        toolchain=TOOLCHAIN,
        code=SWEEP.rule_code("tune_engine"),
    script:
        "../scripts/tune_engine.py"
