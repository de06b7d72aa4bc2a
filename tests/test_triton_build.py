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


def _launch(cell: dict, record: dict, target: str) -> dict:
    from tilesweep.config import compose
    from tilesweep.stages.launch import launch_row

    hw = compose()["catalog"][target]
    return launch_row({**cell, "target": target, "kernel": "k"}, hw, record)


# The compiler's numbers (triton 3.x): bf16 operand buffers of (M*K + N*K) * 2 bytes each; sm_90
# keeps `stages` of them, sm_120 `stages - 1`; 1,024 B of static shared memory either way.
@pytest.mark.slow
@pytest.mark.parametrize(
    ("arch", "target", "tile", "stages", "dynamic", "status", "fits"),
    [
        ("sm_90", "h200", (64, 64, 64), 3, 3 * 16384, "ok", "optin"),
        ("sm_120", "rtx_pro_6000", (64, 64, 64), 3, 2 * 16384, "ok", "default"),
        ("sm_90", "h200", (128, 256, 128), 4, 4 * 98304, "launch", "no"),
        ("sm_120", "rtx_pro_6000", (128, 256, 128), 4, 3 * 98304, "launch", "no"),
        ("sm_90", "h200", (256, 256, 256), 1, 262144, "launch", "no"),  # one stage
    ],
)
def test_known_tiles_fit_or_exceed_with_the_compilers_numbers(
    tmp_path, arch, target, tile, stages, dynamic, status, fits
):
    m, n, k = tile
    cell = _cell(arch, tile_m=m, tile_n=n, tile_k=k, stages=stages)
    record = triton_backend.build(cell, tmp_path, timeout=300)
    assert record["status"] == "ok", record  # every one compiles; the launch check decides
    assert record["smem_dynamic_bytes"] == dynamic
    assert record["smem_static_bytes"] == 1024
    assert record["smem_bytes"] == dynamic + 1024
    row = _launch(cell, record, target)
    assert (row["status"], row["fits"]) == (status, fits), row["reason"]
    if status == "launch":
        limit = row["smem_limit_bytes"]
        assert row["overshoot_bytes"] == dynamic + 1024 - limit
        assert f"over by {dynamic + 1024 - limit:,} B" in row["reason"]


def test_missing_cuobjdump_is_a_failure_not_zero_static_memory(tmp_path, monkeypatch):
    monkeypatch.setattr(triton_backend, "_cuobjdump", lambda: None)
    with pytest.raises(RuntimeError, match="static shared memory unknown"):
        triton_backend.resource_usage(tmp_path / "kernel.cubin")
