"""torch baselines: bmm, the grouped matmul and one matmul per expert in bf16, and the rowwise-
scaled fp8 grouped matmul beside the fp8 kernels, timed in one decode job."""

from __future__ import annotations

from tilesweep.backends import Backend, Runner, register
from tilesweep.settings.strict import Section

NAME = "torch"
JOB = "baselines"
# Every baseline with its operand and output types: each is checked against the fp32 reference of
# its own operand type, and the report compares it with the kernels of that type.
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


class TorchSettings(Section):
    """backend.torch: on or off."""

    enabled: bool


@register
class TorchBackend(Backend):
    """torch baselines: nothing to build; one decode job timing every baseline, bf16 and fp8."""

    name = NAME
    order = 1
    runner_names = tuple(RUNNERS)
    step_runners = STEP_RUNNERS
    settings_model = TorchSettings

    def decode_jobs(self, settings: dict, kernels, gpus: tuple[str, ...]) -> list[str]:
        """Return the one baselines job."""
        return [JOB]

    def owns_job(self, kernel: dict) -> bool:
        """Return whether the decode job is the baselines job."""
        return kernel.get("kernel") == JOB

    def runners(self, kernel: dict, cuda: bool) -> list[Runner]:
        """Return every baseline with its types, and why one is not timed on this device."""
        return [
            Runner(name, dtype, out, skip_reason(name, cuda))
            for name, (dtype, out) in RUNNERS.items()
        ]

    def make_runner(self, runner: str, kernel: dict, counts: list[int], dtype: str, cuda: bool):
        """Return the torch call for a baseline."""
        from tilesweep.measure.gemm_case import baseline_runner

        return baseline_runner(runner, counts, dtype)

    def step_runner(self, runner: str, counts: list[int], kernels: dict):
        """Return the step's call for a baseline that reads its inputs afresh."""
        if runner not in STEP_RUNNERS:
            raise ValueError(f"layout runner {runner!r}: caches its inputs; the step cannot run it")
        return self.make_runner(runner, {}, counts, "bf16", True)
