# A kept example's fused-MoE tuning runs replayed from their journals (no GPU): every
# FOLDER/<run>/<dtype>/ with spec.json, the journal and versions.json, and FOLDER/<run>/ceilings.json,
# gives <run>/tune_<dtype>.csv and the project kernel's picks, <run>/project_kernel/<dtype>/,
# with the current evaluation and pick (src/tilesweep/fused_moe/tune.py).

from tilesweep.fused_moe import backend as fused_moe


rule tune_replay:
    input:
        spec=f"{EXAMPLE}/{{run}}/{{dtype}}/spec.json",
        versions=f"{EXAMPLE}/{{run}}/{{dtype}}/versions.json",
        ceilings=f"{EXAMPLE}/{{run}}/ceilings.json",
        journal=lambda w: fused_moe.journal(EXAMPLE, w.run, w.dtype),
    output:
        table=fused_moe.replayed(EXAMPLE, "{run}", "{dtype}")[0],
        configs=directory(fused_moe.replayed(EXAMPLE, "{run}", "{dtype}")[1]),
    log:
        f"{R}/logs/tune_replay/{{run}}_{{dtype}}.log",
    wildcard_constraints:
        run="[^/]+",
        dtype="[a-z0-9]+",
    conda:
        "../envs/tilesweep.yaml"
    params:
        code=SWEEP.rule_code("tune_replay"),
    script:
        "../scripts/replay_tune.py"
