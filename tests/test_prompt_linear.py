"""The dense GEMMs of a prompt's rows (attention projections, dense MLP, shared experts) at an
engine's cited prompt-size efficiency on a GPU (conf/engine prefill.linear_gemm, plan.prompt_load):
B200's block-FP8 GEMMs as aiconfigurator measured them there; H200 keeps the fit's."""

from __future__ import annotations

import pandas as pd
import pytest

from tilesweep import deployment_verdict
from tilesweep.config import compose_settings
from tilesweep.errors import ConfigError
from tilesweep.plan import row_inputs
from tilesweep.plan.prompt_load import prompt_load
from tilesweep.plan.step_time import StepCase, _at_prompt_size

EMPTY = pd.DataFrame()
DEEPSEEK = [
    "model=deepseek_v3",
    "deployment=fp8_all",
    "deployment.input_len=8192",
    "deployment.output_len=1024",
    "deployment.batches=[32]",
    "grid.layouts=[{tp:8,pp:1,ep:1}]",
]
OFF = "~engine.prefill.linear_gemm"
LINEAR = "+engine.prefill.linear_gemm"


def _row(*overrides: str) -> pd.Series:
    """Return the verdict row of DeepSeek-V3 FP8 TP8 at 32 requests, 8k in / 1k out."""
    settings = compose_settings([*DEEPSEEK, *overrides])
    return deployment_verdict.deployment_table(settings, EMPTY, EMPTY, EMPTY, {}).iloc[0]


@pytest.mark.parametrize("engine", ["sglang", "tensorrtllm"])
def test_a_b200_prompt_gemm_takes_the_engine_files_cited_efficiency(engine):
    settings = compose_settings([f"engine={engine}", "hardware=b200"])
    cited = settings.engine.prefill.linear_gemm["b200"]["fp8"]
    load = prompt_load(settings.engine, settings.hardware, "fp8")
    got = {(dtype, kind): e for dtype, kind, e in load.linear_e_math}
    assert got == {("fp8", kind): c.e_math for kind, c in cited.items()}
    assert set(cited) == {"attention_proj", "dense_gemm", "shared_gemm"}
    assert all("measured by aiconfigurator on B200" in c.cite for c in cited.values())
    experts = settings.engine.prefill.expert_gemm["b200"]["fp8"]
    assert load.expert_e_math == experts.e_math and "measured by aiconfigurator on B200" in (
        experts.cite
    )
    step = StepCase(*(None,) * 5, prompt=load)
    parts = [
        {"kind": "attention_proj", "dtype": "fp8"},
        {"kind": "attention_proj", "dtype": "bf16"},  # an NVFP4 deployment's bf16 attention
        {"kind": "norm", "dtype": "fp32"},
    ]
    fp8, bf16, norm = _at_prompt_size(step, parts)
    assert fp8["e_math"] == cited["attention_proj"].e_math
    assert "e_math" not in bf16 and "e_math" not in norm


@pytest.mark.parametrize("engine", ["sglang", "tensorrtllm"])
def test_the_cited_b200_prompt_gemms_slow_its_prompts_and_are_said(engine):
    cited = _row(f"engine={engine}", "hardware=b200")
    plain = _row(f"engine={engine}", "hardware=b200", OFF)
    assert cited["prefill_ms"] > 1.05 * plain["prefill_ms"] > 0
    assert cited["tpot_ms"] - plain["tpot_ms"] == pytest.approx(
        cited["prefill_ms"] - plain["prefill_ms"]
    )
    assert "dense GEMMs at e_math attention_proj fp8" in row_inputs.row_words(cited)
    assert "dense GEMMs at the fit's e_math (no prompt-size figure" in row_inputs.row_words(plain)


@pytest.mark.parametrize("engine", ["sglang", "tensorrtllm"])
def test_h200_prompts_keep_the_fits_dense_gemms(engine):
    settings = compose_settings([f"engine={engine}", "hardware=h200"])
    load = prompt_load(settings.engine, settings.hardware, "fp8")
    assert load.linear_e_math == ()
    assert load.expert_e_math == {"sglang": 0.231, "tensorrtllm": None}[engine]  # as before
    same = _row(f"engine={engine}", "hardware=h200")
    plain = _row(f"engine={engine}", "hardware=h200", OFF)
    assert same["prefill_ms"] == plain["prefill_ms"] > 0


@pytest.mark.parametrize(
    ("override", "why"),
    [
        (f"{LINEAR}.h999={{fp8:{{attention_proj:{{e_math:0.1,cite:x}}}}}}", "not a GPU"),
        (f"{LINEAR}.h200={{fp8:{{router:{{e_math:0.1,cite:x}}}}}}", "router"),
        (f"{LINEAR}.h200={{fp9:{{dense_gemm:{{e_math:0.1,cite:x}}}}}}", "fp9"),
    ],
)
def test_a_prompt_gemm_figure_nothing_would_read_is_refused(override, why):
    with pytest.raises(ConfigError, match=why):
        compose_settings(["engine=sglang", override])
