"""The collective benchmark: the messages a step needs, the size sweep, the latency/bandwidth fit,
and real gloo collectives on the CPU."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from tilesweep.measure import process_group as coll
from tilesweep.plan import messages
from tilesweep.stages.collective import fit_columns, plan_layout

GLM5 = {
    "name": "glm5",
    "hidden": 6144,
    "moe_intermediate": 2048,
    "routed_experts": 256,
    "top_k": 8,
    "shared_experts": 1,
    "moe_layers": 75,
}
BENCH = {
    "collective_sweep_min_bytes": 4096,
    "collective_sweep_max_bytes": 256 << 20,
    "collective_sweep_factor": 4,
    "collective_extra_sizes": [1000],
    "cpu_collective_max_bytes": 16 << 20,
}


def layout(tp: int, pp: int, ep: int) -> dict:
    """Return a layout row as the grid writes it."""
    return {"tp": tp, "pp": pp, "ep": ep, "world": tp * pp * ep, "layout": f"tp{tp}-pp{pp}-ep{ep}"}


def test_step_messages_follow_the_layout():
    t = 4  # 128 tokens in the step
    assert messages.step_messages(layout(1, 1, 1), GLM5, t) == []
    (ar,) = messages.step_messages(layout(8, 1, 1), GLM5, t)
    assert (ar["collective"], ar["group"], ar["bytes"], ar["per_step"]) == (
        "all_reduce",
        8,
        128 * 6144 * 2,
        150,
    )
    (a2a,) = messages.step_messages(layout(1, 1, 8), GLM5, t)
    assert a2a["bytes"] == 16 * 8 * 6144 * 2 and a2a["per_step"] == 150  # 16 tokens per rank
    ar, p2p = messages.step_messages(layout(4, 2, 1), GLM5, t)
    assert ar["per_step"] == 2 * 38 and p2p["collective"] == "send_recv" and p2p["per_step"] == 1


def test_sweep_spans_kilobytes_to_hundreds_of_megabytes():
    sizes = messages.sweep_sizes(4096, 256 << 20, 4)
    assert sizes[0] == 4096 and sizes[-1] == 256 << 20
    assert all(b == 4 * a for a, b in zip(sizes, sizes[1:], strict=False))
    assert messages.sweep_sizes(4096, 1 << 30, 1) == [4096]


def test_bus_factors_are_nccl_tests_ones():
    assert messages.bus_factor("all_reduce", 8) == pytest.approx(1.75)
    assert messages.bus_factor("all_to_all", 8) == pytest.approx(0.875)
    assert messages.bus_factor("send_recv", 2) == 1.0


def test_fit_recovers_latency_and_bandwidth_over_five_decades():
    sizes = messages.sweep_sizes(4096, 256 << 20, 4)
    alpha, beta = 0.012, 40e6  # 12 us and 40 GB/s (bytes per ms)
    times = [alpha + s / beta for s in sizes]
    got_alpha, got_beta = messages.fit_alpha_beta(sizes, times)
    assert got_alpha == pytest.approx(alpha, rel=1e-6)
    assert got_beta == pytest.approx(beta, rel=1e-6)
    # An unweighted fit would let the 256 MB point swamp the latency; this one keeps small sizes.
    noisy = [t * (1.2 if s > 64 << 20 else 1.0) for s, t in zip(sizes, times, strict=True)]
    assert messages.fit_alpha_beta(sizes, noisy)[0] == pytest.approx(alpha, rel=0.3)
    assert messages.fit_alpha_beta([4096], [0.5]) == (0.5, math.inf)


def test_cpu_plan_caps_the_sweep_and_gpu_plan_reaches_256_mb():
    spec = {"layout": layout(2, 1, 1), "model": GLM5, "tokens_per_expert": [1], "bench": BENCH}
    plan, skipped = plan_layout(spec, 2, cuda=False)
    sweep = [p["bytes"] for p in plan if p["purpose"] == "sweep"]
    assert min(sweep) == 1000 and max(sweep) == 16 << 20
    assert {s["bytes"] for s in skipped} == {64 << 20, 256 << 20}
    assert all("cpu_collective_max_bytes" in s["reason"] for s in skipped)
    plan, skipped = plan_layout(spec, 2, cuda=True)
    assert max(p["bytes"] for p in plan) == 256 << 20 and not skipped
    steps = [p for p in plan if p["purpose"] == "step"]
    assert steps == [{**steps[0], "bytes": 32 * 6144 * 2, "tokens_per_expert": 1}]


def test_fit_columns_give_the_latency_floor():
    sizes = [4096, 65536, 1 << 20, 16 << 20]
    rows = [
        {"collective": "all_reduce", "group": 2, "bytes": s, "time_ms": 0.01 + s / 1e7}
        for s in sizes
    ]
    frame = fit_columns(pd.DataFrame(rows).assign(status="ok"))
    assert frame["latency_floor_us"].iloc[0] == pytest.approx((0.01 + 4096 / 1e7) * 1e3)
    assert frame["fit_latency_us"].iloc[0] == pytest.approx(10.0, rel=1e-6)
    assert frame["fit_algbw_gbs"].iloc[0] == pytest.approx(10.0, rel=1e-6)
    assert frame["fit_busbw_gbs"].iloc[0] == pytest.approx(10.0, rel=1e-6)  # factor 1 at n=2


@pytest.mark.slow
def test_gloo_collectives_run_and_time_every_planned_call():
    plan = [
        {"collective": "all_reduce", "group": 2, "bytes": 4096},
        {"collective": "all_to_all", "group": 4, "bytes": 1 << 16},
        {"collective": "send_recv", "group": 2, "bytes": 1 << 20},
    ]
    samples = coll.run_plan(plan, 4, repeats=3, warmup=1, cuda=False)
    assert len(samples) == 3
    assert all(len(s) == 3 and all(x > 0 for x in s) for s in samples)
