"""An engine whose expert GEMMs run worst-case padded rows at decode (engine.padded_experts,
plan.padded_experts): vLLM 0.12.0 on Hopper with DeepGEMM (conf/engine/vllm_0_12.yaml) computes
round_up(rows + local experts x 127, 128) rows whatever the batch, so its expert part is flat in the
batch where the rows' own composition grows; off its arch, format or MoE TP it is the plain part."""

from __future__ import annotations

import pandas as pd
import pytest
from pydantic import ValidationError

from tilesweep import deployment_verdict
from tilesweep.config import compose_settings
from tilesweep.plan import padded_experts, part_timers
from tilesweep.settings.engine_spec import PaddedExperts

EMPTY = pd.DataFrame()
QWEN = ["model=qwen3_235b_a22b", "hardware=h200", "deployment=fp8_all", "references=none"]


def _spec(**change) -> PaddedExperts:
    """Return vllm_0_12's padded path (its engine file), with `change` applied."""
    spec = compose_settings([*QWEN, "engine=vllm_0_12"]).engine.padded_experts
    return spec.model_copy(update=change)


def _part(rows: float, moe_tp: int = 2) -> dict:
    """Return a Qwen3-235B expert part of one rank at this MoE TP for `rows` routed rows."""
    inter = 1536 / moe_tp
    w = 3 * 4096 * inter
    part = {"name": "routed_experts", "kind": "expert_gemm", "bytes": min(rows, 128) * w}
    part |= {"flops": 2.0 * rows * w, "dtype": "fp8", "count": 94, "rows": rows}
    part |= {"experts_local": 128, "moe_tp": moe_tp, "expert_params": w, "hidden": 4096}
    return part | {"inter_shard": inter}


def test_the_padded_rows_are_the_worst_case_whatever_the_batch():
    assert [padded_experts.padded_rows(r, 128, 128) for r in (8, 32, 128)] == [16384] * 3
    assert padded_experts.padded_rows(512, 128, 128) == 16768  # 64 sequences x top 8
    assert padded_experts.padded_rows(8, 64, 128) == 8192  # EP2: 64 local experts


def test_a_padded_part_is_flat_in_the_batch_and_compute_bound():
    spec, hw = _spec(), compose_settings(QWEN).hardware
    timer = padded_experts.padded_timer(part_timers.roofline_timer, spec, 0.5)
    few, many = timer(_part(32), hw), timer(_part(128), hw)
    gemm = 2 * 16384 * 3 * 4096 * 768 / (0.5 * hw.peak_tflops["fp8"] * 1e12) * 1e3
    assert few["math_ms"] == pytest.approx(gemm) and many["math_ms"] == pytest.approx(gemm)
    passes = 16384 * 9 * 768 / (hw.memory_bandwidth_gbs * 1e9) * 1e3  # silu_and_mul + quant
    assert few["memory_ms"] == pytest.approx(passes)
    assert "16384 padded rows" in few["source"] and "engine.padded_experts" in few["source"]
    plain = part_timers.roofline_timer(_part(32), hw)
    assert plain["memory_ms"] + plain["math_ms"] < few["math_ms"] / 4  # the rows' own: far less


def test_the_padded_path_is_only_where_the_engine_takes_it():
    spec, hw = _spec(), compose_settings(QWEN).hardware
    timer = padded_experts.padded_timer(part_timers.roofline_timer, spec, 0.5)
    at_tp8 = _part(32, moe_tp=8)
    assert timer(at_tp8, hw) == part_timers.roofline_timer(at_tp8, hw)  # MoE TP 8: Triton
    norm = {"kind": "norm", "bytes": 1e6, "flops": 0.0, "dtype": "fp32", "count": 1}
    assert timer(norm, hw) == part_timers.roofline_timer(norm, hw)
    assert padded_experts.applies(spec, "sm_90", "fp8")
    assert not padded_experts.applies(spec, "sm_100", "fp8")
    assert not padded_experts.applies(spec, "sm_90", "bf16")
    assert not padded_experts.applies(None, "sm_90", "fp8")


def test_a_band_with_its_ends_reversed_or_an_unknown_key_is_refused():
    data = _spec().model_dump()
    with pytest.raises(ValidationError, match="e_math_high"):
        PaddedExperts(**(data | {"e_math_low": 0.7, "e_math_high": 0.4}))
    with pytest.raises(ValidationError):
        PaddedExperts(**(data | {"e_bw": 0.5}))


def test_vllm_0_12_on_h200_is_flat_in_the_batch_and_its_band_spans_its_ends():
    """Qwen3-235B at TP2 on H200: today's list (vllm, Triton experts) grows with the batch; 0.12's
    DeepGEMM path holds about the same step from 4 to 16 sequences, above today's, and its band runs
    from the cited GEMM rate's high end to its low end."""
    base = [*QWEN, "deployment.batches=[4,16]", "grid.layouts=[{tp:2,pp:1,ep:1}]"]
    today = deployment_verdict.deployment_table(
        compose_settings([*base, "engine=vllm"]), EMPTY, EMPTY, EMPTY, {}
    )
    then = deployment_verdict.deployment_table(
        compose_settings([*base, "engine=vllm_0_12"]), EMPTY, EMPTY, EMPTY, {}
    )
    grew_today = today["tpot_ms"].iloc[1] / today["tpot_ms"].iloc[0]
    grew_then = then["tpot_ms"].iloc[1] / then["tpot_ms"].iloc[0]
    assert grew_today > 1.5 and grew_then < 1.15
    assert (then["tpot_ms"] > today["tpot_ms"]).all()
    assert (then["tpot_low_ms"] < then["tpot_ms"]).all()
    assert (then["tpot_ms"] < then["tpot_high_ms"]).all()
    assert "padded expert rows" in then["inputs_json"].iloc[0]
