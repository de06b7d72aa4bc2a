"""The fused-MoE backend: a tuning job per dtype (tune.py), picks under a name no engine reads; the
engines' kernels as decode.csv rows; the step runner's micro-batch and the config it picks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from tilesweep import backends, package_data
from tilesweep.backends import Backend, DecodeRunner, StepRunner, Tuner, register
from tilesweep.columns import Status
from tilesweep.fused_moe import routing
from tilesweep.fused_moe.commands import FusedMoeCommands
from tilesweep.fused_moe.engines.base import installed
from tilesweep.fused_moe.section import FusedMoeSettings
from tilesweep.fused_moe.space import config_file_name, engine_default, nearest_key

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
ENGINE_COLUMNS = package_data.column_lists(__name__, "tilesweep.fused_moe")["ENGINE_COLUMNS"]
ENGINE_KERNELS = {
    "engine": "fused_experts",
    "engine:tuned": "fused_experts, the project kernel's tuned table",
    "engine:default": "fused_experts, the engine's default",
}


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
    experts, n = model.routed_experts // layout["ep"], model.moe_intermediate // layout["tp"]
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


def moe_config(table: dict, m: int, experts: int) -> tuple[dict, str]:
    """Return (config, where it came from): the tuned table's nearest key, else default rules."""
    configs = table.get("configs")
    if configs:
        key = nearest_key([int(k) for k in configs], m)
        return dict(configs[str(key)]), f"{table['source']} at M={key}"
    rules = table.get("rules")
    if not rules:
        raise ValueError("the fused-MoE step runner needs a tuned table or default rules")
    return engine_default(rules, m, experts, "bf16"), f"{table['source']} at M={m}"


def fused_setup(rank, n: int, slots: int, counts: list[int], experts: int) -> dict:
    """Return one micro-batch's routing, row blocks, config and kernel call (`invoke`)."""
    from tilesweep.fused_moe import kernel as fm  # triton: this module loads without it

    torch, top_k = rank.torch, rank.model["top_k"]
    if rank.layout["ep"] == 1:  # gate/up gathers each token's rows: M = n tokens, top-k
        pairs, m, k = n * top_k, n, top_k
        ids = (torch.arange(pairs) % experts).view(n, top_k)
    else:  # after the dispatch, one row per pair of this rank's experts: top-k 1
        pairs, m, k = slots, slots, 1
        ids = torch.repeat_interleave(torch.arange(experts), torch.tensor(counts)).view(-1, 1)
    config, source = moe_config(rank.moe_table, m, experts)
    ids = ids.to(rank.device)
    direct = pairs * rank.moe_table.get("sparsity", 4) <= experts
    bm = config["BLOCK_SIZE_M"]
    blocks = routing.direct_blocks(ids, bm) if direct else routing.align_blocks(ids, bm, experts)
    return dict(config=config, source=source, blocks=blocks, top_k=k, pairs=pairs, invoke=fm.invoke)


def engine_rows(mine: FusedMoeSettings | None, tune: pd.DataFrame) -> pd.DataFrame:
    """Return decode.csv's engine rows, timed or each skipped; none where the section is off."""
    if mine is None or not mine.enabled:
        return pd.DataFrame(columns=ENGINE_COLUMNS)
    timed = pd.DataFrame()
    if not tune.empty and "runner" in tune:
        kinds = tune["runner"].astype(str).map(backends.runner_kind)
        timed = tune[kinds == "engine"]
    if not timed.empty:
        out = timed.rename(columns={"m": "tokens"}).reindex(columns=ENGINE_COLUMNS)
        out["kernel"] = timed["source"].map(ENGINE_KERNELS).fillna("fused_experts")
        out["op"] = "whole_moe"
        out["source"] = (timed["status"] == Status.OK).map({True: "measured", False: ""})
        return out.reset_index(drop=True)
    untimed = "no tuned table to time it with: tune_configs runs on GPU machines only"
    rows = [
        {"runner": f"engine:{e}", "kernel": "fused_experts", "op": "whole_moe", "source": ""}
        | {"status": "skipped", "reason": untimed if installed(e) else f"{e} is not installed"}
        for e in mine.engines
    ]
    return pd.DataFrame(rows).reindex(columns=ENGINE_COLUMNS)


class FusedMoeTuner(Tuner):
    """Tuning jobs per dtype (tune.py) and per engine (engines/search.py), and journal replays."""

    rule_modules = {
        "tune_configs": "fused_moe/tune.py",
        "tune_engine": "fused_moe/engines/search.py",
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
        return engine_rows(settings.backend.section(NAME), tune)


class FusedMoeStep(StepRunner):
    """The project's fused-MoE kernel runs the whole step's routed experts on a GPU."""

    step_runners = (NAME,)
    fused = True  # the step's own path: fused gate-up and down weights, its own tuned table
    default_on_gpu = True

    fused_setup = staticmethod(fused_setup)  # the project kernel's micro-batch

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
