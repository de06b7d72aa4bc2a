"""torch baselines (bmm, grouped, per-expert and fp8 rowwise grouped matmuls) in one decode job."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from tilesweep.backends import Backend, DecodeRunner, Runner, StepRunner, register
from tilesweep.settings.strict import Section

if TYPE_CHECKING:
    from tilesweep.settings.root import RootSettings

NAME = "torch"
# One decode job per operand type, so that what reads only one type's rows (the verdict reads
# fp8's) waits only for that job.
JOBS = {"baselines": "bf16", "baselines-fp8": "fp8"}
# Every baseline's operand and output types (its reference and its report peers are by type).
RUNNERS = {
    "torch_bmm": ("bf16", "bf16"),
    "torch_grouped_mm": ("bf16", "bf16"),
    "torch_matmul": ("bf16", "bf16"),
    "torch_scaled_grouped_mm": ("fp8", "bf16"),
}
CUDA_ONLY = {
    "torch_grouped_mm": "torch._grouped_mm runs on CUDA devices only",
    "torch_scaled_grouped_mm": (
        "torch._scaled_grouped_mm runs on CUDA devices only (sm_90 or newer)"
    ),
}
# The torch attribute a baseline calls, where a torch build may lack it.
TORCH_OPS = {"torch_grouped_mm": "_grouped_mm", "torch_scaled_grouped_mm": "_scaled_grouped_mm"}
# The least compute capability a baseline's CUDA kernels run on (rowwise fp8 grouped GEMM: SM90).
MIN_CC = {"torch_scaled_grouped_mm": (9, 0)}
# Runners whose every call reads its inputs afresh (torch_bmm caches its padded input: not these).
STEP_RUNNERS = ("torch_matmul", "torch_grouped_mm")


def skip_reason(name: str, cuda: bool) -> str | None:
    """Return why a baseline is not timed on the device at hand (None when it is)."""
    import torch

    op = TORCH_OPS.get(name)
    if op is not None and getattr(torch, op, None) is None:
        return f"torch.{op} is not in this torch build ({torch.__version__})"
    if not cuda:
        return CUDA_ONLY.get(name)
    if name in MIN_CC:
        have = torch.cuda.get_device_capability()
        if have < MIN_CC[name]:
            need = "sm_{}{}".format(*MIN_CC[name])
            return f"torch.{op} needs {need} or newer; this device is sm_{have[0]}{have[1]}"
    return None


def _torch_op(torch, name: str) -> Callable:
    """Return the torch function a baseline calls; NotImplementedError where this torch lacks it."""
    op = getattr(torch, TORCH_OPS[name], None)
    if op is None:
        raise NotImplementedError(f"torch.{TORCH_OPS[name]} is not in this torch build")
    return op


def _row_ends(torch) -> Callable:
    """Return a call giving a problem's int32 cumulative row ends, made once (untimed)."""
    kept: dict[str, object] = {}

    def row_ends(p):
        if "offs" not in kept:
            kept["offs"] = torch.tensor(p.offsets[1:], dtype=torch.int32, device=p.a.device)
        return kept["offs"]

    return row_ends


def _matmul(torch, counts: list[int]) -> Callable:
    """Return a loop of one torch.matmul per expert with tokens."""

    def call(p):
        for e in range(len(counts)):
            lo, hi = p.offsets[e], p.offsets[e + 1]
            if hi > lo:
                torch.matmul(p.a[lo:hi], p.b[e].t(), out=p.c[lo:hi])
        return p.c

    return call


def _bmm(torch, counts: list[int]) -> Callable:
    """Return one torch.bmm over rows padded to the widest (padded once, untimed), copied back."""
    experts, widest = len(counts), max(counts)
    padded: dict[int, object] = {}

    def call(p):
        key = id(p)
        if key not in padded:  # padding is setup, not timed: a bmm user stores it so
            buf = torch.zeros(experts, widest, p.a.shape[1], dtype=p.a.dtype, device=p.a.device)
            for e in range(experts):
                lo, hi = p.offsets[e], p.offsets[e + 1]
                buf[e, : hi - lo] = p.a[lo:hi]
            out = torch.empty(experts, widest, p.b.shape[1], dtype=p.c.dtype, device=p.a.device)
            padded[key] = (buf, out)
        buf, out = padded[key]
        torch.bmm(buf, p.b.transpose(1, 2), out=out)
        for e in range(experts):
            lo, hi = p.offsets[e], p.offsets[e + 1]
            p.c[lo:hi] = out[e, : hi - lo]
        return p.c

    return call


def _grouped_mm(torch, counts: list[int]) -> Callable:
    """Return torch's grouped GEMM over the rows sorted by expert."""
    grouped, row_ends = _torch_op(torch, "torch_grouped_mm"), _row_ends(torch)
    return lambda p: p.c.copy_(grouped(p.a, p.b.transpose(1, 2), offs=row_ends(p)))


def _scaled_grouped_mm(torch, counts: list[int]) -> Callable:
    """Return torch's fp8 grouped GEMM with rowwise scales (B column-major, int32 offsets)."""
    scaled, row_ends = _torch_op(torch, "torch_scaled_grouped_mm"), _row_ends(torch)

    def call(p):
        b = p.b.transpose(-2, -1)
        offs = row_ends(p)
        return p.c.copy_(scaled(p.a, b, p.a_scale, p.b_scale, offs=offs, out_dtype=torch.bfloat16))

    return call


# How each baseline's call is made, by name.
CALLS = {
    "torch_matmul": _matmul,
    "torch_bmm": _bmm,
    "torch_grouped_mm": _grouped_mm,
    "torch_scaled_grouped_mm": _scaled_grouped_mm,
}


def baseline_runner(name: str, counts: list[int], dtype: str) -> Callable:
    """Return a call computing the grouped GEMM with a torch baseline."""
    import torch

    if name in RUNNERS and dtype != RUNNERS[name][0]:
        raise NotImplementedError(f"{name} baseline is timed for {RUNNERS[name][0]} only")
    if name not in CALLS:
        raise ValueError(f"unknown baseline {name!r}")
    return CALLS[name](torch, counts)


class TorchDecode(DecodeRunner):
    """The baselines' decode jobs: one per operand type (JOBS), each timing its type's."""

    runner_names = tuple(RUNNERS)
    kind = "baseline"

    def decode_jobs(self, settings: RootSettings, kernels, gpus: tuple[str, ...]) -> list[str]:
        """Return the baselines' jobs, one per operand type."""
        return list(JOBS)

    def owns_job(self, kernel: dict) -> bool:
        """Return whether the decode job is one of the baselines' jobs."""
        return kernel.get("kernel") in JOBS

    def row_dtypes(self, kernel: dict) -> frozenset[str]:
        """Return the operand type of a baselines job (every type for no job)."""
        return frozenset(r.dtype for r in self._of(kernel))

    def runners(self, kernel: dict, cuda: bool) -> list[Runner]:
        """Return the baselines of a job's operand type, and why one is not timed here."""
        return [r._replace(skip=skip_reason(r.name, cuda)) for r in self._of(kernel)]

    @staticmethod
    def _of(kernel: dict) -> list[Runner]:
        """Return the baselines a job times (no skip reasons yet)."""
        want = JOBS.get(kernel.get("kernel"))
        return [Runner(name, *types) for name, types in RUNNERS.items() if want in (None, types[0])]

    def make_runner(self, runner: str, kernel: dict, counts: list[int], dtype: str, cuda: bool):
        """Return the torch call for a baseline."""
        return baseline_runner(runner, counts, dtype)


class TorchStep(StepRunner):
    """The baselines that read their inputs afresh run the routed experts inside the step."""

    step_runners = STEP_RUNNERS
    default_on_cpu = True

    def step_runner(self, runner: str, counts: list[int], kernels: dict):
        """Return the step's call for a baseline that reads its inputs afresh."""
        if runner not in STEP_RUNNERS:
            raise ValueError(f"layout runner {runner!r}: caches its inputs; the step cannot run it")
        return baseline_runner(runner, counts, "bf16")


class TorchSettings(Section):
    """backend.torch: on or off."""

    enabled: bool


@register
class TorchBackend(Backend):
    """torch baselines: nothing to build; one decode job; two of them run inside the step."""

    name = NAME
    order = 1
    settings_model = TorchSettings
    decoder = TorchDecode()
    stepper = TorchStep()
