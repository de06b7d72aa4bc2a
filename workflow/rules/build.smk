# Stage 1: build every kernel for its target architecture; no GPU needed. Each backend says how
# (src/tilesweep/backends): one job per kernel (Triton), or one batch job per architecture
# (CUTLASS accounting, which compiles many cells per translation unit and caches them).


wildcard_constraints:
    backend=r"[^/]+",
    arch=r"[^/]+",


rule build_kernel:
    output:
        record=f"{R}/build/{{backend}}/{{arch}}/{{kernel}}/build.json",
    log:
        f"{R}/logs/build_kernel/{{backend}}/{{arch}}/{{kernel}}.log",
    conda:
        "../envs/tilesweep.yaml"
    params:
        rebuild=rebuild_param(
            f"{R}/build/{{backend}}/{{arch}}/{{kernel}}/build.json", REBUILDS
        ),
        cell=lambda w: SWEEP.build_cell(w.backend, w.arch, w.kernel),
        code=lambda w: SWEEP.rule_code("build", w.backend),
        toolchain=lambda w: SWEEP.build_toolchain(w.backend),
    script:
        "../scripts/build_kernel.py"


rule build_batch:
    output:
        record=f"{R}/build/{{backend}}/{{arch}}/batch.json",
    log:
        f"{R}/logs/build_batch/{{backend}}/{{arch}}.log",
    conda:
        "../envs/tilesweep.yaml"
    threads: ALL_CORES if GPUS == 0 else BESIDE_GPU_JOBS
    params:
        rebuild=rebuild_param(f"{R}/build/{{backend}}/{{arch}}/batch.json", REBUILDS),
        cells=lambda w: SWEEP.batch_cells(w.backend, w.arch),
        code=lambda w: SWEEP.rule_code("build", w.backend),
        toolchain=lambda w: SWEEP.build_toolchain(w.backend),
    script:
        "../scripts/build_batch.py"
