"""The fused-MoE backend: one tuning job per dtype on a GPU machine (tune.py), its picks kept for
the whole step under a name no engine reads (engines' files: engines/stage.py)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field, model_validator

from tilesweep.backends import Backend, DecodeRunner, StepRunner, Tuner, register
from tilesweep.fused_moe.commands import FusedMoeCommands
from tilesweep.fused_moe.engines.base import names as engine_names
from tilesweep.fused_moe.space import (
    ENGINE_DTYPE,
    SPACE_KEYS,
    VARIANT_OFF,
    condition_holds,
    config_file_name,
)
from tilesweep.settings.strict import Number, Section, distinct, refuse

if TYPE_CHECKING:
    from tilesweep.settings.bench_method import BenchSettings
    from tilesweep.settings.root import RootSettings
    from tilesweep.settings.workload import ModelSettings

NAME = "fused_moe"
# The folder, and the file-name prefix, of the project kernel's tuned picks
# (tune/fused_moe/<this>/<dtype>/ of a sweep's results, <run>/<this>/<dtype>/ of a kept example):
# never an engine's folder or file name, so that no engine takes a table timed in another kernel
# for its own.
PROJECT_KERNEL = "project_kernel"
# A kept example's tuning run whose tables the report reads (FOLDER/<this>/tune_<dtype>.csv);
# every folder of journals there (<run>/<dtype>/spec.json) is replayed into <run>/tune_<dtype>.csv
# and the project kernel's picks, <run>/project_kernel/<dtype>/ (workflow/rules/
# fused_moe_replay.smk).
EXAMPLE_TUNE = "tune_work"


def tune_table(dtype: str) -> str:
    """Return one dtype's tune table, relative to the results folder."""
    return f"tune/{NAME}/{dtype}.csv"


def project_kernel_dir(dtype: str) -> str:
    """Return the project kernel's picks folder for one dtype (under tune/, never tuned/)."""
    return f"tune/{NAME}/{PROJECT_KERNEL}/{dtype}"


def engine_summary(engine: str) -> str:
    """Return one engine's tuning summary, relative to the results folder."""
    return f"tune/{NAME}/engine_{engine}.csv"


def engine_files(engine: str) -> str:
    """Return the folder of one engine's exported config files (the only files under tuned/)."""
    return f"tuned/{NAME}/engine_{engine}"


def journals(folder: Path) -> list[tuple[str, str]]:
    """Return (run, dtype) of every tuning journal a kept example holds."""
    return sorted((p.parent.parent.name, p.parent.name) for p in Path(folder).glob("*/*/spec.json"))


def replayed(folder, run: str, dtype: str) -> tuple[str, str]:
    """Return the tune table and picks folder a kept example's journals replay into."""
    base = Path(folder) / run
    return str(base / f"tune_{dtype}.csv"), str(base / PROJECT_KERNEL / dtype)


def journal(folder, run: str, dtype: str) -> str:
    """Return a kept run's journal: journal.jsonl, else the compressed journal.jsonl.gz."""
    plain = Path(folder) / run / dtype / "journal.jsonl"
    return str(plain if plain.exists() else plain.with_suffix(".jsonl.gz"))


def project_kernel_file(experts: int, n: int, device_name: str, dtype: str) -> str:
    """Return the project kernel's picks file name: the engines' name behind PROJECT_KERNEL."""
    return f"{PROJECT_KERNEL}_{config_file_name(experts, n, device_name, dtype)}"


Positive = Annotated[int, Field(ge=1)]
EngineDtype = Literal[tuple(ENGINE_DTYPE)]


class Space(Section):
    """The tuners' search space: the values tried for each launch parameter."""

    BLOCK_SIZE_M: distinct(Positive)
    BLOCK_SIZE_N: distinct(Positive)
    BLOCK_SIZE_K: distinct(Positive)
    GROUP_SIZE_M: distinct(Positive)
    num_warps: distinct(Positive)
    num_stages: distinct(Positive)


class Rule(Section):
    """One rule of an engine's default heuristic: its value where its conditions hold."""

    value: int
    m_max: int = None
    m_le_e: bool = None
    m_per_e_over: int = None
    dtype: str = None
    block: bool = None  # the format is fp8 with 128 x 128 block scales

    def holds(self, m: int, experts: int, dtype: str) -> bool:
        """Return whether every condition this rule sets holds (none set: always)."""
        return all(
            condition_holds(k, v, m, experts, dtype)
            for k, v in self
            if k != "value" and v is not None
        )


class EngineDefaults(Section):
    """An engine's default heuristic: the rules for each launch parameter."""

    BLOCK_SIZE_M: list[Rule]
    BLOCK_SIZE_N: list[Rule]
    BLOCK_SIZE_K: list[Rule]
    GROUP_SIZE_M: list[Rule]
    num_warps: list[Rule]
    num_stages: list[Rule]

    def config_for(self, m: int, experts: int, dtype: str) -> dict:
        """Return the config these rules pick for M tokens over E experts (first rule that holds;
        space.engine_default does the same for the rules as a worker's spec writes them)."""
        out = {}
        for key in SPACE_KEYS:
            found = [rule.value for rule in getattr(self, key) if rule.holds(m, experts, dtype)]
            if not found:
                raise ValueError(
                    f"the default rules for {key} end without a rule that always holds"
                )
            out[key] = found[0]
        return out


class Variant(Section):
    """One of the project's kernel variants beyond the engines' space (space.VARIANT_OFF)."""

    TMA: int = Field(None, ge=0)
    PERSISTENT: int = Field(None, ge=0)
    SPLIT_K: int = Field(None, ge=0)
    SORT: int = Field(None, ge=0)

    @model_validator(mode="after")
    def _names_one(self) -> Variant:
        """Refuse a variant that leaves every key off (the engines' own kernel)."""
        if all((getattr(self, key) or 0) <= off for key, off in VARIANT_OFF.items()):
            given = self.model_dump(exclude_unset=True)  # model_dump: the message shows it
            raise refuse("", "names no variant (every key off: the engines' own kernel)", given)
        return self


class EngineTune(Section):
    """backend.fused_moe.engine_tune: searching and picking in the engines' own kernels."""

    formats: list[Literal["bf16", "fp8", "fp8_block"]]
    rounds: int = Field(ge=1, le=4)
    finalists: int = Field(ge=1)
    screen_repeats: int = Field(ge=1)
    final_repeats: int = Field(ge=3)
    routing: list[Literal["uniform", "zipf"]]
    compile_workers: int = Field(ge=0)


class FusedMoeSettings(Section):
    """backend.fused_moe: what is tuned, how it is timed and picked, and the engines' defaults."""

    enabled: bool
    # Tune on a GPU machine (minutes per dtype and engine): opt-in, so a first GPU run ends with
    # its answer within minutes; the shipped drop-in files stand meanwhile.
    tune: bool
    dtypes: distinct(EngineDtype)
    batch_keys: distinct(Positive)
    space: Space
    routing: distinct(Literal["uniform", "zipf"])
    direct_sparsity: int = Field(ge=1)
    screen_repeats: int = Field(ge=1)
    final_repeats: int = Field(ge=1)
    graph_calls: int = Field(ge=1)
    graph_fill_ms: Number = Field(gt=0)
    finalists: int = Field(ge=1)
    guard_default: str
    variants: list[Variant]
    variant_tiles: int
    variant_finalists: int
    config_timeout_s: Number
    items_per_worker: int = Field(ge=0)  # 0: one worker; else the items each worker runs
    compile_timeout_s: Number
    compile_workers: int
    engines: distinct(str)  # each a known engine (engines/<name>.yaml or registered)
    engine_versions: dict[str, str]  # each plans an engine-tuning job
    engine_tune: EngineTune
    extra_tokens_per_expert: list[int]
    engine_defaults: dict[str, EngineDefaults]

    @model_validator(mode="after")
    def _consistent(self) -> FusedMoeSettings:
        """Refuse unknown engines, missing or incomplete default rules, and unscreened variants."""
        known = engine_names()
        for key, listed in (("engine_versions", self.engine_versions), ("engines", self.engines)):
            for engine in listed:
                if engine not in known:
                    raise refuse(f"{key}.{engine}", f"unknown engine; valid: {', '.join(known)}")
        for engine in self.engine_versions:
            if engine not in self.engine_defaults:
                raise refuse(f"engine_defaults.{engine}", "missing: engine_versions names it")
        if self.guard_default not in self.engine_defaults:
            why = f"not one of engine_defaults ({', '.join(self.engine_defaults)})"
            raise refuse("guard_default", why, self.guard_default)
        if self.variants and min(self.variant_tiles, self.variant_finalists) < 1:
            why = "must be at least 1 when variants are screened (variants: [] turns them off)"
            key = "variant_tiles" if self.variant_tiles < 1 else "variant_finalists"
            raise refuse(key, why, getattr(self, key))
        for engine, defaults in self.engine_defaults.items():
            for key, dtype in itertools.product(SPACE_KEYS, self.dtypes):
                if not any(rule.holds(1, 1, dtype) for rule in getattr(defaults, key)):
                    why = f"the default rules for {key} end without a rule that always holds"
                    raise refuse(f"engine_defaults.{engine}", why)
        return self


def moe_table(
    bench: BenchSettings, fused: FusedMoeSettings, model: ModelSettings, layout: dict, device: str
) -> dict:
    """Return the configs one rank's experts run: the first tuned table found, else vLLM's rules."""
    import json
    from pathlib import Path

    experts = model.routed_experts // layout["ep"]
    n = model.moe_intermediate // layout["tp"]
    name = project_kernel_file(experts, n, device, "bf16")
    for folder in bench.step_moe_tables:
        path = Path(folder, name)
        if path.is_file():
            configs = json.loads(path.read_text())
            configs.pop("triton_version", None)
            return {"source": str(path), "configs": configs, "sparsity": fused.direct_sparsity}
    return {
        "source": f"vLLM default rules (no {name} in bench.step_moe_tables)",
        "rules": fused.engine_defaults["vllm"],  # a step's JSON param: written as given
        "sparsity": fused.direct_sparsity,
    }


class FusedMoeTuner(Tuner):
    """Tuning jobs per dtype (tune.py) and per engine (engines/stage.py), and journal replays."""

    rule_modules = {
        "tune_configs": "fused_moe/tune.py",
        "tune_engine": "fused_moe/engines/stage.py",
        "tune_replay": "fused_moe/tune.py",
    }

    def tune_jobs(self, settings: RootSettings, gpus: tuple[str, ...]) -> list[str]:
        """Return the dtypes tuned here: all configured ones where a GPU is here and tune is on."""
        section: FusedMoeSettings = settings.backend.fused_moe
        return list(section.dtypes) if gpus and section.tune else []

    def tune_inputs(self, settings: RootSettings) -> dict:
        """Return its backend section: the space, timing, pick and engines' defaults."""
        return settings.backend.fused_moe

    def tune_tables(self, settings: RootSettings, gpus: tuple[str, ...]) -> list[str]:
        """Return one tune table per tuned dtype."""
        return [tune_table(d) for d in self.tune_jobs(settings, gpus)]

    def tune_outputs(self, settings: RootSettings, gpus: tuple[str, ...]) -> list[str]:
        """Return each tuned dtype's table and picks, then each engine's summary and files."""
        dtypes = self.tune_jobs(settings, gpus)
        out = [p for d in dtypes for p in (tune_table(d), project_kernel_dir(d))]
        for engine in settings.backend.fused_moe.engine_versions if dtypes else ():
            out += [engine_summary(engine), engine_files(engine)]
        return out

    def example_inputs(self, folder: Path) -> dict[str, list[str]]:
        """Return a kept example's replayed tune tables and its drop-in list, where it has them."""
        kept = folder / "engine_tables" / "dropins.csv"
        return {
            "tune": [replayed(folder, r, d)[0] for r, d in journals(folder) if r == EXAMPLE_TUNE],
            "dropins": [str(kept)] if kept.is_file() else [],
        }

    def report_sections(self, tables: dict) -> list[tuple[str, str, str, list]]:
        """Return the tuning and drop-in sections (report_sections.py)."""
        # cycle: report_sections reaches the registry, whose discovery imports this module
        from tilesweep.fused_moe.report_sections import report_sections

        return report_sections(tables)

    def report_figures(self) -> dict[str, tuple]:
        """Return the tuning section's figure (report_sections.FIGURES)."""
        # Deferred: its drawing brings matplotlib, which only a report needs.
        from tilesweep.fused_moe.report_sections import FIGURES

        return FIGURES

    def example_outputs(self, folder: Path) -> list[str]:
        """Return every replayed tune table and picks folder of a kept example's journals."""
        return [p for run, dtype in journals(folder) for p in replayed(folder, run, dtype)]


class FusedMoeRows(DecodeRunner):
    """No decode job: names the tune table's runners and adds the engines' rows to decode.csv."""

    runner_prefix = "engine"
    runner_names = (NAME,)
    kind = "fused"
    runner_kinds = {"engine": "engine"}

    def table_rows(self, settings: RootSettings, tune):
        """Return decode.csv's rows for the engines' own fused-MoE kernels (stages.tables)."""
        # cycle: engine_rows imports the registry, whose discovery imports this module
        from tilesweep.fused_moe.engines.decode_rows import engine_rows

        return engine_rows(settings.backend.section(NAME), tune)


class FusedMoeStep(StepRunner):
    """The project's fused-MoE kernel runs the whole step's routed experts on a GPU."""

    step_runners = (NAME,)
    fused = True  # the step's own path: fused gate-up and down weights, its own tuned table
    default_on_gpu = True

    def fused_setup(self, rank, n: int, slots: int, counts: list[int], experts: int) -> dict:
        """Return the project kernel's routing, config and call for one micro-batch (step.py)."""
        # triton (via fused_moe.step): this module loads without it
        from tilesweep.fused_moe.step import fused_setup

        return fused_setup(rank, n, slots, counts, experts)

    def step_inputs(self, settings: RootSettings, layout: dict, device: str) -> dict:
        """Return the tuned configs one rank of the layout runs (moe_table)."""
        fused = settings.backend.fused_moe
        return {"moe_table": moe_table(settings.bench, fused, settings.model, layout, device)}


@register
class FusedMoeBackend(Backend):
    """The project's fused-MoE kernel: tuned per dtype where a GPU is at hand."""

    name = NAME
    order = 3
    settings_model = FusedMoeSettings

    tuner = FusedMoeTuner()
    decoder = FusedMoeRows()
    stepper = FusedMoeStep()
    commands = FusedMoeCommands()
