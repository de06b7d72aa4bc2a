"""The serving engines' own fused-MoE kernels: taken from their wheels, launched and timed as each
engine runs them, and the check, search and drop-in tables run in them."""
