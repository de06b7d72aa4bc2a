"""Tests for CUTLASS shared-memory accounting from CUTLASS's own types (host-only nvcc)."""

from __future__ import annotations

import pytest

from tilesweep.cutlass import accounting, cell_spec, toolchain

NEEDS_TOOLS = pytest.mark.skipif(
    toolchain.find_nvcc() is None or toolchain.cutlass_include_dir() is None,
    reason="needs nvcc and the nvidia-cutlass headers",
)


def sm120(tile_m: int, tile_n: int, tile_k: int = 128, **extra) -> dict:
    """Return an SM120 NVFP4 cell with the given tile."""
    return dict(arch="sm_120", dtype="nvfp4", tile_m=tile_m, tile_n=tile_n, tile_k=tile_k, **extra)


CELLS = [
    sm120(128, 128),
    sm120(128, 256),
    sm120(128, 128, cluster_m=2),  # SM120 has no multicast: the builder must reject a 2x1 cluster
    sm120(128, 256, epilogue="finalize", stages=3),  # the brief's failure (backend_settings)
    sm120(128, 256, epilogue="finalize"),  # the same with StageCountAutoCarveout
]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """Return a work dir shared by the compile tests so that the cache test can reuse it."""
    return tmp_path_factory.mktemp("cutlass_smem")


@pytest.fixture(scope="module")
def compiled(workdir):
    """Return rows for CELLS, compiled for real in one TU that must be split on the bad cell."""
    return accounting.account(CELLS, workdir, jobs=1)


@pytest.mark.slow
@NEEDS_TOOLS
def test_sm120_cells_compile_and_are_consistent(compiled):
    small, big = compiled[0], compiled[1]
    for row in (small, big):
        assert row["status"] == "ok", row["reason"]
        assert row["smem_bytes"] > 0 and row["stages"] >= 1
        assert row["smem_bytes"] >= row["mainloop_smem_bytes"] + row["epilogue_smem_bytes"]
        assert row["alignment_a"] == row["alignment_b"] == 32
        assert row["builder_smem_capacity"] == 101_376
        assert row["cutlass_version"].count(".") == 2 and row["toolchain"]
        assert row["schedule"] == "cooperative"
        assert "Sm120" in row["schedule_types"]["mainloop"]
        assert row["threads_per_block"] == 384
        assert row["cached"] is False
    assert big["smem_bytes"] > small["smem_bytes"]
    per_stage = [r["mainloop_smem_bytes"] // r["stages"] for r in (small, big)]
    # NVFP4 A+B data at half a byte per element plus one ue4m3 scale per 16 elements.
    assert per_stage[0] == (128 * 128 + 128 * 128) // 2 + (128 * 128 + 128 * 128) // 16
    assert per_stage[1] > per_stage[0]


@pytest.mark.slow
@NEEDS_TOOLS
def test_builder_rejection_is_a_row(compiled):
    row = compiled[2]
    assert row["status"] == "compile"
    assert row["reason"] and "\n" not in row["reason"]
    assert "multicast" in row["reason"]
    assert row["smem_bytes"] is None


@pytest.mark.slow
@NEEDS_TOOLS
def test_three_stages_beside_the_finalize_epilogue_overflow_sm120_where_auto_fits(compiled):
    # The brief's initialize failure: 128x256x128 with FP32 finalize staging and a fixed
    # three-stage mainloop needs more than SM120's 101,376 B; the auto carveout picks fewer stages.
    fixed, auto = compiled[3], compiled[4]
    assert fixed["status"] == auto["status"] == "ok", (fixed["reason"], auto["reason"])
    assert fixed["stages"] == 3 and auto["stages"] < 3
    assert fixed["fits"] is False and auto["fits"] is True
    assert fixed["smem_bytes"] > fixed["builder_smem_capacity"] >= auto["smem_bytes"]
    assert fixed["epilogue_smem_bytes"] == auto["epilogue_smem_bytes"]  # the same FP32 staging
    per_stage = auto["mainloop_smem_bytes"] // auto["stages"]
    assert fixed["mainloop_smem_bytes"] == 3 * per_stage


@pytest.mark.slow
@NEEDS_TOOLS
def test_kernel_body_static_assert_is_caught(tmp_path):
    # The SM90 cooperative kernel's M >= 128 check sits in the kernel body: only the device pass
    # sees it, so the types alone would call this tile fine. (kernel_schedule gives a 64-row tile
    # the ping-pong schedule; the cell names the cooperative one to reach the check.)
    cell = dict(arch="sm_90", dtype="fp8", tile_m=64, tile_n=128, tile_k=128)
    cell["schedule"] = "cooperative"
    (row,) = accounting.account([cell], tmp_path)
    assert row["status"] == "compile"
    assert row["schedule"] == "cooperative"
    assert "Cooperative kernel requires" in row["reason"]
    assert row["error_location"].startswith("sm90_gemm_array_tma_warpspecialized_cooperative")


@pytest.mark.slow
@NEEDS_TOOLS
def test_a_64_row_sm90_tile_compiles_as_pingpong_and_fits_the_h200(tmp_path):
    # The tile the SM90 program times with the ping-pong schedule: accounted with that schedule,
    # it passes the kernel body's checks and fits the H200's 232,448 B opt-in limit.
    cell = dict(arch="sm_90", dtype="fp8", tile_m=64, tile_n=128, tile_k=128)
    (row,) = accounting.account([cell], tmp_path)
    assert row["status"] == "ok", row["reason"]
    assert row["schedule"] == "pingpong"
    assert "KernelPtrArrayTmaWarpSpecializedPingpong" in row["schedule_types"]["mainloop"]
    assert row["schedule_types"]["epilogue_requested"] == (
        "cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong"
    )
    assert "Sm90PtrArrayTmaWarpSpecialized" in row["schedule_types"]["epilogue"]
    assert row["threads_per_block"] == 384  # one producer and two consumer warpgroups
    assert row["smem_bytes"] <= 232_448
    # fp8 A (64 x 128) and B (128 x 128) bytes per mainloop stage
    assert row["mainloop_smem_bytes"] // row["stages"] == 64 * 128 + 128 * 128


@pytest.mark.slow
@NEEDS_TOOLS
def test_second_call_reads_cache(compiled, workdir, monkeypatch):
    def no_compile(*args, **kwargs):
        raise AssertionError("compiled although every cell is cached")

    monkeypatch.setattr(accounting, "compile_tu", no_compile)
    again = accounting.account(CELLS, workdir, jobs=1)
    assert [r["cached"] for r in again] == [True] * len(CELLS)
    for first, second in zip(compiled, again, strict=True):
        assert second["status"] == first["status"]
        assert second["smem_bytes"] == first["smem_bytes"]
    assert list(workdir.glob("cache/*.json"))


def test_no_nvcc_means_skipped(tmp_path, monkeypatch):
    monkeypatch.setattr(accounting, "find_nvcc", lambda: None)
    rows = accounting.account([sm120(128, 128), sm120(256, 128, epilogue="finalize")], tmp_path)
    assert [r["status"] for r in rows] == ["skipped", "skipped"]
    assert all(r["reason"] == "no nvcc found" for r in rows)
    assert not (tmp_path / "cache").exists()


def test_bad_input_is_skipped_not_raised(tmp_path, monkeypatch):
    monkeypatch.setattr(accounting, "find_nvcc", lambda: None)
    rows = accounting.account(
        [dict(arch="sm_80", dtype="fp8", tile_m=128, tile_n=128, tile_k=64), sm120(0, 128)],
        tmp_path,
    )
    assert [r["status"] for r in rows] == ["skipped", "skipped"]
    assert "sm_80" in rows[0]["reason"] and "tile_m" in rows[1]["reason"]


def test_an_unknown_schedule_is_skipped_not_raised(tmp_path, monkeypatch):
    monkeypatch.setattr(accounting, "find_nvcc", lambda: None)
    cell = dict(arch="sm_90", dtype="fp8", tile_m=128, tile_n=128, tile_k=128, schedule="x")
    (row,) = accounting.account([cell], tmp_path)
    assert row["status"] == "skipped"
    assert row["reason"] == "unknown schedule 'x' for sm_90 (known: cooperative, pingpong)"
    assert row["schedule_types"] == {}


def test_cache_key_depends_on_cell_and_toolchain():
    a, _ = cell_spec.normalize(sm120(128, 128))
    b, _ = cell_spec.normalize(sm120(128, 128, stages=3))
    key = accounting.cache_key(a, "4.2.0", "nvcc 13.0")
    assert key == accounting.cache_key(dict(a), "4.2.0", "nvcc 13.0")
    assert key != accounting.cache_key(b, "4.2.0", "nvcc 13.0")
    assert key != accounting.cache_key(a, "4.2.0", "nvcc 12.8")


def test_errors_are_attributed_to_cells():
    log = "\n".join(
        [
            '/inc/cutlass/x.inl(96): error: static assertion failed with "Invalid tile."',
            "    static_assert(false);",
            "          detected during:",
            '            instantiation of class "Foo" at line 12 of /tmp/b/tu.cu',
            "",
            "/tmp/b/tu.cu(25): error: incomplete type is not allowed",
            "2 errors detected in the compilation of tu.cu.",
        ]
    )
    blamed = accounting.attribute_errors(log, "tu.cu", [(5, 15), (16, 30)])
    assert blamed == {
        0: ("Invalid tile.", "x.inl:96"),
        1: ("incomplete type is not allowed", "tu.cu:25"),
    }


def test_plan_groups_keeps_arches_apart_and_fills_jobs():
    units = [accounting.Unit(i, {"arch": "sm_90" if i < 3 else "sm_120"}, str(i)) for i in range(7)]
    groups = accounting.plan_groups(units, jobs=2)
    assert all(len({u.cell["arch"] for u in g}) == 1 for g in groups)
    assert sorted(u.index for g in groups for u in g) == list(range(7))
    assert len(groups) >= 2


def test_an_edit_to_a_cpp_template_reruns_the_cutlass_build_jobs(tmp_path, monkeypatch):
    """The templates are not imported, so the module that reads them declares them (DATA_FILES);
    the CUTLASS build jobs hash the build stage and the backend module (Sweep.rule_code)."""
    import shutil

    from tilesweep import rerun_keys
    from tilesweep.cutlass import source

    def build_hash() -> str:
        return rerun_keys.code_hash("stages/build.py", "backends/cutlass_backend.py")

    package = tmp_path / "tilesweep"
    shutil.copytree(rerun_keys.PACKAGE_DIR, package, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(rerun_keys, "PACKAGE_DIR", package)
    before = build_hash()
    for rel in source.DATA_FILES:
        template = package / rel
        text = template.read_text()
        template.write_text(text + "// edited\n")
        assert build_hash() != before, rel
        template.write_text(text)
    assert build_hash() == before
