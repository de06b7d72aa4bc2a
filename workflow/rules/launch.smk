# Stage 2: check every built kernel against every target's limits.


def build_record(wildcards):
    """Return the build output a launch check reads."""
    arch = SWEEP.settings["catalog"][wildcards.target]["arch"]
    if wildcards.backend == "cutlass":
        return f"{R}/build/cutlass/{arch}/accounting.json"
    return f"{R}/build/{wildcards.backend}/{arch}/{wildcards.kernel}/build.json"


rule check_launch:
    input:
        build=build_record,
    output:
        record=f"{R}/launch/{{backend}}/{{target}}/{{kernel}}.json",
    log:
        f"{R}/logs/check_launch/{{backend}}/{{target}}/{{kernel}}.log",
    params:
        cell=lambda w: SWEEP.launch_cell(w.backend, w.target, w.kernel),
        code=code_hash("steps/launch_check.py", "launch.py", "smem_model.py"),
    script:
        "../scripts/check_launch.py"
