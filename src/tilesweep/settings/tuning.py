"""What the tuning rules' param holds: the groups of the settings that tuning reads."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from tilesweep.settings.backend_sections import BackendSections
from tilesweep.settings.bench_method import Positive
from tilesweep.settings.hardware_spec import HardwareSpec
from tilesweep.settings.root import RootSettings
from tilesweep.settings.strict import Section
from tilesweep.settings.sweep_space import Layout
from tilesweep.settings.workload import ModelSettings


class TuneGrid(Section):
    """The grid's layouts: their TP and EP degrees set the problems tuned."""

    layouts: list[Layout]


class TuneBench(Section):
    """The routing skew and the seed of the tuning draws."""

    zipf_alpha: Positive
    seed: Annotated[int, Field(ge=0)]


class TuneSettings(Section):
    """The tuning rules' param read back: the groups of RootSettings that tuning reads."""

    model: ModelSettings
    grid: TuneGrid
    backend: BackendSections  # each enabled tuner's own section (backends.tune_inputs)
    bench: TuneBench
    catalog: dict[str, HardwareSpec]


# What a tuner's functions read: the whole settings (its CLI verbs) or a tuning rule's param.
Tuning = RootSettings | TuneSettings
