"""An engine whose expert GEMMs run worst-case padded rows at decode (engine.padded_experts,
plan.padded_experts): vLLM 0.12.0 on Hopper with DeepGEMM (conf/engine/vllm_0_12.yaml) computes
round_up(rows + local experts x 127, 128) rows whatever the batch, so its expert part is flat in the
batch where the rows' own composition grows; off its arch, format or MoE TP it is the plain part."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from pydantic import ValidationError

from tilesweep import deployment_verdict
from tilesweep.config import compose_settings
from tilesweep.errors import ConfigError
from tilesweep.plan import padded_experts, part_timers
from tilesweep.plan.architecture import bytes_per_weight
from tilesweep.settings.engine_spec import PaddedExperts
from tilesweep.settings.strict import check

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
    return part | {"inter_shard": inter, "expert_mb": w * bytes_per_weight("fp8") / 1e6}


def _gemm_ms(m_sum: int, moe_tp: int, e_math: float, hw) -> float:
    """Return both expert GEMMs' time over m_sum rows at e_math of the FP8 peak (ms)."""
    flops = 2 * m_sum * 3 * 4096 * 1536 / moe_tp
    return flops / (e_math * hw.peak_tflops["fp8"] * 1e12) * 1e3


def test_the_padded_rows_are_the_worst_case_whatever_the_batch():
    assert [padded_experts.padded_rows(r, 128, 128) for r in (8, 32, 128)] == [16384] * 3
    assert padded_experts.padded_rows(512, 128, 128) == 16768  # 64 sequences x top 8
    assert padded_experts.padded_rows(8, 64, 128) == 8192  # EP2: 64 local experts


def test_a_padded_part_is_flat_in_the_batch_and_compute_bound():
    """Off a measured GPU (measured emptied) the rows take the cited band's middle, here 0.5."""
    spec = _spec(measured={}, e_math_low=0.5, e_math_high=0.5)
    hw = compose_settings(QWEN).hardware
    timer = padded_experts.padded_timer(part_timers.roofline_timer, spec)
    few, many = timer(_part(32), hw), timer(_part(128), hw)
    gemm = _gemm_ms(16384, 2, 0.5, hw)
    assert few["math_ms"] == pytest.approx(gemm) and many["math_ms"] == pytest.approx(gemm)
    passes = 16384 * 9 * 768 / (hw.memory_bandwidth_gbs * 1e9) * 1e3  # silu_and_mul + quant
    assert few["memory_ms"] == pytest.approx(passes)
    assert "16384 padded rows" in few["source"] and "engine.padded_experts" in few["source"]
    plain = part_timers.roofline_timer(_part(32), hw)
    assert plain["memory_ms"] + plain["math_ms"] < few["math_ms"] / 4  # the rows' own: far less


def test_the_padded_path_is_only_where_the_engine_takes_it():
    spec, hw = _spec(), compose_settings(QWEN).hardware
    timer = padded_experts.padded_timer(part_timers.roofline_timer, spec)
    at_tp8 = _part(32, moe_tp=8)
    assert timer(at_tp8, hw) == part_timers.roofline_timer(at_tp8, hw)  # MoE TP 8: Triton
    norm = {"kind": "norm", "bytes": 1e6, "flops": 0.0, "dtype": "fp32", "count": 1}
    assert timer(norm, hw) == part_timers.roofline_timer(norm, hw)
    assert padded_experts.applies(spec, "sm_90", "fp8")
    assert not padded_experts.applies(spec, "sm_100", "fp8")
    assert not padded_experts.applies(spec, "sm_90", "bf16")
    assert not padded_experts.applies(None, "sm_90", "fp8")


@pytest.mark.parametrize("hardware", ["h100", "h200"])
@pytest.mark.parametrize(("tokens", "measured"), [(8, 0.449), (64, 0.298)])
def test_the_padded_rows_at_tp2_take_deepgemms_measured_e_math(hardware, tokens, measured):
    """DeepGEMM 594953a timed on one H100 at Qwen3-235B's TP2 shard (docs/evidence/
    deepgemm_probe_h100.json: gate_up + down over M_sum rows, 0.449 of the peak at 8 tokens, 0.298
    at 64), carried to H200: the row takes it, not the cited band's middle (0.516); the fast end
    takes the cited 0.680, the slow end the measured rate."""
    spec = _spec()
    hw = compose_settings([QWEN[0], f"hardware={hardware}", *QWEN[2:]]).hardware
    part, m_sum = _part(tokens * 8), padded_experts.padded_rows(tokens * 8, 128, 128)
    at = {
        end: padded_experts.padded_timer(part_timers.roofline_timer, spec, end)(part, hw)
        for end in ("middle", "low", "high")
    }
    assert at["middle"]["math_ms"] == pytest.approx(_gemm_ms(m_sum, 2, measured, hw), rel=2e-3)
    middle = _gemm_ms(m_sum, 2, padded_experts.e_math_middle(spec), hw)
    assert at["middle"]["math_ms"] > 1.1 * middle
    assert at["low"]["math_ms"] == pytest.approx(at["middle"]["math_ms"])
    fast = _gemm_ms(m_sum, 2, spec.e_math_high, hw)  # or the weights, where they bind
    total = {end: row["memory_ms"] + row["math_ms"] for end, row in at.items()}
    assert at["high"]["math_ms"] in (pytest.approx(fast), 0.0)
    assert total["high"] < total["middle"] and "the fast end, cited" in at["high"]["source"]
    source = at["middle"]["source"]
    assert f"e_math {measured:.3f}" in source and f"measured[{hardware}]" in source


def test_the_tp4_shard_and_tokens_between_points_read_the_curve_in_log():
    """TP4's own points (0.355 at 8 tokens); 4 tokens (0.25 tokens per expert) in log tokens
    between 1 and 8; a shard between TP4 and TP2 in log expert size."""
    spec, hw = _spec(), compose_settings(QWEN).hardware
    e = lambda part: padded_experts.e_math_at(spec, part, hw, "middle")[0]  # noqa: E731
    assert e(_part(64, moe_tp=4)) == pytest.approx(0.355, abs=5e-4)
    w = math.log(4) / math.log(8)
    assert e(_part(32)) == pytest.approx(0.605 ** (1 - w) * 0.449**w, rel=1e-3)
    mid = _part(64) | {"expert_mb": math.sqrt(4.720 * 9.439)}
    assert e(mid) == pytest.approx(math.sqrt(0.355 * 0.449), rel=1e-3)


def test_a_band_with_its_ends_reversed_or_an_unknown_key_is_refused():
    data = _spec().model_dump(exclude_none=True)
    with pytest.raises(ValidationError, match="e_math_high"):
        PaddedExperts(**(data | {"e_math_low": 0.7, "e_math_high": 0.4}))
    with pytest.raises(ValidationError):
        PaddedExperts(**(data | {"e_bw": 0.5}))


def _refusal(curve: dict) -> str:
    """Return the one-line refusal of a padded path whose h100 curve is `curve`."""
    data = _spec().model_dump(exclude_none=True) | {"measured": {"h100": curve}}
    with pytest.raises(ConfigError) as caught:
        check(PaddedExperts, data, "engine.padded_experts")
    line = str(caught.value)
    assert "\n" not in line and "engine.padded_experts.measured.h100" in line
    return line


def test_a_bad_measured_curve_is_refused_in_one_line():
    curve = _spec().measured["h100"].model_dump(exclude_none=True)
    assert "must be sizes" in _refusal(curve | {"ends": "kernels"})
    assert "ascend" in _refusal(curve | {"points": curve["points"][::-1]})
    assert "source" in _refusal(curve | {"source": ""})
    same_size = [p | {"low_expert_mb": p["high_expert_mb"]} for p in curve["points"]]
    assert "two different expert sizes" in _refusal(curve | {"points": same_size})


def test_vllm_0_12_on_h200_grows_less_with_the_batch_and_its_band_spans_its_ends():
    """Qwen3-235B at TP2 on H200: today's list (vllm, Triton experts) grows with the batch; 0.12's
    DeepGEMM path runs the same padded rows from 4 to 16 sequences, above today's, its time growing
    only with the experts touched (measured: 0.496 to 0.366 of the peak), and its band runs from the
    cited fast end to the measured rate."""
    base = [*QWEN, "deployment.batches=[4,16]", "grid.layouts=[{tp:2,pp:1,ep:1}]"]
    today = deployment_verdict.deployment_table(
        compose_settings([*base, "engine=vllm"]), EMPTY, EMPTY, EMPTY, {}
    )
    then = deployment_verdict.deployment_table(
        compose_settings([*base, "engine=vllm_0_12"]), EMPTY, EMPTY, EMPTY, {}
    )
    grew_today = today["tpot_ms"].iloc[1] / today["tpot_ms"].iloc[0]
    grew_then = then["tpot_ms"].iloc[1] / then["tpot_ms"].iloc[0]
    assert grew_today > 1.5 and grew_then < 1.4 and grew_then < grew_today / 1.4
    assert (then["tpot_ms"] > today["tpot_ms"]).all()
    assert (then["tpot_low_ms"] < then["tpot_ms"]).all()
    assert (then["tpot_ms"] < then["tpot_high_ms"]).all()
    assert "padded expert rows" in then["inputs_json"].iloc[0]


def test_a_measured_curve_under_a_gpu_the_catalog_lacks_is_refused():
    point = "{tokens_per_expert:1,low:0.3,high:0.4,low_kernel:a,high_kernel:b,"
    point += "low_expert_mb:4.7,high_expert_mb:9.4,cite:c}"
    bad = f"+engine.padded_experts.measured.h999={{ends:sizes,source:s,points:[{point}]}}"
    with pytest.raises(ConfigError, match="padded_experts.measured='h999': not a GPU"):
        compose_settings([*QWEN, "engine=vllm_0_12", bad])
