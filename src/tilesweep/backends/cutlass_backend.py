"""CUTLASS backend: shared-memory accounting per arch, and the SM90 FP8 grouped-GEMM program."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import AfterValidator, Field

from tilesweep.backends import Backend, Builder, kernel_cell, register
from tilesweep.backends.cutlass_gpu import SM90Program
from tilesweep.cutlass.accounting import account
from tilesweep.cutlass.cell_spec import ARCHS as CUTLASS_ARCHS
from tilesweep.cutlass.cell_spec import EPILOGUES
from tilesweep.provenance import package_version
from tilesweep.settings.strict import Section, refuse
from tilesweep.settings.sweep_space import Epilogue, Tile
from tilesweep.settings.workload import Dtype

if TYPE_CHECKING:
    from tilesweep.settings.root import RootSettings

NAME = "cutlass"
ARCHS = tuple(CUTLASS_ARCHS)  # the architectures whose CUTLASS types cutlass.cell_spec declares


def _combinations(settings: RootSettings, arch: str) -> list[tuple[Tile, int | str, str]]:
    """Return (tile, stages, epilogue) of every cell on one arch, extra_stages included."""
    conf: CutlassSettings = settings.backend.cutlass
    tiles = settings.grid.tiles
    out = list(itertools.product(tiles, conf.stages, conf.epilogues))
    for extra in conf.extra_stages:
        if extra.arch == arch:
            named = [t for t in tiles if t in extra.tiles]
            for combination in itertools.product(named, extra.stages, extra.epilogues):
                if combination not in out:
                    out.append(combination)
    return out


class CutlassBuilder(Builder):
    """Shared-memory accounting from CUTLASS's own types, one batch job per architecture."""

    build_per = "arch"
    source = "cutlass-types"

    def cells(self, settings: RootSettings, arch: str, cc: int) -> list[dict]:
        """Return the CUTLASS accounting cells for one architecture."""
        dtype = settings.backend.cutlass.dtype_by_arch.get(arch, "none")
        out = []
        for tile, stages, epilogue in _combinations(settings, arch):
            cell = kernel_cell(NAME, arch, dtype, tile, stages, 0, epilogue)
            if arch not in ARCHS or dtype == "none":
                cell["unsupported"] = f"the CUTLASS backend covers {', '.join(ARCHS)}; not {arch}"
            out.append(cell)
        return out

    def kernel_tail(self, cell: dict) -> str:
        """Return the cluster shape: every accounted kernel is 1x1."""
        return "c1x1"

    def build(self, cells: list[dict], out_dir, jobs: int = 1) -> list[dict]:
        """Return one accounting result per cell, in order; unsupported cells are not compiled."""
        workdir = Path(out_dir).parents[1] / "cutlass-work"
        todo = [c for c in cells if not c.get("unsupported")]
        results = iter(account(todo, workdir, jobs=jobs) if todo else [])
        out = []
        for cell in cells:
            if cell.get("unsupported"):
                out.append({"status": "unsupported", "reason": cell["unsupported"]})
            else:  # the accounting's toolchain is nvcc's version: keep it under its own name
                result = dict(next(results))
                result["nvcc"] = result.pop("toolchain", None)
                if result.get("smem_bytes") is not None:
                    # device_kernel declares SharedStorage as `extern __shared__` only: all dynamic.
                    result.update(smem_dynamic_bytes=result["smem_bytes"], smem_static_bytes=0)
                out.append(result)
        return out

    def toolchain(self) -> str:
        """Return the nvidia-cutlass version whose headers were compiled."""
        return f"nvidia-cutlass {package_version('nvidia-cutlass')}"

    def launch_threads(self, build: dict) -> int:
        """Return the threads per block as accounted (MaxThreadsPerBlock of the compiled types)."""
        threads = build.get("threads_per_block")
        if not threads:
            raise ValueError("the CUTLASS build record carries no threads_per_block")
        return int(threads)


def _stage_counts(stages: list[int | str]) -> list[int | str]:
    """Return stages when it holds "auto" or stage counts of at least 1, at least one."""
    if not stages:
        raise refuse("", "give 'auto' or at least one stage count", stages)
    for i, value in enumerate(stages):
        if value != "auto" and not (isinstance(value, int) and value >= 1):
            raise refuse(f"[{i}]", "must be 'auto' or an integer >= 1", value)
    return stages


class ExtraStages(Section):
    """One backend.cutlass.extra_stages entry: stage counts for named tiles of one architecture."""

    arch: Literal[ARCHS]
    tiles: list[Tile] = Field(min_length=1)
    epilogues: list[Literal[tuple(EPILOGUES)]] = Field(min_length=1)
    stages: list[Annotated[int, Field(ge=1)]] = Field(min_length=1)


class CutlassSettings(Section):
    """backend.cutlass: on or off, operand type per arch, epilogues and stage counts."""

    enabled: bool
    dtype_by_arch: dict[str, Literal[Dtype, "none"]]
    epilogues: list[Epilogue] = Field(min_length=1)
    stages: Annotated[list[int | str], AfterValidator(_stage_counts)]  # "auto" or stage counts
    extra_stages: list[ExtraStages]


@register
class CutlassBackend(Backend):
    """CUTLASS: accounting per architecture; the SM90 program on an SM90 device."""

    name = NAME
    order = 2
    settings_model = CutlassSettings
    builder = CutlassBuilder()
    decoder = SM90Program()
