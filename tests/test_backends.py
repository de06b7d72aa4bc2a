"""The backend registry: a toy backend plugs in with no edits elsewhere; runner names resolve."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tilesweep import backends, grid
from tilesweep.backends import Backend, Builder, DecodeRunner, Runner, kernel_cell, register
from tilesweep.config import compose, compose_settings
from tilesweep.errors import LaunchError
from tilesweep.io import write_text
from tilesweep.pipeline import Sweep
from tilesweep.settings import RootSettings, Section, Tile, check


class ToySettings(Section):
    """backend.toy: on or off."""

    enabled: bool


class ToyBuilder(Builder):
    """One cell per tile, built per kernel."""

    def cells(self, settings, arch, cc):
        return [
            kernel_cell("toy", arch, "bf16", tile, 1, 1, "default") for tile in settings.grid.tiles
        ]

    def kernel_tail(self, cell):
        return "toy"


class ToyDecode(DecodeRunner):
    """One decode job, two runners that fail in two ways."""

    runner_prefix = "toy"

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


class ToyBackend(Backend):
    """A backend the package has never heard of: a builder and a decode runner, nothing else."""

    name = "toy"
    settings_model = ToySettings
    builder = ToyBuilder()
    decoder = ToyDecode()


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


def _typed(settings: dict) -> RootSettings:
    """Return a composed config changed by hand as the typed settings the grid takes."""
    return RootSettings.model_validate(settings)


def test_every_shipped_backend_is_registered_and_named_by_a_config_file():
    names = {b.name for b in backends.registered()}
    assert {"triton", "cutlass", "torch"} <= names
    settings = compose()
    assert set(settings["backend"]) == {b.name for b in backends.registered() if b.settings_model}


def test_a_toy_backend_appears_in_cells_slugs_and_decode_jobs(toy, tmp_path):
    settings = _with_toy(compose(["experiment=tiny"]))
    builds = grid.build_cells(_typed(settings))
    mine = builds[builds["backend"] == "toy"]
    # one cell per tile and architecture of the tiny grid (sm_90 and sm_120)
    assert len(mine) == 2 * len(settings["grid"]["tiles"])
    assert mine["kernel"].str.endswith("-toy-default").all()
    assert set(grid.bench_kernels(_typed(settings), builds)["backend"]) == {"triton", "toy"}


def test_sweep_paths_follow_the_backend_not_its_name(toy, monkeypatch):
    monkeypatch.setattr(
        "tilesweep.pipeline.compose_settings",
        lambda overrides, conf_dir: RootSettings.model_validate(_with_toy(compose(overrides))),
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


@pytest.mark.slow  # each runner in its own worker process
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
    write_text(
        ceilings, json.dumps({"copy_gbs": 1.0, "matmul_tflops": {"bf16": 0.1}, "properties": {}})
    )
    frame = bench_decode(spec, str(ceilings), str(tmp_path / "toy.csv"))
    status = frame.groupby("runner")["status"].agg(set).to_dict()
    assert status == {"toy:refused": {"launch"}, "toy:shared-msg": {"runtime"}}
    refused = frame[frame["runner"] == "toy:refused"]
    assert refused["reason"].str.contains("1 byte over the limit").all()


def test_attach_measured_launch_asks_the_backend_which_rows_ran_the_kernel():
    from tilesweep.stages.tables import attach_measured_launch

    catalog = compose_settings().catalog
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


def test_cutlass_rows_match_only_auto_stage_default_epilogue_tiles_of_the_same_schedule():
    cutlass = backends.get("cutlass").decoder
    decode = pd.DataFrame(
        [{"runner": "cutlass:128x128x128", "dtype": "fp8", "schedule": "cooperative"},
         {"runner": "cutlass:64x128x128", "dtype": "fp8", "schedule": "pingpong"}]
    )  # fmt: skip
    row = {"tile_m": 128, "tile_n": 128, "tile_k": 128, "dtype": "fp8", "status": "ok",
           "stages_requested": "auto", "epilogue": "default", "arch": "sm_90",
           "schedule": "cooperative"}  # fmt: skip
    assert len(cutlass.measured_rows(row, decode)) == 1
    assert cutlass.measured_rows({**row, "stages_requested": 4}, decode) is None
    assert cutlass.measured_rows({**row, "epilogue": "finalize"}, decode).empty
    # the 64-row tile was timed with the ping-pong schedule: its pingpong launch row matches
    small = {**row, "tile_m": 64, "schedule": "pingpong"}
    assert list(cutlass.measured_rows(small, decode)["schedule"]) == ["pingpong"]
    assert cutlass.measured_rows({**small, "schedule": "cooperative"}, decode).empty
    # a launch row from before the schedule column gets it from the one function
    assert len(cutlass.measured_rows({**small, "schedule": float("nan")}, decode)) == 1


def test_one_function_gives_the_cutlass_schedule_to_the_accounting_and_the_decode_job():
    from tilesweep.backends import cutlass_gpu
    from tilesweep.cutlass import cell_spec, source

    assert cell_spec.kernel_schedule("sm_90", 64) == "pingpong"
    assert cell_spec.kernel_schedule("sm_90", 128) == "cooperative"
    assert cell_spec.kernel_schedule("sm_90", 256) == "cooperative"
    assert cell_spec.kernel_schedule("sm_120", 64) == "cooperative"
    assert cell_spec.kernel_schedule("sm_100", 128) == "1sm"
    # the accounting compiles the schedule the function gives ...
    raw = dict(arch="sm_90", dtype="fp8", tile_m=64, tile_n=128, tile_k=128)
    cell, bad = cell_spec.normalize(raw)
    assert bad is None and cell["schedule"] == "pingpong"
    body = source.cell_body(cell, "c0")
    assert "KernelPtrArrayTmaWarpSpecializedPingpong" in body
    assert "epilogue::PtrArrayTmaWarpSpecializedPingpong" in body
    assert "Cooperative" not in body
    big, _ = cell_spec.normalize({**raw, "tile_m": 128})
    assert big["schedule"] == "cooperative"
    assert "KernelPtrArrayTmaWarpSpecializedCooperative" in source.cell_body(big, "c0")
    _, bad = cell_spec.normalize({**raw, "schedule": "stream-k"})
    assert bad == "unknown schedule 'stream-k' for sm_90 (known: cooperative, pingpong)"
    # ... and the decode job asks the SM90 program for each tile with that same schedule
    requests, records = cutlass_gpu.tile_requests(["64x128x128", "128x256x128_s5", "odd"])
    assert requests == ["64x128x128@pingpong", "128x256x128_s5@cooperative"]
    assert [r["status"] for r in records] == ["constraint"]


def test_the_sm90_program_is_asked_for_the_accounted_schedule(tmp_path):
    import stat
    import sys

    from tilesweep.backends import cutlass_gpu

    exe = tmp_path / "fake_program"
    exe.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        "if sys.argv[1:] == ['--list']:\n"
        "    print('64x128x128'); print('128x128x128'); sys.exit(0)\n"
        "tiles = next(a for a in sys.argv if a.startswith('--tile=')).split('=', 1)[1]\n"
        "for t in tiles.split(','):\n"
        "    name, schedule = t.split('@')\n"
        "    print(json.dumps({'tile': name, 'schedule': schedule, 'tokens': 1, 'groups': 1,\n"
        "                      'error': 'fake', 'status': 'runtime'}))\n"
    )
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    rows = [cutlass_gpu.to_row(r) for r in cutlass_gpu.run(exe, 64, 64, 1, [1], 1, timeout=60)]
    assert {r["runner"]: r["schedule"] for r in rows} == {
        "cutlass:64x128x128": "pingpong",
        "cutlass:128x128x128": "cooperative",
    }


def test_the_fp8_baseline_is_listed_beside_the_bf16_ones_and_skipped_on_a_cpu(monkeypatch):
    import torch

    torch_backend = backends.get("torch").decoder
    assert backends.backend_of("torch_scaled_grouped_mm").name == "torch"
    assert not backends.step_capable("torch_scaled_grouped_mm")  # the step runs bf16
    jobs = {"baselines": {"bf16"}, "baselines-fp8": {"fp8"}}  # one job per operand type
    assert set(torch_backend.decode_jobs({}, None, ())) == set(jobs)
    for job, dtypes in jobs.items():
        assert {r.dtype for r in torch_backend.runners({"kernel": job}, False)} == dtypes
        assert torch_backend.row_dtypes({"kernel": job}) == dtypes
    runners = {r.name: r for r in torch_backend.runners({}, False)}
    scaled = runners["torch_scaled_grouped_mm"]
    assert (scaled.dtype, scaled.out_dtype) == ("fp8", "bf16")
    assert scaled.skip == "torch._scaled_grouped_mm runs on CUDA devices only (sm_90 or newer)"
    assert runners["torch_bmm"].skip is None and runners["torch_bmm"].dtype == "bf16"
    # a torch without the op: a labelled skip even on a GPU, never an error
    monkeypatch.delattr(torch, "_scaled_grouped_mm", raising=False)
    scaled = next(r for r in torch_backend.runners({}, True) if r.name == scaled.name)
    assert scaled.skip.startswith("torch._scaled_grouped_mm is not in this torch build")
    # and an older GPU than SM90 is a labelled skip too
    monkeypatch.setattr(torch, "_scaled_grouped_mm", lambda *a, **k: None, raising=False)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (8, 0))
    scaled = next(r for r in torch_backend.runners({}, True) if r.name == scaled.name)
    assert scaled.skip == "torch._scaled_grouped_mm needs sm_90 or newer; this device is sm_80"


@pytest.mark.slow  # each runner in its own worker process
@pytest.mark.skipif(
    __import__("torch").cuda.is_available(), reason="the CPU's rows; a GPU times it for real"
)
def test_the_baselines_job_records_the_fp8_baseline_as_unsupported_on_a_cpu(tmp_path):
    from tilesweep.stages.decode import bench_decode

    settings = compose(["experiment=tiny", "grid.tokens_per_expert=[1]"])
    ceilings = tmp_path / "ceilings.json"
    write_text(
        ceilings, json.dumps({"copy_gbs": 1.0, "matmul_tflops": {"bf16": 0.1}, "properties": {}})
    )
    frames = {}
    for job in ("baselines", "baselines-fp8"):
        spec = grid.canonical(
            {
                "kernel": {"kernel": job},
                "model": {**settings["model"], "hidden": 128, "moe_intermediate": 64},
                "tokens_per_expert": [1],
                "bench": {**settings["bench"], "routing": ["uniform"]},
            }
        )
        frames[job] = bench_decode(spec, str(ceilings), str(tmp_path / f"{job}.csv"))
    scaled = frames["baselines-fp8"]
    assert set(scaled["runner"]) == {"torch_scaled_grouped_mm"}
    assert len(scaled) == 2  # gate_up and down
    assert set(scaled["status"]) == {"unsupported"} and set(scaled["dtype"]) == {"fp8"}
    assert scaled["reason"].str.contains("CUDA devices only").all()
    bf16 = frames["baselines"]
    assert set(bf16["dtype"]) == {"bf16"}
    assert set(bf16[bf16["runner"] == "torch_matmul"]["status"]) == {"ok"}


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
    cell = kernel_cell("triton", "sm_90", "bf16", Tile(m=16, n=64, k=64), 2, 4, "default")
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
    from tilesweep.stages.tables import launch_table

    write_text(tmp_path / "l2.json", json.dumps({**row, "toolchain": "triton 0.0-as-built"}))
    table = launch_table([str(tmp_path / "l2.json")])
    assert table["toolchain"].iloc[0] == "triton 0.0-as-built"


def test_a_record_without_status_is_a_labelled_failure():
    from tilesweep.stages.launch import launch_row

    hw = compose()["catalog"]["h200"]
    cell = kernel_cell("triton", "sm_90", "bf16", Tile(m=16, n=64, k=64), 2, 4, "default")
    row = launch_row({**cell, "target": "h200", "kernel": "k"}, hw, {"smem_bytes": None})
    assert (row["status"], row["reason"]) == ("compile", "the build record carries no status")


def test_canonical_toy_cell_json_roundtrips():
    cell = kernel_cell("toy", "sm_90", "bf16", Tile(m=16, n=64, k=64), 1, 1, "default")
    assert json.loads(grid.canonical(cell)) == cell


def test_a_backends_own_model_checks_its_section(toy):
    from tilesweep.config import validate
    from tilesweep.errors import ConfigError

    settings = _with_toy(compose(["experiment=tiny"]))
    validate(settings)
    settings["backend"]["toy"]["colour"] = "red"
    with pytest.raises(ConfigError, match=r"^backend\.toy\.colour: unknown key; allowed: enabled$"):
        validate(settings)


def test_the_root_holds_each_section_as_its_backends_model_read_by_attribute(toy):
    from tilesweep.errors import ConfigError

    settings = _typed(_with_toy(compose(["experiment=tiny"])))
    assert type(settings.backend.toy) is ToySettings and settings.backend.toy.enabled
    assert settings.backend.section("toy") is settings.backend.toy
    for b in backends.registered():
        assert type(settings.backend.section(b.name)) is b.settings_model
    # The rules' JSON params write each section as it was given, and read it back the same.
    plain = settings.as_dict()
    assert plain["backend"]["toy"] == {"enabled": True}
    assert RootSettings.from_json(json.dumps(plain)).as_dict() == plain
    backends.unregister("toy")  # its section's model goes with it
    with pytest.raises(ConfigError, match=r"^backend\.toy: unknown backend; allowed: triton, "):
        check(RootSettings, plain)


def test_a_section_model_says_whether_its_backend_is_on():
    class Colourless(Section):
        colour: str

    class Shy(Backend):
        name = "shy"
        settings_model = Colourless

    with pytest.raises(ValueError, match="backend.shy: its model Colourless has no `enabled`"):
        register(Shy)
    assert "shy" not in [b.name for b in backends.registered()]


def test_a_new_architecture_is_its_hardware_file():
    """Triton builds every architecture a hardware file declares from cc 80 on; CUTLASS covers
    those whose types cutlass.cell_spec declares, and says so for the others."""
    from tilesweep.backends import cutlass_backend
    from tilesweep.cutlass import cell_spec

    assert tuple(cell_spec.ARCHS) == cutlass_backend.ARCHS
    settings = compose()
    h200 = settings["catalog"]["h200"]
    settings["catalog"]["next"] = {**h200, "name": "next", "arch": "sm_110", "cc": 110}
    settings["catalog"]["old"] = {**h200, "name": "old", "arch": "sm_75", "cc": 75}
    settings["grid"]["targets"] = ["next", "old"]
    builds = grid.build_cells(_typed(settings))
    why = builds.get("unsupported", pd.Series(index=builds.index, dtype=object))
    triton = builds["backend"] == "triton"
    new, old = builds["arch"] == "sm_110", builds["arch"] == "sm_75"
    assert why[triton & new & (builds["dtype"] != "nvfp4")].isna().all()  # built
    assert why[triton & old].str.contains("needs cc 80 or newer").all()
    assert why[(builds["backend"] == "cutlass") & new].str.contains("sm_90, sm_100, sm_120").all()
