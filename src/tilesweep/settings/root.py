"""The composed config as a whole: its top-level keys, each group's model and the catalog; and
what the tuning rules' param holds of it (TuneSettings)."""

import json
from typing import Annotated, Self

from pydantic import BaseModel, BeforeValidator, Field, model_validator

from tilesweep.settings.backend_sections import BackendSections
from tilesweep.settings.bench_method import BenchSettings
from tilesweep.settings.cited_figures import References
from tilesweep.settings.engine_spec import EngineSettings
from tilesweep.settings.hardware_spec import HardwareSpec
from tilesweep.settings.question_group import QuestionGroup, Target
from tilesweep.settings.strict import PositiveNumber, Refused, Section, at_least, gpu_counts_as_ints
from tilesweep.settings.sweep_space import GridSettings, Layout
from tilesweep.settings.workload import DeploymentSettings, ModelSettings


class RootSettings(Section):
    """What compose_settings() returns: conf/config.yaml's keys, one per group, and the catalog."""

    results_dir: str = Field(
        description="folder, relative to the working directory, that every rule writes under"
    )
    device: str = Field(
        description="the machine the jobs are planned for: `auto` asks `nvidia-smi` once (a "
        "failed query stops the run with one line), `cpu` plans a CPU sweep, `h200x8` plans for "
        "eight H200s from any machine"
    )
    max_jobs: int = Field(
        description="the most jobs a sweep may plan; a larger grid is refused before the DAG is "
        "built, with the count"
    )
    read_outside: bool = Field(
        description="whether `deployment.fit_file` and `deployment.attention_table` may name "
        "files outside the checkout and `results_dir`"
    )
    hardware: HardwareSpec = Field(
        description="the GPU the verdict is for; every file is also a launch-check target"
    )
    model: ModelSettings = Field(description="shapes, experts, attention, layers")
    grid: GridSettings = Field(
        description="tiles, stages, warps, dtypes, tokens per expert, targets, layouts"
    )
    backend: BackendSections = Field(
        description="which kernel backends build and run, one section each (its model beside "
        "its code); `backend.cutlass.extra_stages`: explicit stage counts for a few tiles of one "
        "arch (default: the brief's four tiles, finalize, 3 stages, on sm_120)"
    )
    bench: BenchSettings = Field(
        description="repeats, routing skew, message sizes, time limits, the whole step"
    )
    deployment: DeploymentSettings = Field(
        description="weight and KV formats (NVFP4 by default), context or serving load "
        "(`input_len`, `output_len`), batches, attention (`auto`: the engine's), the host's "
        'PCIe `topology` (`""`: the hardware file\'s default, the band spanning its '
        "plausible ones), `pcie_allreduce` (a community build's PCIe one-shot all-reduce: "
        "off, one_shot, one_shot_norm), `prefill_chunk` (the launch's prompt chunk, over the "
        "engine file's prefill.chunks; 0: the engine file's), the shipped fit, `fit_batches` "
        "(the TP1 batches the launch-aware fit is made on)"
    )
    engine: EngineSettings = Field(
        description="whose decode step the verdict composes: its kernels per layer (cited file "
        "and line; `tensorrtllm` holds DeepSeek-V3/R1, GLM-5 and Qwen3 MoE lists; "
        "`sglang_b12x`: SGLang with b12x 0.6.0's SM120 MoE, its untimed kernel a gap), host "
        "time per step, attention per architecture, custom all-reduce"
    )
    catalog: dict[str, HardwareSpec] = Field(
        description="every conf/hardware file by name (not a group: read from the folder)"
    )
    # Absent (a config made by hand): what `question=none` and `references=none` give. Parsed
    # first by QuestionGroup.parse, so refused in the group's own one-line words.
    question: Annotated[QuestionGroup, BeforeValidator(QuestionGroup.parse)] = Field(
        default_factory=lambda: QuestionGroup(target=Target()),
        description="the case study the report answers, and the answer card's target: "
        "`question.tpot_target_ms` (unset), `question.min_tokens_per_s_per_user` (20 by default: "
        "the interactive floor the headline answers under; `null` removes it)",
    )
    references: References = Field(
        default_factory=References,
        description="engines' own measured TPOT, cited, composed beside the verdict",
    )

    @model_validator(mode="after")
    def _groups_fit(self) -> Self:
        """Refuse a target the catalog lacks, or a tile or layout the model cannot be split by."""
        for i, name in enumerate(self.grid.targets):
            if name not in self.catalog:
                why = f"unknown hardware; valid: {', '.join(self.catalog)}"
                raise Refused(f"grid.targets[{i}]", why, name)
        if self.deployment.attention == "dsa" and self.model.attention.index_topk is None:
            why = (
                f"model {self.model.name} has no sparse indexer (model.attention.index_topk): "
                "its attention is dense; give auto or dense"
            )
            raise Refused("deployment.attention", why, "dsa")
        for key in ("tiles", "layouts"):
            for i, item in enumerate(getattr(self.grid, key)):
                try:
                    item.fit(self.model)
                except Refused as exc:
                    raise Refused(f"grid.{key}[{i}].{exc.key}", exc.why, exc.value) from None
        return self

    def as_dict(self) -> dict:
        """Return the settings as compose() gives them (unset keys out; the rules' JSON params)."""
        return self.model_dump(exclude_unset=True)  # model_dump: output only (JSON, the report)


class TuneGrid(Section):
    """The grid's layouts: their TP and EP degrees set the problems tuned."""

    layouts: list[Layout]


class TuneBench(Section):
    """The routing skew and the seed of the tuning draws."""

    zipf_alpha: PositiveNumber
    seed: at_least(0)


class TuneSettings(Section):
    """The tuning rules' param read back: the groups of RootSettings that tuning reads."""

    model: ModelSettings
    grid: TuneGrid
    backend: BackendSections  # each enabled tuner's own section (backends.tune_inputs)
    bench: TuneBench
    catalog: dict[str, HardwareSpec]


# What a tuner's functions read: the whole settings (its CLI verbs) or a tuning rule's param.
Tuning = RootSettings | TuneSettings


def catalog_from_json(text: str) -> dict[str, HardwareSpec]:
    """Return the hardware catalog a rule's JSON param holds, each spec validated."""
    plain = gpu_counts_as_ints(json.loads(text))
    return {name: HardwareSpec.model_validate(spec) for name, spec in plain.items()}


def leaf_keys(model: type[BaseModel] = RootSettings, prefix: str = "") -> list[str]:
    """Return the dotted key of every field, into nested groups (not lists, maps, whole files)."""
    keys = []
    for name, field in model.model_fields.items():
        tp = field.annotation
        # a file, two lists of items, and the backends' sections (each its own model)
        whole = (HardwareSpec, QuestionGroup, References, BackendSections)
        if isinstance(tp, type) and issubclass(tp, BaseModel) and tp not in whole:
            keys += leaf_keys(tp, f"{prefix}{name}.")
        else:
            keys.append(f"{prefix}{name}")
    return keys
