"""Pure, CPU-only deployment model: architecture bytes and FLOPs, memory fit, interconnect, bound."""
