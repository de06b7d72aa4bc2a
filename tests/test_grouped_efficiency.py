"""The grouped (MoE) GEMM efficiency band a hardware file cites, read at a batch's tokens per
expert, and the PCIe host topologies a default verdict spans."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from tilesweep import deployment_verdict
from tilesweep.config import compose_settings
from tilesweep.errors import ConfigError
from tilesweep.plan import row_inputs
from tilesweep.plan.grouped_efficiency import band_at, fixed_cost_scaled, shaped_timer
from tilesweep.settings import HardwareSpec
from tilesweep.settings.hardware_spec import EfficiencyCurve
from tilesweep.settings.strict import check

CURVE = EfficiencyCurve.model_validate({
    "points": [
        {"tokens_per_expert": 0.25, "low": 0.4, "high": 0.5, "low_kernel": "a", "high_kernel": "b",
         "cite": "one"},
        {"tokens_per_expert": 4, "low": 0.6, "high": 0.7, "low_kernel": "c", "high_kernel": "d",
         "cite": "two"},
    ]
})  # fmt: skip
EMPTY = pd.DataFrame()


def test_the_band_is_read_at_a_point_between_points_and_held_past_the_ends():
    at = band_at(CURVE, 4)
    assert (at.low, at.high, at.low_kernel) == (0.6, 0.7, "c") and "at 4 tokens" in at.where
    mid = band_at(CURVE, 1)  # half way in log tokens
    assert mid.low == pytest.approx(math.sqrt(0.4 * 0.6))
    assert mid.high == pytest.approx(math.sqrt(0.5 * 0.7)) and "between 0.25 and 4" in mid.where
    below, above = band_at(CURVE, 0.01), band_at(CURVE, 64)
    assert (below.low, below.high) == (0.4, 0.5) and "none cited below" in below.where
    assert (above.low, above.high) == (0.6, 0.7) and "none cited above" in above.where
    assert at.middle == pytest.approx(math.sqrt(0.6 * 0.7))


SIZED = CURVE.model_copy(
    update={
        "points": [
            CURVE.points[0].model_copy(update={"low_expert_mb": 1.0, "high_expert_mb": 2.0}),
            CURVE.points[1].model_copy(update={"low_expert_mb": 1.0, "high_expert_mb": 1.0}),
        ]
    }
)


def test_a_fixed_cost_per_expert_streams_a_larger_expert_better_and_a_smaller_worse():
    assert fixed_cost_scaled(0.4, 1.0, 1.0) == pytest.approx(0.4)
    # time = cost + bytes / datasheet: at 0.4, 1 MB costs 1.5 MB's streaming more
    assert fixed_cost_scaled(0.4, 1.0, 2.0) == pytest.approx(2.0 / 3.5)
    assert fixed_cost_scaled(0.4, 2.0, 1.0) < 0.4


def test_a_sized_band_is_scaled_to_the_layouts_expert_and_held_inside_the_cited_sizes():
    assert band_at(SIZED, 4) == band_at(CURVE, 4)  # no size asked: the band as cited
    at = band_at(SIZED, 4, expert_mb=2.0)  # both kernels timed on 1 MB: larger streams better
    assert at.low == pytest.approx(fixed_cost_scaled(0.6, 1.0, 2.0))
    assert at.high == pytest.approx(fixed_cost_scaled(0.7, 1.0, 2.0))
    assert "from 1 to 2 MB" in at.high_kernel and "2 MB an expert" in at.where
    held = band_at(SIZED, 4, expert_mb=16.0)  # past the largest size a kernel was timed on
    assert held.high == at.high and "held at 2 MB" in held.where
    # One end timed on a larger expert than asked: scaled down, a smaller one up, and the ends
    # named by what they are at the asked size (here the cited high end's kernel is the lower).
    mixed = band_at(SIZED, 0.25, expert_mb=1.5)
    assert mixed.low == pytest.approx(fixed_cost_scaled(0.5, 2.0, 1.5))
    assert mixed.high == pytest.approx(fixed_cost_scaled(0.4, 1.0, 1.5))
    assert mixed.low_kernel.startswith("b,") and mixed.high_kernel.startswith("a,")


def test_the_fixed_cost_scaling_meets_the_one_kernel_cited_at_two_sizes():
    # conf/hardware/rtx_pro_6000.yaml: b12x's MoE before its M=1 kernel, one token, on RTX PRO
    # 6000: 27.71 us for 8 experts of 1.77 MB ([fi5099]) and 36.86 us for 8 of 3.54 MB
    # ([b12x267], L2 evicted), of 1,792 GB/s.
    small, large = 8 * 1.77e-3 / 27.71e-6 / 1792, 8 * 3.54e-3 / 36.86e-6 / 1792
    assert fixed_cost_scaled(small, 1.77, 3.54) == pytest.approx(large, rel=0.05)
    assert small != pytest.approx(large, rel=0.3)  # the same fraction would miss it by a third


def test_a_shaped_timer_times_each_expert_part_at_its_own_size_and_others_at_none():
    asked = []

    def make(e):
        asked.append(e)
        return lambda part, hw: {"e": e}

    timer = shaped_timer(SIZED, 4, "high", make)
    assert timer({"kind": "expert_gemm", "expert_mb": 2.0}, {})["e"] == band_at(SIZED, 4, 2.0).high
    assert timer({"kind": "norm", "expert_mb": 2.0}, {})["e"] == 0.7
    timer({"kind": "expert_gemm", "expert_mb": 2.0}, {})
    assert len(asked) == 2  # one timer made per expert size


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"low": 0.8}, "a band is low <= high"),
        ({"low": float("nan")}, r"hardware\[rtx_pro_6000\]"),
        ({"high": 1.5}, r"hardware\[rtx_pro_6000\]"),
        ({"tokens_per_expert": 8}, "ascend"),
        ({"high_expert_mb": None}, "both ends' expert sizes or neither"),
        ({"low_expert_mb": -1.0}, "greater than 0"),
    ],
)
def test_a_curve_out_of_range_or_order_is_refused(change, why):
    spec = compose_settings([]).hardware.model_dump(exclude_unset=True)
    points = spec["grouped_gemm_efficiency"]["nvfp4"]["points"]
    points[0] = dict(points[0], **change)
    with pytest.raises(ConfigError, match=why):
        check(HardwareSpec, spec, "hardware[rtx_pro_6000]")


def test_the_brief_machine_takes_the_engines_kernels_and_names_each_end():
    settings = compose_settings(
        ["deployment.batches=[1,64]", "deployment.context_len=1024",
         "grid.layouts=[{tp:8,pp:1,ep:1}]", "deployment.topology=switch"]
    )  # fmt: skip
    rows = deployment_verdict.deployment_table(settings, EMPTY, EMPTY, EMPTY, {})
    assert row_inputs.column_words(rows).str.contains("b12x").all()
    assert row_inputs.column_words(rows).str.contains("topology: switch").all()
    assert (rows["tpot_low_ms"] <= rows["tpot_ms"]).all()
    assert (rows["tpot_ms"] <= rows["tpot_high_ms"]).all()
    # More tokens per expert stream the experts better: batch 64's band sits higher.
    assert "at 2 tokens per expert" in row_inputs.row_words(rows.iloc[1])


def test_a_default_verdict_spans_the_plausible_topologies_and_a_named_one_alone():
    base = ["deployment.batches=[1]", "grid.layouts=[{tp:8,pp:1,ep:1}]"]
    spans = deployment_verdict.deployment_table(compose_settings(base), EMPTY, EMPTY, EMPTY, {})
    each = {
        name: deployment_verdict.deployment_table(
            compose_settings([*base, f"deployment.topology={name}"]), EMPTY, EMPTY, EMPTY, {}
        ).iloc[0]
        for name in ("switch", "dual_socket", "switch_free")
    }
    row = spans.iloc[0]
    assert "also span dual_socket, switch_free" in row_inputs.row_words(row)
    assert row["tpot_ms"] == pytest.approx(each["switch"]["tpot_ms"])
    assert row["tpot_low_ms"] == pytest.approx(min(r["tpot_low_ms"] for r in each.values()))
    assert row["tpot_high_ms"] == pytest.approx(max(r["tpot_high_ms"] for r in each.values()))
    assert each["dual_socket"]["comm_ms"] > each["switch"]["comm_ms"]


def test_a_deployment_without_an_expert_band_still_spans_the_plausible_topologies():
    # fp8 experts on SM120 have no cited band: the topologies alone make tpot_low/high_ms (they
    # collapsed to tpot_ms before: the span started from the missing ends).
    base = ["model=qwen3_235b_a22b", "deployment=fp8_all", "deployment.batches=[1]"]
    base.append("grid.layouts=[{tp:8,pp:1,ep:1}]")
    spans = deployment_verdict.deployment_table(compose_settings(base), EMPTY, EMPTY, EMPTY, {})
    each = [
        deployment_verdict.deployment_table(
            compose_settings([*base, f"deployment.topology={name}"]), EMPTY, EMPTY, EMPTY, {}
        ).iloc[0]["tpot_ms"]
        for name in ("switch", "dual_socket", "switch_free")
    ]
    row = spans.iloc[0]
    assert row["tpot_low_ms"] == pytest.approx(min(each))
    assert row["tpot_high_ms"] == pytest.approx(max(each))
    assert row["tpot_low_ms"] < row["tpot_high_ms"]


def test_a_topology_the_hardware_lacks_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="valid: dual_socket, host_staged, switch, switch_free"):
        compose_settings(["deployment.topology=nvswitch"])


def test_an_engine_kernel_of_one_architecture_counts_only_there():
    from tilesweep.plan import engine_profile

    settings = compose_settings([])
    engine, model = settings.engine, settings.model
    on = engine_profile.profile(engine, model, "nvfp4", "sm_120").extra["per_layer"]
    off = engine_profile.profile(engine, model, "nvfp4", "sm_90").extra["per_layer"]
    assert on == off + 2  # SGLang's two add + RMSNorm kernels, fused into the all-reduce elsewhere


# [vllm#31448] on one B200: the whole Triton fused_moe call (bf16, E=128, N=768, hidden 2048,
# top-8, default config) at 1 / 2 / 4 tokens, in us, and the bytes of one expert it streams (MB).
TRITON_B200 = {1: 39.61, 2: 51.87, 4: 73.18}
TRITON_B200_EXPERT_MB = 3 * 768 * 2048 * 2 / 1e6


def test_b200_bf16_points_are_the_cited_kernel_times_net_of_the_fits_fixed_costs():
    fit = json.loads(
        (Path(__file__).resolve().parents[1] / "docs/examples/h200/fit.json").read_text()
    )
    # The call's kernels as the composition charges them: SGLang's 4.5 expert-GEMM kernels at
    # the fit's expert group cost and silu_and_mul at a small kernel's graphed cost.
    fixed_us = (
        4.5 * fit["groups"]["expert_gemm"]["per_kernel_us"] + fit["ceilings"]["launch"]["small_us"]
    )
    spec = compose_settings(["hardware=b200"]).hardware.model_dump(exclude_unset=True)
    points = spec["grouped_gemm_efficiency"]["bf16"]["points"]
    assert len(points) == len(TRITON_B200)
    for pt, (tokens, us) in zip(points, TRITON_B200.items(), strict=True):
        distinct = 128 * (1 - (1 - 8 / 128) ** tokens)  # random top-8 routing
        mb = distinct * TRITON_B200_EXPERT_MB
        e = mb * 1e6 / (spec["memory_bandwidth_gbs"] * 1e9 * (us - fixed_us) * 1e-6)
        assert pt["tokens_per_expert"] == pytest.approx(tokens * 8 / 128)
        assert pt["low"] == pytest.approx(e, abs=1e-3) and pt["high"] == pt["low"]
        assert pt["low_expert_mb"] == pytest.approx(TRITON_B200_EXPERT_MB, abs=0.01)


def test_qwen3_bf16_on_b200_takes_the_triton_curve_and_streams_its_experts_slower():
    base = ["model=qwen3_235b_a22b", "hardware=b200", "deployment=bf16", "engine=sglang",
            "deployment.batches=[1,64]", "deployment.context_len=1024",
            "grid.layouts=[{tp:8,pp:1,ep:1}]", "references=none"]  # fmt: skip
    rows = deployment_verdict.deployment_table(compose_settings(base), EMPTY, EMPTY, EMPTY, {})
    words = row_inputs.column_words(rows)
    assert words.str.contains("Triton fused_moe, default config").all()
    assert "held from 0.25 tokens per expert" in row_inputs.row_words(rows.iloc[1])
    # Without the curve the experts take the H200 step's efficiency, near the datasheet.
    spec = compose_settings(["hardware=b200"]).hardware.model_dump(exclude_unset=True)
    spec.pop("grouped_gemm_efficiency")
    plain = compose_settings(base)
    plain = plain.model_copy(update={"hardware": HardwareSpec.model_validate(spec)})
    bare = deployment_verdict.deployment_table(plain, EMPTY, EMPTY, EMPTY, {})
    # (1.45x at 64 sequences: the curve's kernel times against the fit's efficiency at the
    # B200's reported 7672 GB/s, conf/hardware/b200.yaml)
    assert (rows["memory_ms"] > 1.4 * bare["memory_ms"]).all()
