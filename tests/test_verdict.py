"""The verdict names the deployment: composed for the target the config names, labelled with
what each part came from, and checked against measured whole steps on the device at hand."""

from __future__ import annotations

import pandas as pd
import pytest

from tilesweep import deployment_fit, deployment_verdict
from tilesweep.columns import CHECK_COLUMNS, VERDICT_COLUMNS
from tilesweep.config import compose_settings
from tilesweep.plan import row_inputs
from tilesweep.settings import ModelSettings

H200_HERE = {
    "device": "NVIDIA H200",
    "device_kind": "cuda",
    "catalog_name": "h200",
    "copy_gbs": 4200.0,
    "matmul_tflops": {"bf16": 800.0, "fp8": 1400.0},
    "launch": {"graph_us": 1.1, "fixed_us": 5.0, "eager_us": 8.0},
    "datasheet": {"copy_gbs": 4800, "matmul_tflops": {"bf16": 989, "fp8": 1979}},
}
CPU_HERE = {"device": "cpu (x86_64, 2 threads)", "device_kind": "cpu", "copy_gbs": 12.0,
            "matmul_tflops": {"bf16": 0.3}}  # fmt: skip


@pytest.fixture(scope="module")
def brief():
    """Return the default settings: the brief's GLM-5 NVFP4 deployment on RTX PRO 6000."""
    return compose_settings([])


def whole_step_rows(model: ModelSettings, layouts=("tp1-pp1-ep1", "tp2-pp1-ep1"), batches=(32, 64)):
    """Return measured whole-step rows (as stages/layout writes them), TP1 twice as slow as
    its roofline part by part, and TP2 measured at 0.9x TP1."""
    rows = []
    for layout in layouts:
        tp = int(layout[2])
        for batch in batches:
            base = 10.0 + batch / 32
            parts = {
                "attn_proj": 0.8, "attn_out": 0.3, "attn_index": 0.5, "attn_core": 0.4,
                "dense_mlp": 0.3, "shared_expert": 0.1, "router": 0.1, "expert_gemms": 6.0,
                "norms": 0.2, "embedding": 0.02, "lm_head": 0.6,
            }  # fmt: skip
            row = {
                "layout": layout, "tp": tp, "pp": 1, "ep": 1, "batch": batch, "status": "ok",
                "reason": "", "step_ms": base * (0.9 if tp > 1 else 1.0), "step_p10_ms": base,
                "step_p90_ms": base, "context_len": 1024, "dense_layers_run": 1,
                "moe_layers_run": 2, "routed_experts_run": model.routed_experts,
                "top_k_run": model.top_k, "vocab_run": model.vocab,
                "measured_label": "measured (1 dense + 2 MoE layers per stage)",
                "device": "NVIDIA H200", "timing": "cuda-graph", "emulated": False,
                "sequences_run": batch,
            }  # fmt: skip
            row.update({f"part_{k}_ms": v for k, v in parts.items()})
            row.update({f"launches_{k}": 4 for k in parts})
            rows.append(row)
    return pd.DataFrame(rows)


def test_a_cpu_at_hand_without_a_shipped_fit_leaves_the_target_at_its_roofline():
    bare = compose_settings(["deployment.fit_file="])
    table = deployment_verdict.deployment_table(
        bare, pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), CPU_HERE
    )
    assert list(table.columns) == VERDICT_COLUMNS
    assert set(table["hardware"]) == {"rtx_pro_6000"}  # the target, not the machine at hand
    assert set(table["source"]) == {"model"}
    assert row_inputs.column_words(table).str.contains("no whole step timed in CUDA graphs").all()
    assert len(table) == len(bare.grid.layouts) * len(bare.deployment.batches)


def test_a_cpu_at_hand_composes_with_the_shipped_fit_and_says_so(brief):
    table = deployment_verdict.deployment_table(
        brief, pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), CPU_HERE
    )
    fits = table[table["fits_memory"] == "yes"]
    assert not fits.empty and set(fits["source"]) == {"composed"}
    assert (
        row_inputs.column_words(fits).str.contains("shipped as docs/examples/h200/fit.json").all()
    )
    assert row_inputs.column_words(fits).str.contains("launch-aware fit on NVIDIA H200").all()


def test_an_eager_step_never_calibrates_a_verdict(brief):
    steps = whole_step_rows(brief.model).assign(timing="eager")
    bare = compose_settings(["deployment.fit_file="])
    table = deployment_verdict.deployment_table(
        bare, pd.DataFrame(), pd.DataFrame(), steps, H200_HERE
    )
    assert set(table["source"]) == {"model"}


def test_gpu_fit_makes_composed_rows_and_says_from_where(brief):
    steps = whole_step_rows(brief.model)
    table = deployment_verdict.deployment_table(
        brief, pd.DataFrame(), pd.DataFrame(), steps, H200_HERE
    )
    fits = table[table["fits_memory"] == "yes"]
    assert not fits.empty and set(fits["source"]) == {"composed"}
    assert row_inputs.column_words(fits).str.contains("launch-aware fit on NVIDIA H200").all()
    assert row_inputs.column_words(fits).str.contains(r"at batches \[32, 64\]").all()
    # nvfp4 experts on SM120 take the target's own cited band, never the H200's bf16 figure.
    assert row_inputs.column_words(fits).str.contains("grouped_gemm_efficiency").all()
    assert (fits["tpot_low_ms"] <= fits["tpot_ms"]).all()
    assert (fits["tpot_ms"] <= fits["tpot_high_ms"]).all()
    assert not row_inputs.column_words(fits).str.contains("the bf16 step's efficiency").any()
    roof = deployment_verdict.deployment_table(
        compose_settings(["deployment.fit_file="]),
        pd.DataFrame(),
        pd.DataFrame(),
        pd.DataFrame(),
        CPU_HERE,
    )
    slower = fits.merge(roof, on=["layout", "batch"], suffixes=("", "_roof"))
    assert (slower["tpot_ms"] > slower["tpot_ms_roof"]).all()  # launches and efficiencies: slower
    assert (slower["other_ms"] > 0).all()  # the launches are `other`


def test_quantised_experts_take_the_best_fp8_kernel_fraction(brief):
    steps = whole_step_rows(brief.model)
    decode = pd.DataFrame(
        [
            {"runner": r, "status": "ok", "dtype": "fp8", "routing": "uniform", "op": "gate_up",
             "tokens_per_expert": t, "time_ms": ms, "frac_roofline": f}
            for r, t, ms, f in (("triton:a", 1, 0.2, 0.5), ("triton:b", 1, 0.1, 0.8),
                                ("triton:b", 16, 0.1, 0.7))
        ]
    )  # fmt: skip
    fp8 = compose_settings(["deployment=fp8_all"])  # no cited fp8 band on the target: the kernel's
    table = deployment_verdict.deployment_table(fp8, decode, pd.DataFrame(), steps, H200_HERE)
    one = table[(table["batch"] == 1) & (table["fits_memory"] == "yes")]
    # 0.8 of the measured copy bandwidth (4,200 GB/s) is 0.70 of the datasheet's 4,800.
    assert (
        row_inputs.column_words(one)
        .str.contains(r"best fp8 kernel triton:b at t=1 \(of the datasheet\), e_bw 0.70")
        .all()
    )


def test_measured_interconnect_is_used_only_on_the_target(brief):
    collective = pd.DataFrame(
        [
            {
                "collective": "all_reduce",
                "group": 2,
                "bytes": b,
                "time_ms": ms,
                "status": "ok",
                "backend": "nccl",
                "timing": "cuda-graph",
            }  # fmt: skip
            for b, ms in ((4096, 0.02), (1 << 20, 0.03), (1 << 26, 0.4))
        ]
    )
    elsewhere = deployment_verdict.deployment_table(
        brief, pd.DataFrame(), collective, pd.DataFrame(), H200_HERE
    )
    assert (
        row_inputs.column_words(elsewhere).str.contains("pcie5/").all()
    )  # the RTX PRO 6000's own model
    h200 = compose_settings(["hardware=h200"])
    here = deployment_verdict.deployment_table(
        h200, pd.DataFrame(), collective, pd.DataFrame(), H200_HERE
    )
    assert (
        row_inputs.column_words(here)
        .str.contains("fitted on the collectives measured on NVIDIA H200")
        .all()
    )
    # gloo ranks on the host CPU (a one-GPU machine) say nothing of the GPUs' interconnect.
    on_cpu = collective.assign(backend="gloo")
    again = deployment_verdict.deployment_table(
        h200, pd.DataFrame(), on_cpu, pd.DataFrame(), H200_HERE
    )
    assert (
        row_inputs.column_words(again)
        .str.contains("interconnect: nvlink4/nvswitch; interconnect from: hardware")
        .all()
    )


def test_check_compares_the_same_reduced_model_and_holds_out_all_but_tp1(brief):
    model = brief.model
    steps = whole_step_rows(model)
    collective = pd.DataFrame(
        [
            {
                "collective": "all_reduce",
                "group": 2,
                "bytes": b,
                "time_ms": ms,
                "status": "ok",
                "backend": "nccl",
                "timing": "cuda-graph",
            }  # fmt: skip
            for b, ms in ((4096, 0.02), (1 << 20, 0.03), (1 << 26, 0.4))
        ]
    )
    check = deployment_fit.check_table(steps, collective, H200_HERE, model)
    assert list(check.columns) == CHECK_COLUMNS
    tp1 = check[check["layout"] == "tp1-pp1-ep1"]
    assert not tp1["held_out"].any() and check[check["layout"] != "tp1-pp1-ep1"]["held_out"].all()
    assert (check["calibrated_on"] == "tp1-pp1-ep1 at batches [32, 64] (cuda-graph)").all()
    # Fitted on TP1's parts, each given its share of the whole step's time (the parts here sum
    # to 9.32 ms, the steps took 11 and 12): TP1's own composition lands near the whole step.
    whole = steps[steps["layout"] == "tp1-pp1-ep1"]["step_ms"]
    assert tp1["composed_ms"].to_numpy() == pytest.approx(whole.to_numpy(), rel=0.1)
    # TP2 adds its all-reduces, never below the measured floor of 0.02 ms each.
    tp2 = check[check["layout"] == "tp2-pp1-ep1"].set_index("batch")
    assert (tp2["composed_ms"] > 0).all() and tp2["gaps"].eq("").all()
    tp1_at = tp1.set_index("batch")["composed_ms"]
    assert (tp2["composed_ms"] > tp1_at / 2 + 2 * 3 * 0.02).all()  # half the compute + all-reduces


def test_the_fit_is_made_on_the_batches_asked_for_and_never_on_another(brief):
    model = brief.model
    steps = whole_step_rows(model, batches=(8, 32, 64))
    check = deployment_fit.check_table(steps, pd.DataFrame(), H200_HERE, model, [32])
    assert (check["calibrated_on"] == "tp1-pp1-ep1 at batches [32] (cuda-graph)").all()
    fitted = check[~check["held_out"]]
    assert list(zip(fitted["layout"], fitted["batch"], strict=True)) == [("tp1-pp1-ep1", 32)]
    # A batch never measured is not replaced by a neighbour: no fit, a labelled gap.
    none = deployment_fit.check_table(steps, pd.DataFrame(), H200_HERE, model, [16])
    assert none["composed_ms"].isna().all()
    assert none["gaps"].str.contains("no TP1 cuda-graph whole step").all()


def roofline(settings) -> pd.DataFrame:
    """Return the composed deployment at the roofline, a CPU at hand."""
    return deployment_verdict.deployment_table(
        settings, pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), CPU_HERE
    )


def test_the_question_panel_is_there_only_for_the_question(brief):
    # The tiny grid has no 8-GPU layout: the panel adds them.
    tiny = compose_settings(["experiment=tiny"])
    panel = deployment_verdict.question_panel(tiny, roofline)
    assert panel is not None and set(panel["rows"]["world"]) == {8}
    assert set(panel["rows"]["layout"]) == {"tp8-pp1-ep1", "tp4-pp2-ep1", "tp1-pp1-ep8"}
    assert sorted(panel["winners"]["batch"]) == sorted(brief.deployment.batches)
    for other in ("model=deepseek_v3", "hardware=h200", "question=none"):
        assert deployment_verdict.question_panel(compose_settings([other]), roofline) is None


def test_a_question_about_another_deployment_gets_its_own_panel():
    # The question is data: asked about DeepSeek-V3 on four H200, the panel follows it.
    settings = compose_settings(
        [
            "model=deepseek_v3",
            "hardware=h200",
            "question.model=deepseek_v3",
            "question.hardware=h200",
            "question.gpus=4",
            "question.layouts=[{tp:4,pp:1,ep:1},{tp:1,pp:1,ep:4}]",
        ]
    )
    panel = deployment_verdict.question_panel(settings, roofline)
    assert panel is not None and set(panel["rows"]["world"]) == {4}
    assert {"tp4-pp1-ep1", "tp1-pp1-ep4"} <= set(panel["rows"]["layout"])
