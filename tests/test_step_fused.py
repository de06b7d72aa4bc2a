"""The step's small fused kernels against torch's ops: on the CPU under Triton's interpreter
(fp32), on a GPU in bf16."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

CASES = """
import json, torch
from tilesweep.kernels import step_fused as f

def run(device, dtype, gen):
    def rnd(*shape):
        return torch.randn(*shape, generator=gen, device=device).to(dtype)
    out = {}
    h, y, w = rnd(3, 50), rnd(3, 50), rnd(50)
    want_h = (h.float() + y.float()).to(dtype)
    want = torch.nn.functional.rms_norm(want_h.float(), (50,), w.float(), 1e-6)
    got_h = h.clone()
    got = f.add_rms_norm(torch, got_h, y, w)
    out["add_rms_norm_h"] = float((got_h.float() - want_h.float()).abs().max())
    out["add_rms_norm"] = float((got.float() - want).abs().max() / want.abs().max())
    gu = rnd(4, 3000)
    want = torch.nn.functional.silu(gu[:, :1500].float()) * gu[:, 1500:].float()
    got = f.silu_and_mul(torch, gu).float()
    out["silu_and_mul"] = float((got - want).abs().max() / want.abs().max())
    logits = rnd(5, 40)
    logits[0, 3] = logits[0, 7] = 9.0  # a tie at the top: both kept, as topk keeps them
    got = torch.zeros(5 * 6, device=device)
    f.topk_softmax(torch, logits, 6, got)
    want = torch.softmax(logits.float().topk(6, dim=1).values, dim=1).reshape(-1)
    out["topk_softmax"] = float((got - want).abs().max())
    iq, keys, wt = rnd(2, 5, 24), rnd(2, 70, 24), rnd(2, 5)
    want = (torch.relu(torch.einsum("nhd,ntd->nht", iq.float(), keys.float()))
            * wt.float().unsqueeze(-1)).sum(1)
    got = f.index_scores(torch, iq, keys, wt).float()
    out["index_scores"] = float((got - want).abs().max() / want.abs().max())
    # Column slices of a merged projection's output, read in place (row stride != width).
    merged = rnd(3, 90)
    x, wt = merged[:, 10:60], rnd(50)
    want = torch.nn.functional.rms_norm(x.float(), (50,), wt.float(), 1e-6)
    got = f.rms_norm(torch, x, wt).float()
    out["rms_norm_slice"] = float((got - want).abs().max() / want.abs().max())
    iq_wide, w_wide = rnd(2, 5 * 24 + 7), rnd(2, 11)
    iq, wt = iq_wide[:, 7:].view(2, 5, 24), w_wide[:, 3:8]
    want = (torch.relu(torch.einsum("nhd,ntd->nht", iq.float(), keys.float()))
            * wt.float().unsqueeze(-1)).sum(1)
    got = f.index_scores(torch, iq, keys, wt).float()
    out["index_scores_slices"] = float((got - want).abs().max() / want.abs().max())
    return out

device = DEVICE
gen = torch.Generator(device=device).manual_seed(0)
print(json.dumps(run(device, getattr(torch, DTYPE), gen)))
"""


def _errors(device: str, dtype: str, env: dict) -> dict:
    code = CASES.replace("DEVICE", repr(device)).replace("DTYPE", repr(dtype))
    run = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_fused_kernels_match_torch_under_the_interpreter():
    errors = _errors("cpu", "float32", {**os.environ, "TRITON_INTERPRET": "1"})
    assert len(errors) == 7
    assert max(errors.values()) < 1e-5, errors


@pytest.mark.gpu
def test_fused_kernels_match_torch_on_a_gpu_in_bf16():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    errors = _errors("cuda", "bfloat16", dict(os.environ))
    assert errors["add_rms_norm_h"] == 0.0, errors  # the residual is rounded as torch rounds it
    assert max(errors.values()) < 2e-2, errors
