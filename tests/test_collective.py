"""The collective benchmark: the messages a step needs, the size sweep, the latency/bandwidth fit,
and real gloo collectives on the CPU."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from tilesweep.measure import process_group as coll
from tilesweep.plan import messages
from tilesweep.stages.collective import _timed_row, fit_columns, plan_layout

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
def test_gloo_collectives_run_eager_and_time_every_planned_call():
    plan = [
        {"collective": "all_reduce", "group": 2, "bytes": 4096},
        {"collective": "all_to_all", "group": 4, "bytes": 1 << 16},
        {"collective": "send_recv", "group": 2, "bytes": 1 << 20},
    ]
    # gloo has no CUDA graphs: asked for graph timing, every row says it was timed eagerly.
    how = {"repeats": 3, "warmup": 1, "cuda": False, "max_calls": 10, "fill_ms": 1.0}
    results = coll.run_plan(plan, 4, {**how, "timing": "cuda-graph"})
    assert len(results) == 3
    for result in results:
        assert result["timing"] == "eager" and result["status"] == "ok"
        assert result["calls_per_replay"] == 1
        assert len(result["samples"]) == 3 and all(x > 0 for x in result["samples"])
    with pytest.raises(ValueError, match="allowed: cuda-graph, eager"):
        coll.run_plan(plan, 4, {**how, "timing": "graphs"})


class _OneRank:
    """torch.distributed's calls _graph_times makes, for one rank of a world of one."""

    def get_rank(self):
        return 0

    def get_world_size(self):
        return 1

    def all_gather_object(self, values, value, group=None):
        values[0] = value

    def barrier(self):
        pass


class _Torch:
    class cuda:  # noqa: N801 - stands in for torch.cuda
        @staticmethod
        def synchronize():
            pass


class _Graph:
    def __init__(self, calls):
        self.calls = calls

    def replay(self):
        pass


def _graph_times(monkeypatch, capture, one_call_ms):
    """Return _graph_times' result with capture and event timing stubbed out (no GPU here)."""
    from tilesweep.measure import timing

    captured = []

    def time_events(fn, repeats):
        calls = captured[-1]
        return [one_call_ms * calls] * repeats

    def recording(fns, capture_error_mode="global"):
        assert capture_error_mode == "thread_local"  # NCCL's watchdog thread may run meanwhile
        captured.append(len(fns))
        return capture(fns)

    monkeypatch.setattr(timing, "capture_graph", recording)
    monkeypatch.setattr(timing, "time_events", time_events)
    plan = {"timing": "cuda-graph", "max_calls": 10, "fill_ms": 1.0, "repeats": 5, "warmup": 2}
    calls = []
    result = coll._graph_times(_OneRank(), _Torch, lambda: calls.append(1), True, None, plan)
    return result, captured, calls


def test_graph_timing_sizes_the_replay_to_about_a_millisecond_and_reports_per_call(monkeypatch):
    result, captured, calls = _graph_times(monkeypatch, lambda fns: _Graph(len(fns)), 0.25)
    assert captured == [1, 4]  # a one-call probe, then 1 ms / 0.25 ms = 4 calls per replay
    assert result["status"] == "ok" and result["calls_per_replay"] == 4
    assert result["samples"] == [pytest.approx(0.25)] * 5
    assert len(calls) == 2  # the eager warm-up calls, so NCCL connects before the capture
    short, captured, _ = _graph_times(monkeypatch, lambda fns: _Graph(len(fns)), 0.006)
    assert captured == [1, 10] and short["calls_per_replay"] == 10  # at most max_calls


def test_a_failed_capture_is_the_rows_status_and_reason_never_an_eager_number(monkeypatch):
    def refuse(fns):
        raise RuntimeError("operation not permitted when stream is capturing\nmore detail")

    result, captured, _ = _graph_times(monkeypatch, refuse, 0.25)
    assert captured == [1] and result["samples"] == [] and result["calls_per_replay"] == 0
    assert result["status"] == "runtime"
    assert result["reason"] == (
        "CUDA-graph capture failed on rank 0: RuntimeError: operation not permitted when stream "
        "is capturing"
    )
    row = _timed_row(
        {"collective": "all_reduce", "group": 2, "bytes": 4096}, result | {"timing": "cuda-graph"}
    )
    assert row["status"] == "runtime" and "capture failed" in row["reason"]
    assert "time_ms" not in row and row["timing"] == "cuda-graph"


def test_a_timed_row_says_how_it_was_timed():
    item = {"collective": "all_reduce", "group": 8, "bytes": 1 << 20}
    result = {"samples": [0.02, 0.03, 0.025], "timing": "cuda-graph", "calls_per_replay": 10}
    row = _timed_row(item, result | {"status": "ok", "reason": ""})
    assert row["timing"] == "cuda-graph" and row["calls_per_replay"] == 10
    assert row["time_ms"] == 0.025 and row["status"] == "ok"
    assert row["busbw_gbs"] == pytest.approx(1.75 * (1 << 20) / 0.025e-3 / 1e9)


@pytest.mark.slow
def test_the_collective_table_says_each_rows_timing(tmp_path):
    import json

    from tilesweep.config import compose
    from tilesweep.stages.collective import bench_collective

    settings = compose(["grid=tiny"])
    bench = dict(
        settings["bench"],
        collective_sweep_max_bytes=65536,
        collective_extra_sizes=[4096],
        collective_repeats=3,
    )
    spec = {
        "layout": layout(2, 1, 1),
        "model": settings["model"],
        "tokens_per_expert": [1],
        "bench": bench,
    }
    frame = bench_collective(json.dumps(spec), str(tmp_path / "tp2.csv"))
    timed = frame[frame["status"] == "ok"]
    assert not timed.empty and set(timed["timing"]) == {"eager"}  # gloo: no graphs
    assert set(timed["backend"]) == {"gloo"} and (timed["time_ms"] > 0).all()
    assert "timing" in pd.read_csv(tmp_path / "tp2.csv").columns
