"""The serving engines' own fused-MoE kernels, from their wheels, launched and timed as they run."""
