"""Pure, CPU-only deployment model: bytes and FLOPs, memory fit, interconnect, bound."""
