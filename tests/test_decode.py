"""Decode benchmark building blocks, run for real on the CPU."""

from __future__ import annotations

import math

import pytest
import torch

from tilesweep.backends.torch_baselines import baseline_runner
from tilesweep.config import compose_settings
from tilesweep.measure import gemm_case as decode
from tilesweep.plan import expert_shapes, roofline

SETTINGS = compose_settings([])
MODEL = SETTINGS.model.model_copy(update={"hidden": 256, "moe_intermediate": 128})


def bench(**change):
    """Return the default bench group with some keys changed."""
    return SETTINGS.bench.model_copy(update=change)


def test_zipf_routing_keeps_the_total_and_skews():
    counts = expert_shapes.expert_counts(16, 8, "zipf", 1.2)
    assert sum(counts) == 16 * 8
    assert max(counts) > 16 > min(counts)
    assert expert_shapes.expert_counts(16, 8, "uniform", 1.2) == [16] * 8


def test_tile_schedule_covers_every_row_once():
    counts = [5, 0, 17, 3]
    experts, starts, ends = expert_shapes.tile_schedule(counts, 8)
    covered = []
    for e, s, end in zip(experts, starts, ends, strict=True):
        covered += list(range(s, min(s + 8, end)))
        assert counts[e] > 0
    assert covered == list(range(sum(counts)))


def test_traffic_counts_active_weights_once():
    info = expert_shapes.traffic([4, 0, 4], 64, 32, "bf16", 2)
    assert info["active_experts"] == 2
    assert info["weight_bytes"] == 2 * 64 * 32 * 2
    assert info["flops"] == 2 * 8 * 64 * 32
    assert info["bytes"] == info["weight_bytes"] + 8 * 32 * 2 + 8 * 64 * 2


def test_roofline_labels_each_side_of_the_ridge():
    assert roofline.ridge_point(1000, 5000) == pytest.approx(200)
    assert roofline.bound(100, 1, 1000, 5000) == "memory"
    assert roofline.bound(300, 1, 1000, 5000) == "math"
    floor = roofline.floor_ms(2e12, 1e9, 1000, 1000)
    assert floor["floor_ms"] == pytest.approx(2.0)


def test_rel_error_flags_unwritten_output():
    ref = torch.randn(4, 4)
    out = ref.clone()
    out[1, 2] = float("nan")
    assert math.isinf(decode.rel_error(out, ref))
    assert decode.rel_error(ref, ref) == 0.0


@pytest.mark.parametrize("name", ["torch_matmul", "torch_bmm"])
def test_baselines_match_the_reference_on_random_data(name):
    gen = torch.Generator().manual_seed(1)
    counts = expert_shapes.expert_counts(3, 4, "zipf", 1.2)
    n, k = expert_shapes.expert_ops(MODEL)["gate_up"]
    row = decode.measure_case(
        lambda: baseline_runner(name, counts, "bf16"),
        counts,
        n,
        k,
        "bf16",
        torch.bfloat16,
        bench(repeats=2, warmup=1, cpu_repeats=2),
        False,
        0,
        gen,
    )
    assert row["status"] == "ok", row
    assert row["rel_err"] < 1e-2
    assert row["time_ms"] > 0 and row["repeats"] == 2


@pytest.mark.parametrize(
    ("name", "dtype"), [("torch_scaled_grouped_mm", "bf16"), ("torch_matmul", "fp8")]
)
def test_a_baseline_runs_only_in_its_own_operand_type(name, dtype):
    with pytest.raises(NotImplementedError, match=f"{name} baseline is timed for"):
        baseline_runner(name, [1, 2], dtype)


def test_a_wrong_kernel_is_a_correctness_row():
    gen = torch.Generator().manual_seed(2)
    counts = [2, 2]
    n, k = expert_shapes.expert_ops(MODEL)["down"]

    def wrong(p):
        p.c.fill_(1.0)
        return p.c

    quick = bench(repeats=1, warmup=0, cpu_repeats=1)
    row = decode.measure_case(
        lambda: wrong, counts, n, k, "bf16", torch.bfloat16, quick, False, 0, gen
    )
    assert row["status"] == "correctness"
    assert "time_ms" not in row


def test_a_grouped_gemm_never_has_more_experts_than_the_model():
    from tilesweep.stages.decode import group_size

    method = bench(gpu_experts=32, cpu_experts=2)
    mixtral, wide = (SETTINGS.model.model_copy(update={"routed_experts": n}) for n in (8, 256))
    assert group_size(method, mixtral, cuda=True) == 8  # Mixtral: 8 experts
    assert group_size(method, wide, cuda=True) == 32
    assert group_size(method, wide, cuda=False) == 2
