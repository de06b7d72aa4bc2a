"""The composed config as a whole: its top-level keys, each group's model, the hardware catalog
and every backend's own section."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, field_validator, model_validator

from tilesweep.settings.bench_method import BenchSettings
from tilesweep.settings.engine_figures import References
from tilesweep.settings.engine_spec import EngineSettings
from tilesweep.settings.hardware_spec import HardwareSpec
from tilesweep.settings.question_group import QuestionGroup
from tilesweep.settings.strict import Refused, Section, refuse
from tilesweep.settings.sweep_space import GridSettings
from tilesweep.settings.workload import DeploymentSettings, ModelSettings


class RootSettings(Section):
    """What compose_settings() returns: conf/config.yaml's keys, one per group, and the catalog."""

    results_dir: str
    device: str  # auto, cpu or <hardware>x<count>: checked by tilesweep.device
    max_jobs: int  # the most jobs a sweep may plan (grid.check_size)
    read_outside: bool  # whether deployment files may lie outside the checkout and results_dir
    hardware: HardwareSpec
    model: ModelSettings
    grid: GridSettings
    backend: dict[str, Any]  # one section per registered backend, by its settings_model
    bench: BenchSettings
    deployment: DeploymentSettings
    engine: EngineSettings
    catalog: dict[str, HardwareSpec]  # every conf/hardware file by name
    question: QuestionGroup = None  # the case study's question and the answer card's target
    references: References = None  # engines' figures

    @field_validator("question", mode="before")
    @classmethod
    def _question(cls, value: Any) -> QuestionGroup:
        """Return the question group, refused in its own one-line words (question_group)."""
        return QuestionGroup.parse(value)

    @model_validator(mode="after")
    def _groups_fit(self) -> RootSettings:
        """Refuse a target the catalog lacks, or a tile or layout the model cannot be split by."""
        for i, name in enumerate(self.grid.targets):
            if name not in self.catalog:
                why = f"unknown hardware; valid: {', '.join(self.catalog)}"
                raise refuse(f"grid.targets[{i}]", why, name)
        for key in ("tiles", "layouts"):
            for i, item in enumerate(getattr(self.grid, key)):
                try:
                    item.fit(self.model)
                except Refused as exc:
                    raise refuse(f"grid.{key}[{i}].{exc.key}", exc.why, exc.value) from None
        return self

    def as_dict(self) -> dict:
        """Return the settings as the plain containers compose() gives, key for key (the source
        of the rules' JSON params): keys left out stay out, integers stay integers."""
        return self.model_dump(exclude_unset=True)

    @classmethod
    def from_json(cls, text: str) -> RootSettings:
        """Return the settings a rule's JSON param holds (grid.canonical of as_dict()), validated
        once more: the GPU counts JSON wrote as strings (`by_gpus` keys) made integers again."""
        return cls.model_validate(gpu_counts_as_ints(json.loads(text)))


def catalog_from_json(text: str) -> dict[str, HardwareSpec]:
    """Return the hardware catalog a rule's JSON param holds (grid.canonical of
    RootSettings.catalog), each spec validated, its GPU counts integers again."""
    plain = gpu_counts_as_ints(json.loads(text))
    return {name: HardwareSpec.model_validate(spec) for name, spec in plain.items()}


def gpu_counts_as_ints(node: Any, key: str = "") -> Any:
    """Return node with every `by_gpus` mapping's keys as integers, in ascending order (the
    catalog's, as YAML writes it) where all are digits; anything else as it is (the model names a
    bad key)."""
    if isinstance(node, list):
        return [gpu_counts_as_ints(v) for v in node]
    if not isinstance(node, dict):
        return node
    items = [(k, gpu_counts_as_ints(v, k)) for k, v in node.items()]
    if key == "by_gpus" and all(isinstance(k, str) and k.isdigit() for k, _ in items):
        items = sorted((int(k), v) for k, v in items)
    return dict(items)


def leaf_keys(model: type[BaseModel] = RootSettings, prefix: str = "") -> list[str]:
    """Return the dotted key of every field, descending into nested groups (not into lists,
    mappings or the hardware spec)."""
    keys = []
    for name, field in model.model_fields.items():
        tp = field.annotation
        if isinstance(tp, type) and issubclass(tp, BaseModel) and tp is not HardwareSpec:
            keys += leaf_keys(tp, f"{prefix}{name}.")
        else:
            keys.append(f"{prefix}{name}")
    return keys
