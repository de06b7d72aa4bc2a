# A kept example's tuning runs replayed from their journals (no GPU): every
# FOLDER/<run>/<dtype>/ with spec.json, the journal and versions.json, and FOLDER/<run>/ceilings.json,
# gives <run>/tune_<dtype>.csv and the project kernel's picks, <run>/project_kernel/<dtype>/,
# with the current evaluation and pick.


rule tune_replay:
    input:
        spec=f"{EXAMPLE}/{{run}}/{{dtype}}/spec.json",
        versions=f"{EXAMPLE}/{{run}}/{{dtype}}/versions.json",
        ceilings=f"{EXAMPLE}/{{run}}/ceilings.json",
        journal=lambda w: STAGE5.journal(w.run, w.dtype),
    output:
        table=STAGE5.replayed("{run}", "{dtype}")[0],
        configs=directory(STAGE5.replayed("{run}", "{dtype}")[1]),
    log:
        f"{R}/logs/tune_replay/{{run}}_{{dtype}}.log",
    wildcard_constraints:
        run="[^/]+",
        dtype="[a-z0-9]+",
    conda:
        "../envs/tilesweep.yaml"
    params:
        code=SWEEP.rule_code("tune"),
    script:
        "../scripts/replay_tune.py"
