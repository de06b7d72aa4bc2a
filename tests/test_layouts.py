"""The measured MoE decode step per layout: rank layout, parts, and real multi-process runs on the
CPU (gloo) at world sizes 1 to 8 with tiny shapes; on GPUs (NCCL) when there are two."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch

from tilesweep.grid import layout_slug
from tilesweep.measure import moe_step
from tilesweep.pipeline import Sweep
from tilesweep.plan import sharding as plan
from tilesweep.plan.messages import dispatch_rows, step_messages
from tilesweep.provenance import gpu_names
from tilesweep.stages.layout import bench_layout

ROOT = Path(__file__).resolve().parents[1]
TINY = {
    "name": "tiny",
    "hidden": 64,
    "moe_intermediate": 32,
    "routed_experts": 16,
    "top_k": 4,
    "shared_experts": 1,
    "moe_layers": 4,
}
GLM5 = {**TINY, "hidden": 6144, "moe_intermediate": 2048, "routed_experts": 256, "top_k": 8}
GLM5["moe_layers"] = 75


def lay(tp: int, pp: int, ep: int) -> dict:
    """Return a layout row as the grid writes it."""
    row = {"tp": tp, "pp": pp, "ep": ep, "world": tp * pp * ep}
    return {**row, "layout": layout_slug(row)}


def spec(layout: dict, batches=(1, 2), runner: str = "torch_matmul") -> dict:
    """Return a worker spec for the tiny model: one layer, two experts per rank, two repeats."""
    runners = {"gate_up": runner, "down": runner}
    return {
        "layout": layout,
        "model": TINY,
        "bench": {"seed": 0},
        "kernels": {},
        "experts_run": 2,
        "layers_run": 1,
        "warmup": 1,
        "repeats": 2,
        "power_seconds": 0.0,
        "batches": [{"t": t, "runners": runners} for t in batches],
    }


@pytest.mark.parametrize("shape", [(2, 2, 2), (4, 2, 1), (1, 1, 8), (2, 1, 3)])
def test_groups_partition_every_stage(shape):
    layout = lay(*shape)
    groups = plan.group_ranks(layout)
    for kind, size in (("tp", layout["tp"]), ("ep", layout["ep"])):
        flat = sorted(r for g in groups[kind] for r in g)
        assert flat == list(range(layout["world"])), kind
        assert all(len(g) == size for g in groups[kind])
        for g in groups[kind]:
            stages = {plan.coords(r, layout)["stage"] for r in g}
            assert len(stages) == 1, f"{kind} group {g} spans stages"
    for g in groups["tp"]:
        assert len({plan.coords(r, layout)["ep_index"] for r in g}) == 1
        assert sorted(plan.coords(r, layout)["tp_index"] for r in g) == list(range(len(g)))


@pytest.mark.parametrize("shape", [(1, 1, 1), (8, 1, 1), (4, 2, 1), (1, 1, 8), (2, 1, 2)])
@pytest.mark.parametrize("t", [1, 16, 256])
def test_step_parts_carry_the_collectives_the_bench_times(shape, t):
    layout = lay(*shape)
    parts = plan.step_parts(layout, GLM5, t, 2)
    layers = plan.layers_per_stage(layout, GLM5)
    calls: dict[tuple, int] = {}
    for part in parts.values():
        if part["kind"] == "comm":
            key = (part["collective"], part["group"], part["bytes"])
            calls[key] = calls.get(key, 0) + (layers if part["per"] == "layer" else 1)
    expected = {
        (m["collective"], m["group"], m["bytes"]): m["per_step"]
        for m in step_messages(layout, GLM5, t)
    }
    assert calls == expected


def test_balanced_routing_gives_every_expert_its_tokens():
    for shape in [(1, 1, 1), (2, 1, 1), (1, 1, 2), (1, 1, 8)]:
        layout = lay(*shape)
        for t in (1, 4, 64):
            counts = plan.rank_counts(layout, GLM5, t)
            assert len(counts) == 256 // layout["ep"]
            assert counts == [t] * len(counts)
            assert sum(counts) == dispatch_rows(layout, GLM5, t)


def test_pick_runner_takes_the_fastest_step_capable_runner():
    decode = pd.DataFrame(
        [
            ("torch_bmm", "gate_up", 1, "ok", 1.0),  # caches its input: not usable in a step
            ("torch_matmul", "gate_up", 1, "ok", 3.0),
            ("triton:bf16-m16", "gate_up", 1, "ok", 2.0),
            ("triton:bf16-m64", "gate_up", 1, "launch", None),
            ("torch_matmul", "gate_up", 16, "ok", 5.0),
        ],
        columns=["runner", "op", "tokens_per_expert", "status", "time_ms"],
    ).assign(routing="uniform", dtype="bf16")
    assert plan.pick_runner(decode, "gate_up", 1, "best") == "triton:bf16-m16"
    assert plan.pick_runner(decode, "gate_up", 16, "best") == "torch_matmul"
    assert plan.pick_runner(decode, "down", 1, "best") == plan.FALLBACK_RUNNER
    assert plan.pick_runner(pd.DataFrame(), "down", 1, "best") == plan.FALLBACK_RUNNER
    assert plan.pick_runner(decode, "gate_up", 1, "torch_grouped_mm") == "torch_grouped_mm"


def check_ranks(layout: dict, ranks: list[dict], batches: int) -> None:
    """Assert what every run must show: one result per rank, the layout's parts, moved data."""
    assert [r["rank"] for r in ranks] == list(range(layout["world"]))
    want = set()
    if layout["tp"] > 1:
        want |= {"attn_all_reduce", "moe_all_reduce"}
    if layout["ep"] > 1:
        want |= {"dispatch", "combine"}
    if layout["pp"] > 1:
        want.add("pp_send_recv")
    per_stage = layout["tp"] * layout["ep"]
    for r in ranks:
        assert {k: r[k] for k in ("stage", "ep_index", "tp_index")} == plan.coords(
            r["rank"], layout
        )
        assert len(r["batches"]) == batches
        for b in r["batches"]:
            assert b["finite"]
            for sample in b["samples"]:
                comm = {k for k in sample if k in plan.COMM_PARTS}
                assert comm == want
                assert {"router", "expert_gate_up", "expert_down", "shared_down"} <= set(sample)
                parts = sum(v for k, v in sample.items() if k != "step")
                assert 0 < parts <= sample["step"] * 1.001 + 1e-3
    for i in range(batches):
        for group in plan.group_ranks(layout)["tp"]:
            sums = {ranks[g]["batches"][i]["sums"]["h"] for g in group}
            assert len(sums) == 1, f"TP group {group} disagrees after the all-reduce: {sums}"
        for r in ranks:
            if r["stage"] > 0:
                sent = ranks[r["rank"] - per_stage]["batches"][i]["sums"]["h"]
                assert r["batches"][i]["sums"]["x_in"] == sent, "PP stage did not get its input"


@pytest.mark.slow
@pytest.mark.parametrize(
    "shape",
    [(1, 1, 1), (2, 1, 1), (1, 1, 2), (1, 2, 1), (2, 2, 1), (2, 1, 2), (1, 4, 1), (1, 1, 4)],
)
def test_layout_step_runs_on_gloo_up_to_world_4(shape):
    layout = lay(*shape)
    ranks = moe_step.run_layout(spec(layout), layout["world"], False, 120)
    check_ranks(layout, ranks, 2)


@pytest.mark.slow
@pytest.mark.parametrize("shape", [(8, 1, 1), (4, 2, 1), (1, 1, 8), (2, 2, 2)])
def test_layout_step_runs_on_gloo_at_world_8(shape):
    layout = lay(*shape)
    ranks = moe_step.run_layout(spec(layout, batches=(1,)), layout["world"], False, 180)
    check_ranks(layout, ranks, 1)


def test_a_layout_past_its_time_limit_is_killed():
    layout = lay(1, 1, 2)
    endless = {**spec(layout), "repeats": 10**7}
    with pytest.raises(TimeoutError, match="killed"):
        moe_step.run_layout(endless, 2, False, 0.5)


def cell(layout: dict, tokens=(1, 2, 64), cap: int = 8) -> str:
    """Return a layout-step cell for the tiny model, as the pipeline writes it."""
    bench = {
        "warmup": 1,
        "repeats": 2,
        "cpu_repeats": 2,
        "seed": 0,
        "collective_world_cap": cap,
        "layout_layers": 1,
        "layout_gpu_experts": 16,
        "layout_cpu_experts": 2,
        "layout_cpu_max_tokens_per_expert": 4,
        "layout_runner": "best",
        "layout_power_seconds": 0.0,
        "layout_timeout_s": 120,
    }
    return json.dumps(
        {"layout": layout, "model": TINY, "tokens_per_expert": list(tokens), "bench": bench}
    )


def write_ceilings(path: Path) -> str:
    """Write a ceilings record of the measure_device shape; return its path."""
    path.write_text(json.dumps({"copy_gbs": 10.0, "matmul_tflops": {"bf16": 0.1, "fp32": 0.05}}))
    return str(path)


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU caps")
def test_bench_layout_scales_the_step_and_records_what_it_skipped(tmp_path):
    layout = lay(2, 2, 1)
    out = tmp_path / "layout.csv"
    frame = bench_layout(cell(layout), write_ceilings(tmp_path / "c.json"), [], str(out))
    assert out.exists()
    ok = frame[frame["status"] == "ok"]
    assert list(ok["tokens_per_expert"]) == [1, 2]
    skipped = frame[frame["status"] == "skipped"]
    assert list(skipped["tokens_per_expert"]) == [64]
    assert "layout_cpu_max_tokens_per_expert" in skipped["reason"].iloc[0]
    rec = ok.iloc[0]
    assert rec["layers_per_stage"] == 2 and rec["layers_run"] == 1 and rec["layer_scale"] == 2
    assert rec["experts_per_rank"] == 16 and rec["experts_run"] == 2 and rec["expert_scale"] == 8
    assert rec["step_ms"] > rec["raw_step_ms"]
    total = rec["compute_memory_ms"] + rec["compute_math_ms"] + rec["comm_ms"] + rec["other_ms"]
    assert rec["step_ms"] == pytest.approx(total)
    assert rec["comm_ms"] > 0 and rec["part_pp_send_recv_ms"] > 0
    assert rec["source"] == "measured" and rec["backend"] == "gloo"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU world cap")
def test_bench_layout_skips_a_layout_larger_than_the_cap(tmp_path):
    layout = lay(2, 2, 1)
    frame = bench_layout(
        cell(layout, cap=2), write_ceilings(tmp_path / "c.json"), [], str(tmp_path / "x.csv")
    )
    assert set(frame["status"]) == {"skipped"}
    assert frame["reason"].str.contains("collective_world_cap").sum() == 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU runner")
def test_bench_layout_on_the_cpu_records_a_gpu_runner_as_unsupported(tmp_path):
    spec = json.loads(cell(lay(1, 1, 1), tokens=(1,)))
    spec["bench"]["layout_runner"] = "torch_grouped_mm"
    frame = bench_layout(
        json.dumps(spec), write_ceilings(tmp_path / "c.json"), [], str(tmp_path / "x.csv")
    )
    assert list(frame["status"]) == ["unsupported"]
    assert "CUDA devices only" in frame["reason"].iloc[0]


def test_layout_outputs_are_the_layouts_that_fit_here():
    sweep = Sweep(["bench.collective_world_cap=2"], ROOT / "conf")
    gpus = len(gpu_names())
    cap = gpus if gpus else 2
    expected = {r["layout"] for r in sweep.layouts.to_dict("records") if r["world"] <= cap}
    got = {Path(p).stem for p in sweep.layout_outputs()}
    assert got == expected
    if not gpus:
        assert got == {"tp1-pp1-ep1", "tp2-pp1-ep1", "tp1-pp1-ep2", "tp1-pp2-ep1"}
    params = json.loads(sweep.layout_step_cell("tp2-pp1-ep1"))
    assert params["layout"]["world"] == 2
    assert params["bench"]["layout_layers"] >= 1
    assert "routing" not in params["bench"]  # keys the step does not read stay out of its params


@pytest.mark.gpu
@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs two GPUs"
)
@pytest.mark.parametrize("shape", [(2, 1, 1), (1, 1, 2), (1, 2, 1)])
def test_layout_step_runs_on_nccl(shape):
    layout = lay(*shape)
    ranks = moe_step.run_layout(spec(layout), layout["world"], True, 300)
    check_ranks(layout, ranks, 2)
