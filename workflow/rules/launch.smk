# Stage 2: check every built kernel against every target's limits.


rule check_launch:
    input:
        build=lambda w: SWEEP.build_record(w.backend, w.target, w.kernel),
    output:
        record=f"{R}/launch/{{backend}}/{{target}}/{{kernel}}.json",
    log:
        f"{R}/logs/check_launch/{{backend}}/{{target}}/{{kernel}}.log",
    conda:
        "../envs/tilesweep.yaml"
    params:
        rebuild=rebuild_param(
            f"{R}/launch/{{backend}}/{{target}}/{{kernel}}.json", REBUILDS
        ),
        cell=lambda w: SWEEP.launch_cell(w.backend, w.target, w.kernel),
        code=lambda w: SWEEP.rule_code("launch", w.backend),
    script:
        "../scripts/check_launch.py"
