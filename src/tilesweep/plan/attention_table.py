"""The attention kernel's own times on the target, where they were measured (deployment.
attention_table, from tools/h200_mla_tune.py): a part that would read the TP1 fit takes them.

Every TP1 step has the same heads, so the fit cannot tell the kernel's memory term from its math
term; with 8 of GLM-5's 64 heads the kernel takes 0.66x its 64-head time at 512 sequences, where
the fit read 1.0x (memory) or 0.39x (math). The table is read only on the device that measured
it, for MLA at its latent width over a bf16 cache, within its measured cases. Its steady times
over head counts also identify the kernel's memory and math efficiency (identify)."""

import functools
import math
from collections.abc import Callable

import numpy as np
import pandas as pd

from tilesweep.io import project_path
from tilesweep.plan.part_timers import part_terms
from tilesweep.settings import DeploymentSettings, ModelSettings

# The latent row the table's kernel reads (tools/h200_mla_tune.py: LAT, ROPE).
LATENT = (512, 64)
# The fewest sequences at which the table's times are the kernel's steady rate: at 512 and more
# a kernel's launch is under 1% of its time on the H200 (7 us of at least 247 us).
STEADY_SEQUENCES = 512
# The efficiencies searched, as fractions of the fit device's measured copy bandwidth and bf16
# rate (what a fit's efficiencies are fractions of: launch_fit.fit_step's reference).
_GRID = np.round(np.arange(0.01, 1.2001, 0.005), 3)


@functools.lru_cache(maxsize=4)
def load(path: str) -> pd.DataFrame | None:
    """Return the fastest time per (device, heads, sequences, top) of a tune table, or None."""
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
    """Return ms per layer of the kernel from the table, or None (fewer heads: the fewest's)."""
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


def serves(
    table: pd.DataFrame | None, device: str, model: ModelSettings, dep: DeploymentSettings
) -> bool:
    """Return whether the table times this model's attention core on `device` (MLA, bf16 cache)."""
    att = model.attention
    if table is None or att.kind != "mla" or dep.kv_dtype != "bf16":
        return False
    if (att.kv_lora_rank, att.qk_rope_head_dim) != LATENT:
        return False
    return bool((table["device"] == device).any())


def for_device(
    table: pd.DataFrame | None, device: str, model: ModelSettings, dep: DeploymentSettings
) -> Callable[[dict], float | None] | None:
    """Return part -> ms per occurrence from the table on `device`, or None if it cannot serve."""
    if not serves(table, device, model, dep):
        return None

    def at(part: dict) -> float | None:
        if part["kind"] != "attention" or "heads" not in part:
            return None
        return lookup(table, device, part["heads"], part["sequences"], part["tokens"])

    return at


def identify(table: pd.DataFrame, device: str, reference: dict, overlap: float) -> dict | None:
    """Return the kernel's {e_bw, e_math} on `device` fitted on the table's steady cases, or None
    (fewer than two head counts: the terms are not separable)."""
    lat, rope = LATENT
    mine = table[(table["device"] == device) & (table["sequences"] >= STEADY_SEQUENCES)]
    if mine["heads"].nunique() < 2:
        return None
    rate = (reference.get("peak_tflops") or {}).get("bf16")
    if not rate or not reference.get("memory_bandwidth_gbs"):
        return None
    # The part's roofline terms as plan.architecture.attention_core counts them (bf16 cache).
    attended = mine["top"]
    roof_memory = (
        mine["sequences"] * attended * (lat + rope) * 2 / (reference["memory_bandwidth_gbs"] * 1e6)
    )
    flops = mine["sequences"] * mine["heads"] * attended * (2 * (lat + rope) + 2 * lat)
    roof_math = flops / (rate * 1e9)
    measured = np.log(mine["ms"].to_numpy())[:, None, None]
    e_bw, e_math = _GRID[None, :, None], _GRID[None, None, :]
    roofs = (roof_memory.to_numpy()[:, None, None], roof_math.to_numpy()[:, None, None])
    memory, math_ = part_terms(*roofs, e_bw, e_math, overlap)
    err = ((np.log(memory + math_) - measured) ** 2).sum(axis=0)
    i, j = np.unravel_index(int(np.argmin(err)), err.shape)
    return {
        "e_bw": float(_GRID[i]),
        "e_math": float(_GRID[j]),
        "rms_log_error_pct": float(100 * math.sqrt(err[i, j] / len(mine))),
        "cases": int(len(mine)),
        "heads": sorted(int(h) for h in mine["heads"].unique()),
        "sequences": sorted(int(n) for n in mine["sequences"].unique()),
    }


def with_kernel_efficiencies(
    fit: dict, table: pd.DataFrame | None, model: ModelSettings, dep: DeploymentSettings
):
    """Return the fit with its attention group's efficiencies identified from the table (identify):
    the step fit sees one head count, so it cannot split memory from math; the table can."""
    group = (fit.get("groups") or {}).get("attention")
    if group is None or not serves(table, fit["device"], model, dep):
        return fit
    ref = fit.get("reference") or {}
    got = identify(table, fit["device"], ref, fit.get("overlap") or 0.0)
    if got is None:
        return fit
    note = (
        f"e_bw and e_math from the kernel's own times ({got['cases']} steady cases, heads "
        f"{got['heads']}, {got['sequences'][0]}-{got['sequences'][-1]} sequences; rms error "
        f"{got['rms_log_error_pct']:.1f}%), not the step fit's {group['e_bw']:.3f} / "
        f"{group['e_math']:.3f}, which one head count cannot separate"
    )
    kernel = dict(group, e_bw=got["e_bw"], e_math=got["e_math"], note=note, kernel_table=got)
    return dict(fit, groups=dict(fit["groups"], attention=kernel))
