"""Expert GEMM shapes, routed token counts, row-block schedules, and the bytes and FLOPs moved."""

import math

from tilesweep.settings import ModelSettings


def expert_ops(model: ModelSettings, tp: int = 1) -> dict[str, tuple[int, int]]:
    """Return the (N, K) of each expert GEMM: gate/up fused, then down; split over tp ranks."""
    inter = model.moe_intermediate // tp
    return {"gate_up": (2 * inter, model.hidden), "down": (model.hidden, inter)}


def expert_counts(
    tokens_per_expert: int, experts: int, routing: str, alpha: float, seed: int = 0
) -> list[int]:
    """Return tokens per expert: equal counts, or a Zipf-skewed split of the same total."""
    total = tokens_per_expert * experts
    if routing == "uniform":
        return [tokens_per_expert] * experts
    weights = [1.0 / (i + 1) ** alpha for i in range(experts)]
    scale = total / sum(weights)
    raw = [w * scale for w in weights]
    counts = [math.floor(x) for x in raw]
    order = sorted(range(experts), key=lambda i: raw[i] - counts[i], reverse=True)
    for i in order[: total - sum(counts)]:
        counts[i] += 1
    # Rotate by the seed so the heaviest expert is not always expert 0.
    shift = seed % experts
    return counts[shift:] + counts[:shift]


def tile_schedule(counts: list[int], block_m: int) -> tuple[list[int], list[int], list[int]]:
    """Return, per row block, its expert, first row and the expert's end row."""
    experts, starts, ends, offset = [], [], [], 0
    for e, c in enumerate(counts):
        for r in range(0, c, block_m):
            experts.append(e)
            starts.append(offset + r)
            ends.append(offset + c)
        offset += c
    return experts, starts, ends


def traffic(counts: list[int], n: int, k: int, dtype: str, out_bytes: int) -> dict:
    """Return FLOPs and the fewest bytes moved: active experts' weights once, A, C."""
    elem = {"bf16": 2, "fp8": 1}[dtype]
    tokens = sum(counts)
    active = sum(1 for c in counts if c)
    flops = 2 * tokens * n * k
    weight_bytes = active * n * k * elem
    nbytes = weight_bytes + tokens * k * elem + tokens * n * out_bytes
    return {
        "flops": flops,
        "bytes": nbytes,
        "weight_bytes": weight_bytes,
        "intensity": flops / nbytes if nbytes else 0.0,
        "tokens": tokens,
        "active_experts": active,
    }
