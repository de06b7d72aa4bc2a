"""The fused-MoE product inside tilesweep, one package: the project's fused-MoE Triton kernel
(kernel.py, routing.py) and its search space (space.py), its tuner (tune.py, tune_worker.py,
journal.py, precompile.py, case.py), the serving engines' own fused-MoE kernels with the check,
search and drop-in tables run in them (engines/, one module and one YAML file per engine), its
backend registration (backend.py: the tuner, decode-row, step-runner and commands roles), the
whole step's fused path (step.py), its CLI verbs (commands.py) and its report sections
(report_sections.py, tune_analysis.py). Its rules are workflow/rules/fused_moe.smk and
fused_moe_replay.smk, its config group
conf/backends/fused_moe.yaml, its outputs results/tune/fused_moe/ and results/tuned/fused_moe/.

The core (pipeline, report_paths, cli, stages, measure) reaches it only through the roles of
tilesweep.backends; nothing there imports this package."""
