"""The fused MLA decode kernel against torch's unfused attention: on the CPU under Triton's
interpreter (fp32), on a GPU in bf16 at GLM-5's widths."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tilesweep.kernels import mla_decode as mla

CASES = """
import json, torch
from tilesweep.kernels import mla_decode as mla
gen = torch.Generator().manual_seed(3)
out = {}
# (sequences, heads, tokens, lat, rope, indexed): splits, heads not a multiple of BLOCK_H,
# widths that are not powers of two, the DSA indexer's top tokens.
# Each case under the default configuration and under one with latent slices and bigger blocks.
configs = [None, mla.Config(block_h=32, block_t=16, lat_split=2, num_warps=8, num_stages=1)]
for (n, heads, tokens, lat, rope, indexed), c in [
    (case, c) for case in [(2, 5, 70, 32, 16, False), (3, 20, 40, 24, 8, True),
    (1, 3, 200, 16, 4, True)] for c in configs
]:
    q = torch.randn(n, heads, lat + rope, generator=gen)
    cache = torch.randn(n, tokens, lat + rope, generator=gen)
    idx = None
    if indexed:
        idx = torch.stack([torch.randperm(tokens, generator=gen)[: tokens // 2] for _ in range(n)])
    got = mla.mla_decode(torch, q, cache, lat, 0.3, indices=idx, config=c)
    ref = mla.reference(torch, q, cache, lat, 0.3, indices=idx)
    out[f"{n},{heads},{tokens},{indexed},{c}"] = float((got - ref).abs().max())
    # The two query parts as separate views with their own strides (no concatenated copy).
    wide = torch.randn(heads, n, lat + rope + 5, generator=gen).transpose(0, 1)
    q_abs, q_rope = wide[..., :lat], wide[..., lat + 5 :]
    got = mla.mla_decode(torch, q_abs, cache, lat, 0.3, indices=idx, config=c, q_rope=q_rope)
    ref = mla.reference(torch, torch.cat([q_abs, q_rope], -1), cache, lat, 0.3, indices=idx)
    out[f"{n},{heads},{tokens},{indexed},{c},split"] = float((got - ref).abs().max())
print(json.dumps(out))
"""


def test_plan_splits_tokens_until_the_device_is_busy():
    assert mla.plan(1, 8, 1024) == (1, 32, 32)  # one sequence: split 32 ways
    assert mla.plan(512, 64, 1024) == (4, 1, 1024)  # enough programs: no split
    assert mla.plan(8, 64, 1024, mla.Config(64, 32, 2)) == (2, 16, 64)  # two latent slices
    hb, splits, chunk = mla.plan(3, 20, 100)
    assert hb == 2 and splits * chunk >= 100 and (splits - 1) * chunk < 100


@pytest.mark.slow
def test_fused_matches_torch_under_the_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run(
        [sys.executable, "-c", CASES], env=env, capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stderr[-4000:]  # the interpreter's own error, not a bare exit
    errors = json.loads(run.stdout.strip().splitlines()[-1])
    assert len(errors) == 12
    assert max(errors.values()) < 1e-4, errors


@pytest.mark.gpu
def test_fused_matches_torch_on_a_gpu_in_bf16():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    gen = torch.Generator(device="cuda").manual_seed(0)
    for n, heads, indexed in [(1, 8, False), (64, 64, True), (5, 16, True)]:
        q = torch.randn(n, heads, 576, device="cuda", generator=gen, dtype=torch.bfloat16)
        cache = torch.randn(n, 1024, 576, device="cuda", generator=gen, dtype=torch.bfloat16)
        idx = None
        if indexed:
            idx = torch.rand(n, 1024, device="cuda", generator=gen).topk(512).indices
        got = mla.mla_decode(torch, q, cache, 512, 576**-0.5, indices=idx).float()
        ref = mla.reference(torch, q, cache, 512, 576**-0.5, indices=idx).float()
        assert (got - ref).abs().max().item() < 2e-2 * ref.abs().max().item()
        # As the step passes them: the absorbed part and the rope part as separate views.
        split = mla.mla_decode(
            torch, q[..., :512], cache, 512, 576**-0.5, indices=idx, q_rope=q[..., 512:]
        ).float()
        assert torch.equal(split, got)


def test_the_tuned_configuration_follows_heads_and_sequences():
    assert mla.choose(8, 1) == mla.Config(16, 32, 1, 4, 2)
    assert mla.choose(16, 100) == mla.Config(16, 64, 1, 4, 2)
    assert mla.choose(64, 1) == mla.Config(16, 64, 1, 8, 2)
    assert mla.choose(64, 512) == mla.Config(64, 64, 1, 8, 2)  # 64 heads share one program
    assert mla.choose(40, 512) == mla.choose(64, 512)
    assert mla.choose(256, 8) == mla.choose(128, 8)  # above every key: the widest


@pytest.mark.gpu
def test_sequences_past_two_to_the_31_elements_of_cache():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    # 3,700 sequences x 1,024 tokens x 576 values: the last sequences start past 2**31 elements
    # (an int32 offset wraps there; the 8,192-sequence step hit it on 2026-12-04).
    n, tokens = 3700, 1024
    gen = torch.Generator(device="cuda").manual_seed(1)
    cache = torch.randn(n, tokens, 576, device="cuda", generator=gen, dtype=torch.bfloat16)
    q = torch.randn(n, 8, 576, device="cuda", generator=gen, dtype=torch.bfloat16)
    got = mla.mla_decode(torch, q, cache, 512, 576**-0.5)[-2:].float()
    ref = mla.reference(torch, q[-2:], cache[-2:], 512, 576**-0.5).float()
    assert (got - ref).abs().max().item() < 2e-2 * ref.abs().max().item()
