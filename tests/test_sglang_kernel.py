"""SGLang's own fused-MoE kernel laid out and launched as SGLang 0.5.23 launches it: its sorted
layout and buffer sizes, its launch switches, and the kernel's results under Triton's interpreter
(fp16, as the interpreter mis-stores bf16) against an fp32 reference, unquantised and in fp8
w8a8 per tensor and with 128 x 128 block scales."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tilesweep.fused_moe.engines import sglang as sk
from tilesweep.fused_moe.engines import wheels
from tilesweep.fused_moe.engines.base import get

ROOT = Path(__file__).resolve().parents[1]
KEPT = ROOT / wheels.FOLDER / "sglang-0.5.23"


def test_blocks_are_laid_out_as_sglang_lays_them_out():
    # Sorted by expert, each run padded to BLOCK_SIZE_M with the sentinel (pairs); pairs >= E + 1:
    # the buffer is pairs + (E + 1) x (BLOCK_SIZE_M - 1) = 6 + 4 x 3 = 18, rounded up to 20.
    ids = torch.tensor([[0, 2], [2, 1], [0, 2]], dtype=torch.int32)
    sorted_ids, experts, post = sk.blocks(ids, 4, 3)
    assert sorted_ids.numel() == 20 and int(post) == 12
    assert sorted_ids[:12].tolist() == [0, 4, 6, 6, 3, 6, 6, 6, 1, 2, 5, 6]
    assert (sorted_ids[12:] == 6).all()
    assert experts.numel() == 5 and experts.tolist() == [0, 1, 2, -1, -1]
    # Fewer pairs than E + 1 (here pairs == E): pairs x BLOCK_SIZE_M, where vLLM would take
    # pairs + E x (BLOCK_SIZE_M - 1).
    ids = torch.tensor([[5, 2], [1, 5]], dtype=torch.int32)
    sorted_ids, experts, post = sk.blocks(ids, 8, 4 + 2)
    assert sorted_ids.numel() == 4 * 8 and int(post) == 3 * 8
    assert experts.tolist() == [1, 2, 5, -1]
    # A single pair is still sorted (SGLang has no naive path): one block, the rest -1.
    sorted_ids, experts, post = sk.blocks(torch.tensor([[9]], dtype=torch.int32), 16, 64)
    assert sorted_ids.numel() == 16 and sorted_ids.tolist() == [0] + [1] * 15
    assert experts.tolist() == [9] and int(post) == 16
    assert sk.buffer_size(3, 16, 64) == 48 and sk.buffer_size(66, 16, 64) == 66 + 65 * 15 + 3


def test_swap_ab_and_pdl_follow_sglangs_rules(monkeypatch):
    cpu = torch.device("cpu")
    small = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64}
    assert not sk.swap_ab(small, cpu, True) and sk.pdl(torch.zeros(2, 2)) == {}
    monkeypatch.setattr(sk, "_sm90", lambda device: True)
    assert sk.swap_ab(small, cpu, True)
    assert not sk.swap_ab(small, cpu, False)  # bf16: never
    assert not sk.swap_ab({"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64}, cpu, True)
    assert not sk.swap_ab({"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 32}, cpu, True)


def test_configs_and_scales_sglang_cannot_take_are_refused():
    fp8, launch = torch.float8_e4m3fn, get("sglang").launch
    a, b = torch.zeros(2, 256).to(fp8), torch.zeros(3, 128, 256).to(fp8)
    c = torch.zeros(4, 128, dtype=torch.float16)
    blocks = sk.blocks(torch.tensor([[0, 1], [2, 0]], dtype=torch.int32), 16, 3)
    config = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 256, "GROUP_SIZE_M": 1}
    a_s, b_s = torch.ones(2, 2), torch.ones(3, 1, 2)
    with pytest.raises(ValueError, match="straddle"):
        launch(None, a, b, c, blocks, config, top_k=2, a_scale=a_s, b_scale=b_s,
                  block_shape=[128, 128])  # fmt: skip
    with pytest.raises(ValueError, match="per-tensor scales"):
        launch(None, a, b, c, blocks, config, top_k=2, a_scale=torch.ones(2), b_scale=b_s)
    with pytest.raises(ValueError, match="SPLIT_K"):
        launch(None, a, b, c, blocks, {**config, "SPLIT_K": 2}, top_k=2,
                  a_scale=torch.ones(1), b_scale=torch.ones(3))  # fmt: skip
    with pytest.raises(ValueError, match="no naive path"):
        launch(None, a, b, c, (None, *blocks[1:]), config, top_k=2)


RUN = """
import json, torch
from tilesweep.fused_moe.engines.wheels import load
from tilesweep.fused_moe.engines import sglang as sk
from tilesweep.fused_moe.engines.base import get
kernel, _ = load("sglang", "0.5.23")
FP8 = torch.float8_e4m3fn


def quantize(x, group_rows, group_cols):
    # fp8 and its fp32 scales per (group_rows x group_cols) tile of the last two dims (0: all).
    *lead, r, k = x.shape
    gr, gc = group_rows or r, group_cols or k
    pad = torch.zeros(*lead, -(-r // gr) * gr, -(-k // gc) * gc)
    pad[..., :r, :k] = x
    tiles = pad.reshape(*lead, pad.shape[-2] // gr, gr, pad.shape[-1] // gc, gc)
    scale = tiles.abs().amax(dim=(-3, -1)).clamp(min=1e-6) / 448.0
    full = scale.repeat_interleave(gr, -2).repeat_interleave(gc, -1)[..., :r, :k]
    q = (x / full).to(FP8)
    return q, scale, q.float() * full


def run(experts, m, top_k, n, k, fmt, config, down=False):
    gen = torch.Generator().manual_seed(experts * 100 + m)
    ids = torch.stack([torch.randperm(experts, generator=gen)[:top_k] for _ in range(m)])
    ids = ids.to(torch.int32)
    pairs = m * top_k
    rows = pairs if down else m
    a = torch.randn(rows, k, generator=gen)
    b = torch.randn(experts, n, k, generator=gen) / k**0.5
    weights = torch.rand(pairs, generator=gen) if down else None
    kw = {}
    if fmt == "fp16":
        a_in, b_in, a_ref, b_ref = a.half(), b.half(), a.half().float(), b.half().float()
    elif fmt == "fp8":  # one scale for A, one per expert for B
        a_in, a_s, a_ref = quantize(a, 0, 0)
        b_in, b_s, b_ref = quantize(b, 0, 0)
        kw = {"a_scale": a_s.reshape(1), "b_scale": b_s.reshape(experts)}
    else:  # 1 x 128 groups of A along K, 128 x 128 blocks of B
        a_in, a_s, a_ref = quantize(a, 1, 128)
        b_in, b_s, b_ref = quantize(b, 128, 128)
        kw = {"a_scale": a_s, "b_scale": b_s, "block_shape": [128, 128]}
    blocks = sk.blocks(ids, config["BLOCK_SIZE_M"], experts)
    c = torch.full((pairs, n), float("nan"), dtype=torch.float16)
    get("sglang").launch(kernel, a_in, b_in, c, blocks, config, top_k=1 if down else top_k,
              topk_weights=weights, **kw)
    rows_of = torch.arange(pairs) if down else torch.arange(pairs) // top_k
    ref = torch.einsum("pk,pnk->pn", a_ref[rows_of], b_ref[ids.reshape(-1).long()])
    if down:
        ref = ref * weights[:, None]
    return ((c.float() - ref).norm() / ref.norm()).item()


def cfg(bm, bn, bk):
    return {"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": 1,
            "num_warps": 4, "num_stages": 2}


out = {}
# fp16: the tiny-batch layout (4 pairs over 64 experts), then the generic one with K uneven.
out["fp16-tiny-gate_up"] = run(64, 2, 2, 64, 64, "fp16", cfg(16, 32, 32))
out["fp16-tiny-down"] = run(64, 2, 2, 64, 32, "fp16", cfg(16, 32, 32), down=True)
out["fp16-aligned-gate_up"] = run(6, 5, 2, 48, 80, "fp16", cfg(16, 32, 32))
out["fp16-aligned-down"] = run(6, 5, 2, 80, 24, "fp16", cfg(16, 32, 32), down=True)
out["fp8-gate_up"] = run(6, 5, 2, 48, 80, "fp8", cfg(16, 32, 32))
out["fp8-down"] = run(6, 5, 2, 80, 24, "fp8", cfg(16, 32, 32), down=True)
out["block-gate_up"] = run(6, 5, 2, 160, 256, "block", cfg(16, 64, 64))
out["block-down"] = run(6, 5, 2, 256, 96, "block", cfg(16, 256, 128), down=True)
sk._sm90 = lambda device: True  # swap_ab as on an H200 (BLOCK_SIZE_M < 64, BLOCK_SIZE_N >= 64)
out["fp8-swap-gate_up"] = run(6, 5, 2, 80, 64, "fp8", cfg(16, 64, 32))
out["block-swap-down"] = run(6, 5, 2, 256, 128, "block", cfg(16, 256, 128), down=True)
# Swapped with BLOCK_SIZE_N <= 128 the kernel indexes the scalar weight scale as a_scale[:, None],
# which Triton rejects where it checks slice ranks (3.9 does): SGLang 0.5.23's own failure.
try:
    narrow = run(6, 5, 2, 160, 256, "block", cfg(16, 64, 128))
except Exception as exc:  # the interpreter raises what the compiler would
    narrow = repr(exc)[-200:]
print(json.dumps({"errors": out, "narrow": narrow}))
"""


@pytest.fixture(scope="module")
def sglang_runs():
    """Run every case once under Triton's interpreter; return {"errors": {case: relative L2
    error}, "narrow": the swapped narrow block case's error or the exception it raised}."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", RUN], env=env, capture_output=True, text=True, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


needs_kernel = pytest.mark.skipif(
    not KEPT.is_dir(), reason="needs tools/fetch_engine_kernels.py's SGLang 0.5.23"
)


def _cases(runs, prefix: str) -> dict:
    """Return the errors of the cases whose name starts with prefix."""
    return {name: e for name, e in runs["errors"].items() if name.startswith(prefix)}


@needs_kernel
def test_sglangs_kernel_in_fp16_matches_the_reference_on_both_layouts(sglang_runs):
    fp16 = _cases(sglang_runs, "fp16")
    assert len(fp16) == 4 and all(e < 1e-2 for e in fp16.values()), fp16


@needs_kernel
def test_sglangs_kernel_in_fp8_per_tensor_matches_the_dequantised_reference(sglang_runs):
    fp8 = _cases(sglang_runs, "fp8")
    assert len(fp8) == 3 and all(e < 1e-2 for e in fp8.values()), fp8


@needs_kernel
def test_sglangs_kernel_with_block_scales_matches_the_dequantised_reference(sglang_runs):
    block = _cases(sglang_runs, "block")
    assert len(block) == 3 and all(e < 1e-2 for e in block.values()), block


@needs_kernel
def test_the_swapped_narrow_block_path_is_right_or_refused_by_triton(sglang_runs):
    narrow = sglang_runs["narrow"]
    if isinstance(narrow, str):  # Triton that checks slice ranks: SGLang's kernel cannot build
        assert "too many indices for tensor of rank 0" in narrow, narrow
    else:
        assert narrow < 1e-2
