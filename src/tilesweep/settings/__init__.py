"""Typed config: one pydantic model per group, checked before any job (strict pydantic, because
OmegaConf lets NaN and infinity through); a refusal is one line naming its key."""

from tilesweep.settings.bench_method import BenchSettings, DecodeCell
from tilesweep.settings.cited_figures import Figure, References
from tilesweep.settings.hardware_spec import HardwareSpec
from tilesweep.settings.question_group import Question, QuestionGroup, Target
from tilesweep.settings.root import RootSettings, TuneSettings, Tuning, catalog_from_json, leaf_keys
from tilesweep.settings.strict import Section, check
from tilesweep.settings.sweep_space import Layout, Tile
from tilesweep.settings.workload import DeploymentSettings, ModelSettings

__all__ = [
    "BenchSettings",
    "DecodeCell",
    "DeploymentSettings",
    "Figure",
    "HardwareSpec",
    "Layout",
    "ModelSettings",
    "Question",
    "QuestionGroup",
    "References",
    "RootSettings",
    "Section",
    "Target",
    "Tile",
    "TuneSettings",
    "Tuning",
    "catalog_from_json",
    "check",
    "leaf_keys",
]
