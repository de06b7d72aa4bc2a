"""The launch figure: shared memory per kernel and target against the target's limits."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from tilesweep.report.plotting import empty, floats, kernel_label

FIT_COLORS = {"default": "#3a8a3a", "optin": "#e09b00", "no": "#c0392b", "unknown": "#9a9a9a"}
FIT_LABELS = {
    "default": "fits by default",
    "optin": "fits after opt-in",
    "no": "does not fit",
    "unknown": "unknown",
}
LIMITS = (
    ("smem_default_bytes", "default per block", ":"),
    ("smem_limit_bytes", "opt-in per block", "--"),
    ("smem_per_sm_bytes", "per SM", "-"),
)


def launch_smem(launch: pd.DataFrame) -> Figure:
    """Return bars of shared memory per kernel, one panel per target, with its limit lines.

    Bars are the compiler's (Triton) or CUTLASS's number, coloured by whether the kernel fits;
    CUTLASS bars are split into mainloop and the rest (epilogue); a black diamond is the hand
    estimate; vertical lines are the target's default, opt-in and per-SM limits.
    """
    if launch.empty or "target" not in launch:
        return empty("no launch checks in this sweep", "Shared memory per tile")
    targets = list(dict.fromkeys(launch["target"].astype(str)))
    heights = [max(2.0, 0.32 * (launch["target"] == t).sum() + 1.2) for t in targets]
    fig = Figure(figsize=(9, sum(heights)))
    axes = fig.subplots(len(targets), 1, squeeze=False, height_ratios=heights)[:, 0]
    for ax, target in zip(axes, targets, strict=True):
        part = launch[launch["target"].astype(str) == target].reset_index(drop=True)
        _smem_panel(ax, part, target)
    handles = [Patch(color=c, label=FIT_LABELS[k]) for k, c in FIT_COLORS.items()]
    handles += [
        Patch(facecolor="white", edgecolor="#333333", hatch="///", label="epilogue + rest"),
        Line2D([], [], marker="D", color="black", ls="", label="hand estimate"),
    ]
    handles += [Line2D([], [], color="#333333", ls=ls, label=lab) for _, lab, ls in LIMITS]
    fig.legend(handles=handles, loc="outside lower center", ncols=4, fontsize="small")
    fig.set_layout_engine("constrained")
    return fig


def _smem_panel(ax, part: pd.DataFrame, target: str) -> None:
    """Draw one target's shared-memory bars, estimates and limit lines on ax."""
    rows = part.to_dict("records")
    labels = [kernel_label(r) for r in rows]
    y = np.arange(len(rows))
    smem = floats(part, "smem_bytes").to_numpy() / 1024
    mainloop = floats(part, "mainloop_smem_bytes").to_numpy() / 1024
    colors = [FIT_COLORS.get(str(r.get("fits")), FIT_COLORS["unknown"]) for r in rows]
    split = ~np.isnan(mainloop) & ~np.isnan(smem)
    whole = np.where(split, mainloop, smem)
    ax.barh(y, np.nan_to_num(whole), color=colors, height=0.7)
    if split.any():
        ax.barh(
            y[split],
            (smem - mainloop)[split],
            left=mainloop[split],
            color=[c for c, s in zip(colors, split, strict=True) if s],
            edgecolor="#333333",
            hatch="///",
            height=0.7,
            linewidth=0.3,
        )
    model = floats(part, "smem_model_bytes").to_numpy() / 1024
    ax.plot(model, y, "D", color="black", markersize=4, ls="")
    for i, r in enumerate(rows):
        if np.isnan(smem[i]):
            ax.annotate(
                f"no number ({r.get('status')} failed: see the table)",
                (0 if np.isnan(model[i]) else model[i], i),
                xytext=(8, 0),
                textcoords="offset points",
                va="center",
                fontsize="x-small",
                color="#555555",
            )
    for col, _label, ls in LIMITS:
        values = floats(part, col).dropna()
        if not values.empty:
            ax.axvline(values.iloc[0] / 1024, color="#333333", ls=ls, lw=1)
    ax.set_yticks(y, labels, fontsize="small")
    ax.invert_yaxis()
    arch = str(part["arch"].iloc[0]) if "arch" in part else ""
    ax.set_title(f"{target} ({arch})", fontsize="medium", loc="left")
    ax.set_xlabel("shared memory per block (KiB)")
    ax.grid(axis="x", alpha=0.3)
