"""The messages a decode step sends, bus-bandwidth factors and the latency/bandwidth fit."""

import math

BYTES_PER_ELEMENT = 2  # activations travel in bf16
# Messages up to this size give the small-message latency floor.
LATENCY_FLOOR_BYTES = 65536


def step_messages(layout: dict, model: dict, tokens_per_expert: int) -> list[dict]:
    """Return the collectives of one stage's decode step: kind, group size, bytes, calls."""
    hidden = model["hidden"] * BYTES_PER_ELEMENT
    # The tokens one rank holds: the decode batch that gives each expert this many tokens on
    # average, split over ep ranks (data-parallel attention).
    batch = max(1, tokens_per_expert * model["routed_experts"] // model["top_k"])
    tokens = -(-batch // layout["ep"])
    layers_per_stage = -(-model["moe_layers"] // layout["pp"])
    msgs = []
    if layout["tp"] > 1:
        # Attention output and MoE output are each all-reduced once per layer.
        msgs.append(_message("all_reduce", layout["tp"], tokens * hidden, 2 * layers_per_stage))
    if layout["ep"] > 1:
        # Dispatch and combine: each rank sends its tokens' hidden states to top_k experts
        # (local tokens x top_k rows, padded to ep).
        nbytes = -(-tokens * model["top_k"] // layout["ep"]) * layout["ep"] * hidden
        msgs.append(_message("all_to_all", layout["ep"], nbytes, 2 * layers_per_stage))
    if layout["pp"] > 1:
        # Each stage hands its activations to the next once per step; stages send concurrently.
        msgs.append(_message("send_recv", 2, tokens * hidden, 1))
    return msgs


def _message(collective: str, group: int, nbytes: int, per_step: int) -> dict:
    """Return one collective of a step: kind, group size, bytes, calls per step."""
    return {"collective": collective, "group": group, "bytes": nbytes, "per_step": per_step}


def sweep_sizes(low: int, high: int, factor: int) -> list[int]:
    """Return message sizes from low to high bytes, each `factor` times the previous."""
    sizes, size = [], max(4, low)
    while size <= high:
        sizes.append(size)
        if factor < 2:
            break
        size *= factor
    return sizes


def bus_factor(collective: str, n: int) -> float:
    """Return nccl-tests' bus-bandwidth factor for a collective over n ranks."""
    return {"all_reduce": 2 * (n - 1) / n, "all_to_all": (n - 1) / n}.get(collective, 1.0)


def fit_alpha_beta(sizes: list[float], times_ms: list[float]) -> tuple[float, float]:
    """Return (alpha ms, beta bytes/ms) of time = alpha + bytes / beta, points weighted 1 / time."""
    import numpy as np

    x, y = np.asarray(sizes, float), np.asarray(times_ms, float)
    if len(np.unique(x)) < 2:
        return (float(y.mean()) if len(y) else math.nan), math.inf
    w = 1.0 / np.maximum(y, 1e-12)
    design = np.stack([np.ones_like(x), x], axis=1) * w[:, None]
    (alpha, slope), *_ = np.linalg.lstsq(design, y * w, rcond=None)
    if slope <= 0:
        return float(y.min()), math.inf
    if alpha < 0:  # no latency term fits: bandwidth only, through the origin
        slope = float(np.sum(w * w * x * y) / np.sum(w * w * x * x))
        alpha = 0.0
    return float(alpha), 1.0 / float(slope)


def interpolated_us(points: list, nbytes: float) -> float:
    """Return the time in us at nbytes, linear between cited points, held at the end points."""
    if nbytes <= points[0][0]:
        return float(points[0][1])
    for (b0, t0), (b1, t1) in zip(points, points[1:], strict=False):
        if nbytes <= b1:
            return t0 + (t1 - t0) * (nbytes - b0) / (b1 - b0)
    return float(points[-1][1])
