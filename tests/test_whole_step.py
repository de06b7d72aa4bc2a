"""The measured whole decode step: every layer type, every layout, on the CPU over gloo."""

from __future__ import annotations

import pytest

from tilesweep.measure import process_group, whole_step
from tilesweep.measure.step import graph_timing as step_timing
from tilesweep.measure.step import shapes as step_shapes
from tilesweep.measure.step.clock import PartClock
from tilesweep.measure.step.rank import StepRank

MLA = {
    "kind": "mla",
    "heads": 4,
    "q_lora_rank": 32,
    "kv_lora_rank": 16,
    "qk_nope_head_dim": 8,
    "qk_rope_head_dim": 4,
    "v_head_dim": 8,
    "index_n_heads": 2,
    "index_head_dim": 8,
    "index_topk": 8,
}
GQA = {"kind": "gqa", "heads": 4, "kv_heads": 2, "head_dim": 8}


def tiny_model(attention: dict) -> dict:
    """Return a model with every layer type at toy width."""
    return {
        "hidden": 64,
        "moe_intermediate": 32,
        "routed_experts": 8,
        "top_k": 2,
        "shared_experts": 1,
        "dense_intermediate": 96,
        "vocab": 100,
        "attention": attention,
    }


def spec(layout: dict, attention: dict, batches=(1, 4)) -> dict:
    """Return a whole-step spec for a toy model: one dense and two MoE layers per stage."""
    step = {
        "dense_layers": 1,
        "moe_layers": 2,
        "context_len": 32,
        "batches": list(batches),
        "warmup": 1,
        "repeats": 3,
        "seed": 0,
        "runner": "torch_matmul",
    }
    return {"layout": layout, "model": tiny_model(attention), "step": step}


def test_micro_batches_split_the_rank_share():
    assert step_shapes.micro_batches(5, {"tp": 1, "pp": 2, "ep": 1}) == [3, 2]
    assert step_shapes.micro_batches(5, {"tp": 1, "pp": 1, "ep": 2}) == [3]
    assert step_shapes.micro_batches(1, {"tp": 1, "pp": 2, "ep": 1}) == [1, 0]


def test_cache_bytes_follow_the_attention_kind():
    layout = {"tp": 2, "pp": 1, "ep": 1}
    mla = step_shapes.cache_bytes_per_sequence(tiny_model(MLA), layout, 10, 3)
    assert mla == (16 + 4 + 8) * 10 * 3 * 2  # latent + rope key + index key, replicated on TP
    gqa = step_shapes.cache_bytes_per_sequence(tiny_model(GQA), layout, 10, 3)
    assert gqa == 2 * 1 * 8 * 10 * 3 * 2  # K and V of this rank's one KV head


@pytest.mark.slow
@pytest.mark.parametrize("attention", [MLA, GQA], ids=["mla", "gqa"])
@pytest.mark.parametrize(
    "layout",
    [
        {"tp": 1, "pp": 1, "ep": 1},
        {"tp": 2, "pp": 1, "ep": 1},
        {"tp": 1, "pp": 1, "ep": 2},
        {"tp": 1, "pp": 2, "ep": 1},
    ],
    ids=["tp1", "tp2", "ep2", "pp2"],
)
def test_whole_step_runs_every_part(layout, attention):
    world = layout["tp"] * layout["pp"] * layout["ep"]
    ranks = whole_step.run_whole_step(spec(layout, attention), world, False, 120)
    assert len(ranks) == world
    for rank in ranks:
        for batch in rank["batches"]:
            assert batch["finite"]
            assert len(batch["whole_ms"]) == 3 and min(batch["whole_ms"]) > 0
    parts = set(ranks[0]["batches"][1]["parts"][0])
    expected = {"attn_proj", "attn_core", "attn_out", "dense_mlp", "router", "expert_gemms"}
    expected |= {"shared_expert", "norms"}
    if attention is MLA:
        expected.add("attn_index")
    if layout["tp"] > 1:
        expected |= {"attn_all_reduce", "ffn_all_reduce"}
    if layout["ep"] > 1:
        expected |= {"dispatch", "combine"}
    if layout["pp"] > 1:
        expected.add("pp_send_recv")
    assert expected <= parts
    # The first stage embeds, the last runs the LM head.
    assert "embedding" in ranks[0]["batches"][1]["parts"][0]
    assert "lm_head" in ranks[-1]["batches"][1]["parts"][0]


def test_launch_counter_counts_kernels_per_part_and_skips_views():
    import torch

    from tilesweep.measure.step.graph_timing import make_counter

    counter = make_counter()
    clock = PartClock(torch, False, "count", counter)
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    with counter:
        with clock.part("a"):
            y = (x @ w.t()).view(2, 16).reshape(4, 8).t()
        with clock.part("b"):
            y.add_(1)
            clock.add_launches(2)  # e.g. two Triton kernels
    assert counter.counts == {"a": 1, "b": 3}


@pytest.mark.slow
@pytest.mark.parametrize(
    "layout", [{"tp": 2, "pp": 2, "ep": 1}, {"tp": 1, "pp": 1, "ep": 4}], ids=["tp2pp2", "ep4"]
)
def test_one_rank_of_a_larger_layout_runs_alone(layout):
    one = dict(spec(layout, MLA), emulate=True)
    ranks = whole_step.run_whole_step(one, 1, False, 120)
    rows = whole_step.step_rows(ranks, one, "x")
    assert len(ranks) == 1 and all(r["status"] == "ok" and r["emulated"] for r in rows)
    assert "one rank emulated" in rows[0]["measured_label"]
    parts = set(ranks[0]["batches"][1]["parts"][0])
    assert not parts & {"attn_all_reduce", "ffn_all_reduce", "dispatch", "combine", "pp_send_recv"}
    # The emulated rank of the last stage holds the LM head.
    assert "lm_head" in parts and rows[0]["launches"] > 0


def test_graphed_and_eager_steps_pick_the_same_tokens():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA graphs on the CPU: the step runs eagerly there, labelled eager")
    one = spec({"tp": 1, "pp": 1, "ep": 1}, MLA, batches=(4,))
    one["step"]["runner"] = "torch_grouped_mm"
    torch.distributed.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{process_group.free_port()}", rank=0, world_size=1
    )
    try:
        me = StepRank(torch, torch.distributed, 0, one, True)
        eager_mbs = [me.micro_batch(4)]
        graph_mbs = [me.micro_batch(4)]
        graph_mbs[0]["ids"].copy_(eager_mbs[0]["ids"])
        for cache_e, cache_g in zip(eager_mbs[0]["caches"], graph_mbs[0]["caches"], strict=True):
            for key in cache_e:
                cache_g[key].copy_(cache_e[key])
        off = PartClock(torch, True, mode="off")
        me.one_step(eager_mbs, 0, off)
        whole, _, _, _ = step_timing.capture(me, graph_mbs, 0)
        # The capture ran warm-up steps: start both from the same tokens and caches again.
        graph_mbs[0]["ids"].copy_(eager_mbs[0]["ids"])
        me.one_step(eager_mbs, 0, off)
        whole.replay()
        torch.cuda.synchronize()
        assert torch.equal(eager_mbs[0]["ids"], graph_mbs[0]["ids"])
    finally:
        torch.distributed.destroy_process_group()


def test_launch_columns_say_what_the_graph_launch_adds():
    graphed = {"launched_ms": [1.2, 1.3, 1.4], "launch_exposed": 0}
    cols = whole_step.launch_columns(graphed, [1.0, 1.1, 1.2])
    assert cols["graph_launch_ms"] == pytest.approx(0.2) and cols["launch_exposed"] == 0
    # An eager step has no graph to launch: both columns stay empty.
    assert whole_step.launch_columns({}, [1.0]) == {"graph_launch_ms": None, "launch_exposed": None}


@pytest.mark.gpu
def test_fronted_graphed_replays_are_queued_before_their_start_fires():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("fronting is for CUDA-graph replays; the CPU step runs eagerly")
    one = spec({"tp": 1, "pp": 1, "ep": 1}, GQA, batches=(4,))
    torch.distributed.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{process_group.free_port()}", rank=0, world_size=1
    )
    try:
        me = StepRank(torch, torch.distributed, 0, one, True)
        mbs = [me.micro_batch(4)]
        whole, _, _, slot = step_timing.capture(me, mbs, 0)
        times, _, exposed = step_timing.time_steps(me, mbs, slot, 5, whole)
        assert len(times) == 5 and exposed == 0
        # Unfronted replays are never counted as exposed: they are the launch-included times.
        _, _, unfronted = step_timing.time_steps(me, mbs, slot, 5, whole, front=False)
        assert unfronted == 0
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.gpu
@pytest.mark.parametrize("attention", [MLA, GQA], ids=["mla", "gqa"])
def test_fused_and_torch_kernels_give_the_same_step(attention):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("the fused kernels run on a GPU; the CPU step runs torch's ops")
    torch.distributed.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{process_group.free_port()}", rank=0, world_size=1
    )
    try:
        outs = {}
        for fused in (True, False):
            one = spec({"tp": 1, "pp": 1, "ep": 1}, attention, batches=(4,))
            one["step"].update(runner="torch_grouped_mm", fused=fused)
            me = StepRank(torch, torch.distributed, 0, one, True)
            assert me.kernels_label.startswith("fused" if fused else "torch")
            torch.manual_seed(0)  # the same token ids (weights and caches: the step's seed)
            mbs = [me.micro_batch(4)]
            me.one_step(mbs, 0, PartClock(torch, True, mode="off"))
            torch.cuda.synchronize()
            outs[fused] = mbs[0]["x"].float()
        err = (outs[True] - outs[False]).norm() / outs[False].norm()
        assert err.item() < 3e-2  # bf16 rounding in a different order, nothing more
    finally:
        torch.distributed.destroy_process_group()


def test_the_kernels_label_names_only_what_the_models_step_launches():
    from tilesweep.measure.step.attention import kernels_label

    gqa, dsa = kernels_label(GQA, True), kernels_label(MLA, True)
    assert "index_scores" not in gqa and ", rms_norm" not in gqa and "merged" not in gqa
    assert "index_scores" in dsa and "mla_decode" in dsa and "projections sharing" in dsa
    dense_mla = {k: v for k, v in MLA.items() if not k.startswith("index_")}
    assert "index_scores" not in kernels_label(dense_mla, True)
    assert kernels_label(GQA, False) == "torch ops (torch scaled_dot_product_attention)"
