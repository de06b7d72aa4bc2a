"""The composed config as a whole: its top-level keys, each group's model, the hardware catalog
and every backend's own section."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from tilesweep.errors import ConfigError
from tilesweep.settings.bench_method import BenchSettings
from tilesweep.settings.engine_spec import EngineSettings
from tilesweep.settings.hardware_spec import HardwareSpec
from tilesweep.settings.strict import Section, check
from tilesweep.settings.sweep_space import GridSettings
from tilesweep.settings.workload import DeploymentSettings, ModelSettings


class RootSettings(Section):
    """What compose() returns: conf/config.yaml's keys, one per group, and the catalog."""

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
    catalog: dict[str, Any]  # every conf/hardware file by name, each a HardwareSpec
    question: dict[str, Any] = None  # the case study's question, validated where it is read
    references: dict[str, Any] = None  # engines' figures (tilesweep.references validates them)


def check_settings(settings: Any) -> None:
    """Raise ConfigError naming the first key whose type or name the models refuse."""
    check(RootSettings, settings)
    for name, spec in settings["catalog"].items():
        check(HardwareSpec, spec, f"hardware[{name}]")
    check_backends(settings["backend"])


def check_backends(section: dict) -> None:
    """Raise ConfigError for a backend section no registered backend reads, or a bad key."""
    from tilesweep import backends

    known = {b.name: b for b in backends.registered() if b.settings_model}
    for name, value in section.items():
        if name not in known:
            raise ConfigError(f"backend.{name}: unknown backend; allowed: {', '.join(known)}")
        check(known[name].settings_model, value, f"backend.{name}")


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
