"""The verdict: which part of the step (memory, math, communication, other) bounds it, by how much.

Rules, in order:
1. a layout that does not fit in memory is `does-not-fit` and gets no speed verdict;
2. `kernel-limited` when the dominant part is kernel time (memory or math) and those kernels reach
   under 50% of both their roofs (achieved fraction of bandwidth and of math peak): then neither
   roof explains the time, the kernels do;
3. `mixed` when the top two parts are within 1.2x of each other;
4. else the dominant part's name (`host`: the engine's time between steps; `launch` for
   `other`: the kernels' fixed cost, launches x the measured per-kernel cost; a pipeline bubble is
   never `other`, the bound is over the path).
The margin is top / second as a ratio with one decimal ("1.3x"); the share is top / step.
"""

import math

PARTS = ("memory", "math", "communication", "other", "host")
# The bound a part names: `other` is the kernels' fixed cost (launches x per-kernel cost); `host`
# the engine's time between steps that is not GPU work.
BOUND_NAMES = {"other": "launch"}
MIXED_WITHIN = 1.2
KERNEL_LIMITED_BELOW = 0.5


def margin_text(top: float, second: float) -> str:
    """Return top / second as a one-decimal ratio string, 'inf' when second is zero."""
    return "inf" if second <= 0 else f"{top / second:.1f}x"


def decide_bound(split: dict, achieved: dict | None = None, fits: bool = True) -> dict:
    """Return {bound, share, margin} for a step split {part: ms}; achieved: {bandwidth, math}."""
    if not fits:
        return {"bound": "does-not-fit", "share": math.nan, "margin": ""}
    times = {p: float(split.get(p, 0.0)) for p in PARTS}
    if any(math.isnan(t) for t in times.values()):
        gaps = ", ".join(p for p, t in times.items() if math.isnan(t))
        return {"bound": f"gap ({gaps} unknown)", "share": math.nan, "margin": ""}
    total = sum(times.values())
    if total <= 0:
        return {"bound": "gap (empty step)", "share": math.nan, "margin": ""}
    ranked = sorted(times.items(), key=lambda kv: kv[1], reverse=True)
    (top_name, top), (_, second) = ranked[0], ranked[1]
    margin = margin_text(top, second)
    share = top / total
    if top_name in ("memory", "math") and achieved:
        bw, mp = achieved.get("bandwidth", math.nan), achieved.get("math", math.nan)
        if bw < KERNEL_LIMITED_BELOW and mp < KERNEL_LIMITED_BELOW:
            return {"bound": "kernel-limited", "share": share, "margin": margin}
    if second > 0 and top / second < MIXED_WITHIN:
        return {"bound": "mixed", "share": share, "margin": margin}
    return {"bound": BOUND_NAMES.get(top_name, top_name), "share": share, "margin": margin}
