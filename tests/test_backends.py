"""The backend registry: a toy backend plugs in with no edits elsewhere; runner names resolve."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tilesweep import backends, grid
from tilesweep.backends import Backend, Runner, kernel_cell, register
from tilesweep.config import compose
from tilesweep.errors import LaunchError
from tilesweep.io import write_json
from tilesweep.pipeline import Sweep


class ToyBackend(Backend):
    """A backend the package has never heard of: one cell per tile, one decode job, two runners."""

    name = "toy"
    build_per = "kernel"
    runner_prefix = "toy"
    schema = {"enabled": bool}

    def cells(self, settings, arch, cc):
        return [
            kernel_cell(self.name, arch, "bf16", tile, 1, 1, "default")
            for tile in settings["grid"]["tiles"]
        ]

    def kernel_tail(self, cell):
        return "toy"

    def decode_jobs(self, settings, kernels, gpus):
        return ["toy-job"]

    def owns_job(self, kernel):
        return kernel.get("kernel") == "toy-job"

    def runners(self, kernel, cuda):
        return [Runner("toy:refused", "bf16", "bf16"), Runner("toy:shared-msg", "bf16", "bf16")]

    def make_runner(self, runner, kernel, counts, dtype, cuda):
        def call(problem):
            if runner == "toy:refused":
                raise LaunchError("toy launcher: 1 byte over the limit")
            # A message that names shared memory is still a runtime error: no guessing from text.
            raise RuntimeError("out of resource: shared memory")

        return call


@pytest.fixture
def toy():
    register(ToyBackend)
    try:
        yield backends.get("toy")
    finally:
        backends.unregister("toy")


def _with_toy(settings: dict) -> dict:
    settings["backend"]["toy"] = {"enabled": True}
    return settings


def test_every_shipped_backend_is_registered_and_named_by_a_config_file():
    names = {b.name for b in backends.registered()}
    assert {"triton", "cutlass", "torch"} <= names
    settings = compose()
    assert set(settings["backend"]) == {b.name for b in backends.registered() if b.schema}


def test_a_toy_backend_appears_in_cells_slugs_and_decode_jobs(toy, tmp_path):
    settings = _with_toy(compose(["experiment=tiny"]))
    builds = grid.build_cells(settings)
    mine = builds[builds["backend"] == "toy"]
    # one cell per tile and architecture of the tiny grid (sm_90 and sm_120)
    assert len(mine) == 2 * len(settings["grid"]["tiles"])
    assert mine["kernel"].str.endswith("-toy-default").all()
    assert set(grid.bench_kernels(settings, builds)["backend"]) == {"triton", "toy"}


def test_sweep_paths_follow_the_backend_not_its_name(toy, monkeypatch):
    monkeypatch.setattr(
        "tilesweep.pipeline.compose", lambda overrides, conf_dir: _with_toy(compose(overrides))
    )
    sweep = Sweep(["experiment=tiny"], None)
    assert any(p.endswith("decode/toy-job.csv") for p in sweep.decode_outputs())
    row = next(r for r in sweep.launches.to_dict("records") if r["backend"] == "toy")
    assert sweep.build_record("toy", row["target"], row["kernel"]).endswith(
        f"build/toy/{row['arch']}/{row['kernel']}/build.json"
    )


def test_runner_names_resolve_to_their_backend():
    assert backends.backend_of("triton:bf16-m16n64k64-s2-w4-default").name == "triton"
    assert backends.runner_kernel("triton:bf16-m16n64k64-s2-w4-default") == (
        "bf16-m16n64k64-s2-w4-default"
    )
    assert backends.backend_of("cutlass:128x128x128").name == "cutlass"
    assert backends.runner_kernel("cutlass:128x128x128") == "128x128x128"
    assert backends.backend_of("torch_bmm").name == "torch"
    assert backends.runner_kernel("torch_bmm") is None
    assert backends.step_capable("torch_matmul")
    assert backends.step_capable("triton:bf16-m16n64k64-s2-w4-default")
    assert not backends.step_capable("torch_bmm")  # caches its padded input
    assert not backends.step_capable("cutlass:128x128x128")


@pytest.mark.parametrize("runner", ["cublas", "triton:", "torch_einsum", "cutlass128"])
def test_unknown_runner_names_raise(runner):
    with pytest.raises(ValueError, match="unknown runner"):
        backends.backend_of(runner)
    assert not backends.step_capable(runner)


def test_unknown_backend_raises_naming_the_registered_ones():
    with pytest.raises(KeyError, match="registered: .*triton"):
        backends.get("cublas")


def test_unknown_backend_section_is_a_config_error():
    from tilesweep.errors import ConfigError

    with pytest.raises(ConfigError, match="backend.cublas: unknown backend"):
        compose(["+backend.cublas.enabled=true"])


def test_toy_runners_become_rows_with_the_status_their_launcher_raised(toy, tmp_path):
    from tilesweep.stages.decode import bench_decode

    settings = compose(["experiment=tiny", "grid.tokens_per_expert=[1]"])
    spec = grid.canonical(
        {
            "kernel": {"kernel": "toy-job"},
            "model": {**settings["model"], "hidden": 128, "moe_intermediate": 64},
            "tokens_per_expert": [1],
            "bench": settings["bench"],
        }
    )
    ceilings = tmp_path / "ceilings.json"
    write_json(ceilings, {"copy_gbs": 1.0, "matmul_tflops": {"bf16": 0.1}, "properties": {}})
    frame = bench_decode(spec, str(ceilings), str(tmp_path / "toy.csv"))
    status = frame.groupby("runner")["status"].agg(set).to_dict()
    assert status == {"toy:refused": {"launch"}, "toy:shared-msg": {"runtime"}}
    refused = frame[frame["runner"] == "toy:refused"]
    assert refused["reason"].str.contains("1 byte over the limit").all()


def test_attach_measured_launch_asks_the_backend_which_rows_ran_the_kernel():
    from tilesweep.stages.aggregate import attach_measured_launch

    catalog = compose()["catalog"]
    launch = pd.DataFrame(
        [
            {"backend": "triton", "target": "h200", "kernel": "k1", "smem_bytes": 50176,
             "status": "ok", "stages_requested": 3, "epilogue": "default"},
            {"backend": "triton", "target": "rtx_pro_6000", "kernel": "k1", "smem_bytes": 33792,
             "status": "ok", "stages_requested": 3, "epilogue": "default"},
        ]
    )  # fmt: skip
    decode = pd.DataFrame(
        [
            {"runner": "triton:k1", "device": "NVIDIA H200", "status": "ok",
             "smem_runtime_bytes": 50176, "reason": ""},
            {"runner": "torch_bmm", "device": "NVIDIA H200", "status": "ok",
             "smem_runtime_bytes": None, "reason": ""},
        ]
    )  # fmt: skip
    out = attach_measured_launch(launch, decode, catalog)
    h200 = out[out["target"] == "h200"].iloc[0]
    assert h200["measured_launch"] == "launched"
    assert h200["measured_smem_bytes"] == h200["smem_bytes"]
    assert out[out["target"] == "rtx_pro_6000"]["measured_launch"].isna().all()


def test_cutlass_rows_match_only_auto_stage_default_epilogue_tiles():
    cutlass = backends.get("cutlass")
    decode = pd.DataFrame(
        [{"runner": "cutlass:128x128x128", "dtype": "fp8"}, {"runner": "cutlass:64x128x128",
                                                              "dtype": "fp8"}]
    )  # fmt: skip
    row = {"tile_m": 128, "tile_n": 128, "tile_k": 128, "dtype": "fp8", "status": "ok",
           "stages_requested": "auto", "epilogue": "default"}  # fmt: skip
    assert len(cutlass.measured_rows(row, decode)) == 1
    assert cutlass.measured_rows({**row, "stages_requested": 4}, decode) is None
    assert cutlass.measured_rows({**row, "epilogue": "finalize"}, decode).empty


def test_build_records_carry_their_own_provenance(tmp_path, monkeypatch):
    from tilesweep.provenance import HOST_DEVICE
    from tilesweep.stages import build, launch

    monkeypatch.setattr(
        "tilesweep.backends.triton_backend.build",
        lambda cell, out_dir, timeout=600.0: {"status": "ok", "reason": "", "smem_bytes": 4096,
                                              "smem_dynamic_bytes": 3072,
                                              "smem_static_bytes": 1024, "num_warps": 4,
                                              "regs": 32},
    )  # fmt: skip
    cell = kernel_cell("triton", "sm_90", "bf16", {"m": 16, "n": 64, "k": 64}, 2, 4, "default")
    cell["kernel"] = grid.kernel_slug(cell)
    record = build.build_kernel(grid.canonical(cell), str(tmp_path / "b" / "build.json"))
    assert record["device"] == HOST_DEVICE
    assert record["toolchain"].startswith("triton ")
    assert record["commit"]
    hw = compose()["catalog"]["h200"]
    spec = grid.canonical({"cell": {**cell, "target": "h200"}, "hardware": hw})
    row = launch.check_launch(spec, str(tmp_path / "b" / "build.json"), str(tmp_path / "l.json"))
    assert (row["device"], row["toolchain"]) == (record["device"], record["toolchain"])
    assert (row["smem_dynamic_bytes"], row["smem_static_bytes"], row["smem_bytes"]) == (
        3072,
        1024,
        4096,
    )
    # the aggregate keeps what the record says; it does not stamp its own time's provenance
    from tilesweep.stages.aggregate import launch_table

    write_json(tmp_path / "l2.json", {**row, "toolchain": "triton 0.0-as-built"})
    table = launch_table([str(tmp_path / "l2.json")])
    assert table["toolchain"].iloc[0] == "triton 0.0-as-built"


def test_a_record_without_status_is_a_labelled_failure():
    from tilesweep.stages.launch import launch_row

    hw = compose()["catalog"]["h200"]
    cell = kernel_cell("triton", "sm_90", "bf16", {"m": 16, "n": 64, "k": 64}, 2, 4, "default")
    row = launch_row({**cell, "target": "h200", "kernel": "k"}, hw, {"smem_bytes": None})
    assert (row["status"], row["reason"]) == ("compile", "the build record carries no status")


def test_canonical_toy_cell_json_roundtrips():
    cell = kernel_cell("toy", "sm_90", "bf16", {"m": 16, "n": 64, "k": 64}, 1, 1, "default")
    assert json.loads(grid.canonical(cell)) == cell
