"""Planted kernel faults become rows; the rest of the benchmark carries on unaffected."""

from __future__ import annotations

import json

import pytest
import torch

from tilesweep import backends
from tilesweep.config import compose
from tilesweep.grid import canonical
from tilesweep.io import write_text
from tilesweep.stages.decode import bench_decode

CEILINGS = {
    "copy_gbs": 10.0,
    "matmul_tflops": {"bf16": 0.1, "fp32": 0.02, "fp8": None},
    "properties": {},
}


def _spec(kernel: str, timeout: float) -> str:
    settings = compose(
        [
            "experiment=tiny",
            "grid.tokens_per_expert=[1,4]",
            "model.hidden=256",
            "model.moe_intermediate=128",
        ]
    )
    bench = {**settings["bench"], "kernel_timeout_s": timeout}
    return canonical(
        {
            "kernel": {"kernel": kernel},
            "model": settings["model"],
            "tokens_per_expert": settings["grid"]["tokens_per_expert"],
            "bench": bench,
        }
    )


@pytest.fixture(autouse=True)
def planted_faults(monkeypatch):
    """Register the planted-fault backend here and in every child the benchmark spawns."""
    monkeypatch.setenv("TILESWEEP_PLUGINS", "plugins.planted_faults")
    from plugins.planted_faults import PlantedFaults

    backends.register(PlantedFaults)
    yield
    backends.unregister("fault")


@pytest.fixture
def ceilings(tmp_path):
    path = tmp_path / "ceilings.json"
    write_text(path, json.dumps(CEILINGS))
    return str(path)


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU faults; the GPU test is below")
def test_a_crashing_kernel_is_a_crash_row(tmp_path, ceilings):
    frame = bench_decode(_spec("fault-oob", 60), ceilings, str(tmp_path / "oob.csv"))
    assert set(frame["status"]) == {"crash"}
    assert frame["reason"].str.contains("signal 11").all()
    assert (tmp_path / "oob.csv").exists()


@pytest.mark.slow
def test_a_hanging_kernel_is_killed_and_recorded(tmp_path, ceilings):
    frame = bench_decode(_spec("fault-hang", 8), ceilings, str(tmp_path / "hang.csv"))
    assert set(frame["status"]) == {"timeout"}
    assert frame["reason"].str.contains("killed").all()


@pytest.mark.slow
def test_benchmarks_after_a_fault_are_unaffected(tmp_path, ceilings):
    bench_decode(_spec("fault-oob", 60), ceilings, str(tmp_path / "oob.csv"))
    frame = bench_decode(_spec("baselines", 120), ceilings, str(tmp_path / "base.csv"))
    from tilesweep.backends.torch_baselines import CUDA_ONLY

    timed = frame[~frame["runner"].isin(CUDA_ONLY)] if not torch.cuda.is_available() else frame
    assert set(timed["status"]) == {"ok"}
    assert (timed["rel_err"] < 2e-2).all()


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_illegal_access_and_hang_then_a_clean_gemm(tmp_path, ceilings):
    oob = bench_decode(_spec("fault-oob", 120), ceilings, str(tmp_path / "oob.csv"))
    assert (oob["status"] != "ok").all()
    assert oob["reason"].str.contains("illegal|crash|signal|exit", case=False).all()
    hang = bench_decode(_spec("fault-hang", 20), ceilings, str(tmp_path / "hang.csv"))
    assert set(hang["status"]) == {"timeout"}
    base = bench_decode(_spec("baselines", 300), ceilings, str(tmp_path / "base.csv"))
    assert set(base["status"]) == {"ok"}
    json.dumps(base.to_dict("records"), default=str)
