# Stage 4b: measure a real MoE decode step per parallel layout that fits the machine at hand.


rule bench_layout:
    input:
        ceilings=rules.measure_device.output.record,
        # Only a GPU step picks its expert GEMMs from the decode tables: on the CPU it runs
        # torch_matmul, so it need not wait for (or rerun after) the decode benchmark.
        decode=(
            SWEEP.decode_outputs()
            if GPUS and SWEEP.settings["bench"]["layout_runner"] == "best"
            else []
        ),
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
        cell=lambda w: SWEEP.layout_step_cell(w.layout),
        device=DEVICE,
        toolchain=TOOLCHAIN,
        code=code_hash("stages/layout.py"),
    script:
        "../scripts/bench_layout.py"
