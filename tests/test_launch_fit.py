"""The launch-aware composition: launches x per-kernel cost + roofline terms over fitted
efficiencies, and its fit on a measured step at two batches."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tilesweep.plan import launch_fit, pair_fit
from tilesweep.settings import HardwareSpec


def _obs(mem, flop, launches, e_bw, e_math, cost_ms):
    ms = launches * cost_ms + max(mem / e_bw, flop / e_math)
    return {"roof_memory_ms": mem, "roof_math_ms": flop, "launches": launches, "ms": ms}


def test_fit_recovers_both_efficiencies_when_each_binds_once():
    cost = 0.002
    obs = [_obs(1.0, 0.05, 40, 0.8, 0.5, cost), _obs(1.5, 4.0, 40, 0.8, 0.5, cost)]
    e_bw, e_math, note = pair_fit.fit_pair(obs, cost)
    assert e_bw == pytest.approx(0.8, rel=0.03)
    assert e_math == pytest.approx(0.5, rel=0.03)
    assert note == ""


def test_an_efficiency_that_never_binds_is_named_and_left_at_its_largest():
    cost = 0.002
    obs = [_obs(1.0, 0.01, 10, 0.7, 0.5, cost), _obs(2.0, 0.02, 10, 0.7, 0.5, cost)]
    e_bw, e_math, note = pair_fit.fit_pair(obs, cost)
    assert e_bw == pytest.approx(0.7, rel=0.03)
    assert e_math == pair_fit.GRID[-1]
    assert "math never binds" in note


def test_launches_alone_explain_a_tiny_part():
    cost = 0.002
    obs = [_obs(1e-5, 0.0, 5, 0.5, 1.0, cost), _obs(2e-5, 0.0, 5, 0.5, 1.0, cost)]
    e_bw, _, _ = pair_fit.fit_pair(obs, cost)
    pred = [pair_fit.predict_ms(o, e_bw, 1.0, cost) for o in obs]
    assert pred == pytest.approx([o["ms"] for o in obs], rel=0.02)


def _fit(groups):
    return {
        "device": "GPU X",
        "layout": "tp1-pp1-ep1",
        "timing": "cuda-graph",
        "model": "m",
        "fit_batches": [1, 512],
        "per_kernel_us": 2.0,
        "groups": groups,
        launch_fit.POOLED: {"e_bw": 0.5, "e_math": 0.25, "note": ""},
    }


# A device of 1,000 GB/s and 100 bf16 TFLOP/s: the keys a part timer reads.
HW = HardwareSpec.model_construct(
    name="gpu", memory_bandwidth_gbs=1000.0, peak_tflops={"bf16": 100.0}
)


def test_launch_timer_adds_the_launches_and_divides_the_roof():
    fit = _fit({"norm": {"kinds": ["norm"], "e_bw": 0.25, "e_math": 1.0,
                         "launches_per_occurrence": 3.0, "note": ""}})  # fmt: skip
    timer = launch_fit.launch_timer(fit, 2.0, "composed (test)")
    part = {"name": "norms", "kind": "norm", "bytes": 1e6, "flops": 0.0, "dtype": "bf16",
            "count": 1}  # fmt: skip
    t = timer(part, HW)
    assert t["memory_ms"] == pytest.approx(1e6 / 1e12 * 1e3 / 0.25)
    assert t["launch_ms"] == pytest.approx(3 * 2.0e-3)
    assert t["source"] == "composed (test)"


@pytest.mark.parametrize("flops", [0.0, 3e10, 3e11])
def test_the_fit_and_the_verdict_time_a_part_by_one_formula(flops):
    """The fit's prediction (predict_ms) and the verdict's timer (launch_timer) of one part at
    the same efficiencies, overlap and cost per kernel are the same number."""
    group = {"kinds": ["norm"], "e_bw": 0.4, "e_math": 0.3, "launches_per_occurrence": 3.0,
             "per_kernel_us": 4.0, "note": ""}  # fmt: skip
    fit = dict(_fit({"norm": group}), overlap=0.2)
    part = {"name": "norms", "kind": "norm", "bytes": 2e9, "flops": flops, "dtype": "bf16",
            "count": 1}  # fmt: skip
    t = launch_fit.launch_timer(fit, 2.0, "composed (test)")(part, HW)
    obs = {"roof_memory_ms": 2.0, "roof_math_ms": flops / 1e11, "launches": 3.0}
    predicted = pair_fit.predict_ms(obs, 0.4, 0.3, 4e-3, 0.2)
    assert t["launch_ms"] + t["memory_ms"] + t["math_ms"] == pytest.approx(predicted, rel=1e-12)
    mem, flop = 2.0 / 0.4, flops / 1e11 / 0.3
    assert predicted == pytest.approx(12e-3 + max(mem, flop) + 0.2 * min(mem, flop), rel=1e-12)


def test_a_kind_no_group_covers_takes_the_device_wide_fit_and_says_so():
    timer = launch_fit.launch_timer(_fit({}), 2.0, "composed (test)")
    part = {"name": "lm_head", "kind": "lm_head", "bytes": 1e9, "flops": 1e12, "dtype": "bf16",
            "count": 1}  # fmt: skip
    t = timer(part, HW)
    assert t["math_ms"] == pytest.approx(1e12 / 100e12 * 1e3 / 0.25)
    assert t["launch_ms"] == 0.0
    assert "device-wide" in t["source"]


def test_a_missing_peak_stays_a_gap():
    timer = launch_fit.launch_timer(_fit({}), 2.0, "composed (test)")
    part = {"name": "x", "kind": "expert_gemm", "bytes": 1e6, "flops": 1e9, "dtype": "fp8",
            "count": 1}  # fmt: skip
    t = timer(part, HW)
    assert t["gap"] and math.isnan(t["memory_ms"] + t["math_ms"])


def test_observe_groups_measured_parts_and_counts_launches():
    row = {"part_attn_proj_ms": 1.0, "part_attn_out_ms": 0.5, "launches_attn_proj": 6,
           "launches_attn_out": 2, "part_norms_ms": 0.1, "launches_norms": 4}  # fmt: skip
    parts = [
        {"name": "attention", "kind": "attention_proj", "bytes": 1e6, "flops": 1e6,
         "dtype": "bf16", "count": 2},
        {"name": "norms", "kind": "norm", "bytes": 1e3, "flops": 0.0, "dtype": "fp32",
         "count": 2},
    ]  # fmt: skip
    obs = launch_fit.observe(row, parts, HW, repeats=1)
    assert obs["attention_proj"]["ms"] == 1.5 and obs["attention_proj"]["launches"] == 8
    assert obs["attention_proj"]["occurrences"] == 2
    assert obs["norm"]["launches"] == 4


def test_the_whole_step_time_is_shared_over_its_parts():
    """Parts timed with an event pair each add time the whole graphed step does not take: the
    fit sees each part's share of the whole step."""
    from tilesweep.plan.launch_fit import attribution

    row = {"step_ms": 9.0, "part_norms_ms": 2.0, "part_lm_head_ms": 8.0, "part_router_ms": None}
    assert attribution(row) == pytest.approx(0.9)
    assert attribution({"part_norms_ms": 2.0}) == 1.0  # no whole step: the parts as timed


def test_each_groups_cost_per_launch_is_read_at_the_smallest_batch_never_below_an_empty_kernel():
    """A norm of one sequence costs what it takes in the step (here 5 us a launch), not an empty
    kernel's 1.1 us; a projection whose small-batch time its bytes explain keeps the floor. Both
    costs are in the fit and applied."""
    parts = [
        {"name": "attention", "kind": "attention_proj", "bytes": 1e6, "flops": 1e6,
         "dtype": "bf16", "count": 2},
        {"name": "norms", "kind": "norm", "bytes": 1e3, "flops": 0.0, "dtype": "fp32",
         "count": 2},
    ]  # fmt: skip
    rows = [
        {"batch": b, "part_attn_proj_ms": 0.02 * b, "launches_attn_proj": 6,
         "part_norms_ms": 0.020 + 1e-4 * b, "launches_norms": 4}
        for b in (1, 8)
    ]  # fmt: skip
    fit = launch_fit.fit_step(rows, {1: (parts, 1), 8: (parts, 1)}, HW, 5.0, {}, light_us=1.1)
    norm = fit["groups"]["norm"]
    assert norm["per_kernel_us"] == pytest.approx(5.0, rel=0.05)
    assert norm["floor_kernel_us"] == 1.1
    assert fit["groups"]["attention_proj"]["per_kernel_us"] == pytest.approx(1.1)
    timer = launch_fit.launch_timer(fit, 5.0, "composed (test)")
    t = timer(parts[1], HW)
    assert t["launch_ms"] == pytest.approx(2 * norm["per_kernel_us"] * 1e-3)  # 4 launches, 2 norms
    for row in rows:  # both fit batches are reproduced
        launches = 4 * norm["per_kernel_us"] * 1e-3
        assert 2 * t["memory_ms"] + launches == pytest.approx(row["part_norms_ms"], rel=0.05)
    without = launch_fit.fit_step(rows, {1: (parts, 1), 8: (parts, 1)}, HW, 5.0, {})
    assert without["groups"]["attention_proj"]["per_kernel_us"] == 5.0  # no empty kernel timed


def test_a_part_no_group_measured_counts_the_kernels_it_launches():
    """An EP rank permutes its rows out and back (kernels a TP1 step never runs): the part takes
    the device-wide efficiencies and its own launches at the device's per-kernel cost."""
    from tilesweep.config import compose_settings
    from tilesweep.plan.step_parts import EP_PERMUTE_LAUNCHES, stage_parts
    from tilesweep.settings import Layout

    s = compose_settings([])
    model, dep = s.model, s.deployment
    stage = {"dense": 0, "moe": 2, "sliding": 0}
    by_ep = {
        ep: {p["name"]: p for p in stage_parts(model, dep, Layout(tp=1, pp=1, ep=ep), stage,
                                               64, True, True)}
        for ep in (1, 8)
    }  # fmt: skip
    assert "ep_permute" not in by_ep[1]
    permute = by_ep[8]["ep_permute"]
    assert permute["launches"] == EP_PERMUTE_LAUNCHES and permute["count"] == 2
    t = launch_fit.launch_timer(_fit({}), 2.0, "composed (test)")(permute, HW)
    assert t["launch_ms"] == pytest.approx(EP_PERMUTE_LAUNCHES * 2.0e-3)
    assert "device-wide" in t["source"]


def test_math_is_not_used_to_absorb_a_few_percent_of_a_memory_bound_part():
    # Memory-bound at both batches, measured 3% above the memory term at the larger one: a
    # second efficiency could fit that exactly, and would then bind where rows per weight grow.
    cost = 0.002
    obs = [_obs(0.3, 0.01, 4, 1.0, 1.0, cost), _obs(9.0, 0.8, 4, 1.0, 1.0, cost)]
    obs[1]["ms"] *= 1.03
    e_bw, e_math, note = pair_fit.fit_pair(obs, cost)
    assert e_math == pair_fit.GRID[-1]
    assert "math never binds" in note
    # On more rows per weight the math term stays at the roof's rate, not 10x below it.
    more_rows = {"roof_memory_ms": 2.3, "roof_math_ms": 0.4, "launches": 4, "ms": 0.0}
    assert pair_fit.predict_ms(more_rows, e_bw, e_math, cost) < 2.6


def test_an_unidentified_efficiency_takes_the_devices_never_one_slower_than_measured():
    cost = 0.002
    # Memory-bound at both batches: e_math is not identified and takes the device-wide value.
    obs = [_obs(1.0, 0.01, 10, 0.7, 0.5, cost), _obs(2.0, 0.02, 10, 0.7, 0.5, cost)]
    e_bw, e_math, note = pair_fit.fit_pair(obs, cost, fallback=(0.9, 0.3))
    assert e_bw == pytest.approx(0.7, rel=0.03) and e_math == pytest.approx(0.3)
    assert "e_math not identified" in note and "device-wide" in note
    # A device value that would make the math term alone slower than measured is raised to the
    # least the measurements allow.
    _, e_math, _ = pair_fit.fit_pair(obs, cost, fallback=(0.9, 0.001))
    least = max(o["roof_math_ms"] / (o["ms"] - o["launches"] * cost) for o in obs)
    assert e_math == pytest.approx(least)
    for o in obs:
        assert pair_fit.predict_ms(o, 0.7, e_math, cost) <= o["ms"] * 1.03


def test_one_informative_batch_is_read_with_the_devices_efficiencies():
    # An attention-like part: launch-bound at the small batch, and at the large one explained
    # either by a memory term alone at e_bw 0.39 or by math at the device's e_math 0.25; with the
    # device-wide pair the fit takes the device's reading rather than an implausibly slow stream.
    cost = 0.005
    small = {"roof_memory_ms": 1e-6, "roof_math_ms": 0.0, "launches": 6, "ms": 0.030}
    large = {"roof_memory_ms": 0.43, "roof_math_ms": 0.275, "launches": 6, "ms": 1.14}
    alone = pair_fit.fit_pair([small, large], cost)
    assert alone[0] == pytest.approx(0.387, rel=0.03) and alone[1] == pair_fit.GRID[-1]
    e_bw, e_math, note = pair_fit.fit_pair([small, large], cost, fallback=(1.0, 0.25))
    assert e_math == pytest.approx(0.25, rel=0.01) and e_bw == pytest.approx(1.0)
    assert "e_bw and e_math not identified" in note
    assert pair_fit.predict_ms(large, e_bw, e_math, cost) == pytest.approx(1.14, rel=0.02)
    # With 8x fewer heads (the same bytes, an eighth of the flops) the part is now memory-bound.
    fewer = dict(large, roof_math_ms=0.275 / 8)
    assert pair_fit.predict_ms(fewer, e_bw, e_math, cost) < 0.6 * large["ms"]
    assert pair_fit.predict_ms(fewer, *alone[:2], cost) == pytest.approx(1.14, rel=0.02)


def test_the_indexers_projections_are_read_by_the_attentions_merged_gemms():
    """The step merges the DSA indexer's projections into the attention's GEMMs (one per
    input), so the composition has one attention_proj part per layer holding both, whole on
    every TP rank for the indexer, and no part of its own for them."""
    from tilesweep.config import compose_settings
    from tilesweep.plan.step_parts import _linear_part, stage_parts
    from tilesweep.settings import Layout

    s = compose_settings([])
    model, dep = s.model, s.deployment
    stage = {"dense": 1, "moe": 2, "sliding": 0}
    for tp in (1, 8):
        parts = stage_parts(model, dep, Layout(tp=tp, pp=1, ep=1), stage, 4, True, True)
        kinds = [p["kind"] for p in parts]
        assert "indexer_proj" not in kinds and kinds.count("attention_proj") == 1
        proj = parts[kinds.index("attention_proj")]
        att = _linear_part(model, dep, "attention", tp, 4, "attention_proj", 3)
        idx = _linear_part(model, dep, "indexer", 1, 4, "attention_proj", 3)
        assert proj["bytes"] == pytest.approx(att["bytes"] + idx["bytes"])
        assert proj["flops"] == pytest.approx(att["flops"] + idx["flops"]) and proj["count"] == 3
    assert launch_fit.MEASURED_KINDS["attn_index"] == ("indexer",)


def test_the_overlap_adds_the_unhidden_share_of_the_smaller_term():
    """A part whose bytes and flops take about as long as each other is neither their max nor
    their sum: `overlap` of the smaller term is added, in the fit and in the composition."""
    cost = 0.002
    obs = {"roof_memory_ms": 1.0, "roof_math_ms": 0.5, "launches": 2}
    assert pair_fit.predict_ms(obs, 1.0, 1.0, cost) == pytest.approx(1.004)
    assert pair_fit.predict_ms(obs, 1.0, 1.0, cost, overlap=0.4) == pytest.approx(1.204)
    fit = dict(_fit({"g": {"kinds": ["dense_gemm"], "e_bw": 1.0, "e_math": 1.0,
                           "launches_per_occurrence": 1.0, "note": ""}}), overlap=0.4)  # fmt: skip
    part = {"name": "mlp", "kind": "dense_gemm", "bytes": 1e9, "flops": 25e9, "dtype": "bf16",
            "count": 1}  # fmt: skip
    t = launch_fit.launch_timer(fit, 2.0, "composed (test)")(part, HW)
    assert t["memory_ms"] == pytest.approx(1.0)  # 1 GB at 1,000 GB/s: the bound term
    assert t["math_ms"] == pytest.approx(0.4 * 0.25)  # 25 GFLOP at 100 TFLOP/s, 40% unhidden
    assert launch_fit.launch_timer(_fit(fit["groups"]), 2.0, "x")(part, HW)["math_ms"] == 0.0


def test_the_stream_never_reads_faster_than_the_device_was_measured_to():
    """Measured faster than its bytes allow at the device's read bandwidth, a part's excess is
    its kernels' cost, never a stream above the device's measured read."""
    cost = 0.001
    obs = [_obs(1.0, 0.01, 10, 1.3, 1.0, cost), _obs(2.0, 0.02, 10, 1.3, 1.0, cost)]
    free, _, _ = pair_fit.fit_pair(obs, cost)
    capped, _, _ = pair_fit.fit_pair(obs, cost, bw_max=1.06)
    assert free == pytest.approx(1.3, rel=0.03) and capped <= 1.06


def test_the_devices_overlap_is_read_from_products_around_the_ridge():
    from tilesweep.measure.ceilings import overlap_alpha

    def point(mem, math_, alpha, fixed=5.0):
        return {
            "mem_us": mem,
            "math_us": math_,
            "us": fixed + max(mem, math_) + alpha * min(mem, math_),
        }

    pts = [point(30, 10, 0.5), point(30, 20, 0.5), point(31, 40, 0.5), point(32, 80, 0.9)]
    assert overlap_alpha(pts, 5.0) == pytest.approx(0.5)
    assert overlap_alpha([point(30, 10, 1.7)], 5.0) == 1.0  # clipped: never more than serial
    assert overlap_alpha([point(30, 10, -0.3)], 5.0) == 0.0
    assert overlap_alpha([], 5.0) is None


def test_check_transfer_composes_the_kept_fit_on_steps_it_never_saw(tmp_path):
    """tools/check_transfer.py end to end on the kept example: one held-out row a measured step."""
    root = Path(__file__).resolve().parents[1]
    kept = root / "docs/examples/h200"
    out = tmp_path / "check.csv"
    args = [kept / "fit.json", kept / "layout_deepseek_v3.csv", kept / "ceilings.json", out]
    proc = subprocess.run(
        [sys.executable, root / "tools/check_transfer.py", *args, "model=deepseek_v3"],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    check = pd.read_csv(out)
    steps = pd.read_csv(kept / "layout_deepseek_v3.csv")
    assert len(check) == (steps["status"] == "ok").sum() > 0
    assert check["held_out"].all() and check["composed_ms"].gt(0).all()
