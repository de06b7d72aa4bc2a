"""torch baselines: bmm, the grouped matmul and one matmul per expert, timed in one decode job."""

from __future__ import annotations

from tilesweep.backends import Backend, Runner, register

NAME = "torch"
JOB = "baselines"
RUNNERS = ("torch_bmm", "torch_grouped_mm", "torch_matmul")
CUDA_ONLY = {"torch_grouped_mm": "torch._grouped_mm runs on CUDA devices only"}
# Runners whose every call reads its inputs afresh (torch_bmm caches its padded input: not these).
STEP_RUNNERS = ("torch_matmul", "torch_grouped_mm")


@register
class TorchBackend(Backend):
    """torch baselines: nothing to build; one decode job timing every baseline in bf16."""

    name = NAME
    order = 1
    runner_names = RUNNERS
    step_runners = STEP_RUNNERS
    schema = {"enabled": bool}

    def decode_jobs(self, settings: dict, kernels, gpus: tuple[str, ...]) -> list[str]:
        """Return the one baselines job."""
        return [JOB]

    def owns_job(self, kernel: dict) -> bool:
        """Return whether the decode job is the baselines job."""
        return kernel.get("kernel") == JOB

    def runners(self, kernel: dict, cuda: bool) -> list[Runner]:
        """Return every baseline, in bf16, with why one is not timed on a CPU."""
        return [
            Runner(name, "bf16", "bf16", None if cuda else CUDA_ONLY.get(name)) for name in RUNNERS
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
