"""Time vLLM's own Marlin MoE path (VLLM_MXFP4_USE_MARLIN=1 on sm_90: MXFP4 experts, bf16
activations, moe_wna16_marlin_gemm) at gpt-oss-120b's routed-expert shapes on one GPU, as one
decode step's MoE layer runs it: the hidden state padded to vLLM's Marlin width (F.pad),
moe_align_block_size, the w13 Marlin GEMM (its bias), swigluoai_and_mul, the w2 Marlin GEMM
(bias, router weights), and the sum over top-k (torch.sum into the output, as fused_marlin_moe
does without a moe_sum callback). Shapes as mxfp4.py's Marlin branch pads them: the expert
intermediate per TP shard rounded up to 128, the hidden size to 256. Kernels compiled from the
extracted vLLM sources by tools/marlin_moe_build.py (hashes checked against their manifest).

Each call in a CUDA graph reads its own copy of the experts (enough copies that the touched
experts pass L2 four times), random distinct routing, median of repeats (time_gpu). Every row
has both thread-config tables' figures where they differ: the source's own ("built") and the
one without its (128, 64, 128) entry ("without_128x64", as vLLM 0.14.1's ops.cu has it; the
kernel template is the same in both). One layer per shape is checked once against torch on
dequantised weights.

Writes $OUT/marlin_moe_probe.json and prints one line a row. Usage:
  OUT=/tmp/o python tools/marlin_moe_probe.py [--src DIR] [--build DIR] [--tokens 1,2,...]
      [--tps 8,4,2] [--repeats N] [--copies N]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

import torch


def _root() -> Path:
    """Return the checkout this file runs in (the first parent holding src/tilesweep)."""
    for parent in Path(__file__).resolve().parents:
        if (parent / "src" / "tilesweep").is_dir():
            return parent
    sys.exit("marlin_moe_probe: run it inside a tilesweep checkout (no src/tilesweep above it)")


ROOT = _root()
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tools")]  # runs from a bare checkout
from marlin_moe_build import NAME, WHEEL_GENCODE, block_size_m, build  # noqa: E402

from tilesweep.errors import tool_main  # noqa: E402
from tilesweep.io import check_out_folder, write_text  # noqa: E402
from tilesweep.measure.timing import percentile, time_gpu  # noqa: E402

# gpt-oss-120b (conf/model/gpt_oss_120b.yaml): hidden, expert intermediate, experts, top-k.
MODEL = {"hidden": 2880, "inter": 2880, "experts": 128, "top_k": 4}
# Datasheet HBM bandwidth, bytes/s (NVIDIA H100 SXM5 and H200 SXM product briefs), as
# tools/fused_moe_probe.py has it (not imported: that module needs Triton).
PEAK_BW = {"NVIDIA H100 80GB HBM3": 3.35e12, "NVIDIA H200": 4.8e12}
SWIGLU = (1.702, 7.0)  # swigluoai_and_mul's alpha and limit (gpt-oss's defaults)
FP4 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
MAX_COPIES = 64
DROPPED = (128, 64, 128)  # the entry vLLM 0.16.0's tables add to 0.14.1's


def round_up(value: int, multiple: int) -> int:
    """Return value rounded up to a multiple."""
    return -(-value // multiple) * multiple


def shard(tp: int, model: dict = MODEL) -> dict:
    """Return one TP shard's Marlin shapes (padded as mxfp4.py's Marlin branch) and the model's."""
    if model["inter"] % tp:
        sys.exit(f"marlin_moe_probe: intermediate {model['inter']} does not split over TP{tp}")
    inter = model["inter"] // tp
    return {
        "tp": tp,
        "hidden": round_up(model["hidden"], 256),  # mxfp4.py: round_up(hidden_size, 256)
        "inter": round_up(inter, 128),  # mxfp4.py: round_up(intermediate_size_per_partition, 128)
        "model_hidden": model["hidden"],
        "model_inter": inter,
        "experts": model["experts"],
        "top_k": model["top_k"],
    }


def expert_bytes(hidden: int, inter: int) -> dict:
    """Return one expert's weight bytes per GEMM: FP4 values, e8m0 scales (group 32), bf16 bias."""
    w13 = 2 * inter * hidden // 2 + 2 * inter * hidden // 32 + 2 * inter * 2
    w2 = hidden * inter // 2 + hidden * inter // 32 + hidden * 2
    return {"w13": w13, "w2": w2}


def touched_bytes(s: dict, tokens: int, experts_touched: int) -> dict:
    """Return the bytes one layer reads and writes (padded shapes, and the model's unpadded)."""
    padded = expert_bytes(s["hidden"], s["inter"])
    model = expert_bytes(s["model_hidden"], s["model_inter"])
    rows = tokens * s["top_k"]
    act_padded = 2 * (tokens * s["hidden"] * 2 + rows * (3 * s["inter"] + s["hidden"]))
    act_model = 2 * (
        tokens * s["model_hidden"] * 2 + rows * (3 * s["model_inter"] + s["model_hidden"])
    )
    return {
        "bytes_padded": experts_touched * (padded["w13"] + padded["w2"]) + act_padded,
        "bytes_model": experts_touched * (model["w13"] + model["w2"]) + act_model,
    }


def route(tokens: int, s: dict, generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Return random distinct top-k expert ids (int32) and router weights (float32) per token."""
    ids = torch.stack(
        [torch.randperm(s["experts"], generator=generator)[: s["top_k"]] for _ in range(tokens)]
    )
    weights = torch.rand(tokens, s["top_k"], generator=generator).softmax(dim=-1)
    return ids.to(torch.int32), weights.float()


def align_sizes(numel: int, experts: int, block: int) -> tuple[int, int]:
    """Return moe_align_block_size's sorted-id and expert-id lengths (its Python wrapper's rule)."""
    padded = numel + experts * (block - 1)
    if numel < experts:
        padded = min(numel * block, padded)
    return padded, math.ceil(padded / block)


def copies_for(weight_bytes: float, l2: int) -> int:
    """Return the weight copies whose touched bytes pass L2 four times."""
    return max(3, min(MAX_COPIES, math.ceil(4 * l2 / weight_bytes)))


def _ops():
    """Return this build's torch.ops namespace."""
    return getattr(torch.ops, NAME)


def experts(s: dict, device, generator, codes: bool = False) -> dict:
    """Return one copy of the experts in Marlin's layout; with codes, repacked from known values."""
    e, h, i = s["experts"], s["hidden"], s["inter"]
    out = {}
    for name, n, k in (("w13", 2 * i, h), ("w2", h, i)):
        if codes:  # checkpoint layout [n, k / 2] bytes, low nibble first, repacked per expert
            nib = torch.randint(
                0, 16, (e, n, k), generator=generator, dtype=torch.uint8, device=device
            )
            packed = nib[..., 0::2] | (nib[..., 1::2] << 4)
            empty = torch.empty(0, dtype=torch.int32, device=device)
            out[name] = torch.stack(
                [
                    _ops().gptq_marlin_repack(
                        packed[x].view(torch.int32).T.contiguous(), empty, k, n, 4, False
                    )
                    for x in range(e)
                ]
            )
            out[name + "_codes"] = nib
        else:
            shape = (e, k // 16, n * 2)  # gptq_marlin_repack's output, 8 FP4 values an int32
            out[name] = torch.randint(
                -(2**31), 2**31 - 1, shape, generator=generator, dtype=torch.int32, device=device
            )
        # One e8m0 scale and one bias per expert (constant over n and k, so Marlin's scale and
        # bias permutations leave them as they are): 2^-1, 2^0 or 2^1; bias in [-1, 1).
        exps = (torch.arange(e) % 3 + 126).to(torch.uint8)  # e8m0: 2^(byte - 127)
        out[name + "_scale"] = (
            exps[:, None, None]
            .expand(e, k // 32, n)
            .contiguous()
            .to(device)
            .view(torch.float8_e8m0fnu)
        )
        out[name + "_scale_value"] = 2.0 ** (torch.arange(e) % 3 - 1).float()
        out[name + "_bias_value"] = torch.rand(e, generator=generator, device=device) * 2 - 1
        out[name + "_bias"] = (
            out[name + "_bias_value"][:, None].expand(e, n).to(torch.bfloat16).contiguous()
        )
    return out


class Layer:
    """One MoE layer's launches on one copy of the experts, vLLM's sequence, buffers kept."""

    def __init__(self, s: dict, weights: dict, x, topk_ids, topk_weights, block: int):
        device, rows, h, i = x.device, topk_ids.numel(), s["hidden"], s["inter"]
        self.s, self.w, self.x, self.ids, self.topk_weights, self.block = (
            s,
            weights,
            x,
            topk_ids,
            topk_weights,
            block,
        )
        sorted_len, blocks = align_sizes(rows, s["experts"], block)
        self.sorted = torch.empty(sorted_len, dtype=torch.int32, device=device)
        self.expert_ids = torch.empty(blocks, dtype=torch.int32, device=device)
        self.post_pad = torch.empty(1, dtype=torch.int32, device=device)
        sms = torch.cuda.get_device_properties(device).multi_processor_count if x.is_cuda else 1
        self.workspace = torch.zeros(
            sms * 4, dtype=torch.int32, device=device
        )  # marlin_make_workspace_new(dev, 4)
        cache13 = torch.empty(rows * max(2 * i, h), dtype=x.dtype, device=device)
        self.cache1, self.cache3 = (
            cache13[: rows * 2 * i].view(rows, 2 * i),
            cache13[: rows * h].view(rows, h),
        )
        self.cache2 = torch.empty(rows, i, dtype=x.dtype, device=device)
        self.out = torch.empty(x.shape[0], h, dtype=x.dtype, device=device)
        self.xp = self.pad()
        self.b_type = _ops().kfe2m1f_id()

    def pad(self):
        """FusedMoE.forward: the hidden state padded to the layer's (Marlin) hidden size."""
        self.xp = torch.nn.functional.pad(self.x, (0, self.s["hidden"] - self.x.shape[1]))
        return self.xp

    def align(self) -> None:
        """moe_align_block_size (no expert map)."""
        _ops().moe_align_block_size(
            self.ids,
            self.s["experts"],
            self.block,
            self.sorted,
            self.expert_ids,
            self.post_pad,
            None,
        )

    def _gemm(self, a, c, name: str, top_k: int, mul: bool, m: int, n: int, k: int) -> None:
        """One moe_wna16_marlin_gemm as fused_marlin_moe launches it (auto thread config)."""
        w = self.w
        _ops().moe_wna16_marlin_gemm(
            a,
            c,
            w[name],
            w[name + "_bias"],
            w[name + "_scale"],
            None,
            None,
            None,
            None,
            None,
            self.workspace,
            self.sorted,
            self.expert_ids,
            self.post_pad,
            self.topk_weights,
            self.block,
            top_k,
            mul,
            self.b_type,
            m,
            n,
            k,
            True,
            False,
            True,
            False,
            -1,
            -1,
            -1,
        )

    def w13(self) -> None:
        """The gate_up GEMM: tokens x top-k rows, its bias, router weights not applied."""
        t, s = self.x.shape[0], self.s
        self._gemm(self.xp, self.cache1, "w13", s["top_k"], False, t, 2 * s["inter"], s["hidden"])

    def act(self) -> None:
        """swigluoai_and_mul over the interleaved gate/up halves."""
        _ops().swigluoai_and_mul(self.cache2, self.cache1, *SWIGLU)

    def w2(self) -> None:
        """The down GEMM: one row per routed pair, its bias, times the router weight."""
        t, s = self.x.shape[0], self.s
        self._gemm(self.cache2, self.cache3, "w2", 1, True, t * s["top_k"], s["hidden"], s["inter"])

    def reduce(self) -> None:
        """The sum over top-k into the output (torch.sum, fused_marlin_moe without moe_sum)."""
        torch.sum(self.cache3.view(-1, self.s["top_k"], self.s["hidden"]), dim=1, out=self.out)

    def layer(self) -> None:
        """The whole sequence."""
        self.pad()
        self.align()
        self.w13()
        self.act()
        self.w2()
        self.reduce()


PARTS = ("pad", "align", "w13", "act", "w2", "reduce", "layer")


def reference(layer: Layer, weights: dict) -> torch.Tensor:
    """Return the layer's output computed in float32 from the dequantised experts."""
    s, x = layer.s, layer.xp.float()
    fp4 = torch.tensor(FP4, device=x.device)
    out = torch.zeros(x.shape[0], s["hidden"], device=x.device)
    alpha, limit = SWIGLU
    for t in range(x.shape[0]):
        for e, weight in zip(layer.ids[t].tolist(), layer.topk_weights[t].tolist(), strict=True):
            w13 = fp4[weights["w13_codes"][e].long()] * weights["w13_scale_value"][e]
            w2 = fp4[weights["w2_codes"][e].long()] * weights["w2_scale_value"][e]
            bias13 = weights["w13_bias_value"][e].to(torch.bfloat16).float()
            bias2 = weights["w2_bias_value"][e].to(torch.bfloat16).float()
            h = x[t] @ w13.T + bias13  # bias added before the router weight (Marlin's epilogue)
            gate, up = h[0::2].clamp(max=limit), h[1::2].clamp(-limit, limit)
            a = ((up + 1) * gate * torch.sigmoid(gate * alpha)).to(torch.bfloat16).float()
            out[t] += weight * (a @ w2.T + bias2)
    return out


def check(s: dict, device, generator, tokens: int = 4) -> float:
    """Return the layer's largest error relative to its largest reference value."""
    weights = experts(s, device, torch.Generator(device=device).manual_seed(1), codes=True)
    ids, topk_weights = route(tokens, s, generator)
    x = (torch.randn(tokens, s["model_hidden"], generator=generator) * 0.5).to(torch.bfloat16)
    block = block_size_m(tokens, s["top_k"], s["experts"])
    layer = Layer(s, weights, x.to(device), ids.to(device), topk_weights.to(device), block)
    layer.layer()
    torch.cuda.synchronize()
    ref = reference(layer, weights)
    return float((layer.out.float() - ref).abs().max() / ref.abs().max())


def timed(calls: list, repeats: int) -> dict:
    """Return the median / p10 / p90 microseconds of one call among `calls` (time_gpu's graph)."""
    samples, method = time_gpu(calls, repeats, warmup=1)
    us = [v * 1e3 for v in samples]
    return {
        "us": round(statistics.median(us), 2),
        "us_p10": round(percentile(us, 0.1), 2),
        "us_p90": round(percentile(us, 0.9), 2),
        "timing": method,
    }


def set_dropped(dropped: bool, tables: dict) -> None:
    """Disable (or restore) the DROPPED entry in both of ops.cu's thread-config tables."""
    for large, which in ((0, "small"), (1, "large")):
        for index, entry in enumerate(tables[which]):
            if tuple(entry) == DROPPED:
                _ops().thread_config(large, index, [-1, -1, -1] if dropped else list(DROPPED))


def probe_shape(args, s: dict, built: dict, common: dict, rows: list) -> None:
    """Time every token count of one TP shard (both tables where they differ); add the rows."""
    device, l2 = torch.device("cuda"), torch.cuda.get_device_properties(0).L2_cache_size
    generator = torch.Generator().manual_seed(s["tp"])
    error = check(s, device, generator)
    per_expert = sum(expert_bytes(s["hidden"], s["inter"]).values())
    copies = args.copies or copies_for(s["top_k"] * per_expert, l2)
    gpu_gen = torch.Generator(device=device).manual_seed(s["tp"])
    copies_w = [experts(s, device, gpu_gen) for _ in range(copies)]
    variants = ["built"] + (
        ["without_128x64"] if DROPPED in built["tables"]["small"] + built["tables"]["large"] else []
    )
    for tokens in args.token_list:
        ids, topk_weights = route(tokens, s, generator)
        x = (
            torch.randn(tokens, s["model_hidden"], generator=generator)
            .to(torch.bfloat16)
            .to(device)
        )
        block = block_size_m(tokens, s["top_k"], s["experts"])
        layers = [Layer(s, w, x, ids.to(device), topk_weights.to(device), block) for w in copies_w]
        row = common | {
            "tp": s["tp"],
            "tokens": tokens,
            "hidden_padded": s["hidden"],
            "inter_padded": s["inter"],
            "hidden": s["model_hidden"],
            "inter": s["model_inter"],
            "experts": s["experts"],
            "top_k": s["top_k"],
            "moe_block_size": block,
            "copies": copies,
            "experts_touched": int(ids.unique().numel()),
            "check_max_rel_err": round(error, 5),
        }
        row |= touched_bytes(s, tokens, row["experts_touched"])
        for variant in variants:
            set_dropped(variant != "built", built["tables"])
            try:
                row |= time_parts(layers, variant, args.repeats)
            except Exception as exc:  # a failure is a row, with its message
                row[f"{variant}_error"] = f"{type(exc).__name__}: {exc}"[:300]
            finally:
                set_dropped(False, built["tables"])
        finish(row, rows, variants)


def time_parts(layers: list, variant: str, repeats: int) -> dict:
    """Return each part's microseconds (the layer's with its p10 / p90) under one variant."""
    got = {}
    for part in PARTS:
        result = timed([getattr(layer, part) for layer in layers], repeats)
        got[f"{variant}_{part}_us"] = result["us"]
    got[f"{variant}_layer_us_p10"], got[f"{variant}_layer_us_p90"] = (
        result["us_p10"],
        result["us_p90"],
    )
    got["timing"] = result["timing"]
    return got


def finish(row: dict, rows: list, variants: list) -> None:
    """Add the bandwidth fractions (bytes / datasheet / time), keep the row, print one line."""
    peak = PEAK_BW.get(row["device"])
    words = []
    for variant in variants:
        us = row.get(f"{variant}_layer_us")
        gemm = (row.get(f"{variant}_w13_us") or 0) + (row.get(f"{variant}_w2_us") or 0)
        if us and peak:
            row[f"{variant}_e_layer_model"] = round(row["bytes_model"] / (us * 1e-6) / peak, 4)
            row[f"{variant}_e_layer_padded"] = round(row["bytes_padded"] / (us * 1e-6) / peak, 4)
            row[f"{variant}_e_gemms_model"] = round(row["bytes_model"] / (gemm * 1e-6) / peak, 4)
        parts = " ".join(f"{p}={row.get(f'{variant}_{p}_us')}" for p in PARTS)
        words.append(f"[{variant}] {parts} e_layer_model={row.get(f'{variant}_e_layer_model')}")
    rows.append(row)
    print(
        f"TP{row['tp']} m={row['tokens']} block={row['moe_block_size']}"
        f" experts={row['experts_touched']} err={row['check_max_rel_err']} " + " ".join(words),
        flush=True,
    )


def parse(argv: list[str] | None) -> argparse.Namespace:
    """Return the checked arguments (exit with one line if unusable)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, default=Path(".engine_kernels/vllm-src-0.16.0"))
    parser.add_argument("--build", type=Path, default=Path("/tmp/marlin_moe_build"))
    parser.add_argument("--tokens", default="1,2,4,8,16,32,64")
    parser.add_argument("--tps", default="8,4,2")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--copies", type=int, default=0, help="weight copies (0: pass L2 x4)")
    parser.add_argument("--gencode", default=WHEEL_GENCODE, help="nvcc's (default: the wheel's)")
    parser.add_argument("--verbose", action="store_true", help="print the compiler's lines")
    args = parser.parse_args(argv)
    try:
        args.token_list = [int(t) for t in args.tokens.split(",")]
        args.tp_list = [int(t) for t in args.tps.split(",")]
    except ValueError:
        sys.exit(
            f"marlin_moe_probe: --tokens and --tps take integers, not {args.tokens} / {args.tps}"
        )
    if min(args.token_list) < 1 or min(args.tp_list) < 1 or args.repeats < 1 or args.copies < 0:
        sys.exit("marlin_moe_probe: tokens, TP and repeats must be >= 1, copies >= 0")
    for tp in args.tp_list:
        shard(tp)  # exits where the intermediate does not split
    if not (args.src / "manifest.json").is_file():
        sys.exit(f"marlin_moe_probe: no {args.src}/manifest.json (tools/fetch_engine_sources.py)")
    return args


def main(argv: list[str] | None = None) -> int:
    """Build vLLM's Marlin MoE ops, time them; write $OUT/marlin_moe_probe.json."""
    args = parse(argv)
    out = os.environ.get("OUT")
    if not out:
        sys.exit("marlin_moe_probe: set OUT to the folder for marlin_moe_probe.json")
    check_out_folder(out, ("marlin_moe_probe.json",), flag="OUT")
    if not torch.cuda.is_available():
        sys.exit("marlin_moe_probe: needs a CUDA GPU (sm_90)")
    blocks = {block_size_m(t, MODEL["top_k"], MODEL["experts"]) for t in args.token_list}
    built = build(args.src, args.build, blocks, args.gencode, verbose=args.verbose)
    print(
        f"built {len(built['kernels'])} Marlin instantiations in {built['build_s']} s", flush=True
    )
    common = {
        "device": torch.cuda.get_device_name(),
        "measured_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "figure": "measured",
        "engine": "vllm",
        "source_version": built["manifest"]["version"],
        "sdist_sha256": built["manifest"]["sdist_sha256"],
        "sources_sha256": {
            k: v
            for k, v in built["manifest"]["files"].items()
            if k.endswith((".cu", ".h", ".cuh", ".hpp"))
        },
        "thread_tables": built["tables"],
        "build_s": built["build_s"],
        "gencode": built["gencode"],
    }
    rows: list = []
    try:
        for tp in args.tp_list:
            probe_shape(args, shard(tp), built, common, rows)
    finally:
        Path(out).mkdir(parents=True, exist_ok=True)
        write_text(Path(out) / "marlin_moe_probe.json", json.dumps(rows, indent=1) + "\n")
    print(f"{len(rows)} rows: {out}/marlin_moe_probe.json")
    return 0


if __name__ == "__main__":
    sys.exit(tool_main("marlin_moe_probe", main))
