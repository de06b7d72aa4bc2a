"""B200's MoE layer: the engines' sm_100 TRTLLM-gen kernel lists (conf/engine sglang.yaml and
tensorrtllm.yaml, only_arch [sm_100]) and the B200 FP8 / NVFP4 expert curves read from
aiconfigurator's timings of that call (conf/hardware/b200.yaml)."""

from __future__ import annotations

import re

import pytest
from test_b200_memory import _b200

from tilesweep.config import compose_settings
from tilesweep.plan import engine_profile, row_inputs


def _launches(engine: str, arch: str, dtype: str = "fp8") -> dict:
    """Return the launches per part kind of `engine`'s DeepSeek-V3 list in `dtype` on `arch`."""
    s = compose_settings([f"engine={engine}", "model=deepseek_v3"])
    return engine_profile.profile(s.engine, s.model, dtype, arch).launches


@pytest.mark.parametrize("engine", ["sglang", "tensorrtllm"])
def test_the_sm100_moe_list_is_taken_on_b200_and_not_on_h200(engine):
    arch = {hw: compose_settings([f"hardware={hw}"]).hardware.arch for hw in ("b200", "h200")}
    b200, h200 = _launches(engine, arch["b200"]), _launches(engine, arch["h200"])
    # sm_100: the router GEMM alone (the top-k runs inside the fused call) and TRTLLM-gen's two
    # batched GEMMs; sm_90 keeps its router + top-k and its grouped-GEMM list (more kernels).
    assert (b200["router"], b200["expert_gemm"]) == (1.0, 2.0)
    assert h200["router"] == 2.0 and h200["expert_gemm"] > 2.0
    # the shared expert runs on its own under TRTLLM-gen (SGLang fuses it on sm_90)
    assert b200["shared_gemm"] == 2.0


def test_nvfp4_runs_no_activation_kernel_between_the_gemms_on_b200():
    s = compose_settings(["engine=sglang", "model=deepseek_v3"])
    names = {
        dtype: [
            k.name
            for k in engine_profile.extra_kernels(s.engine, s.model, dtype, "sm_100")[
                "per_moe_layer"
            ]
        ]
        for dtype in ("fp8", "nvfp4")
    }
    assert any("activation kernel" in n for n in names["fp8"])
    assert not any("activation kernel" in n for n in names["nvfp4"])


@pytest.mark.parametrize("fmt", ["fp8", "nvfp4"])
def test_the_b200_curve_points_are_the_cited_times_below_the_bandwidth(fmt):
    hw = compose_settings(["hardware=b200"]).hardware
    bandwidth = hw.memory_bandwidth_gbs * 1e9
    curve = hw.grouped_gemm_efficiency[fmt]
    assert curve.ends == "sizes"
    for pt in curve.points:
        times = [float(t) for t in re.findall(r"TP[84] ([\d.]+) us", pt.cite)]
        mbs = [float(m) for m in re.search(r"([\d.]+) / ([\d.]+) MB", pt.cite).groups()]
        fixed = float(re.search(r"time - ([\d.]+) us", pt.cite).group(1))
        assert "measured by aiconfigurator on B200" in pt.cite
        for t, mb, e in zip(times, mbs, (pt.low, pt.high), strict=True):
            # the point is its cited time and bytes after the fixed cost (times printed to 0.1 us)
            assert mb * 1e6 / bandwidth / ((t - fixed) * 1e-6) == pytest.approx(e, rel=0.015)
            # ... and neither the whole call nor its streaming part beats the bandwidth
            assert mb * 1e6 / (t * 1e-6) < bandwidth and e <= 1.0


def test_a_b200_row_names_the_kernel_its_fp8_experts_stream_at():
    words = row_inputs.column_words(_b200(["deployment.batches=[8]"]))
    assert words.str.contains("TRTLLM-gen FP8 block-scale").all()
    assert words.str.contains("measured by aiconfigurator on B200").all()
