"""The fused-MoE product: kernel, tuner, engines' kernels (engines/), roles, CLI verbs, report
sections; its rules are workflow/rules/fused_moe*.smk, its config conf/backends/fused_moe.yaml."""
