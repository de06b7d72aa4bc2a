"""Older releases' kernels (fused_moe/data/releases.yaml): extracted from a wheel with their
tables and hashes, and tools/release_gemm_probe.py launching them as the releases do, checked
against torch under Triton's interpreter (stand-in kernels written here, of the releases'
signatures: the tests fetch no wheel)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tilesweep.fused_moe.engines import wheels

ROOT = Path(__file__).resolve().parents[1]
RELEASE = "sglang-0.4.3.post2"
SPEC = wheels.releases()[RELEASE]["kernels"]
# A block-scaled FP8 GEMM with w8a8_block_fp8_matmul's arguments (C = A B^T, A [M, K] with
# [M, K / gk] scales, B [N, K] with [N / gn, K / gk] scales); FACTOR scales its result (1: right).
GEMM = """
import triton
import triton.language as tl


def not_a_kernel():
    return 1


@triton.jit
def _w8a8_block_fp8_matmul(A, B, C, As, Bs, M, N, K, group_n, group_k, stride_am, stride_ak,
                           stride_bk, stride_bn, stride_cm, stride_cn, stride_As_m, stride_As_k,
                           stride_Bs_k, stride_Bs_n, BLOCK_SIZE_M: tl.constexpr,
                           BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                           GROUP_SIZE_M: tl.constexpr):
    pid = tl.program_id(0)
    pid_m = pid // tl.cdiv(N, BLOCK_SIZE_N)
    pid_n = pid % tl.cdiv(N, BLOCK_SIZE_N)
    rm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    rn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for kb in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        rk = kb * BLOCK_SIZE_K + tl.arange(0, BLOCK_SIZE_K)
        a = tl.load(A + rm[:, None] * stride_am + rk[None, :] * stride_ak,
                    mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(B + rk[:, None] * stride_bk + rn[None, :] * stride_bn,
                    mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        ks = kb * BLOCK_SIZE_K // group_k
        a_s = tl.load(As + rm * stride_As_m + ks * stride_As_k, mask=rm < M, other=0.0)
        b_s = tl.load(Bs + ks * stride_Bs_k + (rn // group_n) * stride_Bs_n, mask=rn < N, other=0.0)
        acc += tl.dot(a, b) * a_s[:, None] * b_s[None, :]
    acc = acc * FACTOR
    tl.store(C + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc.to(tl.bfloat16),
             mask=(rm[:, None] < M) & (rn[None, :] < N))
"""
# The routed experts' GEMM with fused_moe_kernel's arguments (SGLang 0.4.3's: even_Ks too).
MOE = """
import triton
import triton.language as tl


@triton.jit
def fused_moe_kernel(a_ptr, b_ptr, c_ptr, a_scale_ptr, b_scale_ptr, topk_weights_ptr,
                     sorted_token_ids_ptr, expert_ids_ptr, num_tokens_post_padded_ptr, N, K, EM,
                     num_valid_tokens, stride_am, stride_ak, stride_be, stride_bk, stride_bn,
                     stride_cm, stride_cn, stride_asm, stride_ask, stride_bse, stride_bsk,
                     stride_bsn, group_n: tl.constexpr, group_k: tl.constexpr,
                     BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
                     BLOCK_SIZE_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr,
                     MUL_ROUTED_WEIGHT: tl.constexpr, top_k: tl.constexpr,
                     compute_type: tl.constexpr, use_fp8_w8a8: tl.constexpr,
                     use_int8_w8a16: tl.constexpr, even_Ks: tl.constexpr):
    pid = tl.program_id(0)
    pid_m = pid // tl.cdiv(N, BLOCK_SIZE_N)
    pid_n = pid % tl.cdiv(N, BLOCK_SIZE_N)
    if pid_m * BLOCK_SIZE_M >= tl.load(num_tokens_post_padded_ptr):
        return
    tokens = tl.load(sorted_token_ids_ptr + pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M))
    valid = tokens < num_valid_tokens
    expert = tl.load(expert_ids_ptr + pid_m)
    rows = tokens // top_k
    rn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for kb in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        rk = kb * BLOCK_SIZE_K + tl.arange(0, BLOCK_SIZE_K)
        a = tl.load(a_ptr + rows[:, None] * stride_am + rk[None, :] * stride_ak,
                    mask=valid[:, None] & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + expert * stride_be + rk[:, None] * stride_bk + rn[None, :] * stride_bn,
                    mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        ks = kb * BLOCK_SIZE_K // group_k
        a_s = tl.load(a_scale_ptr + rows * stride_asm + ks * stride_ask, mask=valid, other=0.0)
        b_s = tl.load(b_scale_ptr + expert * stride_bse + ks * stride_bsk
                      + (rn // group_n) * stride_bsn, mask=rn < N, other=0.0)
        acc += tl.dot(a, b) * a_s[:, None] * b_s[None, :]
    if MUL_ROUTED_WEIGHT:
        acc = acc * tl.load(topk_weights_ptr + tokens, mask=valid, other=0.0)[:, None]
    tl.store(c_ptr + tokens[:, None] * stride_cm + rn[None, :] * stride_cn,
             acc.to(compute_type), mask=valid[:, None] & (rn[None, :] < N))
"""
# MLA decode with the Triton backend's two kernels' arguments: here the first split computes the
# whole attention of its heads over the latent cache and the merge copies it out.
MLA = """
import triton
import triton.language as tl


@triton.jit
def _fwd_grouped_kernel_stage1(Q, K_Buffer, V_Buffer, sm_scale, kv_indptr, kv_indices, Att_Out,
                               stride_qbs, stride_qh, stride_buf_kbs, stride_buf_kh,
                               stride_buf_vbs, stride_buf_vh, stride_mid_ob, stride_mid_oh,
                               stride_mid_os, kv_group_num: tl.constexpr,
                               q_head_num: tl.constexpr, BLOCK_DMODEL: tl.constexpr,
                               BLOCK_DPE: tl.constexpr, BLOCK_DV: tl.constexpr,
                               BLOCK_N: tl.constexpr, BLOCK_H: tl.constexpr,
                               NUM_KV_SPLITS: tl.constexpr, logit_cap: tl.constexpr,
                               Lk: tl.constexpr, Lv: tl.constexpr):
    b = tl.program_id(0)
    if tl.program_id(2) == 0:
        heads = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
        start = tl.load(kv_indptr + b)
        n = tl.load(kv_indptr + b + 1) - start
        d = tl.arange(0, BLOCK_DMODEL)
        e = BLOCK_DMODEL + tl.arange(0, BLOCK_DPE)
        q = tl.load(Q + b * stride_qbs + heads[:, None] * stride_qh + d[None, :]).to(tl.float32)
        qe = tl.load(Q + b * stride_qbs + heads[:, None] * stride_qh + e[None, :]).to(tl.float32)
        m = tl.zeros([BLOCK_H], dtype=tl.float32) - float("inf")
        s = tl.zeros([BLOCK_H], dtype=tl.float32)
        acc = tl.zeros([BLOCK_H, BLOCK_DV], dtype=tl.float32)
        dv = tl.arange(0, BLOCK_DV)
        for i in range(0, n):
            loc = tl.load(kv_indices + start + i)
            k = tl.load(K_Buffer + loc * stride_buf_kbs + d).to(tl.float32)
            ke = tl.load(K_Buffer + loc * stride_buf_kbs + e).to(tl.float32)
            v = tl.load(V_Buffer + loc * stride_buf_vbs + dv).to(tl.float32)
            x = (tl.sum(q * k[None, :], 1) + tl.sum(qe * ke[None, :], 1)) * sm_scale
            new = tl.maximum(m, x)
            acc = acc * tl.exp(m - new)[:, None] + tl.exp(x - new)[:, None] * v[None, :]
            s = s * tl.exp(m - new) + tl.exp(x - new)
            m = new
        out = Att_Out + b * stride_mid_ob + heads[:, None] * stride_mid_oh + dv[None, :]
        tl.store(out, acc / s[:, None])


@triton.jit
def _fwd_kernel_stage2(Mid_O, O, kv_indptr, stride_mid_ob, stride_mid_oh, stride_mid_os,
                       stride_obs, stride_oh, NUM_KV_SPLITS: tl.constexpr,
                       BLOCK_DV: tl.constexpr, Lv: tl.constexpr):
    b, h = tl.program_id(0), tl.program_id(1)
    d = tl.arange(0, BLOCK_DV)
    x = tl.load(Mid_O + b * stride_mid_ob + h * stride_mid_oh + d)
    tl.store(O + b * stride_obs + h * stride_oh + d, x)
"""
TABLE = {"1": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1,
               "num_warps": 4, "num_stages": 2}}  # fmt: skip


def _wheel(tmp_path: Path, factor: float = 1.0) -> Path:
    """Write a small sglang 0.4.3.post2 wheel holding the stand-in kernels and one GEMM table."""
    path = tmp_path / "sglang-0.4.3.post2-py3-none-any.whl"
    gemm, moe = SPEC["block_fp8_gemm"], SPEC["fused_moe"]
    name = "N=192,K=384,device_name=cpu_(TRITON_INTERPRET),dtype=fp8_w8a8,block_shape=[128, 128]"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(gemm["module"], GEMM.replace("FACTOR", str(factor)))
        archive.writestr(moe["module"], MOE)
        archive.writestr(SPEC["mla_decode"]["module"], MLA)
        archive.writestr(gemm["tables"] + name + ".json", json.dumps(TABLE))
        archive.writestr(gemm["tables"] + "N=1,K=1,device_name=X,dtype=int8_w8a8.json", "{}")
        archive.writestr(gemm["tables"] + "sub/N=2.json", "{}")  # not directly in the folder
    return path


def test_a_release_is_extracted_with_its_tables_and_hashes(tmp_path):
    out = wheels.extract_release(RELEASE, _wheel(tmp_path), tmp_path / "kept")
    assert out == tmp_path / "kept" / RELEASE
    manifest = json.loads((out / "manifest.json").read_text())
    part = manifest["kernels"]["block_fp8_gemm"]
    text = (out / "block_fp8_gemm.py").read_bytes()
    assert part["file_sha256"] == hashlib.sha256(text).hexdigest()
    assert b"not_a_kernel" not in text and part["functions"] == ["_w8a8_block_fp8_matmul"]
    assert sorted(part["tables_sha256"]) == [
        "N=1,K=1,device_name=X,dtype=int8_w8a8.json",
        "N=192,K=384,device_name=cpu_(TRITON_INTERPRET),dtype=fp8_w8a8,block_shape=[128, 128].json",
    ]
    assert part["default_config"]["num_stages"] == 3  # the release's own default, carried
    assert manifest["kernels"]["fused_moe"]["tables_sha256"] == {}
    with pytest.raises(ValueError, match="not vllm 0.7.3"):
        wheels.extract_release("vllm-0.7.3", _wheel(tmp_path), tmp_path / "kept")


def _probe(tmp_path: Path, kept: Path, *extra: str) -> tuple[subprocess.CompletedProcess, list]:
    """Run the probe's --tiny mode under the interpreter; return the process and its rows."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "OUT": str(tmp_path / "out")}
    cmd = [sys.executable, str(ROOT / "tools/release_gemm_probe.py"), "--tiny", "--kernels"]
    cmd += [str(kept), "--releases", RELEASE, "--tokens", "1,20", *extra]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    out = tmp_path / "out" / "release_gemm_probe.json"
    return proc, json.loads(out.read_text()) if out.is_file() else []


@pytest.mark.slow  # runs the probe tool in a process, its kernels under the interpreter
def test_the_probe_launches_the_release_kernels_as_the_release_does(tmp_path):
    kept = tmp_path / "kept"
    wheels.extract_release(RELEASE, _wheel(tmp_path), kept)
    proc, rows = _probe(tmp_path, kept, "--moe", "--mla")
    assert proc.returncode == 0, proc.stderr
    gemm = [r for r in rows if r["part"] == "block_fp8_gemm"]
    assert {r["gemm"] for r in gemm} == {"tiny_aligned", "tiny_odd"}
    assert all(r["status"] == "ok" and r["max_rel_err"] < 0.02 for r in gemm)
    odd = {(r["config_device"], r["tokens"]): r for r in gemm if r["gemm"] == "tiny_odd"}
    here = odd[("cpu (TRITON_INTERPRET)", 20)]  # the release's table: the nearest batch key
    assert here["config"] == TABLE["1"] and here["config_table"].startswith("N=192,K=384")
    assert odd[("NVIDIA H200", 1)]["config_table"] == "default"  # no table: its default
    assert odd[("NVIDIA H200", 1)]["config"] == SPEC["block_fp8_gemm"]["default_config"]
    assert here["release_kernel_sm90"].startswith("triton")  # N = 192: not CUTLASS's
    aligned = next(r for r in gemm if r["gemm"] == "tiny_aligned")
    assert aligned["release_kernel_sm90"].startswith("cutlass")
    moe = [r for r in rows if r["part"] in ("fused_moe_up", "fused_moe_down")]
    assert len(moe) == 8 and all(r["status"] == "ok" and r["max_rel_err"] < 0.02 for r in moe)
    mla = [r for r in rows if r["part"] == "mla_decode"]
    assert len(mla) == 1 and mla[0]["status"] == "ok" and mla[0]["max_rel_err"] < 0.02
    assert mla[0]["config"] == SPEC["mla_decode"]["launch"]  # the release's fixed launch
    assert all(r["figure"].startswith("checked") and r.get("us_per_call") is None for r in rows)


@pytest.mark.slow  # runs the probe tool in a process, its kernels under the interpreter
def test_a_wrong_kernel_shows_in_its_error_and_an_edited_one_is_refused(tmp_path):
    kept = tmp_path / "kept"
    wheels.extract_release(RELEASE, _wheel(tmp_path, factor=1.5), kept)
    proc, rows = _probe(tmp_path, kept, "--tokens", "1")
    assert proc.returncode == 0, proc.stderr
    assert all(r["max_rel_err"] > 0.3 for r in rows)
    with (kept / RELEASE / "block_fp8_gemm.py").open("a") as handle:
        handle.write("\n# edited\n")
    proc, _ = _probe(tmp_path, kept, "--tokens", "1")
    assert proc.returncode != 0 and "differs from its manifest" in proc.stderr


def test_an_unknown_release_is_refused_in_one_line():
    cmd = [sys.executable, str(ROOT / "tools/fetch_engine_kernels.py"), "--release", "nope-1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("fetch_engine_kernels: no release nope-1")
