"""One decode job's param read back: the config groups it reads, validated."""

from __future__ import annotations

import json
from dataclasses import dataclass

from tilesweep.settings.bench_method import BenchSettings
from tilesweep.settings.workload import ModelSettings


@dataclass(frozen=True)
class DecodeCell:
    """One decode job's param read back: its kernel row, the model, tokens per expert and method."""

    kernel: dict
    model: ModelSettings
    tokens_per_expert: list[int]
    bench: BenchSettings

    @classmethod
    def from_json(cls, text: str) -> DecodeCell:
        """Return the cell a decode job's JSON param holds, its groups validated."""
        spec = json.loads(text)
        return cls(
            spec["kernel"],
            ModelSettings.model_validate(spec["model"]),
            spec["tokens_per_expert"],
            BenchSettings.model_validate(spec["bench"]),
        )
