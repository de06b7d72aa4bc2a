"""The fused-MoE product: kernel, tuner, engines' kernels (engines/), roles, CLI verbs, report
sections; its rules are workflow/rules/fused_moe*.smk, its config
conf/backend_settings/fused_moe.yaml."""
