"""The whole decode step as a GPU runs it, one module a piece: a rank's weights, buffers,
attention, MoE, clock, timing, shapes, an engine's extra kernels and the engine check."""
