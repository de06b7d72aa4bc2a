"""Triton backend: ahead-of-time builds for any architecture, and launches on a local GPU."""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

from tilesweep import gpu_archs
from tilesweep.backends import (
    Backend,
    Builder,
    DecodeRunner,
    Runner,
    StepRunner,
    kernel_cell,
    register,
)
from tilesweep.isolate import Isolated, run_isolated
from tilesweep.measure.gemm_case import triton_runner
from tilesweep.provenance import package_version
from tilesweep.settings.strict import Section

if TYPE_CHECKING:
    from tilesweep.settings.root import RootSettings

NAME = "triton"
# What each architecture's tensor cores run is declared once, in conf/architectures.yaml
# (gpu_archs): Triton builds a dtype's tiles wherever its tensor cores run that dtype.
NO_GPU = "no CUDA device here: Triton kernels are built and launch-checked, not timed"
_OPERAND = {"bf16": "*bf16", "fp8": "*fp8e4nv"}
# Ints a real launch specialises as 16-divisible besides every pointer (model dimensions are
# multiples of 16); num_tiles never is, so one binary serves every batch.
_DIVISIBLE_INTS = ("N", "K")
# cuobjdump -res-usage's figures, by the build record's column each fills.
_USAGE = dict(REG="regs", STACK="stack_bytes", SHARED="smem_static_bytes", LOCAL="local_bytes")


def signature(cell: dict) -> dict[str, str]:
    """Return the Triton signature (argument name to type) of a kernel cell."""
    operand = _OPERAND[cell["dtype"]]
    out = "*fp32" if cell["epilogue"] == "finalize" else "*bf16"
    sig = {"a_ptr": operand, "b_ptr": operand, "c_ptr": out}
    sig |= dict.fromkeys(("a_scale_ptr", "b_scale_ptr"), "*fp32")
    sig |= dict.fromkeys(("tile_expert_ptr", "tile_start_ptr", "tile_end_ptr"), "*i32")
    sig |= dict.fromkeys(("num_tiles", "N", "K"), "i32")
    return sig | dict.fromkeys(constexprs(cell), "constexpr")


def constexprs(cell: dict) -> dict:
    """Return the compile-time constants of a kernel cell."""
    tile = {f"BLOCK_{d.upper()}": cell[f"tile_{d}"] for d in "mnk"}
    return tile | {"HAS_SCALE": cell["dtype"] == "fp8"}


def _cuobjdump() -> str | None:
    """Return the cuobjdump that ships with Triton (or one on PATH), if any."""
    import triton

    bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    return str(bundled) if bundled.exists() else shutil.which("cuobjdump")


def resource_usage(cubin: Path) -> dict:
    """Return registers, stack, static shared and local bytes from the cubin (cuobjdump)."""
    tool = _cuobjdump()
    if tool is None:
        raise RuntimeError("no cuobjdump (Triton's or on PATH): static shared memory unknown")
    cmd = [tool, "-res-usage", str(cubin)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False).stdout
    found = dict(re.findall(r"\b(REG|STACK|SHARED|LOCAL):(\d+)", out))
    if "SHARED" not in found:
        raise RuntimeError(f"cuobjdump -res-usage printed no SHARED figure for {cubin.name}")
    return {column: int(found.get(key, 0)) for key, column in _USAGE.items()}


def compile_kernel(cell: dict):
    """Return the Triton CompiledKernel for a cell, built for its architecture on any host."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    # triton (via kernels.triton_grouped_gemm): this module loads without it
    from tilesweep.kernels.triton_grouped_gemm import grouped_gemm

    sig = signature(cell)
    names = list(sig)
    divisible = [n for n, t in sig.items() if t.startswith("*") or n in _DIVISIBLE_INTS]
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in divisible}
    src = ASTSource(fn=grouped_gemm, signature=sig, constexprs=constexprs(cell), attrs=attrs)
    cc = int(cell["arch"].removeprefix("sm_"))
    options = {"num_warps": cell["warps"], "num_stages": cell["stages"]}
    return triton.compile(src, target=GPUTarget("cuda", cc, 32), options=options)


def _build_in_child(cell: dict, out_dir: str) -> dict:
    """Compile a cell and write its cubin; return the compiler's numbers (runs in a child)."""
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    start = time.perf_counter()
    kernel = compile_kernel(cell)
    seconds = time.perf_counter() - start
    cubin = Path(out_dir) / "kernel.cubin"
    cubin.parent.mkdir(parents=True, exist_ok=True)
    cubin.write_bytes(kernel.asm["cubin"])
    usage = resource_usage(cubin)
    dynamic = int(kernel.metadata.shared)
    row = {"smem_dynamic_bytes": dynamic, "smem_bytes": dynamic + usage["smem_static_bytes"]}
    row |= {key: int(getattr(kernel.metadata, key)) for key in ("num_warps", "num_stages")}
    return row | {"compile_s": round(seconds, 3), "binary": "kernel.cubin", **usage}


def build(cell: dict, out_dir: Path, timeout: float = 600.0) -> dict:
    """Return a build record for one cell: status ok/compile/timeout and the compiler's numbers."""
    if cell.get("unsupported"):
        return {"status": "unsupported", "reason": cell["unsupported"]}
    try:
        numbers = run_isolated(_build_in_child, cell, str(out_dir), timeout=timeout, start="fork")
    except Isolated as exc:
        status = "timeout" if exc.kind == "timeout" else "compile"
        return {"status": status, "reason": f"triton.compile failed: {exc.message}"}
    return {"status": "ok", "reason": "", **numbers}


def _unsupported(dtype: str, arch: str, cc: int) -> str | None:
    """Return why Triton builds no `dtype` kernel for an architecture, or None."""
    runs = gpu_archs.tensor_dtypes(arch, cc)
    if "bf16" not in runs:  # the grouped GEMM's bf16 tensor-core dots
        return f"Triton's GEMM needs cc {gpu_archs.first('bf16')[1]} or newer; {arch} is {cc}"
    if dtype == "nvfp4":
        return (
            "this Triton grouped GEMM has no NVFP4 path (a block-scaled dot needs "
            f"{gpu_archs.first('nvfp4')[0]} or newer); the CUTLASS backend accounts NVFP4 tiles"
        )
    if dtype not in runs:
        return f"{dtype} tensor cores need {gpu_archs.first(dtype)[0]} or newer; {arch} has none"
    return None


def skip_reason(dtype: str, cuda: bool) -> str | None:
    """Return why a Triton kernel of this dtype is not timed on the device at hand, or None."""
    if not cuda:
        return NO_GPU
    if dtype == "nvfp4":
        import torch

        major, minor = torch.cuda.get_device_capability()
        if 10 * major + minor < gpu_archs.first("nvfp4")[1]:
            return f"unsupported on this device: sm_{major}{minor} has no FP4 tensor cores"
        return "no NVFP4 Triton kernel in this backend yet; see the CUTLASS rows"
    return None


class TritonBuilder(Builder):
    """One ahead-of-time build job per kernel, for any architecture Triton targets."""

    build_per = "kernel"

    def cells(self, settings: RootSettings, arch: str, cc: int) -> list[dict]:
        """Return the Triton kernel cells built for one architecture."""
        grid = settings.grid
        combos = itertools.product(grid.dtypes, grid.tiles, grid.stages, grid.warps, grid.epilogues)
        out = []
        for dtype, tile, stages, warps, epilogue in combos:
            cell = kernel_cell(NAME, arch, dtype, tile, stages, warps, epilogue)
            why = _unsupported(dtype, arch, cc)
            out.append(cell if why is None else {**cell, "unsupported": why})
        return out

    def build(self, cells: list[dict], out_dir, jobs: int = 1) -> list[dict]:
        """Return the build result of each cell (one cell per job in practice)."""
        return [build(cell, Path(out_dir)) for cell in cells]

    def toolchain(self) -> str:
        """Return the Triton version that built the kernels."""
        return f"triton {package_version('triton')}"


class TritonDecode(DecodeRunner):
    """One decode job per Triton kernel, its runner `triton:<kernel slug>`."""

    runner_prefix = NAME
    kind = "tile"

    def decode_jobs(self, settings: RootSettings, kernels, gpus: tuple[str, ...]) -> list[str]:
        """Return one decode job per Triton kernel (timed on a GPU, recorded as skipped on CPU)."""
        if kernels is None or kernels.empty:
            return []
        return list(kernels[kernels["backend"] == NAME]["kernel"])

    def owns_job(self, kernel: dict) -> bool:
        """Return whether the decode job is one Triton kernel."""
        return kernel.get("backend") == NAME

    def runners(self, kernel: dict, cuda: bool) -> list[Runner]:
        """Return the one runner of a kernel's job: `triton:<kernel slug>`."""
        out = "fp32" if kernel["epilogue"] == "finalize" else "bf16"
        reason = skip_reason(kernel["dtype"], cuda)
        return [Runner(f"{NAME}:{kernel['kernel']}", kernel["dtype"], out, reason)]

    def make_runner(self, runner: str, kernel: dict, counts: list[int], dtype: str, cuda: bool):
        """Return the call that launches the kernel on a problem."""
        return triton_runner(kernel, counts)

    def measured_rows(self, launch_row: dict, decode):
        """Return the decode rows of this kernel's runner."""
        return decode[decode["runner"] == f"{NAME}:{launch_row['kernel']}"]


class TritonStep(StepRunner):
    """Any bf16 grid kernel runs the routed experts inside the step."""

    def step_capable(self, runner: str) -> bool:
        """Return True for a Triton runner: each reads its inputs afresh on every call."""
        return DECODE.owns_runner(runner)

    def step_runner(self, runner: str, counts: list[int], kernels: dict):
        """Return the step's call for a bf16 grid kernel; raise ValueError for any other."""
        fault = self.runner_fault(runner, kernels)
        if fault:
            raise ValueError(f"layout runner {runner!r}: {fault}")
        return triton_runner(kernels[DECODE.runner_kernel(runner)], counts)

    def step_runner_help(self) -> list[str]:
        """Return the form of a Triton step runner."""
        return [f"{NAME}:<kernel slug>"]

    def runner_fault(self, runner: str, kernels: dict) -> str | None:
        """Return why the step cannot run a Triton runner: its kernel is not a bf16 grid kernel."""
        slug = DECODE.runner_kernel(runner)
        bf16 = sorted(k for k, row in kernels.items() if row.get("dtype") == "bf16")
        if slug not in kernels:
            return f"no such kernel in the grid; bf16 kernels: {', '.join(bf16) or 'none'}"
        if kernels[slug]["dtype"] != "bf16":
            return f"the step runs bf16 kernels only; bf16 kernels: {', '.join(bf16) or 'none'}"
        return None


DECODE = TritonDecode()


class TritonSettings(Section):
    """backend.triton: on or off; its tiles, stages and warps come from the grid."""

    enabled: bool


@register
class TritonBackend(Backend):
    """Triton grouped GEMMs: built per kernel, timed per kernel, bf16 ones inside the step."""

    name = NAME
    order = 0
    settings_model = TritonSettings
    builder = TritonBuilder()
    decoder = DECODE
    stepper = TritonStep()
