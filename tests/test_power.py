"""Power as evidence: the loads' table, its statistics, and the check against the brief's 39%."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tilesweep.columns import POWER_COLUMNS
from tilesweep.measure import power_load
from tilesweep.stages import power

SPEC = json.dumps(
    {
        "bench": {"power_seconds": 1.0, "power_period_s": 0.02},
        "model": {"hidden": 6144, "moe_intermediate": 2048, "routed_experts": 256},
    }
)


def test_quantiles_pick_the_band():
    q = power_load.quantiles([float(v) for v in range(1, 12)])
    assert (q["p10"], q["median"], q["p90"]) == (2.0, 6.0, 10.0)
    assert power_load.quantiles([]) == {"median": None, "p10": None, "p90": None}


def test_sample_row_reads_fractions_of_the_limit():
    class Samples:  # what a PowerSampler holds after a run: (watts, SM MHz, throttle bits)
        limit_w = 600.0
        samples = [(200.0 + 10 * i, 1800, 4 if i == 0 else 0) for i in range(11)]

    row = power_load.sample_row(Samples(), 0.5)
    assert row["power_samples"] == 11 and row["sample_hz"] == 22.0
    assert row["power_w_median"] == 250.0 and row["power_frac_median"] == round(250 / 600, 4)
    assert row["power_frac_p10"] == round(210 / 600, 4)
    assert row["throttled_frac"] == round(1 / 11, 3)


def test_cpu_machine_records_every_load_as_not_measured(tmp_path, monkeypatch):
    monkeypatch.setattr("tilesweep.provenance.gpu_names", lambda: ())
    frame = power.measure_power(SPEC, str(tmp_path / "power.csv"))
    assert list(frame["load"]) == list(power_load.LOADS)
    assert set(frame["status"]) == {"unsupported"}
    assert set(frame["source"]) == {"not measured"}
    assert list(frame.columns[: len(POWER_COLUMNS)]) == POWER_COLUMNS
    assert pd.read_csv(tmp_path / "power.csv")["reason"].str.contains("no NVIDIA GPU").all()


def test_brief_reading_is_judged_against_each_band():
    table = pd.DataFrame(
        [
            {
                "load": "idle",
                "expected_bound": "idle",
                "status": "ok",
                "power_frac_p10": 0.10,
                "power_frac_p90": 0.14,
            },
            {
                "load": "decode_gemm",
                "expected_bound": "memory",
                "status": "ok",
                "power_frac_p10": 0.35,
                "power_frac_p90": 0.45,
            },
            {
                "load": "math_gemm",
                "expected_bound": "math",
                "status": "ok",
                "power_frac_p10": 0.90,
                "power_frac_p90": 0.99,
            },
            {
                "load": "allreduce_small",
                "expected_bound": "communication latency",
                "status": "unsupported",
                "power_frac_p10": None,
                "power_frac_p90": None,
            },
        ]
    )
    judged = power_load.reading_consistency(table, 0.39, "brief")
    assert list(judged.columns) == ["load", "expected_bound", "band", "brief", "consistent"]
    out = judged.set_index("load")["consistent"]
    assert out["decode_gemm"] == "consistent"
    assert out["idle"].startswith("not consistent") and "above" in out["idle"]
    assert out["math_gemm"].startswith("not consistent") and "below" in out["math_gemm"]
    assert "allreduce_small" not in out.index  # not measured: no judgement


@pytest.mark.gpu
def test_loads_on_a_gpu_sample_fast_enough_and_differ():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    model = json.loads(SPEC)["model"]
    rows = {r["load"]: r for r in power_load.single_gpu_loads(model, 1.0, 0.02)}
    for name in ("idle", "decode_gemm", "math_gemm", "launch_loop"):
        assert rows[name]["status"] == "ok"
        assert rows[name]["power_samples"] >= 10 and rows[name]["sample_hz"] >= 10
    assert rows["math_gemm"]["power_w_median"] > rows["idle"]["power_w_median"]
