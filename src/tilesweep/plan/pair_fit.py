"""The pair of efficiencies (e_bw, e_math) of one group of parts, fitted on its measured times at a
few batches: the pair minimising the squared log error of the launch-aware time (part_timers), on
a log grid; the memory term alone where it explains every batch; the device's value where a term
never binds."""

from functools import partial

import numpy as np

from tilesweep.plan.part_timers import part_ms

# Efficiencies searched (log grid): from 0.2% to twice the roof (a part served from cache).
GRID = np.geomspace(0.002, 2.0, 301)
# The memory term alone is kept where it explains every fit batch this closely (fit_pair).
PARSIMONY = 0.05


def predict_ms(
    obs: dict, e_bw: float, e_math: float, per_kernel_ms: float, overlap: float = 0.0
) -> float:
    """Return the launch-aware time of one observation at these efficiencies."""
    terms = (obs["roof_memory_ms"], obs["roof_math_ms"], e_bw, e_math, overlap)
    return float(part_ms(obs["launches"], per_kernel_ms, *terms))


def fit_pair(
    observations: list[dict],
    per_kernel_ms: float,
    fallback: tuple[float, float] | None = None,
    overlap: float = 0.0,
    bw_max: float | None = None,
) -> tuple[float, float, str]:
    """Return (e_bw, e_math, note) minimising the squared log error over the observations.

    The memory term alone is tried first: two batches and two efficiencies always fit exactly, and
    a math efficiency absorbing a few percent of a memory-bound part would bind, wrongly, on a model
    with more rows per weight (Qwen3-235B-A22B's experts at 512 sequences: twice the time). A term
    that never binds takes `fallback`'s (the device's) value, else the largest."""
    bw_grid = GRID if bw_max is None else GRID[np.less_equal(GRID, bw_max)]
    e_bw, err = _memory_only(observations, per_kernel_ms, bw_grid, overlap)
    refit = partial(_with_fallback, observations, per_kernel_ms, fallback, overlap, bw_grid)
    if err <= PARSIMONY:
        if fallback is None:
            binds_math = _binding(observations, e_bw, float(GRID[-1]))[1]
            note = (
                f"math never binds at the fit batches (the memory term alone fits within "
                f"{PARSIMONY:.0%}): e_math not identified"
            )
            return e_bw, float(GRID[-1]), note if not binds_math else ""
        return refit(e_math=fallback[1])
    e_bw, e_math = _grid_fit(observations, per_kernel_ms, overlap, bw_grid)
    binds_mem, binds_math = _binding(observations, e_bw, e_math)
    if fallback is not None and not binds_math:
        return refit(e_math=fallback[1])
    if fallback is not None and not binds_mem:
        return refit(e_bw=fallback[0])
    notes = []
    if not binds_mem:
        notes.append("memory never binds at the fit batches: e_bw not identified")
    if not binds_math:
        notes.append("math never binds at the fit batches: e_math not identified")
    return e_bw, e_math, "; ".join(notes)


def _grid_fit(
    observations: list[dict],
    per_kernel_ms: float,
    overlap: float = 0.0,
    bw_grid: np.ndarray = GRID,
    math_grid: np.ndarray = GRID,
) -> tuple[float, float]:
    """Return the (e_bw, e_math) minimising the squared log error (ties: the largest)."""
    mem, flop, launches, ms = _columns(observations, 3)
    bw, mt = bw_grid[None, :, None], math_grid[None, None, :]
    pred = part_ms(launches, per_kernel_ms, mem, flop, bw, mt, overlap)
    err = (np.log(np.maximum(pred, 1e-12)) - np.log(ms)) ** 2
    total = err.sum(axis=0)
    flipped = total[::-1, ::-1]
    i, j = np.unravel_index(np.argmin(flipped), flipped.shape)
    return float(bw_grid[::-1][i]), float(math_grid[::-1][j])


def _columns(observations: list[dict], dims: int) -> list[np.ndarray]:
    """Return the observations' (roof_memory_ms, roof_math_ms, launches, ms) as columns of
    `dims` dimensions (ms at least 1e-9), to broadcast against efficiency grids."""
    keys = ("roof_memory_ms", "roof_math_ms", "launches")
    rows = [[o[k] for k in keys] + [max(o["ms"], 1e-9)] for o in observations]
    table = np.array(rows, dtype=float)
    return [table[:, i].reshape(-1, *[1] * (dims - 1)) for i in range(4)]


def _binding(observations: list[dict], e_bw: float, e_math: float) -> tuple[bool, bool]:
    """Return (memory binds at some observation, math binds at some observation)."""
    mem = [o["roof_memory_ms"] / e_bw for o in observations]
    flop = [o["roof_math_ms"] / e_math for o in observations]
    pairs = list(zip(mem, flop, strict=True))
    return any(m >= f for m, f in pairs), any(f > m for m, f in pairs)


def _with_fallback(
    observations: list[dict],
    per_kernel_ms: float,
    fallback: tuple[float, float],
    overlap: float,
    bw_grid: np.ndarray,
    e_bw: float | None = None,
    e_math: float | None = None,
) -> tuple[float, float, str]:
    """Return (e_bw, e_math, note) with one efficiency fixed at the device's, the other refitted;
    never below the least the observations allow, so no part runs slower than measured."""
    least = [_least(observations, per_kernel_ms, t) for t in ("roof_memory_ms", "roof_math_ms")]
    device = (max(fallback[0], least[0]), max(fallback[1], least[1]))
    fixed_bw = e_bw is not None
    e_bw = device[0] if fixed_bw else e_bw
    e_math = e_math if fixed_bw else device[1]
    taken = ["e_bw" if fixed_bw else "e_math"]
    errors = [
        predict_ms(o, *device, per_kernel_ms, overlap) / max(o["ms"], 1e-9) for o in observations
    ]
    if max(abs(e - 1) for e in errors) <= PARSIMONY:  # the device's pair fits every batch
        e_bw, e_math = device
        taken = ["e_bw", "e_math"]
    else:
        bw_grid = np.array([e_bw]) if fixed_bw else bw_grid
        math_grid = GRID if fixed_bw else np.array([e_math])
        e_bw, e_math = _grid_fit(observations, per_kernel_ms, overlap, bw_grid, math_grid)
        binds_mem, binds_math = _binding(observations, e_bw, e_math)
        if fixed_bw and not binds_math:
            e_math = device[1]
            taken.append("e_math")
        elif not fixed_bw and not binds_mem:
            e_bw = device[0]
            taken.append("e_bw")
    said = f"{' and '.join(sorted(taken))} not identified at the fit batches: the device-wide"
    return e_bw, e_math, f"{said} value (raised where the measurements allow no less)"


def _least(observations: list[dict], per_kernel_ms: float, term: str) -> float:
    """Return the least efficiency of a term the observations allow (0 where it has no work)."""
    least = 0.0
    for o in observations:
        left = o["ms"] - o["launches"] * per_kernel_ms
        if o[term] > 0 and left > 0:
            least = max(least, o[term] / left)
    return least


def _memory_only(
    observations: list[dict], per_kernel_ms: float, bw_grid: np.ndarray, overlap: float
) -> tuple[float, float]:
    """Return (e_bw, largest relative error) of the fit with the memory term alone."""
    mem, flop, launches, ms = _columns(observations, 2)
    pred = part_ms(launches, per_kernel_ms, mem, flop, bw_grid[None, :], GRID[-1], overlap)
    total = ((np.log(np.maximum(pred, 1e-12)) - np.log(ms)) ** 2).sum(axis=0)
    i = len(bw_grid) - 1 - int(np.argmin(total[::-1]))  # ties: the largest efficiency
    return float(bw_grid[i]), float(np.abs(pred[:, i] / ms[:, 0] - 1).max())
