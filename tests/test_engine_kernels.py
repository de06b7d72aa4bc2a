"""The engines' own kernels: extracted from a wheel with their hashes, loaded back, laid out and
launched as vLLM launches them, and an engine config file read as the engines name it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from tilesweep import engine_kernels
from tilesweep.errors import ConfigError
from tilesweep.measure import vllm_kernel
from tilesweep.measure.engine_check import read_file

ROOT = Path(__file__).resolve().parents[1]
MODULE = """
import torch
from vllm.platforms import current_platform  # never executed: only the kernels are taken
from vllm.triton_utils import tl, triton


def not_a_kernel(x):
    return x + 1


@triton.jit
def scale_row(x, factor):
    return x * factor


@triton.jit
def fused_moe_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, scale_row(tl.load(x_ptr + offs, mask=mask), 2.0), mask=mask)
"""


def _wheel(tmp_path: Path, version: str = "9.9.1") -> Path:
    """Write a small vllm wheel holding MODULE where vLLM keeps its fused-MoE kernel."""
    path = tmp_path / f"vllm-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(engine_kernels.MODULES["vllm"][0], MODULE)
        archive.writestr("vllm/__init__.py", "")
    return path


def test_the_kernels_are_extracted_with_their_hashes_and_nothing_else(tmp_path):
    out = engine_kernels.extract("vllm", _wheel(tmp_path), tmp_path / "kept")
    assert out == tmp_path / "kept" / "vllm-9.9.1"
    text = (out / "kernel.py").read_text()
    assert "def fused_moe_kernel" in text and "def scale_row" in text
    assert "not_a_kernel" not in text and "current_platform" not in text
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["functions"] == ["fused_moe_kernel", "scale_row"]
    assert manifest["version"] == "9.9.1" and manifest["wheel"].startswith("vllm-9.9.1")
    import hashlib

    assert manifest["kernel_py_sha256"] == hashlib.sha256(text.encode()).hexdigest()
    assert manifest["module_sha256"] == hashlib.sha256(MODULE.encode()).hexdigest()


def test_a_wheel_without_the_kernel_or_of_another_engine_is_refused(tmp_path):
    bare = tmp_path / "vllm-1.0.0-py3-none-any.whl"
    with zipfile.ZipFile(bare, "w") as archive:
        archive.writestr(engine_kernels.MODULES["vllm"][0], "def f():\n    pass\n")
    with pytest.raises(ValueError, match="has no @triton.jit fused_moe_kernel"):
        engine_kernels.extract("vllm", bare, tmp_path)
    with pytest.raises(ValueError, match="a vllm wheel, not sglang"):
        engine_kernels.extract("sglang", _wheel(tmp_path), tmp_path)


LOAD_AND_RUN = """
import json, sys, torch
from tilesweep import engine_kernels
kernel, where = engine_kernels.load("vllm", "9.9.1", sys.argv[1])
x = torch.arange(10, dtype=torch.float32)
y = torch.zeros(10)
kernel[(3,)](x, y, 10, BLOCK=4)
print(json.dumps({"type": type(kernel).__name__, "where": where, "y": y.tolist()}))
"""


def test_an_extracted_kernel_loads_and_runs_and_a_changed_one_is_refused(tmp_path):
    kept = tmp_path / "kept"
    engine_kernels.extract("vllm", _wheel(tmp_path), kept)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", LOAD_AND_RUN, str(kept)], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["type"] in ("JITFunction", "InterpretedFunction") and got["where"].startswith(
        "vllm-9.9.1-py3-none-any.whl"
    )
    assert got["y"] == [2.0 * i for i in range(10)]
    kernel_py = kept / "vllm-9.9.1" / "kernel.py"
    kernel_py.write_text(kernel_py.read_text() + "\n# edited\n")
    with pytest.raises(LookupError, match="differs from its manifest"):
        engine_kernels.load("vllm", "9.9.1", kept)
    with pytest.raises(LookupError, match="tools/fetch_engine_kernels.py makes it"):
        engine_kernels.load("vllm", "9.9.2", kept)


def test_vllm_blocks_are_laid_out_as_vllm_lays_them_out():
    # M x top_k x 4 <= E: the naive path, one row block per routed pair and no alignment.
    ids = torch.tensor([[3, 1]], dtype=torch.int32)
    sorted_ids, experts, post = vllm_kernel.vllm_blocks(ids, 16, 64)
    assert sorted_ids is None and experts.tolist() == [3, 1] and post.tolist() == [2 * 16]
    # Else: sorted by expert, each run padded to BLOCK_SIZE_M with the sentinel (pairs), the
    # buffers sized pairs + E x (BLOCK_SIZE_M - 1) and -1 past the used blocks.
    ids = torch.tensor([[0, 2], [2, 1], [0, 2]], dtype=torch.int32)
    sorted_ids, experts, post = vllm_kernel.vllm_blocks(ids, 4, 3)
    assert sorted_ids.numel() == 6 + 3 * 3 and int(post) == 12
    assert sorted_ids[:12].tolist() == [0, 4, 6, 6, 3, 6, 6, 6, 1, 2, 5, 6]
    assert (sorted_ids[12:] == 6).all()
    assert experts.tolist() == [0, 1, 2, -1]
    # Fewer pairs than experts: the buffers are pairs x BLOCK_SIZE_M.
    ids = torch.tensor([[5, 7], [1, 5]], dtype=torch.int32)
    sorted_ids, _, _ = vllm_kernel.vllm_blocks(ids, 8, 12)
    assert sorted_ids.numel() == 4 * 8


KEPT = ROOT / engine_kernels.FOLDER / "vllm-0.33.0"
VLLM_RUN = """
import json, torch
from tilesweep.engine_kernels import load
from tilesweep.measure import fused_moe_case as case, vllm_kernel as vk
from tilesweep.measure.gemm_case import rel_error
kernel, _ = load("vllm", "0.33.0")
out = {}
for experts, m in ((64, 2), (6, 5)):  # the naive path, then the aligned one
    problem = {"experts": experts, "n": 48, "hidden": 64, "top_k": 2}
    gen = torch.Generator().manual_seed(1)
    w = case.make_weights(problem, "bf16", "cpu", gen)
    w.w = {g: t.half() for g, t in w.w.items()}  # the interpreter has no bf16 stores
    batch = case.make_batch(problem, w, m, "uniform", 1.2, "cpu", gen, direct=False,
                            out_dtype="bf16")
    batch.a = {g: t.half() for g, t in batch.a.items()}
    batch.c = {g: t.half() for g, t in batch.c.items()}
    config = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 1,
              "num_warps": 4, "num_stages": 2}
    blocks = vk.vllm_blocks(batch.topk_ids, 16, experts)
    for gemm, top_k in (("gate_up", 2), ("down", 1)):
        weights = None if gemm == "gate_up" else batch.topk_weights
        vk.launch(kernel, batch.a[gemm], w.w[gemm], batch.c[gemm], blocks, config,
                  top_k=top_k, topk_weights=weights)
        ref = case.reference(problem, w, batch, gemm)
        out[f"{experts}-{m}-{gemm}"] = rel_error(batch.c[gemm], ref)
print(json.dumps(out))
"""


@pytest.mark.skipif(not KEPT.is_dir(), reason="needs tools/fetch_engine_kernels.py's vLLM 0.33.0")
def test_vllms_own_kernel_launched_as_vllm_does_matches_the_reference():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", VLLM_RUN], env=env, capture_output=True, text=True, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    errors = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(errors) == 4 and all(e < 1e-2 for e in errors.values()), errors


def test_an_engine_config_file_is_read_by_its_name(tmp_path):
    path = tmp_path / "E=256,N=2048,device_name=NVIDIA_H200,dtype=fp8_w8a8.json"
    path.write_text(json.dumps({"triton_version": "3.6.0", "1": {"BLOCK_SIZE_M": 16}}))
    shape, configs = read_file(path)
    assert shape == {"experts": 256, "n": 2048, "dtype": "fp8"}
    assert configs == {1: {"BLOCK_SIZE_M": 16}}
    bad = tmp_path / "tuned.json"
    bad.write_text("{}")
    with pytest.raises(ConfigError, match="not an engine config file name"):
        read_file(bad)
    empty = tmp_path / "E=8,N=16,device_name=X.json"
    empty.write_text("{}")
    with pytest.raises(ConfigError, match="expected"):
        read_file(empty)
