"""Time DeepGEMM's own m_grouped_fp8_gemm_nt_contiguous (the commit vLLM 0.12.0 pins, built by
tools/deepgemm_build.py) on one Hopper GPU, as vLLM 0.12.0's DeepGemmExperts calls it at decode for
Qwen3-235B-A22B-FP8 (conf/model/qwen3_235b_a22b.yaml: hidden 4096, expert intermediate 1536, 128
experts, top-8): the gate_up GEMM (N = 2 x 1536 / TP, K = 4096) and the down GEMM (N = 4096,
K = 1536 / TP) over M_sum = round_up(tokens x 8 + 128 x 127, 128) rows (plan/padded_experts.py),
laid out as ep_scatter does: random top-8 routing, each used expert's rows in expert order padded
to 128, the tail at expert 0 (m_indices zero-filled), all rows computed. FP8 e4m3 operands,
block-FP8 scales as fp32 powers of two (vLLM's UE8M0 rounding): activations 1 x 128 per row,
weights 128 x 128, bf16 output. The activation scales come as vLLM passes them: row-major to
gate_up (deepgemm_moe_permute's aq_scale_out: DeepGEMM's call makes them MN-major, a transpose
kernel inside the call) and column-major to down (per_token_group_quant_fp8).

Each GEMM in a CUDA graph over N weight copies (the touched experts pass L2 four times), one
activation and output buffer; time_gpu, median of repeats. DeepGEMM JIT-compiles each kernel
(nvcc) at its first call, in the warm-up before the graph, into DG_JIT_CACHE_DIR. One GEMM per
shape is checked once (the first tokens) against torch on dequantised operands.

Writes $OUT/deepgemm_probe.json and prints one line a row. Usage:
  OUT=/tmp/o python tools/deepgemm_probe.py [--src DIR] [--wheel WHL] [--build DIR]
      [--tokens 1,8,16,32,64] [--tps 2,4] [--repeats N] [--copies N] [--no-check]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def _root() -> Path:
    """Return the checkout this file runs in (the first parent holding src/tilesweep)."""
    for parent in Path(__file__).resolve().parents:
        if (parent / "src" / "tilesweep").is_dir():
            return parent
    sys.exit("deepgemm_probe: run it inside a tilesweep checkout (no src/tilesweep above it)")


ROOT = _root()
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tools")]  # runs from a bare checkout
from deepgemm_build import SRC, VARIANTS, WHEEL_GLOB, build, check  # noqa: E402

from tilesweep.errors import tool_main  # noqa: E402
from tilesweep.io import check_out_folder, write_text  # noqa: E402
from tilesweep.measure.timing import percentile, time_gpu  # noqa: E402

MODEL = {"hidden": 4096, "inter": 1536, "experts": 128, "top_k": 8}
ALIGN = 128  # get_mk_alignment_for_contiguous_layout (csrc/utils/layout.hpp)
BLOCK = 128  # block-FP8 scale granularity (K, and the weights' N)
# Dense FP8 datasheet peak (NVIDIA H100 SXM5 / H200 SXM product briefs, without sparsity).
PEAK_FP8 = 1979e12
MAX_COPIES = 32
COPY_BYTES = 40 << 30  # weight copies stop at this many bytes


def padded_rows(tokens: int, top_k: int, experts: int, align: int = ALIGN) -> int:
    """Return vLLM 0.12.0's M_sum (deep_gemm_utils.compute_aligned_M) for tokens at decode."""
    return math.ceil((tokens * top_k + experts * (align - 1)) / align) * align


def gemms(tp: int, model: dict = MODEL) -> dict:
    """Return {gemm: (N, K)} of one TP shard's two grouped GEMMs."""
    if model["inter"] % (tp * BLOCK):
        sys.exit(f"deepgemm_probe: intermediate {model['inter']} / TP{tp} is not a multiple of 128")
    inter = model["inter"] // tp
    return {"gate_up": (2 * inter, model["hidden"]), "down": (model["hidden"], inter)}


def layout(counts: list[int], m_sum: int, align: int = ALIGN) -> list[int]:
    """Return m_indices as ep_scatter writes them: used experts in order padded, the tail 0."""
    out: list[int] = []
    for expert, count in enumerate(counts):
        out += [expert] * (-(-count // align) * align)
    if len(out) > m_sum:
        sys.exit(f"deepgemm_probe: {len(out)} padded rows exceed M_sum {m_sum}")
    return out + [0] * (m_sum - len(out))


def route(tokens: int, model: dict, generator) -> list[int]:
    """Return each expert's row count under random distinct top-k routing."""
    import torch

    counts = [0] * model["experts"]
    for _ in range(tokens):
        for expert in torch.randperm(model["experts"], generator=generator)[: model["top_k"]]:
            counts[int(expert)] += 1
    return counts


def copies_for(touched: float, l2: int, copy_bytes: float) -> int:
    """Return the weight copies whose touched bytes pass L2 four times (memory allowing)."""
    fit = max(2, int(COPY_BYTES // copy_bytes))
    return max(2, min(MAX_COPIES, fit, max(3, math.ceil(4 * l2 / touched))))


def _pow2(shape: tuple, generator, device):
    """Return fp32 powers of two in [1/16, 1] (UE8M0-rounded scales)."""
    import torch

    exp = torch.randint(-4, 1, shape, generator=generator).float()
    return torch.pow(2.0, exp).to(device)


def operands(m_sum: int, n: int, k: int, experts: int, copies: int, generator, mn_major: bool):
    """Return A (fp8 [M, K], fp32 scales MN- or K-major), random weight copies, bf16 output."""
    import torch

    dev = torch.device("cuda")
    a = ((torch.rand(m_sum, k, generator=generator) - 0.5) * 4).to(dev).to(torch.float8_e4m3fn)
    if mn_major:  # per_token_group_quant_fp8(column_major_scales=True): [M, K/128], stride (1, M)
        sfa = _pow2((k // BLOCK, m_sum), generator, dev).T
    else:  # deepgemm_moe_permute's aq_scale_out, row-major: DeepGEMM's call transposes it
        sfa = _pow2((m_sum, k // BLOCK), generator, dev)
    weights = []
    for _ in range(copies):
        w = torch.empty(experts, n, k, dtype=torch.float8_e4m3fn, device=dev)
        for e in range(0, experts, 16):  # slices: small fp32 staging
            block = torch.rand(min(16, experts - e), n, k, device=dev) - 0.5
            w[e : e + block.shape[0]] = block.to(torch.float8_e4m3fn)
        sfb = _pow2((experts, n // BLOCK, k // BLOCK), generator, dev).contiguous()
        weights.append((w, sfb))
    d = torch.empty(m_sum, n, dtype=torch.bfloat16, device=dev)
    return {"a": a, "sfa": sfa, "weights": weights, "d": d}


def reference(ops: dict, m_idx, copy: int = 0):
    """Return the fp32 product of dequantised operands, row by row's expert (torch)."""
    import torch

    w, sfb = ops["weights"][copy]
    a = ops["a"].float() * ops["sfa"].repeat_interleave(BLOCK, dim=1)
    out = torch.zeros(ops["d"].shape, dtype=torch.float32, device=a.device)
    for expert in torch.unique(m_idx).tolist():
        rows = (m_idx == expert).nonzero().squeeze(1)
        sf = sfb[expert].repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)
        out[rows] = a[rows] @ (w[expert].float() * sf).T
    return out


def call(dg, ops: dict, m_idx, copy: int):
    """Return one m_grouped_fp8_gemm_nt_contiguous launch on weight copy `copy`."""
    w, sfb = ops["weights"][copy]
    return lambda: dg.m_grouped_fp8_gemm_nt_contiguous(
        (ops["a"], ops["sfa"]), (w, sfb), ops["d"], m_idx, disable_ue8m0_cast=False
    )


def measure(dg, args, tp: int, gemm: str, tokens: int, l2: int) -> dict:
    """Return one row: the GEMM's median microseconds and its rate over M_sum rows."""
    import torch

    n, k = gemms(tp)[gemm]
    e = MODEL["experts"]
    gen = torch.Generator().manual_seed(1000 * tp + tokens)
    counts = route(tokens, MODEL, gen)
    m_sum = padded_rows(tokens, MODEL["top_k"], e)
    m_idx = torch.tensor(layout(counts, m_sum), dtype=torch.int32, device="cuda")
    used = sum(1 for c in counts if c) + (0 if counts[0] else 1)  # the tail reads expert 0
    copies = args.copies or copies_for(used * n * k, l2, e * n * k)
    ops = operands(m_sum, n, k, e, copies, gen, mn_major=gemm == "down")
    row = {"tp": tp, "gemm": gemm, "tokens": tokens, "m_sum": m_sum, "n": n, "k": k}
    row |= {"routed_rows": tokens * MODEL["top_k"], "experts_touched": used, "copies": copies}
    row["sfa_major"] = "mn" if gemm == "down" else "k (transposed inside the call)"
    if args.check and tokens == args.tokens[0]:
        call(dg, ops, m_idx, 0)()
        ref = reference(ops, m_idx)
        err = (ops["d"].float() - ref).norm() / ref.norm()
        row["check_rel_err"] = round(float(err), 5)
    samples, method = time_gpu([call(dg, ops, m_idx, c) for c in range(copies)], args.repeats, 2)
    us = [1000 * s for s in samples]
    flops = 2 * m_sum * n * k
    row |= {"us": round(statistics.median(us), 2), "method": method}
    row |= {"us_p10": round(percentile(us, 0.1), 2), "us_p90": round(percentile(us, 0.9), 2)}
    row["tflops"] = round(flops / (row["us"] * 1e-6) / 1e12, 1)
    row["frac_1979"] = round(row["tflops"] * 1e12 / PEAK_FP8, 4)
    row["weight_bytes_touched"] = used * n * k
    del ops
    torch.cuda.empty_cache()
    return row


def provenance(args) -> dict:
    """Return the source manifest's commit and digests and the device's name."""
    import torch

    manifest = check(args.src)
    digest = hashlib.sha256((args.src / "manifest.json").read_bytes()).hexdigest()
    return {
        "device": torch.cuda.get_device_name(0),
        "sms": torch.cuda.get_device_properties(0).multi_processor_count,
        "deepgemm_commit": manifest["commit"],
        "source_manifest_sha256": digest,
        "cutlass_wheel": args.wheel.name,
        "cutlass_wheel_sha256": hashlib.sha256(args.wheel.read_bytes()).hexdigest(),
        "peak_fp8_tflops": PEAK_FP8 / 1e12,
        "peak_source": "NVIDIA H100 SXM5 / H200 SXM datasheet dense FP8 (without sparsity)",
        "model": MODEL,
    }


def pick_variant(args) -> tuple[str | None, list[dict]]:
    """Return the first link variant that builds and imports in a child process, and the tries."""
    tries = []
    for variant in VARIANTS:
        cmd = [sys.executable, str(ROOT / "tools" / "deepgemm_build.py"), "--import-check"]
        cmd += [variant, "--out", str(args.src), "--wheel", str(args.wheel)]
        t0 = time.time()
        proc = subprocess.run(
            [*cmd, "--build", str(args.build / variant)], capture_output=True, text=True
        )
        tail = (proc.stdout + proc.stderr)[-1500:]
        tries.append({"variant": variant, "rc": proc.returncode, "s": round(time.time() - t0, 1)})
        tries[-1]["tail"] = tail
        print(f"build {variant}: rc {proc.returncode} in {tries[-1]['s']} s\n{tail}", flush=True)
        if proc.returncode == 0:
            return variant, tries
    return None, tries


def run(args) -> dict:
    """Build, compile, check and time; return the JSON document."""
    import torch

    t0 = time.time()
    variant, tries = pick_variant(args)
    out = {"build_tries": tries, "variant": variant, "rows": []}
    if variant is None:
        write_text(Path(args.out) / "deepgemm_probe.json", json.dumps(out, indent=1) + "\n")
        sys.exit("deepgemm_probe: no build variant imports (build_tries in the JSON)")
    dg = build(args.src, args.wheel, args.build / variant, verbose=args.verbose, variant=variant)
    out = provenance(args) | out | {"build_s": round(time.time() - t0, 1)}
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    for tp, gemm in [(t, g) for t in args.tps for g in gemms(t)]:
        for tokens in args.tokens:
            try:
                row = measure(dg, args, tp, gemm, tokens, l2)
            except Exception as exc:  # a failed launch is recorded, the others still run
                row = {"tp": tp, "gemm": gemm, "tokens": tokens, "error": repr(exc)[:500]}
            out["rows"].append(row)
            print(json.dumps(row), flush=True)
            write_text(Path(args.out) / "deepgemm_probe.json", json.dumps(out, indent=1) + "\n")
    return out


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """Return the parsed arguments (tokens and TPs as int lists; the wheel resolved)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, default=ROOT / SRC)
    parser.add_argument("--wheel", type=Path, default=None, help="nvidia_cutlass wheel")
    parser.add_argument("--build", type=Path, default=Path("/tmp/deepgemm-build"))
    parser.add_argument("--tokens", default="1,8,16,32,64")
    parser.add_argument("--tps", default="2,4")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--copies", type=int, default=0, help="weight copies (0: pass L2 x4)")
    parser.add_argument("--no-check", dest="check", action="store_false")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    args.tokens = [int(t) for t in args.tokens.split(",")]
    args.tps = [int(t) for t in args.tps.split(",")]
    for tp in args.tps:
        gemms(tp)
    if args.wheel is None:
        found = sorted((ROOT / ".whl").glob(WHEEL_GLOB))
        if not found:
            sys.exit(f"deepgemm_probe: no {WHEEL_GLOB} in {ROOT / '.whl'} (carry .whl)")
        args.wheel = found[-1]
    args.out = os.environ.get("OUT", "")
    return args


def main() -> int:
    """Time DeepGEMM's contiguous grouped GEMMs; return the exit status."""
    args = parse()
    check_out_folder(args.out, ("deepgemm_probe.json",), flag="OUT")
    os.environ.setdefault("DG_JIT_CACHE_DIR", str(args.build / "jit"))
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(tool_main("deepgemm_probe", main))
