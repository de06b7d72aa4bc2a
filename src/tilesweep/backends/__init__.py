"""Kernel backends as plugins: each registers a `Backend` with its roles (backends.roles)."""

from __future__ import annotations

import importlib
import os
import pkgutil
from pathlib import Path
from typing import TYPE_CHECKING

from tilesweep import plugin_loader
from tilesweep.backends.roles import Builder, Commands, DecodeRunner, Runner, StepRunner, Tuner
from tilesweep.settings.backend_sections import register_section, unregister_section

if TYPE_CHECKING:
    from tilesweep.settings.root import RootSettings
    from tilesweep.settings.strict import Section
    from tilesweep.settings.sweep_space import Tile

__all__ = ["Backend", "Builder", "Commands", "DecodeRunner", "Runner", "StepRunner", "Tuner"]


class Backend:
    """One backend's registration: its name, config section and roles (None: not played)."""

    name: str = ""  # also its config key: backend.<name>
    order: int = 100  # where its cells, jobs and rows come in every listing (then by name)
    settings_model: type[Section] | None = None  # model of its section backend.<name> (needs
    # an `enabled` field); register() hands it to the settings, which validate the section by it
    builder: Builder | None = None
    decoder: DecodeRunner | None = None
    stepper: StepRunner | None = None
    tuner: Tuner | None = None
    commands: Commands | None = None

    def enabled(self, settings: RootSettings) -> bool:
        """Return whether the config turns this backend on."""
        return settings.backend.enabled(self.name)

    def validate(self, settings: RootSettings) -> None:
        """Raise ConfigError for settings of this backend that cannot describe a sweep."""


def kernel_cell(
    backend: str, arch: str, dtype: str, tile: Tile, stages: int | str, warps: int, epilogue: str
) -> dict:
    """Return one kernel cell as the grid's rows hold it."""
    cell = {"backend": backend, "arch": arch, "dtype": dtype}
    cell |= {"tile_m": tile.m, "tile_n": tile.n, "tile_k": tile.k}
    return cell | {"stages": stages, "warps": warps, "epilogue": epilogue}


_REGISTRY: dict[str, Backend] = {}


def register(cls: type[Backend]) -> type[Backend]:
    """Register a backend class (decorator); return the class."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no name")
    if cls.name in _REGISTRY and type(_REGISTRY[cls.name]) is not cls:
        raise ValueError(f"backend {cls.name!r} registered twice")
    if cls.settings_model is not None:  # the settings validate backend.<name> by it
        register_section(cls.name, cls.settings_model, cls.order)
    _REGISTRY[cls.name] = cls()
    return cls


def unregister(name: str) -> None:
    """Remove a registered backend (for tests that register a toy one)."""
    _REGISTRY.pop(name, None)
    unregister_section(name)


def _discover() -> None:
    """Import every backend module here, each package's `backend` module, then TILESWEEP_PLUGINS."""
    for info in pkgutil.iter_modules(__path__):
        if info.name != "roles":
            importlib.import_module(f"{__name__}.{info.name}")
    top = Path(__path__[0]).parent
    for info in pkgutil.iter_modules([str(top)]):
        if info.ispkg and (top / info.name / "backend.py").is_file():
            importlib.import_module(f"tilesweep.{info.name}.backend")
    try:
        plugin_loader.load(os.environ.get(plugin_loader.VARIABLE, ""))
    except plugin_loader.PluginError as err:  # the user's typo: one line from every entry point
        raise SystemExit(f"tilesweep: {err}") from None


def registered() -> list[Backend]:
    """Return every registered backend, in listing order."""
    return sorted(_REGISTRY.values(), key=lambda b: (b.order, b.name))


def get(name: str) -> Backend:
    """Return the backend registered under name; raise KeyError naming the known ones."""
    if name not in _REGISTRY:
        raise KeyError(f"unknown backend {name!r}; registered: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]


def enabled(settings: RootSettings) -> list[Backend]:
    """Return the backends the config turns on, in listing order."""
    return [b for b in registered() if b.enabled(settings)]


def backend_of(runner: str) -> Backend:
    """Return the backend a decode runner belongs to; raise ValueError for an unknown runner."""
    owners = [b for b in registered() if b.decoder and b.decoder.owns_runner(runner)]
    if len(owners) != 1:
        known = ", ".join(
            f"{d.runner_prefix}:*" if d.runner_prefix else ", ".join(d.runner_names)
            for d in (b.decoder for b in registered() if b.decoder)
            if d.runner_prefix or d.runner_names
        )
        raise ValueError(f"unknown runner {runner!r}; known: {known}")
    return owners[0]


def runner_kernel(runner: str) -> str | None:
    """Return the kernel slug or tile a runner names, or None for a fixed runner."""
    return backend_of(runner).decoder.runner_kernel(runner)


def runner_kind(runner: str) -> str:
    """Return a runner's kind: 'tile', 'baseline', 'program', 'fused', 'engine' or 'unknown'."""
    try:
        return backend_of(str(runner)).decoder.runner_kind(str(runner))
    except ValueError:
        return "unknown"


def step_backend(runner: str) -> Backend | None:
    """Return the backend whose step runner runs this runner, or None."""
    for b in registered():
        if b.stepper and b.stepper.step_capable(runner):
            return b
    return None


def step_capable(runner: str) -> bool:
    """Return whether the MoE step can run a runner (False for an unknown one)."""
    return step_backend(runner) is not None


def default_step_runner(cuda: bool) -> str:
    """Return the step runner `bench.step_runner: auto` picks on a GPU or on the CPU."""
    for b in registered():
        if b.stepper and (b.stepper.default_on_gpu if cuda else b.stepper.default_on_cpu):
            return b.stepper.step_runners[0]
    raise ValueError(f"no backend runs the step by default on the {'GPU' if cuda else 'CPU'}")


def step_inputs(settings: RootSettings, runner: str, layout: dict, device: str) -> dict:
    """Return what the step's runner reads on one rank of a layout beyond the model ({})."""
    found = step_backend(runner)
    return found.stepper.step_inputs(settings, layout, device) if found else {}


def tune_inputs(settings: RootSettings) -> dict:
    """Return each enabled tuner's own settings, by backend name."""
    return {b.name: b.tuner.tune_inputs(settings) for b in enabled(settings) if b.tuner}


def tune_tables(settings: RootSettings, gpus: tuple[str, ...]) -> list[str]:
    """Return the enabled tuners' tables the tables step joins (results-relative paths)."""
    return [p for b in enabled(settings) if b.tuner for p in b.tuner.tune_tables(settings, gpus)]


def tune_outputs(settings: RootSettings, gpus: tuple[str, ...]) -> list[str]:
    """Return everything the enabled tuners write on this machine (results-relative paths)."""
    return [p for b in enabled(settings) if b.tuner for p in b.tuner.tune_outputs(settings, gpus)]


def rule_tuner(rule: str) -> Tuner | None:
    """Return the tuner whose rule this is (its rule_modules name it), or None."""
    for b in registered():
        if b.tuner and rule in b.tuner.rule_modules:
            return b.tuner
    return None


def example_inputs(folder) -> dict[str, list[str]]:
    """Return what a kept example's report reads of every tuner's work, by report input name."""
    out: dict[str, list[str]] = {}
    for b in registered():
        for name, paths in (b.tuner.example_inputs(Path(folder)) if b.tuner else {}).items():
            out.setdefault(name, []).extend(paths)
    return out


def example_outputs(folder) -> list[str]:
    """Return what re-rendering a kept example writes for every tuner (its replayed tuning)."""
    return [p for b in registered() if b.tuner for p in b.tuner.example_outputs(Path(folder))]


def report_sections(tables: dict) -> list[tuple[str, str, str, list]]:
    """Return every tuner's report sections (key, title, short name, blocks), in listing order."""
    return [s for b in registered() if b.tuner for s in b.tuner.report_sections(tables)]


def report_figures() -> dict[str, tuple]:
    """Return every tuner's report figures by name (Tuner.report_figures), in listing order."""
    return {n: f for b in registered() if b.tuner for n, f in b.tuner.report_figures().items()}


def command_parsers(sub) -> None:
    """Add every backend's own subcommands to the CLI's subparsers (each with its handler)."""
    for b in registered():
        if b.commands:
            b.commands.add_parsers(sub)


def table_rows(settings: RootSettings, tune):
    """Return the extra decode.csv rows every backend adds from the tune table (DataFrames)."""
    rows = [b.decoder.table_rows(settings, tune) for b in registered() if b.decoder]
    return [r for r in rows if r is not None and len(r)]


def step_runner_help() -> list[str]:
    """Return how every step-capable runner is written, for error messages."""
    return [form for b in registered() if b.stepper for form in b.stepper.step_runner_help()]


def decode_backend(kernel: dict) -> Backend:
    """Return the backend whose decode job a bench cell's kernel is; raise ValueError if none."""
    owners = [b for b in registered() if b.decoder and b.decoder.owns_job(kernel)]
    if len(owners) != 1:
        raise ValueError(f"decode job {kernel.get('kernel')!r}: {len(owners)} backends claim it")
    return owners[0]


def launch_match(launch_row: dict, decode) -> object:
    """Return the decode rows that ran a launch row's kernel on its target (None if none can)."""
    decoder = get(launch_row["backend"]).decoder
    return decoder.measured_rows(launch_row, decode) if decoder else None


def builders() -> list[Backend]:
    """Return the registered backends that build kernels, in listing order."""
    return [b for b in registered() if b.builder]


def builder(name: str) -> Builder:
    """Return the builder of the named backend; raise KeyError if it builds nothing."""
    found = get(name).builder
    if found is None:
        raise KeyError(f"backend {name!r} builds nothing")
    return found


_discover()
