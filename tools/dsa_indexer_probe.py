"""Time GLM-5's DSA indexer at decode, as SGLang split it before its fusion, in one CUDA graph.

Issue 48: GLM-5 on H200 and B200 composes about 5 ms a step too fast at 4 requests, while B200
measures about what H200 does: a per-step cost that does not scale with bandwidth. SGLang ran the
indexer's query and key paths as separate small kernels before sgl-project/sglang#27705
(conf/engine/sglang_dsa_unfused.yaml: 19 kernels a layer, 7 fused); the composition charges each
small kernel an empty kernel's graphed cost. This script settles what such kernels cost at GLM-5's
decode shapes: it captures the split indexer path of 78 layers (torch ops standing in for SGLang's
kernels, one per op where torch has one) into one CUDA graph and reports, per batch, the step's
time, the kernels a layer launches and the mean time per kernel, beside one empty kernel's graphed
cost. Self-contained: torch only, nothing installed, one GPU. Writes $OUT/dsa_indexer_probe.json.

    python tools/dsa_indexer_probe.py [--layers 78] [--context 1536] [--batches 1,4,8]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # runs from a bare checkout
from tilesweep.errors import tool_main  # noqa: E402 - after the checkout's src is on the path
from tilesweep.io import check_out_folder, write_text  # noqa: E402 - likewise
from tilesweep.measure.timing import capture_graph, time_events  # noqa: E402 - likewise

# GLM-5's indexer (conf/model/glm5.yaml): 32 heads of 128, rope over 64 of them, top-k 2048;
# q_lora_rank 2048, hidden 6144; keys quantised to fp8 in blocks of 128 (one scale a row).
HEADS, DIM, ROPE, TOPK, Q_LORA, HIDDEN, BLOCK = 32, 128, 64, 2048, 2048, 6144, 128


def _quant(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Return fp8 e4m3 values and one fp32 scale per 128-wide row block (act_quant's layout)."""
    scale = t.float().abs().amax(dim=-1, keepdim=True).clamp_min(1e-4) / 448.0
    return (t.float() / scale).to(torch.float8_e4m3fn), scale


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Return interleaved rope of x's pairs (GLM-5's indexer_rope_interleave)."""
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


class Layer:
    """One layer's indexer weights and key cache (bf16 projections, fp8 cache)."""

    def __init__(self, context: int, dev: torch.device):
        g = torch.Generator(device=dev).manual_seed(0)
        r = lambda *s: torch.randn(*s, device=dev, dtype=torch.bfloat16, generator=g) * 0.02  # noqa: E731
        self.wq_b, self.wk, self.wproj = r(Q_LORA, HEADS * DIM), r(HIDDEN, DIM), r(HIDDEN, HEADS)
        self.norm = torch.nn.LayerNorm(DIM, device=dev, dtype=torch.bfloat16)
        self.cache = torch.zeros(context + 64, DIM, device=dev, dtype=torch.uint8)  # fp8 bits
        self.cache_scale = torch.ones(context + 64, 1, device=dev)

    def split(self, q_lora, x, cos, sin, slots, hadamard, context: int) -> torch.Tensor:
        """Return the top-k token ids of one layer's split indexer path (the ops of
        srt/layers/attention/dsa/dsa_indexer.py's unfused decode branch, in order)."""
        gates = (x @ self.wproj).float() * HEADS**-0.5  # weights_proj, cast and scale
        q = (q_lora @ self.wq_b).view(-1, HEADS, DIM)  # wq_b
        k = self.norm(x @ self.wk)  # wk, k_norm
        q_rope, k_rope = _rope(q[..., :ROPE], cos, sin), _rope(k[..., :ROPE], cos[:, 0], sin[:, 0])
        q[..., :ROPE].copy_(q_rope)  # _update_rope_guarded, q and k
        k[..., :ROPE].copy_(k_rope)
        q, k = q @ hadamard, k @ hadamard  # _maybe_rotate, q and k
        q8, q_scale = _quant(q)  # act_quant(query)
        k8, k_scale = _quant(k)  # _store_index_k_cache: quantise and store
        self.cache.index_copy_(0, slots, k8.view(torch.uint8))
        self.cache_scale.index_copy_(0, slots, k_scale)
        gates = gates * q_scale.squeeze(-1) * DIM**-0.5  # q-scale and softmax-scale
        keys = self.cache[:context].view(torch.float8_e4m3fn).float() * self.cache_scale[:context]
        logits = torch.einsum("bhd,td->bht", q8.float(), keys).relu()  # paged MQA logits
        scores = (logits * gates.unsqueeze(-1)).sum(dim=1)
        return scores.topk(min(TOPK, context), dim=-1).indices  # top-k 2048


def _graph_ms(fn, repeats: int) -> float:
    """Return the median ms of one replay of fn captured in a CUDA graph."""
    for _ in range(2):  # capture_graph runs it a third time on its side stream
        fn()
    graph = capture_graph([fn])
    for _ in range(10):
        graph.replay()
    return statistics.median(time_events(graph.replay, repeats))


def _kernels_per_call(fn) -> int:
    """Return the CUDA kernels one eager call of fn launches (torch.profiler's count)."""
    fn()
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        fn()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return sum(1 for e in kernels if "memcpy" not in e.name.lower())


def _bad_arguments(args: argparse.Namespace) -> str | None:
    """Return why the arguments cannot run (None when they can); sets args.batch_list."""
    if not 1 <= args.layers <= 200 or not 64 <= args.context <= 262144:
        return "--layers 1-200 and --context 64-262144"
    try:
        args.batch_list = [int(b) for b in args.batches.split(",")]
    except ValueError:
        return f"--batches takes integers separated by commas, not {args.batches!r}"
    if not all(1 <= b <= 4096 for b in args.batch_list) or args.repeats < 1:
        return "--batches 1-4096 each, --repeats at least 1"
    return None


def main(argv: list[str] | None = None) -> int:
    """Run the probe and write its JSON; 2 with one line where no CUDA GPU is at hand."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=78, help="DSA layers of a step (GLM-5: 78)")
    ap.add_argument("--context", type=int, default=1536, help="tokens cached (1k/1k mean: 1536)")
    ap.add_argument("--batches", default="1,4,8", help="decoding sequences, comma-separated")
    ap.add_argument("--repeats", type=int, default=50, help="timed replays per point")
    args = ap.parse_args(argv)
    why = _bad_arguments(args)
    if why:
        print(f"dsa_indexer_probe: {why}", file=sys.stderr)
        return 2
    folder = os.environ.get("OUT") or "."
    if os.environ.get("OUT"):  # before minutes on the GPU, not after
        check_out_folder(folder, ("dsa_indexer_probe.json",), flag="OUT")
    if not torch.cuda.is_available():
        print("dsa_indexer_probe: no CUDA GPU here; run it on one", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    layers = [Layer(args.context, dev) for _ in range(args.layers)]
    hadamard = torch.eye(DIM, device=dev, dtype=torch.bfloat16)
    empty = torch.zeros(1, device=dev)
    rows = []
    for batch in args.batch_list:
        q_lora = torch.randn(batch, Q_LORA, device=dev, dtype=torch.bfloat16)
        x = torch.randn(batch, HIDDEN, device=dev, dtype=torch.bfloat16)
        angle = torch.rand(batch, 1, ROPE // 2, device=dev, dtype=torch.bfloat16)
        cos, sin = angle.cos(), angle.sin()
        slots = torch.arange(batch, device=dev) + args.context

        def step(batch=batch, q_lora=q_lora, x=x, cos=cos, sin=sin, slots=slots):
            for layer in layers:
                layer.split(q_lora, x, cos, sin, slots, hadamard, args.context)

        def one(q_lora=q_lora, x=x, cos=cos, sin=sin, slots=slots):
            layers[0].split(q_lora, x, cos, sin, slots, hadamard, args.context)

        ms = _graph_ms(step, args.repeats)
        per_layer = _kernels_per_call(one)
        rows.append(
            {
                "batch": batch,
                "step_ms": ms,
                "kernels_per_layer": per_layer,
                "us_per_kernel": 1e3 * ms / (per_layer * args.layers),
            }
        )
        print(json.dumps(rows[-1]))
    n = 1000

    def empties():
        for _ in range(n):
            empty.add_(0)

    out = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "layers": args.layers,
        "context": args.context,
        "empty_kernel_us": 1e3 * _graph_ms(empties, args.repeats) / n,
        "rows": rows,
        "note": "torch ops stand in for SGLang's split-path kernels; kernels_per_layer counts "
        "torch's launches, which may exceed SGLang's 19 (conf/engine/sglang_dsa_unfused.yaml)",
    }
    print(json.dumps({k: v for k, v in out.items() if k != "rows"}))
    write_text(os.path.join(folder, "dsa_indexer_probe.json"), json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(tool_main("dsa_indexer_probe", main))
