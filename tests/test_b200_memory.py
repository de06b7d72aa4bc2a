"""B200's HBM bandwidth as the device reports it: conf/hardware/b200.yaml (its MoE curves:
tests/test_b200_moe.py)."""

from __future__ import annotations

import pandas as pd
import pytest

from tilesweep import deployment_verdict
from tilesweep.config import compose_settings
from tilesweep.settings import HardwareSpec

EMPTY = pd.DataFrame()

# [ao#4002] a B200's driver: a 7680-bit memory bus (cudaDeviceProp) at a 3996 MHz maximum memory
# clock (nvidia-smi), double data rate.
BUS_BITS, MEMORY_MHZ = 7680, 3996


def _b200(overrides: list[str], bandwidth_gbs: float | None = None) -> pd.DataFrame:
    """Return the verdict rows of DeepSeek-V3 FP8 at TP8 on B200 under SGLang (no engine check),
    with the B200's bandwidth replaced where `bandwidth_gbs` is given."""
    settings = compose_settings(
        [
            "hardware=b200",
            "model=deepseek_v3",
            "deployment=fp8_all",
            "engine=sglang",
            "grid.layouts=[{tp:8,pp:1,ep:1}]",
            "references=none",
            *overrides,
        ]
    )
    if bandwidth_gbs is not None:
        spec = settings.hardware.model_dump(exclude_unset=True)
        hw = HardwareSpec.model_validate(dict(spec, memory_bandwidth_gbs=bandwidth_gbs))
        settings = settings.model_copy(update={"hardware": hw})
    return deployment_verdict.deployment_table(settings, EMPTY, EMPTY, EMPTY, {})


def test_b200_bandwidth_is_its_reported_bus_at_its_memory_clock():
    hw = compose_settings(["hardware=b200"]).hardware
    reported = BUS_BITS / 8 * MEMORY_MHZ * 2 / 1e3  # GB/s
    assert hw.memory_bandwidth_gbs == pytest.approx(reported, abs=1.0)
    assert hw.memory_bandwidth_gbs < 8000  # the HGX datasheet's 64 TB/s / 8 is the 8192-bit bus


def test_a_b200_step_moves_its_bytes_at_the_reported_bandwidth():
    load = ["deployment.batches=[64]", "deployment.context_len=1024"]
    now, at_datasheet = _b200(load), _b200(load, bandwidth_gbs=8000)
    # The floor is bytes over bandwidth plus the collectives (unchanged by it): it grows by less
    # than 8000 / 7672; the memory term of the composed step grows by that ratio.
    ratio = float(now["floor_ms"].iloc[0] / at_datasheet["floor_ms"].iloc[0])
    assert 1.0 < ratio < 8000 / 7672 + 1e-9
    memory = float(now["memory_ms"].iloc[0] / at_datasheet["memory_ms"].iloc[0])
    assert memory == pytest.approx(8000 / 7672, rel=0.02)
