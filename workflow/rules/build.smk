# Stage 1: build every kernel for its target architecture; no GPU needed.


rule build_kernel:
    output:
        record=f"{R}/build/triton/{{arch}}/{{kernel}}/build.json",
    log:
        f"{R}/logs/build_kernel/{{arch}}/{{kernel}}.log",
    conda:
        "../envs/tilesweep.yaml"
    params:
        cell=lambda w: SWEEP.build_cell("triton", w.arch, w.kernel),
        code=code_hash("stages/build.py"),
        triton=package_version("triton"),
    script:
        "../scripts/build_kernel.py"


rule account_cutlass:
    output:
        record=f"{R}/build/cutlass/{{arch}}/accounting.json",
    log:
        f"{R}/logs/account_cutlass/{{arch}}.log",
    conda:
        "../envs/tilesweep.yaml"
    threads: ALL_CORES
    params:
        cells=lambda w: SWEEP.cutlass_cells(w.arch),
        code=code_hash("stages/build.py", "backends/cutlass_smem.py"),
        cutlass=package_version("nvidia-cutlass"),
    script:
        "../scripts/account_cutlass.py"
