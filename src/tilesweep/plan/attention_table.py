"""The attention kernel's own times on the target, where they were measured: a part the
composition would otherwise read from the TP1 fit takes them.

The fused MLA decode kernel (kernels/mla_decode.py) was timed over its launch configurations on
one H200 by tools/h200_mla_tune.py, in CUDA graphs, at heads per rank x sequences x indexed
tokens (deployment.attention_table names that table). Every TP1 step has the same heads, so the
fit cannot tell the kernel's memory term from its math term; with 8 of GLM-5's 64 heads (a TP8
rank) the kernel takes 0.66x its 64-head time at 512 sequences, where the fit read either 1.0x
(memory) or 0.39x (math). The table is read only on the device that measured it, for MLA with the
latent width it was measured at and a bf16 cache, within its measured heads and sequences (log
interpolation), at its measured indexed tokens; elsewhere the part keeps the fit.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import pandas as pd

from tilesweep.io import project_path

# The latent row the table's kernel reads (tools/h200_mla_tune.py: LAT, ROPE).
LATENT = (512, 64)


@functools.lru_cache(maxsize=4)
def load(path: str) -> pd.DataFrame | None:
    """Return the fastest time per (device, heads, sequences, top) of a tune table's cases that
    ran, or None where no path is given (read once per path; never modified)."""
    if not path:
        return None
    rows = pd.read_csv(project_path(path))
    ok = rows[rows["status"] == "ok"]
    keys = ["device", "heads", "sequences", "top"]
    best = ok.groupby(keys, as_index=False)["ms"].min()
    return best.astype({"heads": float, "sequences": float, "top": float})


def _between(points: dict[float, float], x: float) -> float | None:
    """Return the log-log interpolation of {x: y} at x, within the measured range, else None."""
    xs = sorted(points)
    if not xs or x < xs[0] or x > xs[-1]:
        return None
    if x in points:
        return points[x]
    hi = next(v for v in xs if v > x)
    lo = max(v for v in xs if v < x)
    w = (math.log(x) - math.log(lo)) / (math.log(hi) - math.log(lo))
    return math.exp((1 - w) * math.log(points[lo]) + w * math.log(points[hi]))


def lookup(table: pd.DataFrame, device: str, heads: float, sequences: float, tokens: float):
    """Return ms per layer of the kernel at heads per rank, sequences and indexed tokens on
    `device` from the table, or None where it has no such case. Fewer heads than the fewest
    measured take the fewest's time (the kernel pads heads to its block)."""
    mine = table[(table["device"] == device) & (table["top"] == tokens)]
    if mine.empty:
        return None
    heads = max(heads, float(mine["heads"].min()))
    by_heads = {}
    for h, rows in mine.groupby("heads"):
        at = _between(dict(zip(rows["sequences"], rows["ms"], strict=True)), sequences)
        if at is not None:
            by_heads[float(h)] = at
    return _between(by_heads, heads)


def for_device(
    table: pd.DataFrame | None, device: str, model: dict, dep: dict
) -> Callable[[dict], float | None] | None:
    """Return part -> ms per occurrence from the table for an attention core part on `device`,
    or None where the table cannot serve this model and deployment at all."""
    att = model["attention"]
    if table is None or att["kind"] != "mla" or dep["kv_dtype"] != "bf16":
        return None
    if (att["kv_lora_rank"], att["qk_rope_head_dim"]) != LATENT:
        return None
    if not (table["device"] == device).any():
        return None

    def at(part: dict) -> float | None:
        if part["kind"] != "attention" or "heads" not in part:
            return None
        return lookup(table, device, part["heads"], part["sequences"], part["tokens"])

    return at
