"""The roles a backend may play, each a narrow protocol; defaults add nothing."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NamedTuple

from pydantic import BaseModel

if TYPE_CHECKING:
    from tilesweep.settings import DecodeCell
    from tilesweep.settings.root import RootSettings


class Runner(NamedTuple):
    """One decode runner: its name, operand and output types, and why it is not timed here."""

    name: str
    dtype: str
    out_dtype: str
    skip: str | None = None


class Builder:
    """Makes a backend's kernel cells for an architecture and builds them."""

    build_per: str = "kernel"  # "kernel": one build job per cell; "arch": one batch per arch
    source: str = "compiler"  # what a build record's numbers come from

    def cells(self, settings: RootSettings, arch: str, cc: int) -> list[dict]:
        """Return the build cells for one architecture (with `unsupported` reasons)."""
        return []

    def kernel_tail(self, cell: dict) -> str:
        """Return the last part of a kernel slug that is particular to this backend."""
        return f"w{cell['warps']}"

    def build(self, cells: list[dict], out_dir, jobs: int = 1) -> list[dict]:
        """Return one build result (status, reason, compiler numbers) per cell, in order."""
        raise NotImplementedError

    def toolchain(self) -> str:
        """Return the versions that decide what the builds produce, as one string."""
        return ""

    def launch_threads(self, build: dict) -> int:
        """Return the threads per block a built kernel launches with."""
        return int(build["num_warps"]) * 32


class DecodeRunner:
    """Times a backend's decode jobs, and says which runners (and launch rows) are its own."""

    runner_prefix: str | None = None  # runners named "<prefix>:<rest>" belong here
    runner_names: tuple[str, ...] = ()  # fixed runner names that belong here
    # What its runners are, for comparisons: "tile" (a grid kernel), "baseline", "program",
    # "fused" or "engine"; runner_kinds names the exceptions by runner.
    kind: str = "tile"
    runner_kinds: dict[str, str] = {}

    def decode_jobs(self, settings: RootSettings, kernels, gpus: tuple[str, ...]) -> list[str]:
        """Return the decode-benchmark jobs added on a machine with these GPUs."""
        return []

    def owns_job(self, kernel: dict) -> bool:
        """Return whether a decode job (its bench cell's kernel) is this runner's."""
        return False

    def row_dtypes(self, kernel: dict) -> frozenset[str]:
        """Return the operand types of the rows a decode job times (steps wait for only those)."""
        return frozenset({kernel["dtype"]}) if kernel.get("dtype") else frozenset()

    def runners(self, kernel: dict, cuda: bool) -> list[Runner]:
        """Return the runners one decode job times."""
        return []

    def bench(self, cell: DecodeCell, ceilings: dict, log) -> list[dict] | None:
        """Return the backend program's decode rows for a cell, or None for the generic one."""
        return None

    def make_runner(self, runner: str, kernel: dict, counts: list[int], dtype: str, cuda: bool):
        """Return the call that computes one grouped GEMM with the named runner."""
        raise ValueError(f"no runner {runner!r} here")

    def owns_runner(self, runner: str) -> bool:
        """Return whether a runner name is this runner's."""
        if self.runner_prefix and runner.startswith(f"{self.runner_prefix}:"):
            return len(runner) > len(self.runner_prefix) + 1
        return runner in self.runner_names

    def runner_kernel(self, runner: str) -> str | None:
        """Return the kernel slug or tile a runner names (None for a fixed runner)."""
        if self.runner_prefix and runner.startswith(f"{self.runner_prefix}:"):
            return runner.split(":", 1)[1]
        return None

    def runner_kind(self, runner: str) -> str:
        """Return what a runner of this backend is (see `kind`)."""
        if self.runner_prefix and runner.startswith(f"{self.runner_prefix}:"):
            return self.runner_kinds.get(self.runner_prefix, self.kind)
        return self.runner_kinds.get(runner, self.kind)

    def measured_rows(self, launch_row: dict, decode):
        """Return the decode rows that ran this launch row's kernel, or None where none can."""
        return None

    def table_rows(self, settings: RootSettings, tune):
        """Return extra decode.csv rows from the tune table, or None."""
        return None


class StepRunner:
    """Runs the routed experts inside the multi-process whole decode step."""

    step_runners: tuple[str, ...] = ()  # fixed runner names the step can run
    fused = False  # True: the step's own fused path (fused weights, the tuned MoE table)
    default_on_gpu = False  # the runner `auto` picks on a GPU (its first step runner)
    default_on_cpu = False  # the runner `auto` picks on the CPU (its first step runner)

    def step_capable(self, runner: str) -> bool:
        """Return whether the step can run this runner."""
        return runner in self.step_runners

    def step_runner(self, runner: str, counts: list[int], kernels: dict):
        """Return the call the step runs for this runner (bf16), or raise ValueError."""
        raise ValueError(f"layout runner {runner!r}: the step cannot run it")

    def step_runner_help(self) -> list[str]:
        """Return how step-capable runners are written, for error messages."""
        return list(self.step_runners)

    def runner_fault(self, runner: str, kernels: dict) -> str | None:
        """Return why the step cannot run this runner with the grid's kernels; None when it can."""
        return None

    def fused_setup(self, rank, n: int, slots: int, counts: list[int], experts: int) -> dict:
        """Return a fused runner's config, source, row blocks, top_k, pairs and `invoke` call."""
        raise ValueError("this step runner has no fused path")

    def step_inputs(self, settings: RootSettings, layout: dict, device: str) -> dict:
        """Return what the step's runner reads beyond the model (so a change reruns the step)."""
        return {}


class Tuner:
    """Adds tuning jobs on a machine with GPUs, with its own rules; paths are tune/<backend>/..."""

    # The stage module (relative to the package) each of its rules calls, for the rules' code
    # hash (Sweep.rule_code).
    rule_modules: dict[str, str] = {}

    def tune_jobs(self, settings: RootSettings, gpus: tuple[str, ...]) -> list[str]:
        """Return the tuning jobs added on a machine with these GPUs."""
        return []

    def tune_inputs(self, settings: RootSettings) -> dict:
        """Return the settings its tuning jobs read beyond the shared ones (they rerun it)."""
        return {}

    def tune_tables(self, settings: RootSettings, gpus: tuple[str, ...]) -> list[str]:
        """Return its per-job tables the tables step joins into tune.csv (results-relative)."""
        return []

    def tune_outputs(self, settings: RootSettings, gpus: tuple[str, ...]) -> list[str]:
        """Return everything its jobs write on this machine (results-relative), its tables first."""
        return self.tune_tables(settings, gpus)

    def example_inputs(self, folder: Path) -> dict[str, list[str]]:
        """Return what a kept example's report reads of its tuning, by report input name."""
        return {}

    def example_outputs(self, folder: Path) -> list[str]:
        """Return what re-rendering a kept example writes for it (its replayed tuning)."""
        return []

    def report_sections(self, tables: dict) -> list[tuple[str, str, str, list]]:
        """Return its report sections, each (key, title, short name, blocks)."""
        return []

    def report_figures(self) -> dict[str, tuple]:
        """Return its report figures by name: (category, alt text, caption, draw)."""
        return {}


class Argument(BaseModel, extra="forbid"):
    """One argument of a subcommand, as argparse's add_argument takes it."""

    name: str
    help: str
    type: Literal["int", "float"] | None = None
    default: int | float | str | list[str] | None = None
    action: Literal["store_true", "append"] | None = None
    nargs: Literal["?", "*"] | None = None
    metavar: str | None = None
    choices: list[str] | None = None
    required: bool | None = None


class Command(BaseModel, extra="forbid"):
    """One subcommand: its line in `tilesweep --help`, its description and arguments."""

    help: str
    description: str
    arguments: list[Argument]

    def add_to(self, sub: argparse._SubParsersAction, name: str, handler) -> None:
        """Add this subcommand as `name`, with its handler (set_defaults) and arguments."""
        one = sub.add_parser(name, help=self.help, description=self.description)
        one.set_defaults(handler=handler)
        for arg in self.arguments:  # model_dump: output only (argparse's keyword arguments)
            given = arg.model_dump(exclude_none=True, exclude={"name", "type"})
            kind = {"type": {"int": int, "float": float}[arg.type]} if arg.type else {}
            one.add_argument(arg.name, **given, **kind)


class Commands:
    """Adds `tilesweep` subcommands of a backend's own (the CLI's verbs for its product)."""

    def add_parsers(self, sub: argparse._SubParsersAction) -> None:
        """Add its subcommands, each with `set_defaults(handler=...)` returning the exit status."""
