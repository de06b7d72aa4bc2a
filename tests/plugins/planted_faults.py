"""Planted faults (tests only, never in a grid): decode jobs `fault-oob` and `fault-hang` run a
kernel that crashes or never returns, to prove a sweep survives them (see fault_kernels.py).
With TILESWEEP_FAULT_JOIN set, the tables step fails mid-way; with TILESWEEP_FAULT_PLAN set, the
plan does (a bug met while the Snakefile is read). Loaded as a plugin:
TILESWEEP_PLUGINS=plugins.planted_faults, with tests/ on the path."""

from __future__ import annotations

import os

from tilesweep.backends import Backend, DecodeRunner, Runner, register

PREFIX = "fault-"


class FaultDecode(DecodeRunner):
    """Only a decode job named for the fault, and its one runner."""

    kind = "fault"

    def owns_job(self, kernel: dict) -> bool:
        """Return whether the decode job plants a fault."""
        return str(kernel.get("kernel", "")).startswith(PREFIX)

    def owns_runner(self, runner: str) -> bool:
        """Return whether a runner is a planted fault."""
        return runner.startswith(PREFIX)

    def runners(self, kernel: dict, cuda: bool) -> list[Runner]:
        """Return the one fault runner the job names."""
        return [Runner(kernel["kernel"], "bf16", "bf16")]

    def make_runner(self, runner: str, kernel: dict, counts: list[int], dtype: str, cuda: bool):
        """Return the planted fault's call."""
        from plugins import fault_kernels

        return fault_kernels.runner(runner.removeprefix(PREFIX), cuda)

    def table_rows(self, settings, tune):
        """Fail the tables step when TILESWEEP_FAULT_JOIN is set (a join that breaks mid-way)."""
        if os.environ.get("TILESWEEP_FAULT_JOIN"):
            raise RuntimeError("planted fault in the tables step")
        return None


@register
class PlantedFaults(Backend):
    """Faulting kernels: no config key, no cells; only decode jobs named for the fault."""

    name = "fault"
    decoder = FaultDecode()

    def enabled(self, settings) -> bool:
        """Never on; fail as a bug would when TILESWEEP_FAULT_PLAN is set (the plan asks)."""
        if os.environ.get("TILESWEEP_FAULT_PLAN"):
            raise RuntimeError("planted fault in the plan")
        return False
