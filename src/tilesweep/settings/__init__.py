"""Typed config: one pydantic model per group, checked before any job (strict pydantic, because
OmegaConf lets NaN and infinity through); a refusal is one line naming its key."""

from tilesweep.settings.bench_method import BenchSettings, DecodeCell
from tilesweep.settings.hardware_spec import HardwareSpec
from tilesweep.settings.root import RootSettings, TuneSettings, Tuning, catalog_from_json, leaf_keys
from tilesweep.settings.strict import Section, check
from tilesweep.settings.sweep_space import Layout, Tile
from tilesweep.settings.workload import DeploymentSettings, ModelSettings

__all__ = [
    "BenchSettings",
    "DecodeCell",
    "DeploymentSettings",
    "HardwareSpec",
    "Layout",
    "ModelSettings",
    "RootSettings",
    "Section",
    "Tile",
    "TuneSettings",
    "Tuning",
    "catalog_from_json",
    "check",
    "leaf_keys",
]
