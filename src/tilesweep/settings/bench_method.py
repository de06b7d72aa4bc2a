"""The `bench` group: how kernels, collectives and decode steps are timed."""

from __future__ import annotations

from typing import Literal

from tilesweep.settings.strict import Section


class BenchSettings(Section):
    """Repeats, warm-up, routing, message sizes, step sizes, timeouts and power sampling."""

    warmup: int
    repeats: int
    cpu_repeats: int
    gpu_experts: int
    cpu_experts: int
    routing: list[str]
    zipf_alpha: float
    seed: int
    kernel_timeout_s: float
    collective_world_cap: int
    collective_repeats: int
    collective_extra_sizes: list[int]
    cpu_collective_max_bytes: int
    collective_sweep_min_bytes: int
    collective_sweep_max_bytes: int
    collective_sweep_factor: int
    collective_timing: str
    collective_graph_calls: int
    collective_graph_fill_ms: float
    step_dense_layers: int
    step_moe_layers: int
    step_context_len: int
    step_runner: str
    step_mode: str
    step_kernels: Literal["fused", "torch"] = "fused"
    step_kernel_list: Literal["lean", "engine"] = "lean"
    step_emulate: bool
    step_moe_tables: list[str]
    step_cpu_context_len: int
    step_cpu_experts: int
    step_cpu_vocab: int
    step_cpu_max_batch: int
    step_cpu_world_cap: int
    step_timeout_s: float
    power_seconds: float
    decode_power_seconds: float
    power_period_s: float
