"""vLLM 0.12.0's routed experts in tools/release_gemm_probe.py: its fused_moe kernel launched with
the release's arguments and the config it picks (its shipped table for the shape and device, else
its default), Qwen3-235B's TP2 and TP4 shapes, and --padded's rows of its DeepGEMM path (M_sum
rows whatever the batch). Stand-in kernels of the release's signature, under Triton's interpreter:
the tests fetch no wheel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from test_release_gemm_probe import MOE, TABLE

from tilesweep.fused_moe.engines import wheels

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import padded_moe_probe  # noqa: E402 - tools/ is not a package

RELEASE = "vllm-0.12.0"
SPEC = wheels.releases()[RELEASE]["kernels"]["fused_moe"]
# vLLM 0.12.0's fused_moe_kernel arguments (fused_moe.py:316-368): a bias pointer and its strides,
# SPLIT_K, int8 w8a8, per-channel and bias flags; no even_Ks.
MOE_012 = (
    MOE.replace("c_ptr, a_scale_ptr", "c_ptr, b_bias_ptr, a_scale_ptr")
    .replace("stride_bsn, group_n", "stride_bsn, stride_bbe, stride_bbn, group_n")
    .replace("GROUP_SIZE_M: tl.constexpr,", "GROUP_SIZE_M: tl.constexpr, SPLIT_K: tl.constexpr,")
    .replace(
        "use_int8_w8a16: tl.constexpr, even_Ks: tl.constexpr",
        "use_int8_w8a8: tl.constexpr, use_int8_w8a16: tl.constexpr,"
        " per_channel_quant: tl.constexpr, HAS_BIAS: tl.constexpr",
    )
)
# The tiny shape's table as the release names it (E=8 experts, N=128 its inter, no spaces).
NAME = "E=8,N=128,device_name=cpu_(TRITON_INTERPRET),dtype=fp8_w8a8,block_shape=[128,128].json"


def _wheel(tmp_path: Path) -> Path:
    """Write a small vllm 0.12.0 wheel holding the stand-in kernel and one table of the shape."""
    path = tmp_path / "vllm-0.12.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(SPEC["module"], MOE_012)
        archive.writestr(SPEC["tables"] + NAME, json.dumps(TABLE))
    return path


def _probe(tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess, list]:
    """Run the probe's --tiny mode on the release under the interpreter; return it and its rows."""
    kept = tmp_path / "kept"
    wheels.extract_release(RELEASE, _wheel(tmp_path), kept)
    env = {**os.environ, "TRITON_INTERPRET": "1", "OUT": str(tmp_path / "out")}
    cmd = [sys.executable, str(ROOT / "tools/release_gemm_probe.py"), "--tiny", "--kernels"]
    cmd += [str(kept), "--releases", RELEASE, "--gemms", "none", "--tokens", "1,20", *extra]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    out = tmp_path / "out" / "release_gemm_probe.json"
    return proc, json.loads(out.read_text()) if out.is_file() else []


def test_the_padded_rows_are_the_releases_worst_case_whatever_the_batch():
    # Qwen3-235B: 128 experts, top 8 (deep_gemm_utils.py compute_aligned_M, alignment 128)
    assert [padded_moe_probe.padded_rows(m, 8, 128) for m in (1, 4, 16)] == [16384] * 3
    assert padded_moe_probe.padded_rows(32, 8, 128) == 16512
    assert padded_moe_probe.padded_rows(64, 8, 128) == 16768
    tp2 = {"hidden": 4096, "inter": 768}
    up, down = (padded_moe_probe.shapes(tp2, 16384)[p] for p in ("up", "down"))
    assert up[:3] == (16384, 1536, 4096) and down[:3] == (16384, 4096, 768)
    assert up[3] == 2 * 16384 * 1536 * 4096 and down[3] == 2 * 16384 * 4096 * 768


@pytest.mark.slow  # runs the probe tool in a process, its kernel under the interpreter
def test_the_release_kernel_runs_with_its_arguments_and_its_configs(tmp_path):
    proc, rows = _probe(tmp_path, "--moe", "--padded", "--as-device", "NVIDIA H200,default")
    assert proc.returncode == 0, proc.stderr
    moe = [r for r in rows if r["part"] in ("fused_moe_up", "fused_moe_down")]
    assert moe and all(r["status"] == "ok" and r["max_rel_err"] < 0.02 for r in moe)
    by = {(r["config_device"], r["tokens"]): r for r in moe if r["part"] == "fused_moe_up"}
    assert by[("cpu (TRITON_INTERPRET)", 20)]["config_table"] == NAME  # its table: nearest key
    assert by[("cpu (TRITON_INTERPRET)", 20)]["config"] == TABLE["1"]
    assert by[("default", 1)]["config"] == SPEC["default_config"]  # asked for: its default
    assert by[("NVIDIA H200", 1)]["config_table"] == "default"  # no table for it: its default
    padded = [r for r in rows if r["part"].startswith("deepgemm_padded_")]
    assert {r["part"] for r in padded} == {f"deepgemm_padded_{p}" for p in padded_moe_probe.PARTS}
    assert {r["m_sum"] for r in padded if r["tokens"] == 1} == {1024}  # 1 x 2 + 8 x 127 -> 1024
    assert all(r["status"] == "ok" and r["model"] == "tiny" for r in padded)


def test_an_unknown_moe_model_is_refused_in_one_line(tmp_path, monkeypatch):
    """The probe's main in this process (tests/test_attacks_r60.py runs it as a user does)."""
    import release_gemm_probe  # deferred: imports torch and triton

    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    with pytest.raises(SystemExit) as exit_:
        release_gemm_probe.main(["--moe-models", "nope"])
    line = exit_.value.code
    assert isinstance(line, str) and "\n" not in line, line
    assert (
        line.startswith("release_gemm_probe: no MoE model nope") and not (tmp_path / "out").exists()
    )
