# Stage 3: time the model's expert GEMMs at every tokens-per-expert on the device at hand: one
# job per decode job of each enabled backend (a kernel, the torch baselines, the CUTLASS SM90
# program where an SM90 device is here; see src/tilesweep/backends).


rule measure_device:
    output:
        record=f"{R}/device/ceilings.json",
    log:
        f"{R}/logs/measure_device.log",
    # The verdict reads it: before the measurements the answer does not need.
    priority: ANSWER_FIRST
    conda:
        "../envs/tilesweep.yaml"
    # On a CPU a benchmark takes every core, so no other job perturbs its timings.
    threads: ALL_CORES if GPUS == 0 else 2
    resources:
        gpu=min(GPUS, 1),
    params:
        rebuild=rebuild_param(f"{R}/device/ceilings.json", REBUILDS),
        catalog=grid_json(SWEEP.settings.catalog),
        device=DEVICE,
        toolchain=TOOLCHAIN,
        code=SWEEP.rule_code("device"),
    script:
        "../scripts/measure_device.py"


rule bench_decode:
    input:
        ceilings=rules.measure_device.output.record,
    output:
        table=f"{R}/decode/{{kernel}}.csv",
    log:
        f"{R}/logs/bench_decode/{{kernel}}.log",
    # The jobs the verdict reads (its operand type's) come before the measurements the answer
    # does not need; the other kernels' jobs after it.
    priority: lambda w: ANSWER_FIRST if w.kernel in ANSWER_DECODE else 0
    conda:
        "../envs/tilesweep.yaml"
    # On a CPU a benchmark takes every core, so no other job perturbs its timings.
    threads: ALL_CORES if GPUS == 0 else 2
    resources:
        gpu=min(GPUS, 1),
    params:
        rebuild=rebuild_param(f"{R}/decode/{{kernel}}.csv", REBUILDS),
        cell=lambda w: SWEEP.bench_cell(w.kernel),
        device=DEVICE,
        toolchain=TOOLCHAIN,
        code=lambda w: SWEEP.rule_code("decode", w.kernel),
    script:
        "../scripts/bench_decode.py"
