"""The deployment model (tilesweep.plan): memory fit, PP latency vs throughput, label honesty,
latency floors, interconnect shape, bound rules and the deployment settings' schema."""

from __future__ import annotations

import copy
import math

import pytest
from conftest import fast_sample

from tilesweep.config import compose
from tilesweep.errors import ConfigError
from tilesweep.plan import row_inputs
from tilesweep.plan.bound import decide_bound, margin_text
from tilesweep.plan.composition import COLUMNS, compose_deployment
from tilesweep.plan.interconnect import (
    collective_time,
    floored_ms,
    topology_numbers,
)
from tilesweep.plan.memory_fit import memory_fit, rank_weight_bytes, stage_layers
from tilesweep.plan.part_timers import roofline_timer
from tilesweep.plan.step_parts import stage_collectives
from tilesweep.plan.step_time import StepCase, compose_step
from tilesweep.settings import DeploymentSettings, HardwareSpec, Layout, ModelSettings, RootSettings


def collective_ms(*args) -> float:
    """Return the time in ms of one collective (collective_time's time alone)."""
    return collective_time(*args)[0]


BRIEF_LAYOUTS = "grid.layouts=[{tp:8,pp:1,ep:1},{tp:4,pp:2,ep:1},{tp:1,pp:1,ep:8}]"


@pytest.fixture(scope="module")
def brief():
    return compose([BRIEF_LAYOUTS])


def composed(settings: dict, **how):
    """Return the deployment table of compose()'s plain settings, validated."""
    return compose_deployment(RootSettings.model_validate(settings), **how)


def _hw(settings: dict) -> HardwareSpec:
    """Return compose()'s hardware group as the plan reads it, validated."""
    return HardwareSpec.model_validate(settings["hardware"])


def _model(settings: dict) -> ModelSettings:
    """Return compose()'s model group as the plan reads it, validated."""
    return ModelSettings.model_validate(settings["model"])


def _dep(settings: dict, **change) -> DeploymentSettings:
    """Return compose()'s deployment group, with `change` applied, validated."""
    return DeploymentSettings.model_validate({**settings["deployment"], **change})


def total_weight_bytes(model: ModelSettings, dep: DeploymentSettings) -> float:
    """Return every weight's bytes: the one rank of an unsplit single-stage layout."""
    stage = {"dense": model.dense_layers, "moe": model.moe_layers, "sliding": 0}
    return rank_weight_bytes(model, dep, Layout(tp=1, pp=1, ep=1), stage, True, True)


def _layouts(settings: dict) -> list[Layout]:
    """Return compose()'s grid layouts, validated."""
    return [Layout(**lay) for lay in settings["grid"]["layouts"]]


def test_glm5_bf16_is_about_1_5_tb_and_fits_no_8x96gb_layout(brief):
    dep = _dep(brief, weight_dtype="bf16")
    assert 1.40e12 < total_weight_bytes(_model(brief), dep) < 1.55e12
    for layout in _layouts(brief):
        fit = memory_fit(_model(brief), dep, _hw(brief), layout, 1)
        assert not fit["fits"] and fit["short_bytes"] > 0 and fit["max_batch_fit"] == 0


def test_glm5_nvfp4_fits_8x96gb_at_batch_1(brief):
    for layout in _layouts(brief):
        fit = memory_fit(_model(brief), _dep(brief), _hw(brief), layout, 1)
        assert fit["fits"], layout
        assert (
            fit["max_batch_fit"] >= 1
            and fit["max_context_fit"] >= brief["deployment"]["context_len"]
        )


def test_largest_batch_that_fits_fits_and_one_more_does_not(brief):
    layout = Layout(tp=8, pp=1, ep=1)
    fit = memory_fit(_model(brief), _dep(brief), _hw(brief), layout, 1)
    b = fit["max_batch_fit"]
    assert memory_fit(_model(brief), _dep(brief), _hw(brief), layout, b)["fits"]
    assert not memory_fit(_model(brief), _dep(brief), _hw(brief), layout, b + 1)["fits"]


def test_a_layout_that_does_not_fit_gets_no_speed_verdict(brief):
    df = composed(brief)
    assert list(df.columns) == COLUMNS
    nofit = df[df.fits_memory == "no"]
    assert len(nofit) and (nofit.bound == "does-not-fit").all()
    assert nofit.tpot_ms.isna().all() and nofit.tokens_per_s.isna().all()
    fits = df[df.fits_memory == "yes"]
    assert fits.tpot_ms.notna().all() and (fits.bound != "does-not-fit").all()


def test_every_fitting_row_sits_above_its_physical_floor(brief):
    df = composed(brief)
    fits = df[df.fits_memory == "yes"]
    assert len(fits) and fits.floor_ms.gt(0).all()
    assert (fits.tpot_ms >= fits.floor_ms * (1 - 1e-9)).all()
    assert fits.x_floor.to_numpy() == pytest.approx((fits.tpot_ms / fits.floor_ms).to_numpy())
    # The floor is the roofline step with no per-kernel cost: a larger kernel gap raises the
    # TPOT of a roofline verdict, never its floor.
    gappy = copy.deepcopy(brief)
    gappy["deployment"]["kernel_gap_us"] = 50.0
    wide = composed(gappy)
    wide = wide[wide.fits_memory == "yes"]
    assert wide.floor_ms.to_numpy() == pytest.approx(fits.floor_ms.to_numpy())
    assert (wide.tpot_ms.to_numpy() > fits.tpot_ms.to_numpy()).all()
    # Collectives are on the floor's path: TP8 at batch 1 has more floor than its weights alone.
    row = fits[(fits.layout == "tp8-pp1-ep1") & (fits.batch == 1)].iloc[0]
    step = compose_step(StepCase(
        _model(brief), _dep(brief, kernel_gap_us=0.0), _hw(brief),
        Layout(tp=8, pp=1, ep=1), 1,
    ))  # fmt: skip
    assert row.floor_ms == pytest.approx(step["tpot_ms"])
    assert step["split"]["communication"] > 0


def test_pp_tpot_is_more_than_a_stage_and_throughput_uses_pp_micro_batches(brief):
    layout = Layout(tp=4, pp=2, ep=1)
    step = compose_step(StepCase(_model(brief), _dep(brief), _hw(brief), layout, 32))
    assert step["micro_batches"] == 2
    assert step["tpot_ms"] > max(step["stage_ms"])
    assert step["tpot_ms"] >= sum(step["stage_ms"]) + step["hop_ms"] - 1e-12
    # Each of the 2 micro-batches carries 16 of the 32 sequences: batch 32 is not a 2x-longer step.
    one = compose_step(StepCase(_model(brief), _dep(brief), _hw(brief), layout, 16))
    assert step["tpot_ms"] < 2 * one["tpot_ms"]
    assert sum(step["split"].values()) == pytest.approx(step["tpot_ms"])


def test_pp_at_batch_1_is_bound_over_the_whole_path_not_a_bubble(brief):
    layout = Layout(tp=4, pp=2, ep=1)
    step = compose_step(StepCase(_model(brief), _dep(brief), _hw(brief), layout, 1))
    assert step["micro_batches"] == 1
    # One micro-batch crosses both stages: both stages' memory is on its path, no idle `other`.
    tp4 = compose_step(
        StepCase(_model(brief), _dep(brief), _hw(brief), Layout(tp=4, pp=1, ep=1), 1)
    )
    assert step["split"]["memory"] == pytest.approx(tp4["split"]["memory"], rel=0.05)
    assert step["split"]["other"] < 0.4 * step["tpot_ms"]
    assert sum(step["split"].values()) == pytest.approx(step["tpot_ms"])
    # The hops (both ways round the ring) are communication on the path.
    assert step["split"]["communication"] > step["hop_ms"]


def test_ep_waits_for_the_most_loaded_rank():
    from tilesweep.plan.step_parts import busiest_rank

    distinct_1, rows_1 = busiest_rank(256, 8, 8, 1)
    distinct_8, rows_8 = busiest_rank(256, 8, 8, 8)
    assert 2.3 < distinct_1 < 2.9 and rows_1 == distinct_1  # mean would be 1.0
    assert 9.5 < distinct_8 < 11.5 and rows_8 > 8 * 8 / 8  # mean would be 7.2 experts, 8 rows
    assert busiest_rank(256, 8, 8, 8) == (distinct_8, rows_8)  # the same every call
    full, _ = busiest_rank(256, 8, 8, 4096)
    assert full == 32.0  # every local expert is hit
    assert busiest_rank(256, 8, 1, 1) == (pytest.approx(8.0), 8.0)


def test_a_routing_draws_distinct_experts_uniformly():
    import numpy as np

    from tilesweep.plan.step_parts import _distinct_picks

    picks = _distinct_picks(np.random.default_rng(1), 20_000, 64, 8)
    ordered = np.sort(picks, axis=1)
    assert (ordered[:, 1:] != ordered[:, :-1]).all()  # no expert twice in a token's routing
    share = np.bincount(picks.ravel(), minlength=64) / picks.size
    assert np.allclose(share, 1 / 64, rtol=0.05)  # each expert equally likely
    # A pair of experts is as likely in one routing as any other pair: 8*7/(64*63) of tokens.
    both = ((picks == 0).any(axis=1) & (picks == 1).any(axis=1)).mean()
    assert both == pytest.approx(8 * 7 / (64 * 63), rel=0.2)


def test_without_a_fit_every_composed_figure_is_labelled_model(brief):
    assert (composed(brief).dropna(subset=["tpot_ms"]).source == "model").all()


def test_a_missing_peak_is_a_gap_not_another_dtypes_peak(brief):
    plain = copy.deepcopy(brief["hardware"])
    plain["peak_tflops"]["nvfp4"] = None
    hw = HardwareSpec.model_validate(plain)
    part = {
        "name": "e",
        "kind": "expert_gemm",
        "bytes": 1e6,
        "flops": 1e9,
        "dtype": "nvfp4",
        "count": 1,
    }
    out = roofline_timer(part, hw)
    assert math.isnan(out["math_ms"]) and "peak_tflops.nvfp4" in out["gap"]
    settings = dict(brief, hardware=plain)
    row = composed(settings).iloc[0]
    assert (
        math.isnan(row.tpot_ms)
        and "gap" in row.bound
        and "peak_tflops.nvfp4" in row_inputs.row_words(row)
    )


def test_no_composed_collective_is_below_its_floor(brief):
    numbers, _ = topology_numbers(_hw(brief))
    for coll in ("all_reduce", "all_to_all", "send_recv"):
        for n in (2, 4, 8):
            floor = collective_ms(coll, n, 0.0, numbers)
            for nbytes in (0, 2, 12288, 1 << 20):
                t = collective_ms(coll, n, nbytes, numbers)
                assert t >= floor or (math.isnan(t) and math.isnan(floor))  # a count's gap
    measured = {"send_recv": {2: 0.037}, "all_reduce": {8: 0.5}}
    t, label = floored_ms("send_recv", 2, 12288, numbers, measured)
    assert t >= 0.037 and label == "measured floor"
    layout = Layout(tp=8, pp=1, ep=1)
    stage = stage_layers({"dense_layers": 3, "moe_layers": 75, "sliding_layers": 0}, 1)[0]
    for coll in stage_collectives(_model(brief), layout, stage, 8):
        assert floored_ms(coll["collective"], coll["n"], coll["bytes"], numbers, measured)[0] >= 0.5
    low = compose_step(StepCase(_model(brief), _dep(brief), _hw(brief), layout, 8))
    high = compose_step(
        StepCase(_model(brief), _dep(brief), _hw(brief), layout, 8, measured_floors=measured)
    )
    assert high["split"]["communication"] >= 2 * 78 * 0.5 - 1e-9
    assert high["split"]["communication"] > low["split"]["communication"]


@pytest.mark.parametrize("hardware", ["rtx_pro_6000", "rtx_5090", "h100", "h200", "b200", "a100"])
@pytest.mark.parametrize("topology", [None, "switch", "dual_socket", "switch_free", "host_staged"])
def test_more_bytes_never_less_time_and_a_count_without_figures_is_a_gap(hardware, topology):
    hw = _hw(compose([f"hardware={hardware}"]))
    numbers, _ = topology_numbers(hw, topology)
    if numbers is None:
        pytest.skip(f"{hardware} has no {topology} topology")
    for coll in ("all_reduce", "all_to_all", "send_recv"):
        block = getattr(numbers, coll)
        given = set(block.by_gpus) if block else set()
        for n in range(2, 17):
            times = [collective_ms(coll, n, b, numbers) for b in (0, 1, 1024, 1 << 20, 1 << 30)]
            if n in given:
                assert times == sorted(times), (coll, n)
            else:  # never stretched from another count
                assert all(math.isnan(t) for t in times), (coll, n)


def test_hardware_without_an_interconnect_model_is_a_gap():
    numbers, reason = topology_numbers(_hw(compose(["hardware=l40s"])))
    assert numbers is None and "no interconnect_model" in reason
    assert math.isnan(collective_ms("all_reduce", 2, 1024, numbers))


def test_depth_reduced_model_composes_with_every_layer_type(brief):
    reduced = {"dense_layers": 1, "moe_layers": 2}
    full = compose_step(
        StepCase(_model(brief), _dep(brief), _hw(brief), Layout(tp=1, pp=1, ep=1), 8)
    )
    small = compose_step(
        StepCase(
            _model(brief),
            _dep(brief),
            _hw(brief),
            Layout(tp=1, pp=1, ep=1),
            8,
            layer_overrides=reduced,
        )
    )
    assert 0 < small["tpot_ms"] < full["tpot_ms"] / 10


@pytest.mark.parametrize(
    ("split", "achieved", "bound"),
    [
        ({"memory": 10, "math": 2, "communication": 1, "other": 1}, None, "memory"),
        ({"memory": 10, "math": 9, "communication": 1, "other": 1}, None, "mixed"),
        ({"memory": 1, "math": 2, "communication": 10, "other": 1}, None, "communication"),
        # The example: 34% of bandwidth, 41% of math peak: kernel-limited, not math-bound.
        (
            {"memory": 2, "math": 10, "communication": 1, "other": 1},
            {"bandwidth": 0.34, "math": 0.41},
            "kernel-limited",
        ),
        (
            {"memory": 2, "math": 10, "communication": 1, "other": 1},
            {"bandwidth": 0.34, "math": 0.6},
            "math",
        ),
        (
            {"memory": 1, "math": 1, "communication": 10, "other": 1},
            {"bandwidth": 0.1, "math": 0.1},
            "communication",
        ),
    ],
)
def test_bound_rules(split, achieved, bound):
    assert decide_bound(split, achieved)["bound"] == bound


def test_bound_margin_share_and_does_not_fit():
    out = decide_bound({"memory": 13, "math": 10, "communication": 0, "other": 0})
    assert (
        out["margin"] == "1.3x"
        and out["share"] == pytest.approx(13 / 23)
        and out["bound"] == "memory"
    )
    assert decide_bound({"memory": 1}, fits=False)["bound"] == "does-not-fit"
    assert margin_text(5, 0) == "inf"


@pytest.mark.parametrize(
    ("override", "message"),
    fast_sample(
        [
            (
                "deployment.weight_dtype=fp4",
                "deployment.weight_dtype='fp4': allowed: bf16, fp8, nvfp4",
            ),
            ("deployment.kv_dtype=nvfp4", "deployment.kv_dtype='nvfp4': allowed: bf16, fp8"),
            ("deployment.context_len=0", "deployment.context_len=0: must be at least 1"),
            ("deployment.batches=[]", "deployment.batches=[]: give at least one"),
            ("deployment.batches=[8,0]", "deployment.batches[1]=0: must be at least 1"),
            (
                "deployment.runtime_reserve_gb=-1",
                "deployment.runtime_reserve_gb=-1: must be at least 0",
            ),
            ("deployment.quantized=[embedding]", "deployment.quantized[0]='embedding': allowed"),
            ("+deployment.colour=red", "deployment.colour: unknown key"),
            ("model.attention.kind=mha", "model.attention.kind='mha': allowed: mla, gqa"),
            ("model.dense_layers=-1", "model.dense_layers=-1: must be at least 0"),
            ("~model.attention.index_topk", "model.attention: missing key 'index_topk'"),
            ("deployment=bf16|deployment.compute_dtype=nvfp4", "narrower than weight_dtype=bf16"),
        ]
    ),
)
def test_bad_deployment_values_are_one_line_errors(override, message):
    with pytest.raises(ConfigError) as err:
        compose(override.split("|"))
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "model", ["glm5", "deepseek_v3", "qwen3_235b_a22b", "mixtral_8x7b", "gpt_oss_120b"]
)
def test_every_model_composes_a_step(model):
    settings = compose(
        [f"model={model}", "grid.tiles=[{m:16,n:64,k:64}]", "grid.layouts=[{tp:8,pp:1,ep:1}]"]
    )
    df = composed(settings)
    assert len(df) == len(settings["deployment"]["batches"])
    assert row_inputs.column_words(df).str.contains("interconnect: pcie5/switch").all()


def test_attention_tp_with_expert_ep_on_the_same_gpus(brief):
    tp8 = Layout(tp=8, pp=1, ep=1)
    xep = tp8.model_copy(update={"experts": "ep"})
    model, dep, hw = _model(brief), _dep(brief), _hw(brief)
    one_tp, one_x = (compose_step(StepCase(model, dep, hw, lay, 1)) for lay in (tp8, xep))
    # One token: its 8 experts land on ~2.6 whole experts of the busiest rank, more bytes than
    # an eighth of each of 8; the collectives are the TP group's all-reduces either way.
    assert one_x["split"]["memory"] > one_tp["split"]["memory"]
    assert one_x["split"]["communication"] == pytest.approx(one_tp["split"]["communication"])
    big_tp, big_x = (compose_step(StepCase(model, dep, hw, lay, 4096)) for lay in (tp8, xep))
    # Every expert hit: the same weight bytes; only the busiest rank's extra rows remain.
    assert big_x["split"]["memory"] == pytest.approx(big_tp["split"]["memory"], rel=0.15)
    table = composed(dict(brief, grid=dict(brief["grid"], layouts=[xep])))
    assert set(table["layout"]) == {"tp8-pp1-ep1-xep"}


def test_moe_split_layouts_as_engines_serve_them(brief):
    """Attention TP4 with MoE TP2 x EP2; DP attention with an EP8 MoE beside TP2 attention; DP8
    attention with a TP8 MoE (gathered): each named, split and communicating as its engine does."""
    from tilesweep.plan.sharding import gathers, layout_name

    mixed = Layout(tp=4, pp=1, ep=1, moe_tp=2)
    dp_ep = Layout(tp=2, pp=1, ep=4, moe_tp=1)
    dp_tp = Layout(tp=1, pp=1, ep=8, moe_tp=8)
    names = [layout_name(lay) for lay in (mixed, dp_ep, dp_tp)]
    assert names == ["tp4-pp1-ep1-moe2x2", "tp2-pp1-ep4-moe1x8", "tp1-pp1-ep8-moe8x1"]
    assert [lay.moe_split() for lay in (mixed, dp_ep, dp_tp)] == [(2, 2), (1, 8), (8, 1)]
    # The defaults name as before: MoE TP = attention TP, and experts=ep is MoE TP 1.
    assert layout_name(Layout(tp=8, pp=1, ep=1, experts="ep")) == "tp8-pp1-ep1-xep"
    assert layout_name(Layout(tp=8, pp=1, ep=1, moe_tp=8)) == "tp8-pp1-ep1"
    stage = {"dense": 3, "moe": 75, "sliding": 0}
    # One attention group: the TP all-reduces carry the MoE's sums; nothing is gathered.
    assert not gathers(mixed)
    assert [c["name"] for c in stage_collectives(_model(brief), mixed, stage, 8)] == [
        "tp_all_reduce"
    ]
    # DP attention beside another MoE split: the attention's all-reduce, then per MoE layer one
    # gather and scatter of the whole micro-batch over the stage, and no all-to-all.
    got = {c["name"]: c for c in stage_collectives(_model(brief), dp_ep, stage, 8)}
    assert set(got) == {"tp_all_reduce", "moe_gather_scatter"}
    assert got["tp_all_reduce"]["count"] == 2 * 78 - 75
    assert got["moe_gather_scatter"]["n"] == 8 and got["moe_gather_scatter"]["count"] == 75
    assert got["moe_gather_scatter"]["bytes"] == 8 * brief["model"]["hidden"] * 2
    got = {c["name"] for c in stage_collectives(_model(brief), dp_tp, stage, 8)}
    assert got == {"moe_gather_scatter"}  # TP1 attention: no all-reduce of its own
    model, dep, hw = _model(brief), _dep(brief), _hw(brief)
    plain, split = (
        compose_step(StepCase(model, dep, hw, lay, 8)) for lay in (Layout(tp=4, pp=1, ep=1), mixed)
    )
    # Whole experts over two ranks: each rank reads more of each expert it runs.
    assert split["split"]["memory"] > plain["split"]["memory"]
    table = composed(dict(brief, grid=dict(brief["grid"], layouts=[mixed, dp_tp])))
    assert set(table["layout"]) == {"tp4-pp1-ep1-moe2x2", "tp1-pp1-ep8-moe8x1"}


def test_a_grid_without_collective_figures_is_refused_in_one_line():
    from tilesweep.config import compose_settings
    from tilesweep.deployment_refusals import refusal

    settings = compose_settings(
        ["hardware=l40s", "deployment=fp8_all", "model=mixtral_8x7b",
         "grid.layouts=[{tp:4,pp:1,ep:1},{tp:8,pp:1,ep:1}]"]
    )  # fmt: skip
    why = refusal(settings)
    assert why.startswith("hardware=l40s: tp4-pp1-ep1 (and 1 more layouts) cannot be composed")
    assert "conf/hardware/l40s.yaml" in why and "\n" not in why
    # A grid with one layout it has figures for is composed; the others are labelled gaps.
    fine = compose_settings(["hardware=l40s", "deployment=fp8_all", "model=mixtral_8x7b"])
    assert refusal(fine) is None
    # ...and the card blames the gap, not memory, where layouts fit but compose nothing.
    import pandas as pd

    from tilesweep import answer_card
    from tilesweep.deployment_verdict import deployment_table

    empty = pd.DataFrame()
    card = answer_card.build(fine, deployment_table(fine, empty, empty, empty, {}))
    assert "no layout both fits in memory and composes (communication unknown: " in card.headline
    assert "tp8-pp1-ep1" in card.notes()[0] and "fits in memory at" not in card.headline


def test_checkpoint_options_follow_the_named_checkpoint():
    from tilesweep.plan.architecture import deployment_model

    experts_only = compose(["deployment=nvfp4_experts"])
    all_fp8 = compose(["deployment=fp8_all"])
    assert experts_only["deployment"]["quantized"] == ["routed_experts", "shared_experts"]
    assert all_fp8["deployment"]["weight_dtype"] == "fp8"
    model = _model(experts_only)
    # bf16 attention and dense MLP beside NVFP4 experts weigh more than NVFP4 everywhere.
    everywhere = _dep(compose([]))
    assert total_weight_bytes(model, _dep(experts_only)) > total_weight_bytes(model, everywhere)
    # Dense MLA at decode: no DSA indexer, attention over the whole context.
    dense = compose(["deployment.attention=dense"])
    assert model.attention.index_topk is not None
    assert deployment_model(model, _dep(dense)).attention.index_topk is None
    layout = Layout(tp=8, pp=1, ep=1)
    sparse_step = compose_step(StepCase(model, everywhere, _hw(dense), layout, 8))
    dense_step = compose_step(
        StepCase(deployment_model(model, _dep(dense)), _dep(dense), _hw(dense), layout, 8)
    )
    assert dense_step["tpot_ms"] != sparse_step["tpot_ms"]


@pytest.mark.parametrize(
    "layout, message",
    fast_sample(
        [
            ("{tp:8,pp:1,ep:1,experts:ep2}", "'ep2': allowed: tp, ep"),
            (
                "{tp:1,pp:1,ep:8,experts:ep}",
                "experts='ep': spreads whole experts over the TP group",
            ),
            (
                "{tp:4,pp:1,ep:1,moe_tp:3}",
                "moe_tp=3: does not divide a stage.s tp.ep = 4.1 = 4 ranks",
            ),
            ("{tp:8,pp:1,ep:1,experts:ep,moe_tp:2}", "moe_tp=2: must be 1 with experts=ep"),
            ("{tp:2,pp:1,ep:4,moe_tp:0}", "moe_tp=0: must be at least 1"),
        ]
    ),
)
def test_bad_expert_layouts_are_one_line_errors(layout, message):
    from tilesweep.errors import ConfigError

    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        compose([f"grid.layouts=[{layout}]"])


def test_a_missing_all_reduce_count_keeps_its_layouts_as_gap_rows_naming_count_and_file(brief):
    """C141/C147: a hardware file without the all-reduce figure of 8 GPUs keeps the 8-GPU
    layouts as gap rows whose bound names the count and the file, and the card says so."""
    from tilesweep import answer_card

    cut = copy.deepcopy(brief)
    switch = cut["hardware"]["interconnect_model"]["topologies"]["switch"]
    del switch["all_reduce"]["by_gpus"][8]
    table = composed(cut)
    tp8 = table[(table["layout"] == "tp8-pp1-ep1") & (table["fits_memory"] == "yes")]
    assert len(tp8) and tp8["tpot_ms"].isna().all()
    bound = "gap (communication unknown: no all_reduce figures for 8 GPUs"
    assert tp8["bound"].str.startswith(bound).all()
    assert tp8["bound"].str.contains("in conf/hardware/rtx_pro_6000.yaml").all()
    settings = RootSettings.model_validate(cut)
    card = answer_card.build(settings, table)
    assert card.picks and all(p.layout != "tp8-pp1-ep1" for p in card.picks)
    line = card.notes()[1]
    assert line in card.lines() and "tp8-pp1-ep1" in line and "8 GPUs" in line
