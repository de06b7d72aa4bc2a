"""The measured whole step per layout: rank placement, the stage's CPU caps and skipped rows,
the pipeline's cells, a time limit, and NCCL on two GPUs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from test_whole_step import GQA, MLA, tiny_model

from tilesweep.measure import whole_step
from tilesweep.pipeline import Sweep
from tilesweep.plan import sharding as plan
from tilesweep.provenance import gpu_names
from tilesweep.settings import Layout
from tilesweep.stages.layout import bench_layout, model_as_run

ROOT = Path(__file__).resolve().parents[1]


def lay(tp: int, pp: int, ep: int) -> dict:
    """Return a layout row as the grid writes it."""
    row = {"tp": tp, "pp": pp, "ep": ep, "world": tp * pp * ep}
    return {**row, "layout": plan.layout_name(Layout(tp=tp, pp=pp, ep=ep))}


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


def cell(
    layout: dict, batches=(1, 4, 64), cap: int = 2, attention=MLA, emulate: bool = False
) -> str:
    """Return a whole-step cell for a toy model, as the pipeline writes it."""
    bench = {
        "warmup": 1,
        "repeats": 2,
        "cpu_repeats": 2,
        "seed": 0,
        "step_dense_layers": 1,
        "step_moe_layers": 2,
        "step_context_len": 64,
        "step_runner": "auto",
        "step_cpu_context_len": 16,
        "step_cpu_experts": 2,
        "step_cpu_vocab": 50,
        "step_cpu_max_batch": 8,
        "step_cpu_world_cap": cap,
        "step_emulate": emulate,
        "step_mode": "graph",
        "step_moe_tables": [],
        "step_timeout_s": 120,
    }
    model = dict(tiny_model(attention), name="toy", dense_layers=1, moe_layers=4)
    return json.dumps({"layout": layout, "model": model, "batches": list(batches), "bench": bench})


def test_the_cpu_runs_a_narrower_model_and_says_so():
    spec = json.loads(cell(lay(1, 1, 2)))
    model = model_as_run(spec["model"], spec["layout"], spec["bench"], cuda=False)
    assert model["routed_experts"] == 4 and model["top_k"] == 2 and model["vocab"] == 50
    assert model_as_run(spec["model"], spec["layout"], spec["bench"], cuda=True) == spec["model"]


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU caps")
@pytest.mark.parametrize("attention", [MLA, GQA], ids=["mla", "gqa"])
def test_bench_layout_measures_whole_steps_and_records_what_it_skipped(tmp_path, attention):
    out = tmp_path / "layout.csv"
    frame = bench_layout(cell(lay(1, 2, 1), attention=attention), str(out))
    assert out.exists()
    ok = frame[frame["status"] == "ok"]
    assert list(ok["batch"]) == [1, 4]
    skipped = frame[frame["status"] == "skipped"]
    assert list(skipped["batch"]) == [64] and "CPU cap" in skipped["reason"].iloc[0]
    rec = ok.iloc[1]
    assert rec["step_p10_ms"] <= rec["step_ms"] <= rec["step_p90_ms"]
    assert rec["part_pp_send_recv_ms"] > 0 and rec["part_expert_gemms_ms"] > 0
    assert (rec["routed_experts_run"], rec["top_k_run"], rec["vocab_run"]) == (2, 2, 50)
    assert rec["context_len"] == 16 and rec["measured_label"].startswith("measured (1 dense")
    assert rec["source"] == "measured" and rec["backend"] == "gloo"
    assert skipped["source"].iloc[0] == "not measured"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU world cap")
def test_bench_layout_skips_a_layout_larger_than_the_cap(tmp_path):
    frame = bench_layout(cell(lay(2, 2, 1), batches=(1, 2)), str(tmp_path / "x.csv"))
    assert set(frame["status"]) == {"skipped"}
    assert frame["reason"].str.contains("step_cpu_world_cap").sum() == 2
    assert frame["reason"].str.contains("step_emulate is off").sum() == 2


@pytest.mark.slow
def test_bench_layout_emulates_one_rank_of_a_layout_larger_than_the_cap(tmp_path):
    frame = bench_layout(cell(lay(2, 2, 1), batches=(1,), emulate=True), str(tmp_path / "x.csv"))
    assert list(frame["status"]) == ["ok"] and frame["emulated"].all()
    assert frame["measured_label"].str.contains("one rank emulated").all()
    assert (frame["timing"] == "eager").all()  # the CPU has no CUDA graphs: labelled


def test_a_layout_past_its_time_limit_is_killed():
    spec = json.loads(cell(lay(1, 1, 2)))
    spec["model"] = model_as_run(spec["model"], spec["layout"], spec["bench"], cuda=False)
    step = {"dense_layers": 1, "moe_layers": 2, "context_len": 16, "batches": [2],
            "warmup": 1, "repeats": 10**7, "seed": 0, "runner": "torch_matmul"}  # fmt: skip
    with pytest.raises(TimeoutError, match="killed"):
        whole_step.run_whole_step({**spec, "step": step}, 2, False, 1.0)


def test_layout_outputs_and_cells_follow_the_config():
    emulating = Sweep(["bench.step_cpu_world_cap=2"], ROOT / "conf")
    measurable = emulating.layouts[emulating.layouts["experts"] == "tp"]  # experts=ep: composed
    assert {Path(p).stem for p in emulating.layout_outputs()} == set(measurable["layout"])
    sweep = Sweep(["bench.step_cpu_world_cap=2", "bench.step_emulate=false"], ROOT / "conf")
    gpus = len(gpu_names())
    cap = gpus if gpus else 2
    expected = {
        r["layout"]
        for r in sweep.layouts.to_dict("records")
        if r["world"] <= cap and r["experts"] == "tp"
    }
    got = {Path(p).stem for p in sweep.layout_outputs()}
    assert got == expected
    if not gpus:
        assert got == {"tp1-pp1-ep1", "tp2-pp1-ep1", "tp1-pp1-ep2", "tp1-pp2-ep1"}
    params = json.loads(sweep.layout_step_cell("tp2-pp1-ep1"))
    assert params["layout"]["world"] == 2
    # The deployment's batches and the grid's tokens per expert as sequences (GLM-5: t x 32).
    assert params["batches"] == sorted(
        {1, 8, 32, 64, 128} | {32 * t for t in (1, 2, 4, 8, 16, 32, 64, 128, 256)}
    )
    assert "routing" not in params["bench"]  # keys the step does not read stay out of its params


@pytest.mark.gpu
@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs two GPUs"
)
@pytest.mark.parametrize("shape", [(2, 1, 1), (1, 1, 2), (1, 2, 1)])
def test_whole_step_runs_on_nccl(shape):
    from test_whole_step import spec

    layout = lay(*shape)
    ranks = whole_step.run_whole_step(spec(layout, MLA), layout["world"], True, 300)
    assert all(b["finite"] for r in ranks for b in r["batches"])
