"""Time SGLang 0.5.23's own fused-MoE Triton kernel (w8a8, 128 x 128 block FP8) on one GPU, as a
TP8 decode step runs it: the routed experts' gate_up and down GEMMs of GLM-5 and DeepSeek-V3, in
a CUDA graph, weights cold (each call in the graph reads its own copy of the experts, enough
copies to pass L2 several times over), CUDA events, median of repeats; an empty kernel in the
same graph gives the fixed cost of one launch. torch and triton (and, from this checkout's src,
tilesweep.errors for its one-line errors and measure.timing's graph capture and event timer);
the kernel is loaded from
.engine_kernels/sglang-0.5.23/kernel.py (tools/fetch_engine_kernels.py; hash checked against its
manifest) and its config from the wheel's own tables there, as SGLang 0.5.23 picks them
(fused_moe_triton_config.py: get_config_file_name, the nearest batch key; no file: its
get_default_config for block FP8). Launch as SGLang's invoke_fused_moe_kernel does: the whole
sorted buffer as EM, swap_ab on sm_90 for BLOCK_SIZE_M < 64 <= BLOCK_SIZE_N, PDL on sm_90+,
the down GEMM's B through a TMA descriptor where the _down table says USE_TMA.

Writes $OUT/fused_moe_probe.json (rows) and prints one line a row. Usage:
  OUT=/tmp/o python tools/fused_moe_probe.py [--tokens 1,2,...] [--copies N] [--repeats N]
      [--as-device "NVIDIA H200"] [--models glm5,deepseek_v3] [--tiny]
--tiny times nothing: one small shape, launched and checked (TRITON_INTERPRET=1 on the CPU).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import importlib.util
import json
import os
import statistics
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # runs from a bare checkout
from tilesweep.errors import tool_main  # noqa: E402 - after the checkout's src is on the path
from tilesweep.io import check_out_folder, write_text  # noqa: E402 - likewise
from tilesweep.measure.timing import capture_graph, time_events  # noqa: E402 - likewise

KEPT = Path(".engine_kernels/sglang-0.5.23")
BLOCK = (128, 128)  # weight_block_size of both checkpoints' FP8 experts
# Routed experts at TP8 (conf/model/{glm5,deepseek_v3}.yaml: hidden, moe_intermediate / 8,
# routed_experts, top_k); SGLang fuses the one shared expert as expert E (E + 1, top_k + 1).
SHAPES = {
    "glm5": {"hidden": 6144, "inter": 2048 // 8, "experts": 256, "top_k": 8},
    "deepseek_v3": {"hidden": 7168, "inter": 2048 // 8, "experts": 256, "top_k": 8},
}
TINY = {"tiny": {"hidden": 256, "inter": 128, "experts": 8, "top_k": 2}}
# Datasheet HBM bandwidth, bytes/s (NVIDIA H100 SXM5 and H200 SXM product briefs).
PEAK_BW = {"NVIDIA H100 80GB HBM3": 3.35e12, "NVIDIA H200": 4.8e12}
PDL_EARLY_ROWS = 512  # invoke_fused_moe_kernel: GDC_EARLY when A has at most this many rows
PDL = [True]  # SGLang's PDL on sm_90+ (--no-pdl turns it off, to tell its share)
CONFIG_KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M")


def load_kernel():
    """Return SGLang's fused_moe_kernel from the extracted module, its hash checked."""
    if not (KEPT / "manifest.json").is_file():
        sys.exit(f"fused_moe_probe: no {KEPT}/manifest.json here (fetch_engine_kernels --release)")
    manifest = json.loads((KEPT / "manifest.json").read_text())
    text = (KEPT / "kernel.py").read_bytes()
    if hashlib.sha256(text).hexdigest() != manifest["kernel_py_sha256"]:
        sys.exit(f"{KEPT / 'kernel.py'}: differs from its manifest; extract it again")
    spec = importlib.util.spec_from_file_location("sglang_0_5_23_moe", KEPT / "kernel.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # Triton reads a JIT function's source from its file
    spec.loader.exec_module(module)
    return module.fused_moe_kernel, manifest


@triton.jit
def empty_kernel(x_ptr):
    """Do nothing: one launch's fixed cost in the graph."""
    if tl.program_id(0) < 0:
        tl.store(x_ptr, 0)


def config_file(experts: int, n: int, device: str, down: bool) -> str:
    """Return SGLang's config file name (get_config_file_name, fp8_w8a8, block [128, 128])."""
    name = f"E={experts},N={n},device_name={device.replace(' ', '_')},dtype=fp8_w8a8"
    return name + f",block_shape={list(BLOCK)}" + ("_down" if down else "") + ".json"


def table(name: str) -> tuple[dict | None, str]:
    """Return ({batch: config}, folder) of the running Triton's folder, else the newest other."""
    here = "triton_" + triton.__version__.split("+")[0].replace(".", "_")
    folders = sorted((KEPT / "configs").glob("triton_*"), key=lambda p: _version(p.name))
    for folder in [KEPT / "configs" / here, *reversed(folders)]:
        if (folder / name).is_file():
            data = json.loads((folder / name).read_text())
            return {int(k): v for k, v in data.items() if k.isdigit()}, folder.name
    return None, "none"


def _version(name: str) -> tuple:
    """Return a folder's Triton version as a tuple (triton_3_5_1 -> (3, 5, 1))."""
    return tuple(int(x) for x in name.removeprefix("triton_").split("_") if x.isdigit())


def pick(configs: dict | None, m: int) -> dict:
    """Return SGLang's config for M tokens: the nearest key, else its block-FP8 default."""
    if configs is None:  # get_default_config(dtype="fp8_w8a8", block_shape=[128, 128]), CUDA
        return {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": BLOCK[0], "BLOCK_SIZE_K": BLOCK[1]} | {
            "GROUP_SIZE_M": 32,
            "num_warps": 4,
            "num_stages": 3,
        }
    return dict(configs[min(configs, key=lambda key: abs(key - m))])


def layout(topk_ids, block_m: int, experts: int, device):
    """Return (sorted_ids, expert_ids, post_pad) as SGLang's moe_align_block_size hands them."""
    flat = topk_ids.flatten().cpu()
    pairs = flat.numel()
    size = pairs + (experts + 1) * (block_m - 1)  # E + 1 buckets, rounded to 4
    if pairs < experts + 1:
        size = pairs * block_m
    size = (size + 3) // 4 * 4
    sorted_ids = torch.full((size,), pairs, dtype=torch.int32)
    expert_ids = torch.full((triton.cdiv(size, block_m),), -1, dtype=torch.int32)
    at = 0
    for e in range(experts):
        rows = (flat == e).nonzero().flatten()
        if rows.numel() == 0:
            continue
        sorted_ids[at : at + rows.numel()] = rows.to(torch.int32)
        span = triton.cdiv(rows.numel(), block_m)
        expert_ids[at // block_m : at // block_m + span] = e
        at += span * block_m
    post = torch.tensor([at], dtype=torch.int32)
    return sorted_ids.to(device), expert_ids.to(device), post.to(device)


def route(m: int, shape: dict, generator) -> torch.Tensor:
    """Return [m, top_k + 1] expert ids: top_k distinct routed ones and the fused shared one."""
    e, k = shape["experts"], shape["top_k"]
    ids = torch.stack([torch.randperm(e, generator=generator)[:k] for _ in range(m)])
    return torch.cat([ids, torch.full((m, 1), e)], dim=1).to(torch.int32)


def fp8(shape, device, generator) -> torch.Tensor:
    """Return a random FP8 e4m3 tensor of this shape (bytes 0-0x77: finite, positive)."""
    if device.type == "cuda":  # made on the GPU: a copy of the experts is a GB
        return torch.randint(0, 0x78, shape, dtype=torch.uint8, device=device).view(
            torch.float8_e4m3fn
        )
    x = torch.randint(0, 0x78, shape, dtype=torch.uint8, generator=generator)
    return x.view(torch.float8_e4m3fn)


def scales(shape, device) -> torch.Tensor:
    """Return random float32 block scales of this shape, in [0.5, 1.5)."""
    return torch.rand(shape, device=device) + 0.5


def experts(shape: dict, device, generator) -> dict:
    """Return one copy of a layer's experts at TP8: gate_up and down weights with block scales."""
    e, h, i = shape["experts"] + 1, shape["hidden"], shape["inter"]
    return {
        "w_up": fp8((e, 2 * i, h), device, generator),
        "s_up": scales((e, 2 * i // BLOCK[0], h // BLOCK[1]), device),
        "w_dn": fp8((e, h, i), device, generator),
        "s_dn": scales((e, h // BLOCK[0], i // BLOCK[1]), device),
    }


class Gemm:
    """One expert GEMM call as SGLang launches it; `call()` launches it on its copy of B."""

    def __init__(self, kernel, a, a_scale, b, b_scale, c, topk_ids, weights, top_k, config, **how):
        """`how`: block_m (the layout's, SGLang's up config's), tma (down: A and B through TMA
        descriptors), c_sorted (up, when the down GEMM uses TMA)."""
        self.kernel, self.config = kernel, config
        experts, n, k = b.shape
        bm, bn, bk = (config[key] for key in CONFIG_KEYS[:3])
        tma, c_sorted = how.get("tma", False), how.get("c_sorted", False)
        self.topk_ids, self.c_sorted, self.a_sorted = topk_ids, c_sorted, tma
        block_m = how.get("block_m", bm)
        self.sorted_ids, self.expert_ids, self.post = layout(topk_ids, block_m, experts, a.device)
        em = self.sorted_ids.numel()
        self.grid = (triton.cdiv(em, bm) * triton.cdiv(n, bn),)
        cuda = a.device.type == "cuda"
        cc = torch.cuda.get_device_capability(a.device)[0] if cuda else 0
        cuda_ver = tuple(int(x) for x in (torch.version.cuda or "0.0").split(".")[:2])
        sm90 = cc == 9 and cuda_ver >= (12, 3)
        a_desc = b_desc = None
        if tma:  # SGLang's TMA down path: A [BM, BK] and B [1, BN, BK] boxes
            from triton.tools.tensor_descriptor import TensorDescriptor  # optional: Triton 3.4+

            triton.set_allocator(lambda size, align, stream: torch.empty(size, device="cuda",
                                 dtype=torch.int8))  # fmt: skip
            a_desc = TensorDescriptor(a, list(a.shape), list(a.stride()), [bm, bk])
            b_desc = TensorDescriptor(b, list(b.shape), list(b.stride()), [1, bn, bk])
        self.kwargs = dict(
            a_ptr=a,
            a_desc=a_desc,
            b_ptr=b,
            b_desc=b_desc,
            bias_ptr=None,
            c_ptr=c,
            a_scale_ptr=a_scale,
            b_scale_ptr=b_scale,
            topk_weights_ptr=weights,
            sorted_token_ids_ptr=self.sorted_ids,
            expert_ids_ptr=self.expert_ids,
            num_tokens_post_padded_ptr=self.post,
            add_mask_ptr=None,
            N=n,
            K=k,
            EM=em,
            num_valid_tokens=topk_ids.numel(),
            stride_am=a.stride(0),
            stride_ak=a.stride(1),
            stride_be=b.stride(0),
            stride_bk=b.stride(2),
            stride_bn=b.stride(1),
            stride_bias_e=0,
            stride_bias_n=0,
            stride_cm=c.stride(-2),
            stride_cn=c.stride(-1),
            stride_asm=a_scale.stride(0),
            stride_ask=a_scale.stride(1),
            stride_bse=b_scale.stride(0),
            stride_bsk=b_scale.stride(2),
            stride_bsn=b_scale.stride(1),
            group_n=BLOCK[0],
            group_k=BLOCK[1],
            MUL_ROUTED_WEIGHT=weights is not None,
            top_k=top_k,
            compute_type=tl.bfloat16,
            use_fp8_w8a8=True,
            use_int8_w8a8=False,
            use_int8_w8a16=False,
            per_channel_quant=False,
            even_Ks=k % bk == 0,
            c_sorted=c_sorted,
            swap_ab=sm90 and bm < 64 <= bn,
            FUSE_ADD_TO_OUTPUT=False,
            MASK_OUTPUT=False,
            FUSE_SUM_ALL_REDUCE=False,
            ROUTER_TOPK=1,
            **{key: config[key] for key in CONFIG_KEYS},
            num_warps=config["num_warps"],
            num_stages=config["num_stages"],
        )
        if cc >= 9 and PDL[0]:
            self.kwargs.update(USE_GDC=True, GDC_EARLY=a.shape[0] <= PDL_EARLY_ROWS)
            self.kwargs["launch_pdl"] = True

    def call(self) -> None:
        """Launch the kernel once."""
        self.kernel[self.grid](**self.kwargs)


def touched_bytes(topk_ids, b, c) -> int:
    """Return the bytes one call must move: the touched experts' B and scales, A, and C."""
    experts = torch.unique(topk_ids).numel()
    _, n, k = b.shape
    scales = triton.cdiv(n, BLOCK[0]) * triton.cdiv(k, BLOCK[1]) * 4
    pairs = topk_ids.numel()
    return experts * (n * k + scales) + pairs * (k + k // BLOCK[1] * 4) + pairs * n * c.itemsize


def calls(kernel, shape, m, weights, tables, generator) -> tuple[dict, list]:
    """Return ({part: (gemm builder, config, tma)}, inputs) for M tokens; builders take a copy's
    index. As fused_moe.py's fused_experts_impl: the layout aligned to the up config's
    BLOCK_SIZE_M serves both GEMMs; where the _down table says USE_TMA, the up GEMM writes its
    output in sorted, block-padded order (c_sorted) and the down GEMM reads A and B by TMA."""
    k = shape["top_k"] + 1
    up_cfg, down_cfg = pick(tables["up"][0], m), pick(tables["down"][0] or tables["up"][0], m)
    tma = bool(down_cfg.pop("USE_TMA", False)) and tables["down"][0] is not None
    up_cfg.pop("USE_TMA", None)  # up TMA: opt-in, no shipped up table sets it here
    device = weights[0]["w_up"].device
    h, i, e = shape["hidden"], shape["inter"], shape["experts"] + 1
    bm = up_cfg["BLOCK_SIZE_M"]
    pairs = m * k
    # fused_experts_impl: padded_tokens = min(pairs, E + 1) x (BLOCK_SIZE_M - 1) on the TMA path
    rows = pairs + min(pairs, e) * (bm - 1)
    inputs = []
    for _ in weights:  # each copy its own routing and activations, as each layer has
        ids = route(m, shape, generator).to(device)
        inputs.append(
            {
                "ids": ids,
                "topk_w": torch.rand(pairs, device=device),
                "a": fp8((m, h), device, generator),
                "a_s": scales((m, h // BLOCK[1]), device),
                "c1": torch.empty(m, k, 2 * i, dtype=torch.bfloat16, device=device),
                "c1_sorted": torch.empty(rows, 2 * i, dtype=torch.bfloat16, device=device),
                "a2": fp8((pairs, i), device, generator),  # silu_and_mul's output, per group
                "a2_s": scales((pairs, i // BLOCK[1]), device),
                "a2_sorted": fp8((rows, i), device, generator),
                "a2_sorted_s": scales((rows, i // BLOCK[1]), device),
                "c3": torch.empty(m, k, h, dtype=torch.bfloat16, device=device),
            }
        )

    def up(j):
        w, x = weights[j], inputs[j]
        c = x["c1_sorted"] if tma else x["c1"]
        return Gemm(kernel, x["a"], x["a_s"], w["w_up"], w["s_up"], c, x["ids"], None, k,
                    up_cfg, c_sorted=tma)  # fmt: skip

    def down(j, use_tma=tma):
        w, x = weights[j], inputs[j]
        a, a_s = (x["a2_sorted"], x["a2_sorted_s"]) if use_tma else (x["a2"], x["a2_s"])
        return Gemm(kernel, a, a_s, w["w_dn"], w["s_dn"], x["c3"], x["ids"], x["topk_w"], 1,
                    down_cfg, tma=use_tma, block_m=bm)  # fmt: skip

    return {"up": (up, up_cfg, False), "down": (down, down_cfg, tma)}, inputs


def check(gemm, part: str) -> float:
    """Return the max relative error of a call's output against a torch dequantised reference."""
    gemm.call()
    args = gemm.kwargs
    ids = gemm.topk_ids.flatten().long()
    pairs = ids.numel()
    post = int(gemm.post.item())
    sid = gemm.sorted_ids[:post].long()
    at = torch.nonzero(sid < pairs).flatten()  # sorted positions holding a routed pair
    where = torch.empty(pairs, dtype=torch.long, device=ids.device)
    where[sid[at]] = at  # each pair's sorted position
    rows = where if gemm.a_sorted else torch.arange(pairs, device=ids.device) // args["top_k"]
    a = args["a_ptr"].float()
    a = a * args["a_scale_ptr"].repeat_interleave(BLOCK[1], 1)[:, : a.shape[1]]
    b = args["b_ptr"][ids].float()  # the touched experts only, one per routed pair
    sb = args["b_scale_ptr"][ids].repeat_interleave(BLOCK[0], 1).repeat_interleave(BLOCK[1], 2)
    b = b * sb[:, : b.shape[1], : b.shape[2]]
    ref = torch.einsum("pk,pnk->pn", a[rows], b)
    if part == "down":
        ref = ref * args["topk_weights_ptr"][:, None]
    c = args["c_ptr"]
    out = c[where] if gemm.c_sorted else c.reshape(pairs, -1)
    out = out.float()
    return float(((out - ref).abs().max() / ref.abs().max().clamp_min(1e-6)).item())


def time_graph(calls, repeats: int) -> float:
    """Return the median microseconds of one replay of a graph of `calls` (CUDA events)."""
    graph = capture_graph(calls)  # each call runs once on a side stream first (compiles)
    for _ in range(3):
        graph.replay()
    return statistics.median(time_events(graph.replay, repeats)) * 1e3


def main() -> int:
    """Time the kernel over the token counts; write $OUT/fused_moe_probe.json."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", default="1,2,4,8,16,32,64")
    parser.add_argument("--copies", type=int, default=0, help="weight copies (0: pass L2 x4)")
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument(
        "--as-device", default="NVIDIA H200", help="also time with this device's config tables"
    )
    parser.add_argument("--no-pdl", action="store_true", help="launch without PDL (not SGLang)")
    parser.add_argument("--models", default=",".join(SHAPES), help="of " + ",".join(SHAPES))
    parser.add_argument("--tiny", action="store_true", help="one small shape; checks the launch")
    args = parser.parse_args()
    out = os.environ.get("OUT")
    if not out:
        sys.exit("fused_moe_probe: set OUT to the folder for fused_moe_probe.json")
    try:
        tokens = [int(t) for t in args.tokens.split(",")]
    except ValueError:
        sys.exit(f"fused_moe_probe: --tokens takes integers separated by commas, not {args.tokens}")
    if min(tokens) < 1 or args.copies < 0 or args.repeats < 1:
        sys.exit("fused_moe_probe: tokens and repeats must be >= 1, copies >= 0")
    wanted = args.models.split(",")
    if not set(wanted) <= set(SHAPES):
        sys.exit(f"fused_moe_probe: --models takes {','.join(SHAPES)}, not {args.models}")
    kernel, manifest = load_kernel()
    check_out_folder(out, ("fused_moe_probe.json",), flag="OUT")  # before it runs, not after
    PDL[0] = not args.no_pdl
    cuda = torch.cuda.is_available() and not os.environ.get("TRITON_INTERPRET")
    device = torch.device("cuda" if cuda else "cpu")
    name = torch.cuda.get_device_name() if cuda else "cpu (TRITON_INTERPRET)"
    l2 = torch.cuda.get_device_properties(0).L2_cache_size if cuda else 0
    names = [name] + ([args.as_device] if args.as_device and args.as_device != name else [])
    shapes = TINY if args.tiny else {model: SHAPES[model] for model in wanted}
    generator = torch.Generator().manual_seed(0)
    rows = []
    common = {
        "device": name,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "pdl": PDL[0],
        "l2_bytes": l2,
        "kernel": f"{manifest['wheel']} {manifest['module']} sha256 {manifest['module_sha256']}",
    }
    if cuda:  # the fixed cost: one empty launch a call, same graph conditions
        flag = torch.zeros(1, device=device)
        empties = [lambda: empty_kernel[(1,)](flag)] * 64
        us = time_graph(empties, args.repeats) / len(empties)
        rows.append({**common, "part": "empty", "us_per_call": round(us, 2)})
        print(f"empty kernel in graph: {us:.2f} us a launch")
    for model, shape in shapes.items():
        e, h, i = shape["experts"] + 1, shape["hidden"], shape["inter"]
        # Copies: the fewest whose touched experts at one token pass L2 four times over.
        touched = (shape["top_k"] + 1) * 3 * i * h
        copies = args.copies or (max(4, -(-4 * l2 // touched)) if cuda else 1)
        weights = [experts(shape, device, generator) for _ in range(copies)]
        for table_device in names:
            tables = {
                "up": table(config_file(e, i, table_device, False)),
                "down": table(config_file(e, i, table_device, True)),
            }
            for m in tokens:
                parts, inputs = calls(kernel, shape, m, weights, tables, generator)
                size = {
                    "up": statistics.mean(
                        touched_bytes(x["ids"], w["w_up"], x["c1"])
                        for x, w in zip(inputs, weights, strict=True)
                    ),
                    "down": statistics.mean(
                        touched_bytes(x["ids"], w["w_dn"], x["c3"])
                        for x, w in zip(inputs, weights, strict=True)
                    ),
                }
                size["up+down"] = size["up"] + size["down"]
                runs = {
                    "up": (parts["up"][0], parts["up"][2]),
                    "down": (parts["down"][0], parts["down"][2]),
                }
                if parts["down"][2]:  # the same down GEMM without TMA, for comparison
                    runs["down_no_tma"] = (
                        functools.partial(parts["down"][0], use_tma=False),
                        False,
                    )
                runs["up+down"] = (None, parts["down"][2])
                made = {}
                for part, (builder, tma) in runs.items():
                    base = part.split("_")[0] if part != "up+down" else "down"
                    row = {**common, "model": model, "tp": 8, "tokens": m, "part": part}
                    row |= {"experts": e, "top_k": shape["top_k"] + 1, "hidden": h}
                    row |= {"inter_shard": i, "copies": copies, "config_device": table_device}
                    row |= {"config_table": tables[base][1], "tma": tma}
                    row["c_sorted"] = part == "up" and parts["down"][2]  # up feeds a TMA down
                    row |= {"config": parts[base][1] if part != "up+down" else None}
                    row |= {"bytes_per_call": int(size[base if part != "up+down" else part])}
                    try:
                        if part == "up+down":  # one layer's two GEMMs in order, PDL between
                            down = made.get("down") or made.get("down_no_tma")
                            if "up" not in made or down is None:
                                raise RuntimeError("up or down failed above")
                            row["tma"] = "down" in made and tma
                            pairs = zip(made["up"], down, strict=True)
                            seq = [g.call for pair in pairs for g in pair]
                        else:
                            made[part] = [builder(j) for j in range(copies)]
                            seq = [g.call for g in made[part]]
                            if m <= 4:
                                row["max_rel_err"] = round(check(made[part][0], base), 4)
                        us = time_graph(seq, args.repeats) / copies if cuda else None
                    except Exception as exc:  # a failure is a row: the message, kept
                        row |= {"status": "launch", "message": f"{type(exc).__name__}: {exc}"}
                        rows.append(row)
                        print(f"{model} {table_device} m={m} {part}: {row['message'][:300]}")
                        continue
                    row["status"] = "ok"
                    row["us_per_call"] = None if us is None else round(us, 2)
                    if us and name in PEAK_BW:
                        bw = row["bytes_per_call"] / (us * 1e-6)
                        row |= {"eff_bw_TBps": round(bw / 1e12, 3)}
                        row |= {"bw_fraction_of_datasheet": round(bw / PEAK_BW[name], 3)}
                    rows.append(row)
                    print(
                        f"{model} cfg={table_device} m={m} {part}: {row['us_per_call']} us,"
                        f" {row['bytes_per_call'] / 1e6:.1f} MB,"
                        f" frac {row.get('bw_fraction_of_datasheet')}, err"
                        f" {row.get('max_rel_err')} ({tables[base][1]}, tma {tma})",
                        flush=True,
                    )
                del made, parts, inputs
                save(rows, out)
        del weights
        if cuda:
            torch.cuda.empty_cache()
    save(rows, out)
    return 0


def save(rows: list, out: str) -> None:
    """Write the rows so far to $OUT/fused_moe_probe.json (kept if a later shape runs out)."""
    Path(out).mkdir(parents=True, exist_ok=True)
    write_text(Path(out) / "fused_moe_probe.json", json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(tool_main("fused_moe_probe", main))
