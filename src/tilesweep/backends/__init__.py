"""Kernel backends as plugins: every module of this package registers one `Backend`.

A backend says which config key enables it (`backend.<name>.enabled`, set in
`conf/backends/<name>.yaml`), which cells it builds for an architecture, how they are built (one
job per kernel, or one batch job per architecture), how a build record becomes a launch row, which
decode runners it contributes, which of them can run inside the multi-process MoE step, how a
decode row maps back to a kernel's launch row, and where it runs for real. The rest of the
package asks the registry; nothing else branches on a backend's or a runner's name.

Adding a backend is one module here (discovered on import) and one file in conf/backends/.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import NamedTuple

# code_hash follows every module of a package that says so: its plugins are found, not imported.
PLUGIN_PACKAGE = True


class Runner(NamedTuple):
    """One decode-benchmark runner a job times: its name, operand and output types, and why it is
    not timed on the device at hand (None when it is)."""

    name: str
    dtype: str
    out_dtype: str
    skip: str | None = None


class Backend:
    """The protocol every backend implements; defaults describe a backend that contributes
    nothing at that step."""

    name: str = ""  # also its config key: backend.<name>
    order: int = 100  # where its cells, jobs and rows come in every listing (then by name)
    build_per: str = "none"  # "kernel": one build job per cell; "arch": one batch per arch
    source: str = "compiler"  # what a build record's numbers come from
    runner_prefix: str | None = None  # runners named "<prefix>:<rest>" belong to this backend
    runner_names: tuple[str, ...] = ()  # fixed runner names that belong to this backend
    step_runners: tuple[str, ...] = ()  # fixed runner names the MoE step can run
    settings_model: type | None = None  # pydantic model of its section backend.<name>

    def enabled(self, settings: dict) -> bool:
        """Return whether the config turns this backend on."""
        return bool(settings.get("backend", {}).get(self.name, {}).get("enabled", False))

    def validate(self, settings: dict) -> None:
        """Raise ConfigError for settings of this backend that cannot describe a sweep."""

    def cells(self, settings: dict, arch: str, cc: int) -> list[dict]:
        """Return this backend's build cells for one architecture (with `unsupported` reasons)."""
        return []

    def kernel_tail(self, cell: dict) -> str:
        """Return the last part of a kernel slug that is particular to this backend."""
        return f"w{cell['warps']}"

    def build(self, cells: list[dict], out_dir, jobs: int = 1) -> list[dict]:
        """Return one build result (status, reason, compiler numbers) per cell, in order."""
        raise NotImplementedError(f"backend {self.name!r} builds nothing")

    def toolchain(self) -> str:
        """Return the versions that decide what this backend's builds produce, as one string."""
        return ""

    def launch_threads(self, build: dict) -> int:
        """Return the threads per block a built kernel launches with."""
        return int(build["num_warps"]) * 32

    def decode_jobs(self, settings: dict, kernels, gpus: tuple[str, ...]) -> list[str]:
        """Return the decode-benchmark jobs this backend adds on a machine with these GPUs."""
        return []

    def tune_jobs(self, settings: dict, gpus: tuple[str, ...]) -> list[str]:
        """Return the tuning jobs (one per dtype) this backend adds on a machine with these GPUs."""
        return []

    def owns_job(self, kernel: dict) -> bool:
        """Return whether a decode job (its bench cell's kernel) belongs to this backend."""
        return False

    def runners(self, kernel: dict, cuda: bool) -> list[Runner]:
        """Return the runners one decode job of this backend times."""
        return []

    def bench(self, spec: dict, ceilings: dict, log) -> list[dict] | None:
        """Return decode rows measured by the backend's own program, or None when the generic
        per-runner benchmark times `runners`."""
        return None

    def make_runner(self, runner: str, kernel: dict, counts: list[int], dtype: str, cuda: bool):
        """Return the call that computes one grouped GEMM with the named runner."""
        raise ValueError(f"backend {self.name!r} has no runner {runner!r}")

    def owns_runner(self, runner: str) -> bool:
        """Return whether a runner name belongs to this backend."""
        if self.runner_prefix and runner.startswith(f"{self.runner_prefix}:"):
            return len(runner) > len(self.runner_prefix) + 1
        return runner in self.runner_names

    def runner_kernel(self, runner: str) -> str | None:
        """Return the kernel slug or tile a runner names (None for a fixed runner)."""
        if self.runner_prefix and runner.startswith(f"{self.runner_prefix}:"):
            return runner.split(":", 1)[1]
        return None

    def step_capable(self, runner: str) -> bool:
        """Return whether the multi-process MoE step can run this runner."""
        return runner in self.step_runners

    def step_runner(self, runner: str, counts: list[int], kernels: dict):
        """Return the call the MoE step runs for this runner (bf16), or raise ValueError."""
        raise ValueError(f"layout runner {runner!r}: backend {self.name!r} runs none in the step")

    def step_runner_help(self) -> list[str]:
        """Return how this backend's step-capable runners are written, for error messages."""
        return list(self.step_runners)

    def measured_rows(self, launch_row: dict, decode):
        """Return the decode rows (on the launch row's target) that ran this launch row's kernel,
        or None when the decode benchmark cannot run it."""
        return None


def kernel_cell(
    backend: str, arch: str, dtype: str, tile: dict, stages: int | str, warps: int, epilogue: str
) -> dict:
    """Return one kernel cell as the grid's rows hold it."""
    return {
        "backend": backend,
        "arch": arch,
        "dtype": dtype,
        "tile_m": tile["m"],
        "tile_n": tile["n"],
        "tile_k": tile["k"],
        "stages": stages,
        "warps": warps,
        "epilogue": epilogue,
    }


_REGISTRY: dict[str, Backend] = {}


def register(cls: type[Backend]) -> type[Backend]:
    """Register a backend class (decorator); return the class."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no name")
    if cls.name in _REGISTRY and type(_REGISTRY[cls.name]) is not cls:
        raise ValueError(f"backend {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls()
    return cls


def unregister(name: str) -> None:
    """Remove a registered backend (for tests that register a toy one)."""
    _REGISTRY.pop(name, None)


def _discover() -> None:
    """Import every module of this package, so each registers its backend."""
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")


def registered() -> list[Backend]:
    """Return every registered backend, in listing order."""
    return sorted(_REGISTRY.values(), key=lambda b: (b.order, b.name))


def get(name: str) -> Backend:
    """Return the backend registered under name; raise KeyError naming the known ones."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(
            f"unknown backend {name!r}; registered: {', '.join(sorted(_REGISTRY))}"
        ) from None


def enabled(settings: dict) -> list[Backend]:
    """Return the backends the config turns on, in listing order."""
    return [b for b in registered() if b.enabled(settings)]


def backend_of(runner: str) -> Backend:
    """Return the backend a decode runner belongs to; raise ValueError for an unknown runner."""
    owners = [b for b in registered() if b.owns_runner(runner)]
    if len(owners) != 1:
        known = ", ".join(
            f"{b.runner_prefix}:*" if b.runner_prefix else ", ".join(b.runner_names)
            for b in registered()
            if b.runner_prefix or b.runner_names
        )
        raise ValueError(f"unknown runner {runner!r}; known: {known}")
    return owners[0]


def runner_kernel(runner: str) -> str | None:
    """Return the kernel slug or tile a runner names, or None for a fixed runner."""
    return backend_of(runner).runner_kernel(runner)


def step_capable(runner: str) -> bool:
    """Return whether the MoE step can run a runner (False for an unknown one)."""
    try:
        return backend_of(runner).step_capable(runner)
    except ValueError:
        return False


def decode_backend(kernel: dict) -> Backend:
    """Return the backend whose decode job a bench cell's kernel is; raise ValueError if none."""
    owners = [b for b in registered() if b.owns_job(kernel)]
    if len(owners) != 1:
        raise ValueError(f"decode job {kernel.get('kernel')!r}: {len(owners)} backends claim it")
    return owners[0]


def launch_match(launch_row: dict, decode) -> object:
    """Return the decode rows that ran a launch row's kernel on its target (None if none can)."""
    return get(launch_row["backend"]).measured_rows(launch_row, decode)


_discover()
