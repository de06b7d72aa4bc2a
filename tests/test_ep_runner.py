"""Attention TP with the experts EP inside it, as TensorRT-LLM runs it: the MoE runner permutes only
its own experts' rows in the kernels its list already counts (no permutation kernel beside them),
and the layer's all-reduce on H100 at 4 GPUs is timed on TensorRT-LLM's own in-graph figures."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tilesweep import deployment_verdict
from tilesweep.config import compose_settings
from tilesweep.plan import engine_profile
from tilesweep.plan.interconnect import collective_time, topology_numbers
from tilesweep.plan.launch_fit import launch_timer
from tilesweep.plan.step_parts import EP_PERMUTE_LAUNCHES, make_part
from tilesweep.plan.topology import with_engine_allreduce

ROOT = Path(__file__).resolve().parents[1]
FIT = json.loads((ROOT / "docs/examples/h200/fit.json").read_text())
EMPTY = pd.DataFrame()
QWEN_TP4_EP = [
    "model=qwen3_235b_a22b",
    "hardware=h100",
    "deployment=fp8_all",
    "deployment.batches=[4]",
    "grid.layouts=[{tp:4,pp:1,ep:1,experts:ep}]",
    "references=none",
]


def _profile(engine: str):
    settings = compose_settings(["model=qwen3_235b_a22b", f"engine={engine}", "references=none"])
    return engine_profile.profile(settings.engine, settings.model, "fp8", "sm_90")


def test_tensorrtllm_lists_no_permutation_kernel_beside_its_moe_runner():
    trt, sglang = _profile("tensorrtllm"), _profile("sglang")
    assert trt.launches["expert_permute"] == 0
    assert "expert_permute" not in sglang.launches  # its part counts its own kernels
    hw = compose_settings(["hardware=h100", "references=none"]).hardware
    permute = make_part("ep_permute", "expert_permute", 1e6, 0.0, "bf16", 1, launches=3)
    runner = launch_timer(FIT, 5.0, "fit", launches=trt.launches)(permute, hw)
    separate = launch_timer(FIT, 5.0, "fit", launches=sglang.launches)(permute, hw)
    assert runner["launch_ms"] == 0 and separate["launch_ms"] > 0
    assert runner["memory_ms"] == separate["memory_ms"] > 0  # the rows still move


def test_a_tensorrtllm_ep_step_spends_no_launches_on_a_permutation_it_does_not_run():
    def other_ms(edit) -> float:
        settings = compose_settings(["engine=tensorrtllm", *QWEN_TP4_EP])
        moe = settings.engine.families["gqa_moe"].per_moe_layer
        settings.engine.families["gqa_moe"].per_moe_layer[:] = [k for k in moe if edit(k)]
        table = deployment_verdict.deployment_table(settings, EMPTY, EMPTY, EMPTY, {})
        return float(table["other_ms"].iloc[0])

    listed = other_ms(lambda k: True)
    unlisted = other_ms(lambda k: k.kind != "expert_permute")
    moe_layers = compose_settings(["model=qwen3_235b_a22b", "references=none"]).model.moe_layers
    # Without the list's word, each MoE layer pays the permutation's own kernels.
    assert unlisted - listed > moe_layers * EP_PERMUTE_LAUNCHES * 1e-3


def test_h100s_four_gpu_one_shot_is_no_slower_than_its_eight_gpu_one_up_to_a_mebibyte():
    engine = compose_settings(["engine=tensorrtllm", "references=none"]).engine
    hw = compose_settings(["hardware=h100", "references=none"]).hardware
    numbers, _ = topology_numbers(with_engine_allreduce(hw, engine, 8192))  # hidden 4096
    for nbytes in (8 << 10, 32 << 10, 128 << 10, 512 << 10, 1 << 20):
        four, label = collective_time("all_reduce", 4, nbytes, numbers)
        eight, _ = collective_time("all_reduce", 8, nbytes, numbers)
        assert four <= eight, nbytes  # one peer buffer read per other GPU: fewer at 4
        assert "[aic-h100-trtllm]" in label and "one_shot" in label


@pytest.mark.parametrize("tp", [4, 8])
def test_qwen3_on_h100_with_tensorrtllm_composes_attention_tp_with_experts_ep(tp):
    layouts = f"grid.layouts=[{{tp:{tp},pp:1,ep:1,experts:ep}}]"
    overrides = ["engine=tensorrtllm", *QWEN_TP4_EP[:-2], layouts, "references=none"]
    settings = compose_settings(overrides)
    row = deployment_verdict.deployment_table(settings, EMPTY, EMPTY, EMPTY, {}).iloc[0]
    assert row["layout"] == f"tp{tp}-pp1-ep1-xep" and row["tpot_ms"] > row["floor_ms"] > 0
