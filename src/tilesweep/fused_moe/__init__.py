"""The fused-MoE product in its own package: the project's kernel, its tuner, the engines' own
kernels (engines/), its backend roles, CLI verbs and report sections. Its rules are
workflow/rules/fused_moe*.smk, its config conf/backends/fused_moe.yaml; the core reaches it only
through tilesweep.backends' roles."""
