"""On a real GPU: the Triton grouped GEMM is right against an fp32 reference, and a kernel built,
launch-checked and benchmarked here finds its launch row with the same shared memory, total to
total. Skipped without CUDA. Needs no Hydra: the hardware files are read as plain YAML."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from tilesweep.backends import kernel_cell
from tilesweep.device import catalog_name
from tilesweep.grid import canonical, kernel_slug
from tilesweep.io import write_text
from tilesweep.settings import HardwareSpec, ModelSettings, Tile

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
CONF = Path(__file__).resolve().parents[1] / "conf"
MODEL = {
    "name": "toy",
    "hidden": 512,
    "moe_intermediate": 256,
    "routed_experts": 8,
    "top_k": 2,
    "shared_experts": 0,
    "moe_layers": 1,
}


def _catalog() -> dict[str, HardwareSpec]:
    return {
        p.stem: HardwareSpec.model_validate(yaml.safe_load(p.read_text()))
        for p in (CONF / "hardware").glob("*.yaml")
    }


def _model() -> dict:
    """Return a whole model (a decode job validates its cell's): glm5's, toy-sized (MODEL)."""
    return {**yaml.safe_load((CONF / "model" / "glm5.yaml").read_text()), **MODEL}


def _bench() -> dict:
    bench = yaml.safe_load((CONF / "bench" / "default.yaml").read_text())
    return {**bench, "routing": ["uniform"], "repeats": 3, "warmup": 1, "gpu_experts": 4}


def _here() -> tuple[str, int]:
    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}", major * 10 + minor


def _kernel(dtype: str, m: int, n: int, k: int, stages: int = 2, epilogue: str = "default"):
    arch, _ = _here()
    cell = kernel_cell("triton", arch, dtype, Tile(m=m, n=n, k=k), stages, 4, epilogue)
    return {**cell, "kernel": kernel_slug(cell)}


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
@pytest.mark.parametrize("tile", [(16, 64, 64), (64, 128, 64)])
@pytest.mark.parametrize("op", ["gate_up", "down"])
def test_triton_grouped_gemm_matches_the_fp32_reference(dtype, tile, op):
    from tilesweep.measure.gemm_case import (
        TOLERANCE,
        make_problem,
        reference,
        rel_error,
        triton_runner,
    )
    from tilesweep.plan.expert_shapes import expert_ops

    if dtype == "fp8" and _here()[1] < 89:
        pytest.skip("fp8 needs sm_89 or newer")
    n, k = expert_ops(ModelSettings.model_validate(_model()))[op]
    counts = [1, 5, 0, 17]  # uneven, one empty expert, one spanning two M tiles of 16
    kernel = _kernel(dtype, *tile)
    gen = torch.Generator(device="cuda").manual_seed(0)
    problem = make_problem(counts, n, k, dtype, torch.bfloat16, "cuda", gen)
    call = triton_runner(kernel, counts)
    out = call(problem)
    torch.cuda.synchronize()
    err = rel_error(out, reference(problem, dtype))
    assert err <= TOLERANCE[dtype], err
    # the launch reports its shared memory as a total: dynamic + the driver's static figure + the
    # driver's per-block reservation (1 KiB on sm_80 and newer)
    launched = call.launched
    assert launched["smem_runtime_bytes"] == (
        launched["smem_runtime_dynamic_bytes"]
        + launched["smem_runtime_static_bytes"]
        + launched["smem_runtime_reserved_bytes"]
    ), launched
    assert launched["smem_runtime_reserved_bytes"] >= 0, launched


@pytest.mark.parametrize("op", ["gate_up", "down"])
def test_the_scaled_grouped_mm_baseline_matches_the_fp32_reference(op):
    from tilesweep.backends.torch_baselines import baseline_runner, skip_reason
    from tilesweep.measure.gemm_case import TOLERANCE, make_problem, reference, rel_error
    from tilesweep.plan.expert_shapes import expert_ops

    why = skip_reason("torch_scaled_grouped_mm", True)
    if why is not None:
        pytest.skip(why)
    n, k = expert_ops(ModelSettings.model_validate(_model()))[op]
    counts = [1, 5, 0, 17]  # uneven, with one empty expert
    gen = torch.Generator(device="cuda").manual_seed(0)
    problem = make_problem(counts, n, k, "fp8", torch.bfloat16, "cuda", gen)
    out = baseline_runner("torch_scaled_grouped_mm", counts, "fp8")(problem)
    torch.cuda.synchronize()
    err = rel_error(out, reference(problem, "fp8"))
    assert err <= TOLERANCE["fp8"], err


@pytest.mark.slow
def test_attach_measured_launch_finds_the_kernel_run_here(tmp_path):
    from tilesweep.io import concat_tables
    from tilesweep.stages.build import build_kernel
    from tilesweep.stages.decode import bench_decode
    from tilesweep.stages.launch import check_launch
    from tilesweep.stages.tables import attach_measured_launch, launch_table

    catalog = _catalog()
    target = catalog_name(torch.cuda.get_device_name(0), catalog)
    if target is None:
        pytest.skip(f"no conf/hardware file lists {torch.cuda.get_device_name(0)!r}")
    kernel = _kernel("bf16", 16, 64, 64)
    cell = {k: v for k, v in kernel.items() if k != "kernel"}
    build_path = tmp_path / "build" / "build.json"
    build = build_kernel(canonical(cell), str(build_path))
    assert build["status"] == "ok", build
    spec = canonical({"cell": {**kernel, "target": target}, "hardware": catalog[target]})
    check_launch(spec, str(build_path), str(tmp_path / "launch.json"))

    ceilings = tmp_path / "ceilings.json"
    write_text(
        ceilings,
        json.dumps({"copy_gbs": 1000.0, "matmul_tflops": {"bf16": 100.0}, "properties": {}}),
    )
    bench_spec = canonical(
        {"kernel": kernel, "model": _model(), "tokens_per_expert": [1, 16], "bench": _bench()}
    )
    decode_path = tmp_path / "decode.csv"
    frame = bench_decode(bench_spec, str(ceilings), str(decode_path))
    assert set(frame["status"]) == {"ok"}, frame[["status", "reason"]].to_dict("records")

    launch = launch_table([str(tmp_path / "launch.json")])
    out = attach_measured_launch(launch, concat_tables([str(decode_path)]), catalog)
    row = out.iloc[0]
    assert row["measured_launch"] == "launched"
    assert int(row["measured_smem_bytes"]) == int(row["smem_bytes"]), json.dumps(
        {k: str(row[k]) for k in ("smem_bytes", "smem_dynamic_bytes", "smem_static_bytes")}
    )


def test_the_small_kernel_and_host_loop_probes_measure_on_the_gpu():
    from tilesweep.measure.ceilings import launch_us

    got = launch_us(True, 5)
    # A small decode kernel does a DRAM round trip an empty one does not: never cheaper, and
    # far from the GEMV's fixed cost of tens of microseconds.
    assert got["graph_us"] * 0.8 <= got["small_us"] < 50
    loop = got["host_loop"]
    assert loop["host_us"] >= 0 and loop["loop_us"] >= loop["graph_us"] * 0.9
