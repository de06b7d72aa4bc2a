# After stage 3: the best tile per batch, as vLLM/SGLang fused-MoE config files (GPU runs only).


rule tune_configs:
    input:
        SWEEP.decode_outputs(),
    output:
        SWEEP.tuned_outputs(DEVICE),
    log:
        f"{R}/logs/tune_configs.log",
    conda:
        "../envs/tilesweep.yaml"
    params:
        settings=SWEEP.settings_json(),
        dtypes=SWEEP.settings["grid"]["dtypes"],
        code=code_hash("stages/tune.py"),
    script:
        "../scripts/tune_configs.py"
