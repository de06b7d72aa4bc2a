"""The engines' own kernels: extracted from a wheel with their hashes, loaded back, laid out and
launched as vLLM launches them, and an engine config file read as the engines name it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pandas as pd
import pytest
import torch

from tilesweep import engine_kernels
from tilesweep.errors import ConfigError
from tilesweep.measure import engine_tune, vllm_kernel
from tilesweep.measure.engine_case import FILE_DTYPE
from tilesweep.measure.engine_check import judge, read_file

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
from tilesweep.measure import engine_case as ec, vllm_kernel as vk
from tilesweep.measure.gemm_case import rel_error
kernel, _ = load("vllm", "0.33.0")
out = {}
for fmt in ("bf16", "fp8", "fp8_block"):
    for experts, m in ((64, 2), (6, 5)):
        problem = {"experts": experts, "n": 160, "hidden": 256, "top_k": 2}
        gen = torch.Generator().manual_seed(1)
        w = ec.make_weights(problem, fmt, "cpu", gen, dtype=torch.float16)
        batch = ec.make_batch(problem, w, m, "uniform", 1.2, "cpu", gen, dtype=torch.float16)
        config = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1,
                  "num_warps": 4, "num_stages": 2}
        blocks = vk.vllm_blocks(batch.topk_ids, 16, experts)
        for gemm, top_k in (("gate_up", 2), ("down", 1)):
            weights = None if gemm == "gate_up" else batch.topk_weights
            vk.launch(kernel, batch.a[gemm], w.w[gemm], batch.c[gemm], blocks, config,
                      top_k=top_k, topk_weights=weights, a_scale=batch.a_scale[gemm],
                      b_scale=w.scale[gemm], block_shape=ec.block_shape(fmt))
            ref = ec.reference(problem, w, batch, gemm)
            out[f"{fmt}-{experts}-{m}-{gemm}"] = rel_error(batch.c[gemm], ref)
print(json.dumps(out))
"""


@pytest.mark.skipif(not KEPT.is_dir(), reason="needs tools/fetch_engine_kernels.py's vLLM 0.33.0")
def test_vllms_own_kernel_launched_as_vllm_does_matches_the_reference():
    # bf16 (fp16 here: the interpreter mis-stores bf16), fp8 per tensor and fp8 block-scaled,
    # on the naive path and the aligned one; K = 160 leaves a partial 128-wide scale block.
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", VLLM_RUN], env=env, capture_output=True, text=True, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    errors = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(errors) == 12 and all(e < 1e-2 for e in errors.values()), errors


def test_an_engine_config_file_is_read_by_its_name(tmp_path):
    path = tmp_path / "E=256,N=2048,device_name=NVIDIA_H200,dtype=fp8_w8a8.json"
    path.write_text(json.dumps({"triton_version": "3.6.0", "1": {"BLOCK_SIZE_M": 16}}))
    shape, configs = read_file(path)
    assert shape == {"experts": 256, "n": 2048, "format": "fp8"}
    assert configs == {1: {"BLOCK_SIZE_M": 16}}
    # The engines' own names of each format, as both write them, read back to that format.
    for fmt in FILE_DTYPE:
        name = engine_tune.file_name(FILE_DTYPE[fmt], 256, 256, "NVIDIA H200")
        (tmp_path / name).write_text(json.dumps({"1": {"BLOCK_SIZE_M": 16}}))
        assert read_file(tmp_path / name)[0] == {"experts": 256, "n": 256, "format": fmt}
    assert engine_tune.file_name(FILE_DTYPE["fp8_block"], 256, 256, "NVIDIA H200") == (
        "E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json"
    )
    other = tmp_path / "E=8,N=16,device_name=X,dtype=int8_w8a16.json"
    other.write_text("{}")
    with pytest.raises(ConfigError, match="not a format launched here"):
        read_file(other)
    bad = tmp_path / "tuned.json"
    bad.write_text("{}")
    with pytest.raises(ConfigError, match="not an engine config file name"):
        read_file(bad)
    empty = tmp_path / "E=8,N=16,device_name=X.json"
    empty.write_text("{}")
    with pytest.raises(ConfigError, match="expected"):
        read_file(empty)


def _timed(median: float, spread: float) -> dict:
    return {"time_ms": median, "time_p10_ms": median - spread, "time_p90_ms": median + spread}


def test_a_config_is_exported_only_where_it_beats_the_default_beyond_the_noise():
    routings = ["uniform", "zipf"]
    default = "m16n64k128-g1-w4-s4"
    # Faster on both routings, beyond both spreads: exported.
    finals = {default: {r: _timed(1.0, 0.01) for r in routings},
              "fast": {r: _timed(0.9, 0.01) for r in routings}}  # fmt: skip
    assert engine_tune.export_pick(finals, default, routings)[0] == "fast"
    # Faster in the median but inside the noise on one routing: the default is exported.
    finals["fast"]["zipf"] = _timed(0.985, 0.01)
    chosen, why = engine_tune.export_pick(finals, default, routings)
    assert chosen == default and "within the noise" in why
    # Much faster on one routing, slower on the other: the default.
    finals["fast"] = {"uniform": _timed(0.5, 0.01), "zipf": _timed(1.2, 0.01)}
    assert engine_tune.export_pick(finals, default, routings)[0] == default
    # A config not timed on every routing never counts; an untimed default is exported.
    finals["fast"] = {"uniform": _timed(0.5, 0.01)}
    assert engine_tune.export_pick(finals, default, routings)[0] == default
    assert engine_tune.export_pick({"fast": finals["fast"]}, default, ["uniform"])[0] == default


def test_neighbours_change_one_parameter_and_block_fp8_takes_k_at_the_block():
    config = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1,
              "num_warps": 4, "num_stages": 3}  # fmt: skip
    values = {"BLOCK_SIZE_M": [16, 32], "BLOCK_SIZE_N": [64, 128], "BLOCK_SIZE_K": [64, 128, 256],
              "GROUP_SIZE_M": [1], "num_warps": [4, 8], "num_stages": [3]}  # fmt: skip
    near = engine_tune.neighbours(config, values, "bf16")
    assert len(near) == 5  # M 32, N 128, K 64, K 256, 8 warps
    assert all(sum(c[k] != config[k] for k in config) == 1 for c in near)
    block = engine_tune.neighbours(config, values, "fp8_block")
    assert all(c["BLOCK_SIZE_K"] <= 128 for c in block) and len(block) == 4


def test_the_check_calls_a_key_holding_the_defaults_config_the_same_kernel():
    rows = []
    for label, config, median in (("file", "a", 1.0), ("default", "a", 0.98),
                                  ("file", "b", 0.9), ("default", "a", 1.0),
                                  ("file", "c", 1.1), ("default", "a", 1.0)):  # fmt: skip
        m = {"a": 1, "b": 2, "c": 4}[config if label == "file" else rows[-1]["config"]]
        rows.append({"m": m, "routing": "uniform", "config_from": label, "config": config,
                     "rel_err": 0.001, **_timed(median, 0.005)})  # fmt: skip
    columns = ["x_default_measured", "x_default", "outcome"]  # empty, as check_file makes them
    table = judge(pd.DataFrame(rows).reindex(columns=[*rows[0], *columns]))
    files = table[table["config_from"] == "file"].set_index("m")
    assert files.loc[1, "outcome"] == "same config" and files.loc[1, "x_default"] == 1.0
    assert files.loc[1, "x_default_measured"] == pytest.approx(0.98)  # the noise of one config
    assert files.loc[2, "outcome"] == "won" and files.loc[4, "outcome"] == "lost"


def test_the_engines_block_fp8_defaults_are_their_rules():
    from tilesweep.config import compose
    from tilesweep.plan import fused_moe_space as space

    rules = compose([])["backend"]["fused_moe"]["engine_defaults"]
    vllm = {m: space.engine_default(rules["vllm"], m, 256, "fp8_block") for m in (1, 8, 16, 64, 65)}
    # vLLM 0.33 get_default_config, block-wise fp8 on CUDA.
    assert [vllm[m]["BLOCK_SIZE_N"] for m in (1, 8, 16)] == [64, 64, 128]
    assert [vllm[m]["BLOCK_SIZE_M"] for m in (64, 65)] == [16, 64]
    assert [vllm[m]["num_stages"] for m in (1, 8)] == [4, 3]
    assert [vllm[m]["GROUP_SIZE_M"] for m in (16, 64)] == [1, 32]
    assert all(c["BLOCK_SIZE_K"] == 128 and c["num_warps"] == 4 for c in vllm.values())
    # Per-tensor fp8 and bf16 keep their rules (the block rules do not reach them).
    assert space.engine_default(rules["vllm"], 1, 256, "fp8")["BLOCK_SIZE_N"] == 64
    assert space.engine_default(rules["vllm"], 16, 256, "fp8")["num_stages"] == 4
    sglang = space.engine_default(rules["sglang"], 1, 256, "fp8_block")
    assert sglang == {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128,
                      "GROUP_SIZE_M": 32, "num_warps": 4, "num_stages": 3}  # fmt: skip


def test_the_tune_engine_job_says_why_where_no_kernel_can_be_timed(tmp_path):
    from tilesweep.config import compose
    from tilesweep.stages.tune_engine import tune_engine

    settings = json.dumps(compose(["experiment=tiny"]))
    summary, configs = tmp_path / "engine_vllm.csv", tmp_path / "engine_vllm"
    tune_engine(settings, "vllm", str(summary), str(configs))
    rows = pd.read_csv(summary)
    assert rows["status"].tolist() == ["skipped"] and "GPU" in rows["reason"][0]
    assert configs.is_dir() and not (tmp_path / "engine_vllm.partial").exists()


def test_kept_engine_exports_are_rebuilt_from_their_checks_byte_for_byte(tmp_path):
    import shutil

    from tilesweep.config import compose

    kept = ROOT / "docs/examples/h200/engine_tune"
    copy = tmp_path / "engine_tune"
    shutil.copytree(kept, copy)
    for export in copy.glob("*-*/E=*.json"):
        export.unlink()
    engine_tune.rebuild_exports(copy, compose([]))
    for export in kept.glob("*-*/E=*.json"):
        assert (copy / export.parent.name / export.name).read_bytes() == export.read_bytes()
    assert (copy / "summary.csv").read_bytes() == (kept / "summary.csv").read_bytes()
