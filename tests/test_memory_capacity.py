"""A GPU's memory in the fit: what CUDA reports where the hardware file cites it, else the
datasheet's figure, said so in each row (plan.memory_fit.capacity)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tilesweep import deployment_verdict
from tilesweep.config import compose_settings
from tilesweep.plan.memory_fit import capacity, memory_fit
from tilesweep.settings import HardwareSpec

EMPTY = pd.DataFrame()
GIB, MIB = 1 << 30, 1 << 20
# [trtllm#10278] nvidia-smi's memory.total of a B200; CUDA is given a little less.
B200_SMI_MIB = 183359


def _hardware(name: str) -> HardwareSpec:
    """Return the hardware file `name` as composed."""
    return compose_settings([f"hardware={name}"]).hardware


def _dsr1_tp4(overrides: list[str]) -> pd.DataFrame:
    """Return the verdict rows of DeepSeek-V3 FP8 at TP4 on B200 under SGLang, 8k prompts and 1k
    outputs (no engine check)."""
    settings = compose_settings(
        [
            "hardware=b200",
            "model=deepseek_v3",
            "deployment=fp8_all",
            "engine=sglang",
            "grid.layouts=[{tp:4,pp:1,ep:1}]",
            "deployment.input_len=8192",
            "deployment.output_len=1024",
            "references=none",
            *overrides,
        ]
    )
    return deployment_verdict.deployment_table(settings, EMPTY, EMPTY, EMPTY, {})


def test_b200_holds_what_cuda_reports_not_the_datasheet_in_1e9_bytes():
    hw = _hardware("b200")
    room, words = capacity(hw)
    assert room == pytest.approx(hw.memory_cuda_gib * GIB)
    # Below nvidia-smi's total (the driver keeps some), above the datasheet's 180 read as 1e9 B.
    assert hw.memory_gb * 1e9 < room < B200_SMI_MIB * MIB
    assert "memory_cuda_gib" in words


def test_a_gpu_without_a_device_figure_takes_its_datasheet_and_says_so():
    hw = _hardware("rtx_pro_6000")
    assert hw.memory_cuda_gib is None
    room, words = capacity(hw)
    assert room == hw.memory_gb * 1e9
    assert "datasheet" in words


def test_a_cuda_figure_past_any_gpu_is_refused():
    spec = _hardware("b200").model_dump(exclude_unset=True)
    with pytest.raises(ValueError, match="outside any GPU's range"):
        HardwareSpec.model_validate(dict(spec, memory_cuda_gib=1e6))


def test_the_fit_compares_weights_kv_and_reserve_with_the_cuda_capacity():
    settings = compose_settings(
        ["hardware=b200", "model=deepseek_v3", "deployment=fp8_all", "references=none"]
    )
    layout = settings.grid.layouts[0].model_copy(update={"tp": 4})
    hw = settings.hardware
    fit = memory_fit(settings.model, settings.deployment, hw, layout, 1)
    assert fit["capacity_bytes"] == pytest.approx(hw.memory_cuda_gib * GIB)
    # The same need against the datasheet figure: the datasheet would leave 11.5 GB less room.
    sheet = HardwareSpec.model_validate(
        dict(hw.model_dump(exclude_unset=True), memory_cuda_gib=None)
    )
    old = memory_fit(settings.model, settings.deployment, sheet, layout, 1)
    assert old["needed_bytes"] == fit["needed_bytes"]
    assert fit["capacity_bytes"] - old["capacity_bytes"] == pytest.approx(11.5e9, rel=0.01)
    assert fit["max_batch_fit"] > old["max_batch_fit"]


def test_a_bf16_cache_of_32_long_sequences_needs_the_fp8_cache_deepseek_launches_on_b200():
    rows = _dsr1_tp4(["deployment.batches=[16,32]"]).set_index("batch")
    assert rows.loc[16, "fits_memory"] == "yes"
    assert rows.loc[32, "fits_memory"] == "no"
    fp8 = _dsr1_tp4(["deployment.batches=[32]", "deployment.kv_dtype=fp8"]).set_index("batch")
    assert fp8.loc[32, "fits_memory"] == "yes"
    # An MLA cache line is 576 elements a layer: fp8 halves the 32 sequences' share of the need.
    kv_bf16 = rows.loc[32, "mem_needed_gb"] - rows.loc[16, "mem_needed_gb"]
    assert rows.loc[32, "mem_needed_gb"] - fp8.loc[32, "mem_needed_gb"] == pytest.approx(kv_bf16)
    words = json.loads(fp8.loc[32, "inputs_json"])
    assert "178.35 GiB" in words["memory capacity"]
