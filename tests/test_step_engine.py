"""The measured whole step with an engine's kernel list (bench.step_kernel_list=engine): the list
expanded over the step's layers, the rows' columns, the CPU's labelled rows, the check composing
each row with the kernels it ran, and (on a GPU) the step itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest
import torch

from tilesweep.config import compose
from tilesweep.measure import whole_step
from tilesweep.measure.step import extras as step_extras
from tilesweep.plan import calibration, engine_profile
from tilesweep.plan.launch_fit import small_kernel_us
from tilesweep.settings import ModelSettings
from tilesweep.settings.engine_spec import EngineSettings
from tilesweep.stages import layout as layout_stage

FIT = "docs/examples/h200/fit.json"
KEPT_STEPS = "docs/examples/h200/layout.csv"
SGLANG = "engine-faithful (sglang 0.5.23 kernel list)"


@pytest.fixture(scope="module")
def settings() -> dict:
    return compose(["engine=sglang"])  # the default model (GLM-5) in the default nvfp4


def _model(settings: dict) -> ModelSettings:
    """Return compose()'s model group as the plan reads it, validated."""
    return ModelSettings.model_validate(settings["model"])


def _engine(settings: dict) -> EngineSettings:
    """Return compose()'s engine group as the plan reads it, validated."""
    return EngineSettings.model_validate(settings["engine"])


def test_a_fraction_is_spread_to_the_nearest_whole_total():
    assert step_extras.spread(3, 2) == [3, 3]
    assert step_extras.spread(1.5, 3) == [2, 2, 1]  # 4.5 kernels over 3 layers: 5, halves up
    assert step_extras.spread(0.5, 1) == [1]
    assert step_extras.spread(0.25, 2) == [1, 0]  # 0.5 over 2 layers: 1
    assert step_extras.spread(2.4, 0) == []
    for count in (0.0, 0.3, 1.5, 2.25, 5.5, 11.5):
        for layers in (1, 2, 3, 7):
            got = step_extras.spread(count, layers)
            assert sum(got) == step_extras.half_up(count * layers)
            assert max(got) - min(got) <= 1


def test_sglangs_glm5_list_expands_over_one_dense_and_two_moe_layers(settings):
    # On a Hopper GPU (sm_90: the arch the measured step reads off the device at hand).
    x = step_extras.expand(settings["engine"], settings["model"], "nvfp4", 1, 2, arch="sm_90")
    assert x["label"] == SGLANG
    # conf/engine/sglang.yaml, mla_dsa_moe: per layer 3 + 2 + 1 quantisations (the fused indexer
    # q kernel names its quant) and 2 others (rotary, the cache write; the page-table transform
    # runs inside top-k); per dense layer 3 (named quantisations); per MoE layer 2 (post-process
    # and cat: GLM-5's gate writes the shared-expert column, so the two pads never launch) and 3
    # (a1/a2 quantisation, silu_and_mul); per step 8, none a quantisation. The two add + RMSNorm
    # kernels of sm_120 are not in a step measured here (only_arch).
    assert x["layers"] == [
        {"quant": 9, "copy": 2},
        {"quant": 9, "copy": 4},
        {"quant": 9, "copy": 4},
    ]
    assert x["step"] == {"quant": 0, "copy": 8}
    assert (
        x["listed"]
        == x["run"]
        == {
            "per_layer": 8.0,
            "per_moe_layer": 5.0,
            "per_dense_layer": 3.0,
            "per_step": 8.0,
        }
    )
    # The same sums as the composition's profile counts for the verdict.
    prof = engine_profile.profile(_engine(settings), _model(settings), "nvfp4", "sm_90")
    assert prof.extra == x["listed"]
    # On sm_100 the MoE layer runs its TRTLLM-gen list (only_arch); with no arch, only the
    # arch-free entries (the MoE layer's are all arch-bound now).
    b200 = step_extras.expand(settings["engine"], settings["model"], "nvfp4", 1, 2, arch="sm_100")
    assert b200["run"]["per_moe_layer"] != x["run"]["per_moe_layer"]
    bare = step_extras.expand(settings["engine"], settings["model"], "nvfp4", 1, 2)
    assert bare["run"]["per_moe_layer"] == 0.0 and bare["run"]["per_layer"] == 8.0
    # In bf16 the activation quantisations listed only for fp8 and nvfp4 do not run.
    bf16 = step_extras.expand(settings["engine"], settings["model"], "bf16", 1, 2, arch="sm_90")
    assert bf16["run"]["per_layer"] == 4.0 and bf16["layers"][0] == {"quant": 5, "copy": 2}


def test_a_listed_fraction_runs_as_its_nearest_whole_total():
    vllm = compose(["engine=vllm"])
    x = step_extras.expand(vllm["engine"], vllm["model"], "nvfp4", 1, 2)
    assert x["listed"]["per_layer"] == 11.5
    per_layer = [
        sum(layer.values()) - extra
        for layer, extra in zip(x["layers"], (2, 7, 7), strict=True)  # less dense / MoE extras
    ]
    assert sum(per_layer) == 35  # 34.5 over the step's 3 layers, halves up
    assert x["run"]["per_layer"] == pytest.approx(35 / 3)
    assert x["label"] == "engine-faithful (vllm 0.34.0 kernel list)"


def test_an_engine_without_a_list_is_refused():
    settings = compose([])
    unread = dict(settings["engine"], name="other", families={})
    with pytest.raises(ValueError, match="lists no kernels"):
        step_extras.expand(unread, settings["model"], "nvfp4", 1, 2)


def _cell(settings: dict, kernel_list: str) -> dict:
    bench = dict(settings["bench"], step_kernel_list=kernel_list)
    return {
        "layout": {"layout": "tp1-pp1-ep1", "tp": 1, "pp": 1, "ep": 1, "world": 1},
        "model": settings["model"],
        "batches": [1, 8, 32],
        "bench": bench,
        "engine": settings["engine"],
        "weight_dtype": settings["deployment"]["weight_dtype"],
    }


def test_on_the_cpu_the_engine_rows_say_why_they_were_not_run(settings):
    run_spec, skipped = layout_stage.step_spec(_cell(settings, "engine"), cuda=False)
    assert run_spec["step"]["kernel_lists"] == ["lean"]
    engine_rows = [r for r in skipped if r.get("kernel_list") == SGLANG]
    assert [r["batch"] for r in engine_rows] == [1, 8, 32]
    assert all(r["status"] == "skipped" and "GPU only" in r["reason"] for r in engine_rows)
    assert engine_rows[0]["extra_per_layer"] == 8.0
    # The lean step still runs (its batches over the CPU cap skipped, as before).
    assert run_spec["step"]["batches"] == [1, 8]


def test_on_a_gpu_the_engine_list_runs_beside_the_lean_step(settings):
    run_spec, skipped = layout_stage.step_spec(_cell(settings, "engine"), cuda=True)
    step = run_spec["step"]
    assert step["kernel_lists"] == ["lean", "engine"] and not skipped
    assert step["engine_list"]["label"] == SGLANG
    assert len(step["engine_list"]["layers"]) == step["dense_layers"] + step["moe_layers"]
    lean_spec, _ = layout_stage.step_spec(_cell(settings, "lean"), cuda=True)
    assert lean_spec["step"]["kernel_lists"] == ["lean"] and "engine_list" not in lean_spec["step"]
    # An engine with no list: its rows are skipped with the reason, the lean step runs.
    unread = dict(settings["engine"], name="other", families={})
    trt = dict(_cell(settings, "engine"), engine=unread)
    trt_spec, trt_skipped = layout_stage.step_spec(trt, cuda=True)
    assert trt_spec["step"]["kernel_lists"] == ["lean"]
    assert {r["status"] for r in trt_skipped} == {"skipped"}
    assert all("lists no kernels" in r["reason"] for r in trt_skipped)


def test_the_lean_setting_leaves_the_steps_rerun_key_as_it_was():
    from tilesweep.pipeline import Sweep

    lean = json.loads(Sweep(["device=cpu"], None).layout_step_cell("tp8-pp1-ep1"))
    assert "step_kernel_list" not in lean["bench"] and "engine" not in lean
    engine = json.loads(
        Sweep(["device=cpu", "bench.step_kernel_list=engine"], None).layout_step_cell("tp8-pp1-ep1")
    )
    assert engine["bench"]["step_kernel_list"] == "engine"
    assert engine["engine"]["name"] == "sglang" and engine["weight_dtype"] == "nvfp4"


def _result(launches: dict, micro: list[int]) -> dict:
    """Return one batch's result as step_timing.run_batch returns it on the CPU."""
    return {
        "batch": sum(micro),
        "micro_batches": micro,
        "launches": launches,
        "whole_ms": [2.0, 1.0, 3.0],
        "eager_ms": [2.0, 1.0, 3.0],
        "timing": "eager",
        "parts": [{"attn_proj": 0.5}],
        "finite": True,
        "step_kernels": "torch ops",
    }


def _on_hopper(monkeypatch) -> None:
    """Make the GPU at hand an sm_90 one, for the list's arch-bound entries (no GPU needed)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))


def _spec(settings: dict, monkeypatch) -> dict:
    _on_hopper(monkeypatch)
    run_spec, _ = layout_stage.step_spec(_cell(settings, "engine"), cuda=True)
    run_spec["step"]["batches"] = [4]
    return run_spec


def test_rows_name_their_kernel_list_and_count_kernels_per_layer(settings, monkeypatch):
    spec = _spec(settings, monkeypatch)
    lean = {"embedding": 1, "attn_proj": 30, "expert_gemms": 12, "lm_head": 3, "unnamed": 2}
    engine = dict(lean, engine_extra=8 + 3 + 2 * (8 + 5), engine_extra_step=8)
    ranks = [{"batches": [_result(lean, [4])], "engine_batches": [_result(engine, [4])]}]
    rows = whole_step.step_rows(ranks, spec, "tp1-pp1-ep1")
    assert [r["kernel_list"] for r in rows] == ["lean", SGLANG]
    assert rows[0]["kernels_per_layer"] == pytest.approx(42 / 3)  # outside: embedding, head
    assert rows[1]["kernels_per_layer"] == pytest.approx((42 + 37) / 3)
    assert rows[0]["extra_per_layer"] == 0.0 and rows[1]["extra_per_moe_layer"] == 5.0
    assert "sglang 0.5.23 kernel list's extra kernels" in rows[1]["measured_label"]
    assert "extra kernels" not in rows[0]["measured_label"]
    # A failed engine list: its rows are failures with the reason; the lean rows stand.
    ranks[0] = {"batches": ranks[0]["batches"], "engine_error": "RuntimeError: boom"}
    rows = whole_step.step_rows(ranks, spec, "tp1-pp1-ep1")
    assert rows[0]["status"] == "ok" and rows[1]["status"] == "runtime"
    assert rows[1]["reason"] == "RuntimeError: boom" and rows[1]["kernel_list"] == SGLANG


def _kept_steps(layouts=("tp1-pp1-ep1",), batches=(1, 8)) -> pd.DataFrame:
    steps = pd.read_csv(KEPT_STEPS)
    return steps[steps["layout"].isin(layouts) & steps["batch"].isin(batches)]


def _as_engine(lean: pd.DataFrame) -> pd.DataFrame:
    """Return the rows relabelled as an engine list's that ran SGLang's GLM-5 extras."""
    extras = {"extra_per_layer": 9.0, "extra_per_moe_layer": 7.0, "extra_per_dense_layer": 3.0,
              "extra_per_step": 8.0}  # fmt: skip
    return lean.assign(kernel_list=SGLANG, **extras)


def _check(steps: pd.DataFrame, settings: dict) -> tuple[pd.DataFrame, dict]:
    with open(FIT) as f:
        fit = json.load(f)
    hw = calibration.device_hardware(fit["ceilings"], fit["device"], None)
    here = calibration.Here(_model(settings), hw, fit["device"])
    return calibration.step_check(steps, here, fit=fit), fit


@pytest.mark.parametrize("layout", ["tp1-pp1-ep1", "tp2-pp1-ep1"], ids=["tp1", "emulated-tp2"])
def test_the_check_composes_an_engine_row_with_the_kernels_it_ran(settings, layout):
    lean = _kept_steps((layout,)).assign(kernel_list="lean")
    check, fit = _check(pd.concat([lean, _as_engine(lean)], ignore_index=True), settings)
    assert sorted(set(check["kernel_list"])) == sorted({"lean", SGLANG})
    cost_ms = small_kernel_us(fit)[0] * 1e-3
    # 1 dense + 2 MoE layers: 9 x 3 + 7 x 2 + 3 x 1 per layer, 8 per step.
    kernels = 9 * 3 + 7 * 2 + 3 + 8
    for batch in (1, 8):
        at = check[check["batch"] == batch].set_index("kernel_list")
        extra = at.loc[SGLANG, "composed_ms"] - at.loc["lean", "composed_ms"]
        assert extra == pytest.approx(kernels * cost_ms, rel=1e-9)
        assert SGLANG in at.loc[SGLANG, "composed_label"]
        assert "extra kernels as run" in at.loc[SGLANG, "composed_label"]
        assert at.loc[SGLANG, "held_out"]


def test_a_row_without_a_kernel_list_is_lean_and_only_lean_rows_are_fitted(settings):
    kept = _kept_steps(batches=(1, 8192))
    assert engine_profile.as_run(kept.iloc[0].to_dict()) is None
    with open(FIT) as f:
        fit = json.load(f)
    hw = calibration.device_hardware(fit["ceilings"], fit["device"], None)
    here = calibration.Here(_model(settings), hw, fit["device"], fit["per_kernel_us"])
    assert calibration.step_fit(kept, here) is not None
    assert calibration.step_fit(_as_engine(kept), here) is None  # an engine list never fits


@pytest.mark.slow
def test_the_quantisation_stand_in_scales_each_group_under_the_interpreter():
    code = """
import json, torch
from tilesweep.kernels.token_group_quant import token_group_quant
x = torch.randn(3, 300, generator=torch.Generator().manual_seed(0))
q, s = token_group_quant(torch, x, group=128, out_dtype=torch.float32)
g = torch.nn.functional.pad(x, (0, 84)).view(3, 3, 128)
want_s = g.abs().amax(-1) / torch.finfo(torch.float8_e4m3fn).max
want_q = (g / want_s[..., None]).reshape(3, -1)[:, :300]
print(json.dumps({"s": float((s - want_s).abs().max()), "q": float((q - want_q).abs().max()),
                  "qmax": float(q.abs().amax(-1).min())}))
"""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    err = json.loads(run.stdout.strip().splitlines()[-1])
    assert err["s"] < 1e-7 and err["q"] < 1e-3
    assert err["qmax"] == pytest.approx(448.0)  # each group's largest value hits fp8's largest


@pytest.mark.slow
def test_the_engine_extras_launch_inside_the_step_under_the_interpreter():
    """The step's own launch count with the engine's list: every copy stand-in counted in its
    part, the lean step's kernels untouched; the quantisation stand-ins run in the step too
    (their launches are counted on a GPU only: the interpreter runs torch ops for a kernel)."""
    code = """
import json, torch
from test_whole_step import MLA, spec
from tilesweep.measure import process_group
from tilesweep.measure.step import graph_timing as step_timing
from tilesweep.measure.step.clock import PartClock
from tilesweep.measure.step.rank import StepRank
from tilesweep.measure.step.shapes import micro_batches
one = spec({"tp": 1, "pp": 1, "ep": 1}, MLA, batches=(4,))
copies = {"layers": [{"quant": 0, "copy": 1}, {"quant": 0, "copy": 3}, {"quant": 0, "copy": 3}],
          "step": {"quant": 0, "copy": 2}}
quants = {"layers": [{"quant": 2, "copy": 0}] * 3, "step": {"quant": 1, "copy": 0}}
torch.distributed.init_process_group(
    "gloo", init_method=f"tcp://127.0.0.1:{process_group.free_port()}", rank=0, world_size=1)
me = StepRank(torch, torch.distributed, 0, one, False)
mbs = [me.micro_batch(n) for n in micro_batches(4, me.layout)]
lean, slot = step_timing.count_launches(me, mbs, 0)
me.step_spec["engine_list"] = copies
me.use_kernel_list("engine")
engine, slot = step_timing.count_launches(me, mbs, slot)
me.step_spec["engine_list"] = quants
me.use_kernel_list("engine")
clock = PartClock(torch, False)
me.one_step(mbs, slot, clock)
parts = clock.collect()
finite = bool(torch.isfinite(mbs[0]["x"]).all())
torch.distributed.destroy_process_group()
print(json.dumps({"lean": lean, "engine": engine, "parts": sorted(parts), "finite": finite}))
"""
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    lean, engine = got["lean"], got["engine"]
    assert "engine_extra" not in lean
    per_layer = {
        name: step_extras.kernels_per_layer(got[name], 3, 1) for name in ("lean", "engine")
    }
    assert per_layer["engine"] - per_layer["lean"] == pytest.approx(7 / 3)
    assert engine.pop("engine_extra") == 1 + 3 + 3 and engine.pop("engine_extra_step") == 2
    assert engine == lean  # the lean step's own kernels are untouched
    assert {"engine_extra", "engine_extra_step"} <= set(got["parts"]) and got["finite"]


@pytest.mark.gpu
def test_the_quantisation_stand_in_matches_torch_on_a_gpu():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from tilesweep.kernels.token_group_quant import token_group_quant

    x = torch.randn(8, 6144, device="cuda", dtype=torch.bfloat16)
    q, s = token_group_quant(torch, x)
    groups = x.float().view(8, 48, 128)
    want_s = groups.abs().amax(-1) / torch.finfo(torch.float8_e4m3fn).max
    want_q = (groups / want_s[..., None]).clamp(-448, 448).to(torch.float8_e4m3fn)
    assert torch.allclose(s, want_s, rtol=1e-6)
    back, want = q.float().view(8, 48, 128), want_q.float()
    assert ((back - want).abs() <= 0.0625 * want.abs() + 1e-6).all()  # one fp8 step at most


@pytest.mark.gpu
def test_the_engine_list_is_graphed_and_measured_beside_the_lean_step_on_a_gpu(settings):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("the engine's list runs on a GPU only")
    from test_whole_step import MLA, spec

    one = spec({"tp": 1, "pp": 1, "ep": 1}, MLA, batches=(4,))
    one["step"].update(runner="torch_grouped_mm", mode="graph", kernel_lists=["lean", "engine"])
    # The toy widths over GLM-5's settings: the engine's list is chosen by the model, validated
    # whole (as the pipeline's spec carries it).
    tiny = {**settings["model"], **one["model"], "name": "tiny"}
    arch = "sm_{}{}".format(*torch.cuda.get_device_capability())  # as the layout stage reads it
    one["step"]["engine_list"] = step_extras.expand(
        settings["engine"], tiny, "nvfp4", 1, 2, arch=arch
    )
    ranks = whole_step.run_whole_step(one, 1, True, 300)
    rows = whole_step.step_rows(ranks, one, "tp1-pp1-ep1")
    assert [(r["kernel_list"], r["status"]) for r in rows] == [("lean", "ok"), (SGLANG, "ok")]
    assert all(r["timing"] == "cuda-graph" for r in rows)
    # SGLang's GLM-5 nvfp4 list (conf/engine/sglang.yaml, the two never-launched pads dropped):
    # 8 small kernels every layer, 3 more a dense layer, 5 more a MoE layer; 1 dense + 2 MoE here
    extras = 8 * 3 + 3 + 5 * 2
    assert rows[1]["launches_engine_extra"] == extras and rows[1]["launches_engine_extra_step"] == 8
    assert rows[1]["kernels_per_layer"] - rows[0]["kernels_per_layer"] == pytest.approx(extras / 3)


def test_the_check_runs_one_rank_of_a_named_layout_and_refuses_another_name():
    from tilesweep.measure.step import engine_check as check

    _, cell = check.settings_and_cell([], "tp8-pp1-ep1")
    assert json.loads(cell)["layout"]["layout"] == "tp8-pp1-ep1"  # one rank of eight
    with pytest.raises(ValueError, match="tpT-ppP-epE"):
        check.layout_override("tp8")
    assert check.main(["unused", "--layout=8gpus"]) == 2  # refused before anything runs


def test_the_check_composes_for_the_gpu_that_ran_the_step_not_the_fits():
    from tilesweep.config import compose_settings
    from tilesweep.measure.step import engine_check as check

    typed = compose_settings(["engine=sglang", f"deployment.fit_file={FIT}"])
    kept = _kept_steps().assign(kernel_list="lean")
    own = check.composed(kept, typed).set_index("batch")
    h100 = check.composed(kept.assign(device="NVIDIA H100 80GB HBM3"), typed).set_index("batch")
    assert own["composed_for"].str.contains("the fit's own ceilings").all()
    assert h100["composed_for"].str.contains("for h100").all()
    assert h100["composed_label"].str.contains("datasheet on both ends").all()
    assert h100["held_out"].all() and not own["held_out"].all()  # the fit saw no H100 step
    # Memory-bound parts slow by at most the datasheet ratio on the fit's reference (H200's
    # measured copy 4,252 over 4,800 GB/s, then the H100's 3,350); launches cost the same.
    with open(FIT) as f:
        fit = json.load(f)
    bound = 4800 / 3350 * fit["ceilings"]["copy_gbs"] / 4252
    ratio = h100["composed_ms"] / own["composed_ms"]
    assert ((ratio > 1.05) & (ratio <= bound * 1.001)).all(), ratio.to_dict()
    elsewhere = check.composed(kept.assign(device="NVIDIA Unknown GPU"), typed)
    assert elsewhere["gaps"].str.contains("no conf/hardware file").all()
    assert (elsewhere["composed_ms"].to_numpy() == own["composed_ms"].to_numpy()).all()
