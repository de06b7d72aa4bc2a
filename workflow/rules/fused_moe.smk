# The fused-MoE package's tuning (GPU only; src/tilesweep/fused_moe/), its outputs keyed by its
# backend's name: the project's kernel tuned in the serving engines' conditions, one job per
# dtype, its picks in tune/fused_moe/project_kernel/<dtype>/ for the whole step's runner, never
# named or laid out as an engine's file (src/tilesweep/fused_moe/tune.py).

from tilesweep.fused_moe import backend as fused_moe


rule tune_configs:
    input:
        ceilings=rules.measure_device.output.record,
    output:
        table=SWEEP.path(fused_moe.tune_table("{dtype}")),
        configs=directory(SWEEP.path(fused_moe.project_kernel_dir("{dtype}"))),
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
        rebuild=rebuild_param(SWEEP.path(fused_moe.tune_table("{dtype}")), REBUILDS),
        settings=SWEEP.tune_settings_json(),
        work=lambda w: SWEEP.path("tune", fused_moe.NAME, ".work", w.dtype),
        device=DEVICE,
        toolchain=TOOLCHAIN,
        code=SWEEP.rule_code("tune_configs"),
    script:
        "../scripts/tune_configs.py"


# The engines' own kernels: config files searched and picked in vLLM's and SGLang's fused-MoE
# kernels (GPU only; see src/tilesweep/fused_moe/engines/search.py), one job per engine: the
# exported files, the only ones under tuned/.
rule tune_engine:
    input:
        ceilings=rules.measure_device.output.record,
    output:
        summary=SWEEP.path(fused_moe.engine_summary("{engine}")),
        configs=directory(SWEEP.path(fused_moe.engine_files("{engine}"))),
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
        rebuild=rebuild_param(
            SWEEP.path(fused_moe.engine_summary("{engine}")), REBUILDS
        ),
        settings=SWEEP.tune_settings_json(),
        device=DEVICE,
        toolchain=TOOLCHAIN,
        code=SWEEP.rule_code("tune_engine"),
    script:
        "../scripts/tune_engine.py"
