"""Time older engine releases' own Triton block-FP8 kernels on one GPU at DeepSeek-V3 decode
shapes: the w8a8_block_fp8_matmul linear-layer GEMM, (--moe) the routed experts' fused_moe kernel
of SGLang 0.4.3.post2 and vLLM 0.7.3, and (--mla) SGLang 0.4.3's Triton MLA decode
(fused_moe/data/releases.yaml), each with the config the release picks (its shipped table for
the device and shape, the nearest batch key, else its default), in a CUDA graph
(tilesweep.measure.timing.time_gpu), weights cold (each call reads its own copy; enough copies to
pass L2 four times over), CUDA events, median of repeats.

The kernels are loaded from <kernels>/<release>/ (tools/fetch_engine_kernels.py --release NAME;
each file's SHA-256 checked against its manifest). Both releases ran this Triton GEMM on sm_90 only
where N or K is not a multiple of 128 (kv_a, N=576); the other shapes went to a CUTLASS blockwise
kernel (sgl_kernel fp8_blockwise_scaled_mm, vLLM cutlass_scaled_mm) that is not timed here: each
row says which kernel the release ran at that shape (`release_kernel_sm90`).

--moe-models picks the routed experts' shapes (MOE_MODELS: DeepSeek-V3 at TP8, Qwen3-235B-A22B
at TP2 and TP4, whose vLLM 0.12.0 tables are E=128,N=768 and N=384). --padded (with --moe-models)
also times what vLLM 0.12.0 runs instead on Hopper when DeepGEMM is installed: its contiguous
grouped GEMMs over M_sum = round_up(tokens x top_k + experts x 127, 128) rows whatever the batch,
as FP8 GEMMs of those shapes in cuBLASLt (a proxy: DeepGEMM is not on the device image) and the
activation and quantisation passes over M_sum rows as single elementwise kernels of their bytes
(padded_moe_probe.py).

Writes $OUT/release_gemm_probe.json (rows) and prints one line a row. Usage:
  OUT=/tmp/o python tools/release_gemm_probe.py [--kernels DIR] [--releases a,b] [--tokens 1,2,...]
      [--gemms q_a,kv_a,...|none] [--as-device "NVIDIA H200,default"] [--moe] [--mla] [--tiny]
      [--moe-models deepseek_v3_tp8,qwen3_235b_tp2,qwen3_235b_tp4] [--padded]
--tiny times nothing: small shapes, launched and checked against torch (TRITON_INTERPRET=1).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import inspect
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import triton
import triton.language as tl


def _root() -> Path:
    """Return the checkout this file runs in (the first parent holding src/tilesweep)."""
    for parent in Path(__file__).resolve().parents:
        if (parent / "src" / "tilesweep").is_dir():
            return parent
    sys.exit("release_gemm_probe: run it inside a tilesweep checkout (no src/tilesweep above it)")


ROOT = _root()
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tools")]  # runs from a bare checkout
from fused_moe_probe import PEAK_BW, fp8, layout, scales, touched_bytes  # noqa: E402
from padded_moe_probe import probe_padded, summary  # noqa: E402

from tilesweep.errors import tool_main  # noqa: E402
from tilesweep.io import check_out_folder, write_text  # noqa: E402
from tilesweep.measure.timing import percentile, time_gpu  # noqa: E402

BLOCK = 128  # DeepSeek-V3's weight_block_size [128, 128]
# DeepSeek-V3's linear layers at decode (conf/model/deepseek_v3.yaml: hidden 7168, q_lora 1536,
# kv_lora 512 + rope 64, 128 heads of 128 + 64 (q) and 128 + 128 (kv_b), dense MLP 18432, shared
# expert 2048): {name: (N, K)}. q_a and kv_a are ReplicatedLinear (whole on every GPU); _tp1 is a
# whole layer (SGLang 0.4.3's DP attention replicates the attention), _tp8 a TP8 shard; w_q_uk and
# w_uv_o are vLLM 0.7.3's absorbed MLA weights (attention/backends/mla/utils.py:329-387).
GEMMS = {
    "q_a": (1536, 7168),
    "kv_a": (576, 7168),
    "q_b_tp1": (24576, 1536),
    "kv_b_tp1": (32768, 512),
    "o_proj_tp1": (7168, 16384),
    "q_b_tp8": (3072, 1536),
    "kv_b_tp8": (4096, 512),
    "o_proj_tp8": (7168, 2048),
    "w_q_uk_tp8": (8192, 1536),
    "w_uv_o_tp8": (7168, 8192),
    "dense_gate_up_tp8": (4608, 7168),
    "dense_down_tp8": (7168, 2304),
    "shared_gate_up_tp8": (512, 7168),
    "shared_down_tp8": (7168, 256),
}
# The routed experts at TP8 (256 experts of 2048 / 8, top 8; the shared expert is its own MLP at
# these releases), as fused_experts_impl launches them: gate_up (N = 2 x 256, K = 7168) and down.
MOE = {"hidden": 7168, "inter": 2048 // 8, "experts": 256, "top_k": 8}
# --moe-models: {name: shape}; Qwen3-235B-A22B (conf/model/qwen3_235b_a22b.yaml: hidden 4096,
# moe_intermediate 1536, 128 experts, top 8, no shared expert) with its experts TP-split.
MOE_MODELS = {
    "deepseek_v3_tp8": {**MOE, "model": "deepseek_v3", "tp": 8},
    "qwen3_235b_tp2": {"hidden": 4096, "inter": 1536 // 2, "experts": 128, "top_k": 8}
    | {"model": "qwen3_235b_a22b", "tp": 2},
    "qwen3_235b_tp4": {"hidden": 4096, "inter": 1536 // 4, "experts": 128, "top_k": 8}
    | {"model": "qwen3_235b_a22b", "tp": 4},
}
# MLA decode (SGLang 0.4.3's Triton backend): the latent KV cache, one head of kv_lora 512 + rope 64
# (bf16, memory_pool.py MLATokenToKVPool; V is its first 512), and the query heads a GPU runs: 128
# under DP attention (every head, its own sequences), 16 at TP8.
KV_LORA, ROPE = 512, 64
MLA_HEADS = (128, 16)
TINY_GEMMS = {"tiny_aligned": (256, 256), "tiny_odd": (192, 384)}
TINY_MOE = {"hidden": 256, "inter": 128, "experts": 8, "top_k": 2, "model": "tiny", "tp": 1}
MAX_COPIES = 256


def module_name(release: str, part: str) -> str:
    """Return the name a release's extracted kernel module is loaded under."""
    return f"release_{release}_{part}".replace(".", "_").replace("-", "_")


def load(kernels: Path, release: str, part: str):
    """Return (the release's kernel of this part, its manifest entry), its file's hash checked."""
    kept = kernels / release
    if not (kept / "manifest.json").is_file():
        sys.exit(f"release_gemm_probe: no {kept}/manifest.json (fetch_engine_kernels --release)")
    spec = json.loads((kept / "manifest.json").read_text())["kernels"][part]
    text = (kept / spec["file"]).read_bytes()
    if hashlib.sha256(text).hexdigest() != spec["file_sha256"]:
        sys.exit(f"release_gemm_probe: {kept / spec['file']} differs from its manifest")
    name = module_name(release, part)
    if name not in sys.modules:  # Triton reads a JIT function's source from its file
        found = importlib.util.spec_from_file_location(name, kept / spec["file"])
        module = importlib.util.module_from_spec(found)
        sys.modules[name] = module
        found.loader.exec_module(module)
    return getattr(sys.modules[name], spec["function"]), {**spec, "folder": str(kept)}


def table(spec: dict, part: str, prefix: str, device: str) -> tuple[dict | None, str]:
    """Return ({batch: config}, file) of the release's shipped table for this shape and device
    (its file name: `prefix`,device_name=<device, spaces as _>,dtype=fp8_w8a8,block_shape=[128,
    128], the block's spacing as the release writes it), else (None, "default")."""
    if device == "default":  # --as-device default: the release's default config, whatever ships
        return None, "default"
    want = f"{prefix},device_name={device.replace(' ', '_')},dtype=fp8_w8a8,block_shape="
    for name, digest in sorted(spec["tables_sha256"].items()):
        block = name.removeprefix(want).removesuffix(".json").replace(" ", "")
        if name.startswith(want) and block == f"[{BLOCK},{BLOCK}]":
            data = (Path(spec["folder"]) / "configs" / part / name).read_bytes()
            if hashlib.sha256(data).hexdigest() != digest:
                sys.exit(f"release_gemm_probe: configs/{part}/{name} differs from its manifest")
            return {int(k): v for k, v in json.loads(data).items()}, name
    return None, "default"


def pick(configs: dict | None, spec: dict, m: int) -> dict:
    """Return the release's config for M rows: the nearest batch key, else its default."""
    if configs is None:
        return dict(spec["default_config"])
    return dict(configs[min(configs, key=lambda key: abs(key - m))])


def release_kernel(n: int, k: int) -> str:
    """Return the kernel both releases ran on sm_90 for a block-FP8 linear of this shape."""
    if n % 128 == 0 and k % 128 == 0:  # fp8_utils.py apply_w8a8_block_fp8_linear, both releases
        return "cutlass blockwise (not timed here)"
    return "triton w8a8_block_fp8_matmul (this kernel)"


def gemm_call(kernel, m: int, n: int, k: int, config: dict, device, generator):
    """Return (launch, tensors) of one w8a8_block_fp8_matmul call as the release launches it:
    A [M, K] fp8 with row-major [M, K / 128] scales, B [N, K] fp8 with [N / 128, K / 128] scales."""
    t = {
        "a": fp8((m, k), device, generator),
        "a_s": scales((m, triton.cdiv(k, BLOCK)), device),
        "b": fp8((n, k), device, generator),
        "b_s": scales((triton.cdiv(n, BLOCK), triton.cdiv(k, BLOCK)), device),
        "c": torch.empty(m, n, dtype=torch.bfloat16, device=device),
    }
    grid = (triton.cdiv(m, config["BLOCK_SIZE_M"]) * triton.cdiv(n, config["BLOCK_SIZE_N"]),)
    a, b, c, a_s, b_s = t["a"], t["b"], t["c"], t["a_s"], t["b_s"]
    args = (a, b, c, a_s, b_s, m, n, k, BLOCK, BLOCK, a.stride(-2), a.stride(-1), b.stride(1))
    args += (b.stride(0), c.stride(-2), c.stride(-1), a_s.stride(-2), a_s.stride(-1))
    args += (b_s.stride(1), b_s.stride(0))

    def launch() -> None:
        kernel[grid](*args, **config)

    return launch, t


def gemm_error(t: dict) -> float:
    """Return the max relative error of a GEMM call's output against torch, dequantised."""
    a = t["a"].float() * t["a_s"].repeat_interleave(BLOCK, 1)[:, : t["a"].shape[1]]
    sb = t["b_s"].repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)
    b = t["b"].float() * sb[: t["b"].shape[0], : t["b"].shape[1]]
    ref = a @ b.T
    return float(((t["c"].float() - ref).abs().max() / ref.abs().max().clamp_min(1e-6)).item())


def moe_calls(kernel, spec: dict, m: int, config: dict, weights: dict, device, generator):
    """Return {part: (launch, tensors)} of the routed experts' gate_up and down fused_moe calls
    for M tokens, as the release's invoke_fused_moe_kernel launches them (one layout, aligned to
    the config's BLOCK_SIZE_M, serves both; fused_moe_probe.layout builds it)."""
    shape = MOE_SHAPE[0]
    e, h, i, top_k = (shape[key] for key in ("experts", "hidden", "inter", "top_k"))
    ids = torch.stack([torch.randperm(e, generator=generator)[:top_k] for _ in range(m)])
    ids = ids.to(torch.int32).to(device)
    bm = config["BLOCK_SIZE_M"]
    sorted_ids, expert_ids, post = layout(ids, bm, e, device)
    pairs = m * top_k
    t_up = {
        "a": fp8((m, h), device, generator),
        "a_s": scales((m, h // BLOCK), device),
        "b": weights["w_up"],
        "b_s": weights["s_up"],
        "c": torch.empty(m, top_k, 2 * i, dtype=torch.bfloat16, device=device),
        "w": None,
        "top_k": top_k,
    }
    t_dn = {
        "a": fp8((pairs, i), device, generator),
        "a_s": scales((pairs, i // BLOCK), device),
        "b": weights["w_dn"],
        "b_s": weights["s_dn"],
        "c": torch.empty(m, top_k, h, dtype=torch.bfloat16, device=device),
        "w": torch.rand(m, top_k, device=device),
        "top_k": 1,
    }
    names = set(inspect.signature(getattr(kernel, "fn", kernel)).parameters)
    out = {}
    for part, t in (("up", t_up), ("down", t_dn)):
        a, b, c, a_s, b_s = t["a"], t["b"], t["c"], t["a_s"], t["b_s"]
        em = sorted_ids.numel()
        if spec.get("trim_em") and a.shape[0] < bm:  # vLLM 0.7.3's small-batch grid
            em = min(em, a.shape[0] * t["top_k"] * bm)
        kwargs = dict(
            a_ptr=a, b_ptr=b, c_ptr=c, a_scale_ptr=a_s, b_scale_ptr=b_s,
            topk_weights_ptr=t["w"] if t["w"] is not None else a_s,
            sorted_token_ids_ptr=sorted_ids, expert_ids_ptr=expert_ids,
            num_tokens_post_padded_ptr=post, N=b.shape[1], K=b.shape[2], EM=sorted_ids.numel(),
            num_valid_tokens=ids.numel(), stride_am=a.stride(0), stride_ak=a.stride(1),
            stride_be=b.stride(0), stride_bk=b.stride(2), stride_bn=b.stride(1),
            stride_cm=c.stride(1), stride_cn=c.stride(2), stride_asm=a_s.stride(0),
            stride_ask=a_s.stride(1), stride_bse=b_s.stride(0), stride_bsk=b_s.stride(2),
            stride_bsn=b_s.stride(1), group_n=BLOCK, group_k=BLOCK,
            MUL_ROUTED_WEIGHT=t["w"] is not None, top_k=t["top_k"], compute_type=tl.bfloat16,
            use_fp8_w8a8=True, use_int8_w8a16=False,
            even_Ks=b.shape[2] % config["BLOCK_SIZE_K"] == 0,
        )  # fmt: skip
        kwargs |= NO_BIAS  # vLLM 0.12's further arguments (fused_moe.py:688-735), where it has them
        if spec.get("trim_em"):  # vLLM passes the trimmed EM to the kernel too
            kwargs["EM"] = em
        kwargs = {key: value for key, value in kwargs.items() if key in names}
        grid = (triton.cdiv(em, bm) * triton.cdiv(b.shape[1], config["BLOCK_SIZE_N"]),)

        def launch(kwargs=kwargs, grid=grid) -> None:
            kernel[grid](**kwargs, **config)

        out[part] = (launch, {**t, "ids": ids})
    return out


MOE_SHAPE = [MOE]  # the routed experts' shape in force (--tiny swaps in TINY_MOE)
# vLLM 0.12.0's invoke_fused_moe_kernel passes these too (no bias, SPLIT_K 1, block FP8 only).
NO_BIAS = {"b_bias_ptr": None, "stride_bbe": 0, "stride_bbn": 0, "SPLIT_K": 1}
NO_BIAS |= {"use_int8_w8a8": False, "per_channel_quant": False, "HAS_BIAS": False}


def moe_error(t: dict) -> float:
    """Return the max relative error of a fused_moe call's output against torch, dequantised."""
    ids = t["ids"].long().flatten()
    pairs = ids.numel()
    rows = torch.arange(pairs) // t["top_k"] if t["top_k"] > 1 else torch.arange(pairs)
    a = t["a"].float() * t["a_s"].repeat_interleave(BLOCK, 1)
    b = t["b"][ids].float()
    sb = t["b_s"][ids].repeat_interleave(BLOCK, 1).repeat_interleave(BLOCK, 2)
    ref = torch.einsum("pk,pnk->pn", a[rows], b * sb[:, : b.shape[1], : b.shape[2]])
    if t["w"] is not None:
        ref = ref * t["w"].flatten()[:, None]
    out = t["c"].reshape(pairs, -1).float()
    return float(((out - ref).abs().max() / ref.abs().max().clamp_min(1e-6)).item())


def mla_call(stage1, stage2, launch: dict, heads: int, batch: int, context: int, device):
    """Return (launch, tensors) of one layer's MLA decode as the release's triton backend runs it
    (decode_attention_fwd_grouped: the split-KV kernel, then the merge), each sequence's `context`
    tokens contiguous in its own KV pool."""
    lk, lv, splits = KV_LORA + ROPE, KV_LORA, launch["num_kv_splits"]
    # bf16 as the release serves DeepSeek; fp16 under Triton's interpreter, whose bf16 dot
    # multiplies the raw bit patterns
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float16
    t = {
        "q": torch.randn(batch, heads, lk, dtype=dtype, device=device),
        "kv": torch.randn(batch * context, 1, lk, dtype=dtype, device=device),
        "o": torch.empty(batch, heads, lv, dtype=dtype, device=device),
        "logits": torch.empty(batch, heads, splits, lv + 1, dtype=torch.float32, device=device),
        "indptr": torch.arange(batch + 1, dtype=torch.int32, device=device) * context,
        "indices": torch.arange(batch * context, dtype=torch.int32, device=device),
        "scale": 1.0 / math.sqrt(128 + ROPE),
    }
    q, kv, o, logits = t["q"], t["kv"], t["o"], t["logits"]
    # V is the cache's first Lv columns (get_value_buffer: kv[..., :512]): the same pointer and
    # strides as the cache itself, which is what the kernel receives (Triton's interpreter would
    # copy the view, so the cache is passed as is)
    v = kv
    grid1 = (batch, triton.cdiv(heads, min(launch["BLOCK_H"], heads)), splits)
    args1 = (q, kv, v, t["scale"], t["indptr"], t["indices"], logits, q.stride(0), q.stride(1))
    args1 += (kv.stride(0), kv.stride(1), v.stride(0), v.stride(1), logits.stride(0))
    args1 += (logits.stride(1), logits.stride(2))
    kw1 = dict(kv_group_num=heads, q_head_num=heads, BLOCK_DMODEL=KV_LORA, BLOCK_DPE=ROPE)
    kw1 |= dict(BLOCK_DV=triton.next_power_of_2(lv), BLOCK_N=launch["BLOCK_N"])
    kw1 |= dict(BLOCK_H=launch["BLOCK_H"], NUM_KV_SPLITS=splits, logit_cap=0.0, Lk=lk, Lv=lv)
    kw1 |= dict(num_warps=launch["num_warps"], num_stages=launch["num_stages"])
    args2 = (logits, o, t["indptr"], logits.stride(0), logits.stride(1), logits.stride(2))
    args2 += (o.stride(0), o.stride(1))
    kw2 = dict(NUM_KV_SPLITS=splits, BLOCK_DV=triton.next_power_of_2(lv), Lv=lv)
    kw2 |= dict(num_warps=4, num_stages=2)

    def run() -> None:
        stage1[grid1](*args1, **kw1)
        stage2[(batch, heads)](*args2, **kw2)

    return run, t


def mla_error(t: dict) -> float:
    """Return the max relative error of an MLA decode's output against torch's attention."""
    batch, heads, _ = t["q"].shape
    kv = t["kv"].float().view(batch, -1, KV_LORA + ROPE)
    scores = torch.einsum("bhd,bnd->bhn", t["q"].float(), kv) * t["scale"]
    ref = torch.einsum("bhn,bnd->bhd", scores.softmax(-1), kv[..., :KV_LORA])
    out = t["o"].float()
    return float(((out - ref).abs().max() / ref.abs().max().clamp_min(1e-6)).item())


def probe_mla(args, common: dict, cuda: bool, rows: list) -> None:
    """Time SGLang 0.4.3's Triton MLA decode (both kernels a layer) over heads, batch, context."""
    device = torch.device("cuda" if cuda else "cpu")
    torch.manual_seed(2)
    release = "sglang-0.4.3.post2"
    stage1, spec = load(args.kernels, release, "mla_decode")
    stage2 = getattr(sys.modules[module_name(release, "mla_decode")], spec["reduce"])
    heads_list = (16,) if args.tiny else MLA_HEADS
    contexts = [64] if args.tiny else [int(c) for c in args.mla_contexts.split(",")]
    batches = [2] if args.tiny else [int(b) for b in args.mla_batches.split(",")]
    for heads in heads_list:
        for context in contexts:
            for batch in batches:
                kv_bytes = batch * context * (KV_LORA + ROPE) * 2
                copies = copies_for(kv_bytes, common["l2_bytes"], cuda)
                row = {**common, "release": release, "part": "mla_decode", "heads": heads}
                row |= {"batch": batch, "context": context, "tokens": batch, "copies": copies}
                row |= {"config_device": "fixed", "config_table": "none (fixed launch)"}
                row |= {"config": spec["launch"], "kernel_module": spec["module"]}
                row["bytes_per_call"] = kv_bytes  # the latent cache read once: the kernel's floor
                try:
                    calls = [
                        mla_call(stage1, stage2, spec["launch"], heads, batch, context, device)
                        for _ in range(copies)
                    ]
                    row["status"] = "ok"
                    if not cuda or (batch <= 2 and context <= 4096):
                        calls[0][0]()
                        row["max_rel_err"] = round(mla_error(calls[0][1]), 4)
                    if cuda:
                        row |= timed([c[0] for c in calls], args.repeats)
                    del calls
                except Exception as exc:
                    row |= {"status": "launch", "message": f"{type(exc).__name__}: {exc}"}
                finish(row, rows)


def timed(calls: list, repeats: int) -> dict:
    """Return the median / p10 / p90 microseconds of one call among `calls` (time_gpu's graph)."""
    samples, method = time_gpu(calls, repeats, warmup=1)
    us = [s * 1e3 for s in samples]
    return {
        "us_per_call": round(statistics.median(us), 2),
        "us_p10": round(percentile(us, 0.1), 2),
        "us_p90": round(percentile(us, 0.9), 2),
        "timing": method,
    }


def copies_for(weight_bytes: float, l2: int, cuda: bool) -> int:
    """Return the weight copies whose total passes L2 four times (1 on the CPU)."""
    if not cuda:
        return 1
    return max(3, min(MAX_COPIES, math.ceil(4 * l2 / weight_bytes)))


def probe_gemms(args, common: dict, devices: list, cuda: bool, rows: list) -> None:
    """Time each release's w8a8_block_fp8_matmul over the GEMMs, tokens and config devices."""
    device = torch.device("cuda" if cuda else "cpu")
    generator = torch.Generator().manual_seed(0)
    gemms = TINY_GEMMS if args.tiny else {g: GEMMS[g] for g in args.gemms.split(",")}
    done = {}  # (kernel source, config, N, K, M) -> timing: both releases' same kernel, once
    for gemm, (n, k) in gemms.items():
        copies = copies_for(n * k, common["l2_bytes"], cuda)
        for release in args.releases.split(","):
            kernel, spec = load(args.kernels, release, "block_fp8_gemm")
            src = hashlib.sha256(inspect.getsource(kernel.fn).encode()).hexdigest()
            for config_device in devices:
                configs, source = table(spec, "block_fp8_gemm", f"N={n},K={k}", config_device)
                for m in args.token_list:
                    config = pick(configs, spec, m)
                    row = {**common, "release": release, "part": "block_fp8_gemm"}
                    row |= {"gemm": gemm, "n": n, "k": k, "tokens": m, "copies": copies}
                    row |= {"config_device": config_device, "config_table": source}
                    row |= {"config": config, "release_kernel_sm90": release_kernel(n, k)}
                    row |= {"kernel_src_sha256": src[:16], "kernel_module": spec["module"]}
                    scale_bytes = triton.cdiv(n, BLOCK) * triton.cdiv(k, BLOCK) * 4
                    row["bytes_per_call"] = n * k + scale_bytes + m * k + m * n * 2
                    key = (src, json.dumps(config, sort_keys=True), n, k, m)
                    try:
                        if key not in done:
                            calls = [
                                gemm_call(kernel, m, n, k, config, device, generator)
                                for _ in range(copies)
                            ]
                            result = {"status": "ok"}
                            if m <= 4 or not cuda:
                                calls[0][0]()
                                result["max_rel_err"] = round(gemm_error(calls[0][1]), 4)
                            if cuda:
                                result |= timed([c[0] for c in calls], args.repeats)
                            done[key] = result
                            del calls
                        row |= done[key]
                    except Exception as exc:  # a failure is a row: the message, kept
                        row |= {"status": "launch", "message": f"{type(exc).__name__}: {exc}"}
                    finish(row, rows)


def probe_moe(args, common: dict, devices: list, cuda: bool, rows: list) -> None:
    """Time each release's fused_moe gate_up and down calls over the --moe-models shapes, the
    tokens and the config devices."""
    for shape in args.moe_shapes:
        MOE_SHAPE[0] = shape
        _probe_moe_shape(args, common, devices, cuda, rows, shape)


def _probe_moe_shape(args, common, devices: list, cuda: bool, rows: list, shape: dict) -> None:
    """Time each release's fused_moe calls for one shape (MOE_SHAPE[0])."""
    device = torch.device("cuda" if cuda else "cpu")
    generator = torch.Generator().manual_seed(1)
    e, h, i = shape["experts"], shape["hidden"], shape["inter"]
    touched = shape["top_k"] * 3 * i * h
    copies = copies_for(touched, common["l2_bytes"], cuda)
    weights = [
        {
            "w_up": fp8((e, 2 * i, h), device, generator),
            "s_up": scales((e, 2 * i // BLOCK, h // BLOCK), device),
            "w_dn": fp8((e, h, i), device, generator),
            "s_dn": scales((e, h // BLOCK, i // BLOCK), device),
        }
        for _ in range(copies)
    ]
    for release in args.releases.split(","):
        kernel, spec = load(args.kernels, release, "fused_moe")
        for config_device in devices:
            configs, source = table(spec, "fused_moe", f"E={e},N={i}", config_device)
            for m in args.token_list:
                config = pick(configs, spec, m)
                base = {**common, "release": release, "model": shape["model"], "tp": shape["tp"]}
                base |= {"experts": e, "top_k": shape["top_k"], "shared_fused": False}
                base |= {"hidden": h, "inter_shard": i, "tokens": m, "copies": copies}
                base |= {"config_device": config_device, "config_table": source}
                base |= {"config": config, "kernel_module": spec["module"]}
                _moe_rows(args, cuda, rows, base, (kernel, spec, config, weights, generator))
    del weights


def _moe_rows(args, cuda: bool, rows: list, base: dict, how: tuple) -> None:
    """Build one token count's calls on every weight copy; time up, down and both (a row each)."""
    kernel, spec, config, weights, generator = how
    device, m = weights[0]["w_up"].device, base["tokens"]
    try:
        made = [moe_calls(kernel, spec, m, config, w, device, generator) for w in weights]
    except Exception as exc:
        made, failed = None, f"{type(exc).__name__}: {exc}"
    size = {}
    if made is not None:  # the mean over copies of what each call must move
        for part in ("up", "down"):
            size[part] = statistics.mean(
                touched_bytes(c[part][1]["ids"], c[part][1]["b"], c[part][1]["c"]) for c in made
            )
        size["up+down"] = size["up"] + size["down"]
    for part in ("up", "down", "up+down"):
        row = {**base, "part": f"fused_moe_{part}"}
        if part in size:
            row["bytes_per_call"] = int(size[part])
        try:
            if made is None:
                raise RuntimeError(failed)
            parts = ["up", "down"] if part == "up+down" else [part]
            seq = [c[p][0] for c in made for p in parts]
            row["status"] = "ok"
            if part != "up+down" and (m <= 4 or not cuda):
                made[0][part][0]()
                row["max_rel_err"] = round(moe_error(made[0][part][1]), 4)
            if cuda:
                result = timed(seq, args.repeats)
                if part == "up+down":  # per layer: both calls
                    result["us_per_call"] = round(result["us_per_call"] * 2, 2)
                row |= result
        except Exception as exc:
            row |= {"status": "launch", "message": f"{type(exc).__name__}: {exc}"}
        finish(row, rows)


def finish(row: dict, rows: list) -> None:
    """Add the bandwidth fraction where it applies, keep the row and print one line."""
    us, peak = row.get("us_per_call"), PEAK_BW.get(row["device"])
    if us and peak and "bytes_per_call" in row:
        row["bw_fraction_of_datasheet"] = round(row["bytes_per_call"] / (us * 1e-6) / peak, 3)
    rows.append(row)
    what = row.get("gemm") or row["part"] + (
        f" h{row['heads']} ctx{row['context']}" if "heads" in row else ""
    )
    tail = row.get("message", "")[:200] or f"{us} us err {row.get('max_rel_err')}"
    print(f"{row['release']} {what} m={row['tokens']} cfg={row['config_device']}"
          f" ({row['config_table'][:40]}): {tail}", flush=True)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Time the releases' kernels; write $OUT/release_gemm_probe.json."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=Path, default=Path(".engine_kernels"))
    parser.add_argument("--releases", default="sglang-0.4.3.post2,vllm-0.7.3")
    parser.add_argument("--tokens", default="1,2,4,8,16,32,64")
    parser.add_argument("--gemms", default=",".join(GEMMS), help="of " + ",".join(GEMMS))
    parser.add_argument(
        "--as-device", default="NVIDIA H200", help="also with these devices' tables (a,b; default)"
    )
    parser.add_argument("--moe", action="store_true", help="also the routed experts' fused_moe")
    parser.add_argument("--mla", action="store_true", help="also SGLang 0.4.3's MLA decode")
    parser.add_argument("--mla-batches", default="1,2,4,8,16,64", help="sequences on one GPU")
    parser.add_argument("--mla-contexts", default="1024,4096", help="tokens of each sequence")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--tiny", action="store_true", help="small shapes, checked, not timed")
    parser.add_argument(
        "--moe-models", default="deepseek_v3_tp8", help="of " + ",".join(MOE_MODELS)
    )
    parser.add_argument("--padded", action="store_true", help="vLLM 0.12's DeepGEMM rows (proxy)")
    args = parser.parse_args(argv)
    out = os.environ.get("OUT")
    if not out:
        sys.exit("release_gemm_probe: set OUT to the folder for release_gemm_probe.json")
    try:
        args.token_list = [int(t) for t in args.tokens.split(",")]
    except ValueError:
        sys.exit(f"release_gemm_probe: --tokens takes integers, not {args.tokens}")
    if min(args.token_list) < 1 or args.repeats < 1:
        sys.exit("release_gemm_probe: tokens and repeats must be >= 1")
    unknown = set(args.gemms.split(",")) - set(GEMMS) - {"none"}
    if unknown and not args.tiny:
        sys.exit(f"release_gemm_probe: no GEMM {sorted(unknown)[0]} (of {', '.join(GEMMS)})")
    models = args.moe_models.split(",")
    if set(models) - set(MOE_MODELS):
        bad = sorted(set(models) - set(MOE_MODELS))[0]
        sys.exit(f"release_gemm_probe: no MoE model {bad} (of {', '.join(MOE_MODELS)})")
    args.moe_shapes = [TINY_MOE] if args.tiny else [MOE_MODELS[name] for name in models]
    check_out_folder(out, ("release_gemm_probe.json",), flag="OUT")  # before they run, not after
    cuda = torch.cuda.is_available() and not os.environ.get("TRITON_INTERPRET")
    name = torch.cuda.get_device_name() if cuda else "cpu (TRITON_INTERPRET)"
    devices = list(dict.fromkeys([name, *filter(None, args.as_device.split(","))]))
    common = {
        "device": name,
        "measured_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "l2_bytes": torch.cuda.get_device_properties(0).L2_cache_size if cuda else 0,
        "figure": "measured" if cuda else "checked (interpreter, not timed)",
    }
    rows: list = []
    started = time.monotonic()
    try:
        if args.gemms != "none":
            probe_gemms(args, common, devices, cuda, rows)
        if args.moe:
            probe_moe(args, common, devices, cuda, rows)
        if args.padded:
            helpers = {"timed": timed, "copies_for": copies_for, "finish": finish}
            probe_padded(args, common, cuda, rows, helpers)
        if args.mla:
            probe_mla(args, common, cuda, rows)
    finally:
        Path(out).mkdir(parents=True, exist_ok=True)
        write_text(Path(out) / "release_gemm_probe.json", json.dumps(rows, indent=1) + "\n")
    print("\n".join(summary(rows)))
    print(f"{len(rows)} rows in {time.monotonic() - started:.0f} s: {out}/release_gemm_probe.json")
    return 0


if __name__ == "__main__":
    sys.exit(tool_main("release_gemm_probe", main))
