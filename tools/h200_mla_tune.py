"""Time the fused MLA decode kernel (kernels/mla_decode.py) over its launch configurations on the
GPU at hand, in CUDA graphs, at the whole step's shapes: heads per rank (GLM-5 TP1 64, TP4 16,
TP8 8; DeepSeek-V3 TP1 128) x sequences x indexed tokens, and write one row per case and
configuration (time, p10/p90, bandwidth of the latent rows read, error against torch in fp32).
The fastest per heads chooses kernels.mla_decode.TUNED.
Usage (on the GPU machine): python tools/h200_mla_tune.py OUT_CSV [--budget-s 240]
  [--sequences 2048 8192 --heads 8 16 64 128 --tokens 8192 2048 --tuned-only]: other shapes
  (--tokens: cached and indexed tokens per sequence), and only the configuration
  kernels.mla_decode.choose picks for each (what the whole step runs there).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time

import pandas as pd
import torch

from tilesweep.errors import ConfigError, tool_main
from tilesweep.io import check_out_file, write_table
from tilesweep.kernels import mla_decode as mla
from tilesweep.measure.timing import summarize, time_gpu

LAT, ROPE = 512, 64
HEADS = (64, 8, 16, 128)  # GLM-5 first: what the budget must cover
SEQUENCES = (1, 8, 64, 512)
# (cache tokens per sequence, indexer's top tokens): the step's (1,024 of 1,024) and a long
# context under DSA (2,048 of 8,192) at one batch.
TOKENS = ((1024, 1024),)
LONG = ((8192, 2048), 64)
# Rotate buffer sets until a graph replay reads at least this much, so L2 never holds the cache.
MIN_BYTES = 256 << 20


def configs(heads: int) -> list[mla.Config]:
    """Return the configurations tried for `heads`: no head block wider than the heads need."""
    widest = max(16, 1 << (heads - 1).bit_length())
    out = []
    for bh, bt, ls, w, st in itertools.product((16, 32, 64), (16, 32, 64), (1, 2), (4, 8), (1, 2)):
        if bh > widest or (ls == 2 and bh == 16):
            continue
        out.append(mla.Config(bh, bt, ls, w, st))
    return out


def case(n: int, heads: int, tokens: int, top: int, gen):
    """Return (query, cache, indices) for n sequences."""
    q = torch.randn(n, heads, LAT + ROPE, device="cuda", generator=gen, dtype=torch.bfloat16)
    cache = torch.randn(n, tokens, LAT + ROPE, device="cuda", generator=gen, dtype=torch.bfloat16)
    idx = torch.rand(n, tokens, device="cuda", generator=gen).topk(top).indices
    return q, cache, idx


BUFFERS: dict[tuple, tuple[list, list]] = {}


def buffers(n, heads, tokens, top, gen) -> tuple[list, list]:
    """Return (inputs, outputs) of enough buffer sets that a replay never runs from L2 (kept for
    every configuration of the shape)."""
    key = (n, heads, tokens, top)
    if key not in BUFFERS:
        BUFFERS.clear()
        read = n * top * (LAT + ROPE) * 2
        sets = max(1, min(32, -(-MIN_BYTES // max(read, 1))))
        bufs = [case(n, heads, tokens, top, gen) for _ in range(sets)]
        outs = [torch.empty(n, heads, LAT, device="cuda", dtype=torch.bfloat16) for _ in bufs]
        BUFFERS[key] = (bufs, outs)
    return BUFFERS[key]


def time_case(n, heads, tokens, top, c, gen, scale) -> dict:
    """Return one row: the configuration timed over enough buffer sets to defeat L2."""
    read = n * top * (LAT + ROPE) * 2
    bufs, outs = buffers(n, heads, tokens, top, gen)
    sets = len(bufs)
    fns = [
        (lambda q=q, k=k, i=i, o=o: mla.mla_decode(torch, q, k, LAT, scale, i, o, config=c))
        for (q, k, i), o in zip(bufs, outs, strict=True)
    ]
    samples, method = time_gpu(fns, 30, 2)
    s = summarize(samples)
    return {
        "ms": s["time_ms"],
        "p10_ms": s["time_p10_ms"],
        "p90_ms": s["time_p90_ms"],
        "timing": method,
        "buffer_sets": sets,
        "latent_gbs": read / (s["time_ms"] * 1e-3) / 1e9,
    }


def main() -> int:
    """Tune and write the table; return the exit status."""
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--budget-s", type=float, default=240.0)
    ap.add_argument("--sequences", type=int, nargs="+", default=list(SEQUENCES))
    ap.add_argument("--heads", type=int, nargs="+", default=list(HEADS))
    ap.add_argument("--tuned-only", action="store_true")
    ap.add_argument("--tokens", type=int, nargs=2, metavar=("CACHED", "TOP"),
                    help="cached and indexed tokens per sequence (default 1024 1024)")  # fmt: skip
    ap.add_argument("--force", action="store_true", help="let out overwrite a kept example's file")
    args = ap.parse_args()
    check_out_file(args.out, args.force, "out")  # before minutes of tuning, not after
    if not torch.cuda.is_available():
        raise ConfigError("needs a CUDA GPU (torch sees none); run it on the GPU machine")
    start = time.monotonic()
    gen = torch.Generator(device="cuda").manual_seed(0)
    scale = (LAT + ROPE) ** -0.5
    device = torch.cuda.get_device_name(0)
    tokens = [tuple(args.tokens)] if args.tokens else TOKENS
    shapes = [(n, h, t, k) for h in args.heads for n in args.sequences for t, k in tokens]
    if not args.tuned_only:
        shapes += [(LONG[1], h, *LONG[0]) for h in (8, 64) if h in args.heads]
    rows, usable = [], {}
    for heads in args.heads:
        q, cache, idx = case(3, heads, 1024, 1024, gen)
        ref = mla.reference(torch, q, cache, LAT, scale, idx).float()
        usable[heads] = []
        tried = configs(heads)
        if args.tuned_only:  # what the step runs at each of the asked sequences
            tried = list(dict.fromkeys(mla.choose(heads, n) for n in args.sequences))
        for c in tried:
            base = {
                "heads": heads,
                **c.__dict__,
                "device": device,
                "triton": mla.triton.__version__,
            }
            try:
                got = mla.mla_decode(torch, q, cache, LAT, scale, idx, config=c).float()
                torch.cuda.synchronize()
                err = ((got - ref).abs().max() / ref.abs().max()).item()
            except Exception as e:  # a configuration that does not compile or launch is a row
                rows.append({**base, "status": "error", "reason": repr(e)[:200]})
                continue
            if not err < 2e-2:
                rows.append({**base, "status": "wrong", "reason": f"max rel error {err:.3g}"})
                continue
            usable[heads].append((c, base, err))
        print(f"heads {heads}: {len(usable[heads])} configurations compiled "
              f"after {time.monotonic() - start:.0f} s", flush=True)  # fmt: skip
    for n, heads, tokens, top in shapes:
        for c, base, err in usable[heads]:
            if args.tuned_only and c != mla.choose(heads, n):
                continue
            row = {**base, "sequences": n, "tokens": tokens, "top": top, "rel_error": err}
            if time.monotonic() - start > args.budget_s:
                rows.append({**row, "status": "skipped", "reason": "time budget spent"})
                continue
            row.update(time_case(n, heads, tokens, top, c, gen, scale), status="ok")
            rows.append(row)
        write_table(args.out, pd.DataFrame(rows))
        print(f"{n} x {heads} heads done after {time.monotonic() - start:.0f} s", flush=True)
    table = pd.DataFrame(rows)
    write_table(args.out, table)
    ok = table[table["status"] == "ok"]
    keys = ["heads", "sequences", "tokens"]
    best = ok.loc[ok.groupby(keys)["ms"].idxmin()]
    cols = keys + ["block_h", "block_t", "lat_split", "num_warps", "num_stages", "ms", "latent_gbs"]
    print(best[cols].to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(tool_main("h200_mla_tune", main))
