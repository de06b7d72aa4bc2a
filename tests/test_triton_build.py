"""Real Triton ahead-of-time builds for GPUs this machine does not have."""

from __future__ import annotations

import pytest

from tilesweep.backends import triton_backend


def _cell(arch: str, **kw) -> dict:
    cell = {
        "backend": "triton",
        "arch": arch,
        "dtype": "bf16",
        "tile_m": 64,
        "tile_n": 64,
        "tile_k": 64,
        "stages": 3,
        "warps": 4,
        "epilogue": "default",
    }
    return {**cell, **kw}


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_90", "sm_120"])
def test_build_records_compiler_numbers(tmp_path, arch):
    record = triton_backend.build(_cell(arch), tmp_path)
    assert record["status"] == "ok", record
    assert record["smem_bytes"] >= record["smem_dynamic_bytes"] > 0
    assert 0 < record["regs"] <= 255
    assert record["num_warps"] == 4
    assert (tmp_path / "kernel.cubin").stat().st_size > 0


@pytest.mark.slow
def test_more_stages_need_more_shared_memory(tmp_path):
    two = triton_backend.build(_cell("sm_90", stages=2), tmp_path / "a")
    four = triton_backend.build(_cell("sm_90", stages=4), tmp_path / "b")
    assert four["smem_bytes"] > two["smem_bytes"]


@pytest.mark.slow
def test_fp8_build_for_hopper(tmp_path):
    record = triton_backend.build(_cell("sm_90", dtype="fp8", tile_k=128), tmp_path)
    assert record["status"] == "ok", record


def test_unsupported_cell_is_a_row_not_a_crash(tmp_path):
    record = triton_backend.build(_cell("sm_80", unsupported="fp8 needs sm_89"), tmp_path)
    assert record == {"status": "unsupported", "reason": "fp8 needs sm_89"}


@pytest.mark.slow
def test_compile_failure_is_a_row(tmp_path):
    # A 4-warp program cannot hold a 512x512 fp32 accumulator: the compiler refuses or fails.
    record = triton_backend.build(
        _cell("sm_90", tile_m=512, tile_n=512, tile_k=512, stages=1), tmp_path, timeout=120
    )
    assert record["status"] in {"ok", "compile", "timeout"}
    if record["status"] != "ok":
        assert record["reason"]
