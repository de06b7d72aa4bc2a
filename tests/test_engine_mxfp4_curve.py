"""MXFP4 experts on Hopper (gpt-oss-120b, vLLM's Marlin w4a16 path) take the engine's own
measured grouped-GEMM curve where its file carries one for the GPU (engine.grouped_gemm_efficiency,
as tools/marlin_moe_curve.py prints it), and fall back, saying so, where it does not. The curve
here is a placeholder made in the test, never a figure of conf/."""

from __future__ import annotations

import pandas as pd
import pytest

from tilesweep import deployment_verdict
from tilesweep.config import compose_settings
from tilesweep.plan import grouped_efficiency
from tilesweep.settings.hardware_spec import EfficiencyCurve

EMPTY = pd.DataFrame()
BASE = ["hardware=h100", "model=gpt_oss_120b", "deployment=mxfp4_experts", "engine=vllm"]
BASE += ["deployment.batches=[4]", "grid.layouts=[{tp:8,pp:1,ep:1}]", "references=none"]
BASE += ["grid.tiles=[{m:16,n:16,k:16}]"]  # the sweep's default tiles do not divide 2880
# A made-up band (0.2-0.3 of the datasheet at 0.125 tokens an expert, sized at TP8's expert).
PLACEHOLDER = EfficiencyCurve.model_validate(
    {
        "points": [
            {
                "tokens_per_expert": 0.125,
                "low": 0.2,
                "low_kernel": "test low",
                "low_expert_mb": 1.652,
                "high": 0.3,
                "high_kernel": "test high",
                "high_expert_mb": 1.652,
                "cite": "test placeholder, not a figure",
            }
        ]
    }
)


def _table(curves: dict) -> pd.DataFrame:
    """Return the verdict rows with the engine file carrying `curves`."""
    settings = compose_settings(BASE)
    engine = settings.engine.model_copy(update={"grouped_gemm_efficiency": curves})
    own = settings.model_copy(update={"engine": engine})
    return deployment_verdict.deployment_table(own, EMPTY, EMPTY, EMPTY, {})


def test_mxfp4_experts_take_the_engines_own_curve_on_its_gpu_only():
    """With an h100 mxfp4 curve the row names engine[vllm]'s band and spans its ends; without
    one (or with one for another GPU) it keeps the bf16 step's efficiency and says so."""
    plain = _table({})
    mine = _table({"h100": {"mxfp4": PLACEHOLDER}})
    elsewhere = _table({"h200": {"mxfp4": PLACEHOLDER}})
    assert "the bf16 step's efficiency applied" in plain["expert_efficiency"].iloc[0]
    words = mine["expert_efficiency"].iloc[0]
    assert "engine[vllm].grouped_gemm_efficiency" in words and "test low" in words
    assert mine["tpot_ms"].iloc[0] != pytest.approx(plain["tpot_ms"].iloc[0])
    assert mine["tpot_low_ms"].iloc[0] < mine["tpot_high_ms"].iloc[0]
    assert elsewhere["tpot_ms"].iloc[0] == pytest.approx(plain["tpot_ms"].iloc[0])


def _sizes_curve() -> EfficiencyCurve:
    """Return a made-up curve of one kernel at two expert sizes (1 and 4 MB)."""
    point = {
        "tokens_per_expert": 0.125,
        "low": 0.2,
        "low_kernel": "small",
        "low_expert_mb": 1.0,
        "high": 0.8,
        "high_kernel": "large",
        "high_expert_mb": 4.0,
        "cite": "test",
    }
    return EfficiencyCurve.model_validate({"ends": "sizes", "points": [point]})


def test_a_curve_of_sizes_reads_between_them_in_log_size_and_holds_past_them():
    """ends: sizes: at 1 MB the small size's e, at 4 MB the large one's, at 2 MB (half-way in
    log size) their geometric mean, held at the nearer size outside; both ends one value."""
    curve = _sizes_curve()
    at = {mb: grouped_efficiency.band_at(curve, 0.125, mb) for mb in (0.5, 1.0, 2.0, 4.0, 9.0)}
    assert at[1.0].low == pytest.approx(0.2) and at[4.0].high == pytest.approx(0.8)
    assert at[2.0].low == pytest.approx(0.4) and at[2.0].high == pytest.approx(0.4)
    assert at[0.5].middle == pytest.approx(0.2) and at[9.0].middle == pytest.approx(0.8)
    assert "read at 2 MB" in at[2.0].low_kernel


def test_a_curve_of_sizes_needs_two_sizes_at_every_point():
    """A point of an `ends: sizes` curve without two different sizes is refused in one line."""
    point = _sizes_curve().points[0].model_dump() | {"high_expert_mb": 1.0}
    with pytest.raises(ValueError, match="two different expert sizes"):
        EfficiencyCurve.model_validate({"ends": "sizes", "points": [point]})


def test_mxfp4_experts_on_a_curve_of_sizes_say_so_and_have_no_band():
    """The row reads e at its layout's expert size, says how, and its band ends coincide."""
    row = _table({"h100": {"mxfp4": _sizes_curve()}})
    assert "read in log expert size between the sizes" in row["expert_efficiency"].iloc[0]
    assert row["tpot_low_ms"].iloc[0] == pytest.approx(row["tpot_high_ms"].iloc[0])
