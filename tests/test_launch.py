"""Launch-check arithmetic and the brief's hand estimate."""

from __future__ import annotations

import pytest

from tilesweep.config import compose
from tilesweep.plan import occupancy as launch
from tilesweep.plan.smem_estimate import hand_estimate

CATALOG = compose()["catalog"]


@pytest.mark.parametrize(
    ("tile", "default_kb", "finalize_kb"),
    [
        ((128, 128, 128), 50, 82),
        ((128, 128, 256), 68, 100),
        ((128, 256, 128), 91, 155),
        ((256, 128, 128), 91, 155),
    ],
)
def test_hand_estimate_reproduces_the_briefs_table(tile, default_kb, finalize_kb):
    m, n, k = tile
    assert hand_estimate("nvfp4", m, n, k, "auto", "default") // 1024 == default_kb
    assert hand_estimate("nvfp4", m, n, k, "auto", "finalize") // 1024 == finalize_kb


def test_overshoot_reason_names_bytes_limit_and_target():
    result = launch.check(147_456, 0, 384, CATALOG["rtx_pro_6000"])
    assert result["fits"] == "no"
    assert result["status"] == "launch"
    assert result["overshoot_bytes"] == 46_080
    assert result["reason"] == (
        "needs 147,456 B > 101,376 B opt-in limit on rtx_pro_6000, over by 46,080 B"
    )


def test_same_kernel_fits_h200_after_opt_in():
    result = launch.check(147_456, 0, 384, CATALOG["h200"])
    assert result["fits"] == "optin"
    assert result["blocks_per_sm_smem"] == 233_472 // (147_456 + 1024)
    assert result["overshoot_bytes"] == 0


def test_small_kernel_fits_by_default_and_occupancy_counts_each_limit():
    hw = CATALOG["h200"]
    result = launch.check(16_384, 128, 128, hw)
    assert result["fits"] == "default"
    assert result["blocks_per_sm_smem"] == 233_472 // (16_384 + 1024)  # 13
    # 128 regs x 32 lanes = 4096 per warp, 4 warps = 16384 per block: 4 blocks by registers
    assert result["blocks_per_sm_regs"] == 4
    assert result["blocks_per_sm"] == 4


def test_register_allocation_rounds_up_per_warp():
    hw = CATALOG["h200"]
    # 100 regs x 32 = 3200, rounded up to 3328 (13 x 256) per warp
    assert launch.blocks_by_registers(100, 256, hw) == 65_536 // (3328 * 8)
    assert launch.blocks_by_registers(0, 256, hw) is None


def test_exactly_at_the_limit_fits():
    hw = CATALOG["rtx_pro_6000"]
    assert launch.check(101_376, 0, 128, hw)["fits"] == "optin"
    assert launch.check(49_152, 0, 128, hw)["fits"] == "default"
    assert launch.check(101_377, 0, 128, hw)["overshoot_bytes"] == 1


def _cutlass_cell(tile_m: int) -> dict:
    """Return an sm_90 CUTLASS fp8 cell on the H200, as the launch check gets it."""
    from tilesweep.backends import kernel_cell
    from tilesweep.settings import Tile

    cell = kernel_cell("cutlass", "sm_90", "fp8", Tile(m=tile_m, n=128, k=128), "auto", 0,
                       "default")  # fmt: skip
    return {**cell, "target": "h200", "kernel": f"fp8-m{tile_m}n128k128-sauto-c1x1-default"}


def test_a_cutlass_launch_row_carries_the_schedule_and_threads_its_build_compiled():
    from tilesweep.stages.launch import launch_row

    build = {"status": "ok", "reason": "", "smem_bytes": 200_000, "threads_per_block": 384,
             "schedule": "pingpong", "source": "cutlass-types"}  # fmt: skip
    row = launch_row(_cutlass_cell(64), CATALOG["h200"], build)
    assert (row["schedule"], row["threads"], row["fits"]) == ("pingpong", 384, "optin")
    # a failed build still says which schedule it tried
    failed = {"status": "compile", "reason": "Cooperative kernel requires ...",
              "schedule": "cooperative"}  # fmt: skip
    assert launch_row(_cutlass_cell(64), CATALOG["h200"], failed)["schedule"] == "cooperative"
    # a record without its threads per block is a labelled row, not a guess
    row = launch_row(_cutlass_cell(64), CATALOG["h200"], {**build, "threads_per_block": None})
    assert (row["status"], row["reason"]) == (
        "compile",
        "the CUTLASS build record carries no threads_per_block",
    )


def test_the_schedule_is_a_declared_launch_column():
    from tilesweep.columns import LAUNCH_COLUMNS

    assert LAUNCH_COLUMNS.index("schedule") == LAUNCH_COLUMNS.index("epilogue") + 1
