"""Device names find their hardware file; missing figures are labelled gaps, never a neighbour's
value; a crashed program is a crash; the measured shared memory is a total, like the built one."""

from __future__ import annotations

import shutil
import stat
import sys

import pytest

from tilesweep.config import CONF_DIR, compose_settings
from tilesweep.device import catalog_name


@pytest.fixture(scope="module")
def catalog():
    return compose_settings().catalog


@pytest.mark.parametrize(
    ("device", "name"),
    [
        ("NVIDIA H200", "h200"),
        ("cuda:NVIDIA H200 x2", "h200"),
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "rtx_pro_6000"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx_pro_6000"),
        ("NVIDIA GeForce RTX 5090", "rtx_5090"),
        ("NVIDIA A100-SXM4-80GB", "a100"),
        # parts whose figures differ from every file: no file claims them
        ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", None),
        ("NVIDIA H200 NVL", None),
        ("NVIDIA H100 PCIe", None),
        ("cpu (x86_64, 8 threads)", None),
    ],
)
def test_device_names_find_the_hardware_file(catalog, device, name):
    assert catalog_name(device, catalog) == name


def test_every_hardware_file_names_its_devices(catalog):
    for name, spec in catalog.items():
        assert spec.device_names, name
        for device in spec.device_names:
            assert catalog_name(device, catalog) == name


def test_a_new_hardware_file_needs_no_code(tmp_path):
    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf)
    text = (conf / "hardware" / "h200.yaml").read_text()
    text = text.replace("name: h200", "name: gh200").replace(
        'device_names: ["NVIDIA H200"]', 'device_names: ["NVIDIA GH200 144G HBM3e"]'
    )
    (conf / "hardware" / "gh200.yaml").write_text(text)
    settings = compose_settings(["grid.targets=[gh200]"], conf)
    assert catalog_name("NVIDIA GH200 144G HBM3e", settings.catalog) == "gh200"
    assert settings.catalog["gh200"].arch == "sm_90"


def test_a_missing_fp8_peak_is_a_labelled_gap_not_the_bf16_one():
    from tilesweep.stages.decode import _roof_columns

    ceilings = {
        "copy_gbs": 4000.0,
        "matmul_tflops": {"bf16": 800.0, "fp8": None},
        "matmul_errors": {"fp8": "RuntimeError: no fp8 tensor cores"},
    }
    row = {"flops": 2e9, "bytes": 1e6, "status": "ok", "gbs": 100.0, "tflops": 1.0, "time_ms": 1}
    cols = _roof_columns(row, "fp8", ceilings)
    assert cols["ceiling_matmul_tflops"] is None
    assert "fp8" in cols["roofline_gap"] and "no fp8 tensor cores" in cols["roofline_gap"]
    assert "bound" not in cols  # no fraction either: the columns stay, empty
    assert all(cols.get(k, 0) != cols.get(k, 0) for k in ("frac_matmul_peak", "frac_roofline"))
    assert cols["frac_copy_bw"] == 100.0 / 4000.0
    bf16 = _roof_columns(row, "bf16", ceilings)
    assert bf16["ceiling_matmul_tflops"] == 800.0 and bf16["roofline_gap"] == ""
    assert bf16["bound"] in {"memory", "math"}


def test_a_failed_ceiling_records_its_error(monkeypatch):
    from tilesweep.measure import ceilings

    def boom(*args, **kwargs):
        raise RuntimeError("CUBLAS_STATUS_NOT_SUPPORTED\nmore text")

    monkeypatch.setattr(ceilings, "time_cpu", boom)
    rate, why = ceilings._matmul_tflops(64, "bf16", cuda=False, repeats=1)
    assert rate is None
    assert why == "RuntimeError: CUBLAS_STATUS_NOT_SUPPORTED"
    assert ceilings._matmul_tflops(64, "fp8", cuda=False, repeats=1)[0] is None


def test_l2_comes_from_the_device_then_the_hardware_file_else_is_unknown():
    from tilesweep.measure.gemm_case import MAX_ROTATION_SETS, _rotation_sets
    from tilesweep.stages.decode import l2_for_rotation

    assert l2_for_rotation({"properties": {"l2_bytes": 60 << 20}}) == (60 << 20, "device")
    sheet = {"properties": {}, "catalog_name": "h100", "datasheet": {"l2_bytes": 50 << 20}}
    assert l2_for_rotation(sheet) == (50 << 20, "conf/hardware/h100.yaml")
    size, source = l2_for_rotation({"properties": {}, "datasheet": None})
    assert size is None and source.startswith("unknown")
    assert _rotation_sets(1 << 30, True, None) == MAX_ROTATION_SETS
    assert _rotation_sets(1 << 30, False, None) == 1


def _program(tmp_path, body: str):
    exe = tmp_path / "prog"
    exe.write_text(f"#!{sys.executable}\n{body}\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return exe


def test_a_crashed_cutlass_host_program_is_a_crash_with_its_signal(tmp_path):
    from tilesweep.cutlass import toolchain

    exe = _program(
        tmp_path,
        'import json, os, signal\nprint(json.dumps({"index": 0}), flush=True)\n'
        "os.kill(os.getpid(), signal.SIGSEGV)",
    )
    rows, failure = toolchain.run_tu(exe)
    assert set(rows) == {0}
    assert failure.startswith("signal SIGSEGV (11)")
    exe = _program(tmp_path, "import sys\nsys.exit(3)")
    assert toolchain.run_tu(exe) == ({}, "exit code 3")


def test_a_crashed_sm90_program_is_a_crash_row(tmp_path):
    from tilesweep.backends import cutlass_gpu

    exe = _program(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGABRT)")
    (rec,) = cutlass_gpu.run(exe, 64, 64, 1, [1], 1, timeout=60)
    row = cutlass_gpu.to_row(rec)
    assert row["status"] == "crash"
    assert row["reason"].startswith("signal SIGABRT (6)")


def test_launched_shared_memory_is_dynamic_plus_the_drivers_static_and_reserved():
    from tilesweep.measure.gemm_case import (
        CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK,
        CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
        launched_smem,
    )

    class FakeDriver:  # libcuda's three calls, answering as an H200 did for a Triton kernel
        def __init__(self, rc):
            self.rc, self.asked = rc, []

        def cuFuncGetAttribute(self, out, attribute, function):  # noqa: N802 (the driver's name)
            self.asked.append((attribute.value, function.value))
            out._obj.value = 0
            return self.rc

        def cuCtxGetDevice(self, out):  # noqa: N802
            out._obj.value = 0
            return 0

        def cuDeviceGetAttribute(self, out, attribute, device):  # noqa: N802
            self.asked.append((attribute.value, device.value))
            out._obj.value = 1024
            return 0

    ok = FakeDriver(0)
    got = launched_smem(49152, 0xABC, ok)
    assert ok.asked == [
        (CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, 0xABC),
        (CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, 0),
    ]
    assert got == {
        "smem_runtime_dynamic_bytes": 49152,
        "smem_runtime_static_bytes": 0,
        "smem_runtime_reserved_bytes": 1024,
        "smem_runtime_bytes": 50176,  # what the cubin's dynamic + cuobjdump SHARED count
    }
    failed = launched_smem(49152, 0xABC, FakeDriver(201))
    assert failed["smem_runtime_bytes"] is None
    assert "CUresult 201" in failed["smem_runtime_note"]
    assert launched_smem(49152, None, ok)["smem_runtime_bytes"] is None
