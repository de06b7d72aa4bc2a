"""The `bench` group: how kernels, collectives and decode steps are timed; and one decode job's
param read back (DecodeCell)."""

import json
from dataclasses import dataclass
from typing import Annotated, Literal, Self

from pydantic import Field, model_validator

from tilesweep.columns import COLLECTIVE_TIMINGS
from tilesweep.settings.strict import Number, PositiveNumber, Section, at_least, distinct, refuse
from tilesweep.settings.workload import ModelSettings

# The longest a timeout or a reading may be: a week (timers overflow far beyond it).
WEEK_S = 7 * 24 * 3600


Seconds = Annotated[Number, Field(gt=0, le=WEEK_S)]
# The most timed runs of one measurement: past it a median moves no more, and a typo (1e9) would
# hold a job for days.
Repeats = Annotated[int, Field(ge=1, le=10_000)]


class BenchSettings(Section):
    """Repeats, warm-up, routing, message sizes, step sizes, timeouts and power sampling."""

    warmup: at_least(0)
    repeats: Repeats
    cpu_repeats: Repeats
    gpu_experts: at_least(1)
    cpu_experts: at_least(1)
    routing: distinct(Literal["uniform", "zipf"])
    zipf_alpha: PositiveNumber
    seed: at_least(0)
    kernel_timeout_s: Seconds
    collective_world_cap: at_least(1)
    collective_repeats: Repeats
    collective_extra_sizes: list[at_least(4)]  # bytes
    cpu_collective_max_bytes: at_least(4)
    collective_sweep_min_bytes: at_least(4)
    collective_sweep_max_bytes: at_least(4)
    collective_sweep_factor: at_least(1)
    collective_timing: Literal[COLLECTIVE_TIMINGS]
    collective_graph_calls: at_least(1)
    collective_graph_fill_ms: PositiveNumber
    step_dense_layers: at_least(0)
    step_moe_layers: at_least(1)
    step_context_len: at_least(1)
    step_runner: str  # auto or a backend with a step runner: checked by settings.root
    step_mode: Literal["graph", "eager"]
    step_kernels: Literal["fused", "torch"] = "fused"
    step_kernel_list: Literal["lean", "engine"] = "lean"
    step_emulate: bool
    step_moe_tables: list[str]
    step_cpu_context_len: at_least(1)
    step_cpu_experts: at_least(1)
    step_cpu_vocab: at_least(1)
    step_cpu_max_batch: at_least(1)
    step_cpu_world_cap: at_least(1)
    step_timeout_s: Seconds
    power_seconds: Seconds
    decode_power_seconds: Annotated[Number, Field(ge=0)]
    power_period_s: Seconds

    @model_validator(mode="after")
    def _sweep_in_order(self) -> Self:
        """Refuse a collective sweep whose largest message is below its smallest."""
        low, high = self.collective_sweep_min_bytes, self.collective_sweep_max_bytes
        if high < low:
            why = f"less than collective_sweep_min_bytes={low}"
            raise refuse("collective_sweep_max_bytes", why, high)
        return self


@dataclass(frozen=True)
class DecodeCell:
    """One decode job's param read back: its kernel row, the model, tokens per expert and method."""

    kernel: dict
    model: ModelSettings
    tokens_per_expert: list[int]
    bench: BenchSettings

    @classmethod
    def from_json(cls, text: str) -> Self:
        """Return the cell a decode job's JSON param holds, its groups validated."""
        spec = json.loads(text)
        return cls(
            spec["kernel"],
            ModelSettings.model_validate(spec["model"]),
            spec["tokens_per_expert"],
            BenchSettings.model_validate(spec["bench"]),
        )
