"""Typed config: one pydantic model per config group, checked before any job runs.

pydantic rather than Hydra structured configs: it is already installed (snakemake needs it), and
in strict mode it refuses NaN and infinity, unknown keys and wrong types (a bool for an int)
with the failing location, where OmegaConf's structured configs let NaN and infinity through.
Ranges and choices are declared in the models (`Field`, `Literal`), rules across keys as model
validators, and a refused value is one line naming its dotted key (strict.explain). Each backend
declares its own section's model beside its code (`Backend.settings_model`). The root's field
descriptions make README.md's configuration table (`python -m tilesweep.settings.doc`).
"""

from tilesweep.settings.bench_method import BenchSettings
from tilesweep.settings.cited_figures import Figure, References
from tilesweep.settings.decode_cell import DecodeCell
from tilesweep.settings.hardware_spec import HardwareSpec
from tilesweep.settings.question_group import Question, QuestionGroup, Target
from tilesweep.settings.root import RootSettings, catalog_from_json, leaf_keys
from tilesweep.settings.strict import Section, check
from tilesweep.settings.sweep_space import GridSettings, Layout, Tile
from tilesweep.settings.tuning import TuneSettings, Tuning
from tilesweep.settings.workload import (
    DSA_KEYS,
    GQA_KEYS,
    MLA_KEYS,
    SLIDING_KEYS,
    Attention,
    DeploymentSettings,
    ModelSettings,
)

__all__ = [
    "DSA_KEYS",
    "GQA_KEYS",
    "MLA_KEYS",
    "SLIDING_KEYS",
    "Attention",
    "BenchSettings",
    "DecodeCell",
    "DeploymentSettings",
    "Figure",
    "GridSettings",
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
