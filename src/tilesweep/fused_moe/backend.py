"""The fused-MoE backend: a tuning job per dtype (tune.py), picks under a name no engine reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from tilesweep.backends import Backend, DecodeRunner, StepRunner, Tuner, register
from tilesweep.fused_moe.commands import FusedMoeCommands
from tilesweep.fused_moe.section import FusedMoeSettings
from tilesweep.fused_moe.space import config_file_name
from tilesweep.fused_moe.step import fused_setup

if TYPE_CHECKING:
    from tilesweep.settings.bench_method import BenchSettings
    from tilesweep.settings.root import RootSettings
    from tilesweep.settings.workload import ModelSettings

NAME = "fused_moe"
# The project kernel's picks' folder and file-name prefix (tune/fused_moe/<this>/<dtype>/): never
# an engine's, so that no engine takes a table timed in another kernel for its own.
PROJECT_KERNEL = "project_kernel"
# A kept example's tuning run whose tables the report reads; every <run>/<dtype>/ of journals is
# replayed into <run>/tune_<dtype>.csv and <run>/project_kernel/<dtype>/ (fused_moe_replay.smk).
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


def moe_table(
    bench: BenchSettings, fused: FusedMoeSettings, model: ModelSettings, layout: dict, device: str
) -> dict:
    """Return the configs one rank's experts run: the first tuned table found, else vLLM's rules."""
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

    fused_setup = staticmethod(fused_setup)  # the project kernel's micro-batch (step.py)

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
