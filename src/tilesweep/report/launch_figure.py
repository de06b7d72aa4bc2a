"""The launch figure: shared memory per kernel and target against the target's limits."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from tilesweep.answer_picks import numeric
from tilesweep.report import plotting as plot

FIT_COLORS = {"default": "#3a8a3a", "optin": "#e09b00", "no": "#c0392b", "unknown": "#9a9a9a"}
FIT_LABELS = {
    "default": "fits by default",
    "optin": "fits after opt-in",
    "no": "does not fit",
    "unknown": "unknown",
}
# The target's limits: column, label, line style, colour and width. The opt-in per-block limit
# and the per-SM capacity lie 1 KiB apart on SM120 (and SM90), so the per-SM line is a wide pale
# band under the dashed opt-in line, and each line is named above the panel on its own tier.
LIMITS = (
    ("smem_default_bytes", "default per block", ":", "#555555", 1.5),
    ("smem_limit_bytes", "opt-in per block", "--", "#1f5fbf", 1.5),
    ("smem_per_sm_bytes", "per SM", "-", "#b07cc6", 4.0),
)
# The height of one tier of limit names above a panel, in points.
TIER_PT = plot.TEXT_PT + 3


def target_order(launch: pd.DataFrame, first: str | None = None) -> list[str]:
    """Return the launch table's targets in table order, `first` ahead of the rest."""
    targets = list(dict.fromkeys(launch["target"].astype(str)))
    return sorted(targets, key=lambda t: t != first)


def launch_smem(launch: pd.DataFrame, first: str | None = None) -> Figure:
    """Return bars of shared memory per kernel, one panel per target, with the target's limits."""
    if launch.empty or "target" not in launch:
        return plot.empty("no launch checks in this sweep", "Shared memory per tile")
    targets = target_order(launch, first)
    heights = [max(2.2, 0.3 * (launch["target"] == t).sum() + 1.4) for t in targets]
    fig = Figure(figsize=(9, sum(heights)))
    axes = fig.subplots(len(targets), 1, squeeze=False, height_ratios=heights, sharex=True)
    for ax, target in zip(axes[:, 0], targets, strict=True):
        part = launch[launch["target"].astype(str) == target].reset_index(drop=True)
        _smem_panel(ax, part, target, deployed=target == first)
    handles = [Patch(color=c, label=FIT_LABELS[k]) for k, c in FIT_COLORS.items()]
    handles += [
        Patch(facecolor="white", edgecolor="#333333", hatch="///", label="epilogue + rest"),
        Line2D([], [], marker="D", color="black", ls="", label="hand estimate"),
    ]
    handles += [Line2D([], [], color=c, ls=ls, lw=w, label=lab) for _, lab, ls, c, w in LIMITS]
    plot.legend_below(fig, handles, ncols=4)
    return plot.finish(fig)


def _smem_panel(ax, part: pd.DataFrame, target: str, deployed: bool = False) -> None:
    """Draw one target's shared-memory bars, estimates and limit lines on ax."""
    rows = part.to_dict("records")
    labels = [plot.kernel_label(r) for r in rows]
    y = np.arange(len(rows))
    smem = numeric(part, "smem_bytes").to_numpy() / 1024
    mainloop = numeric(part, "mainloop_smem_bytes").to_numpy() / 1024
    fits = np.array(
        [str(r.get("fits")) if str(r.get("fits")) in FIT_COLORS else "unknown" for r in rows]
    )
    split = ~np.isnan(mainloop) & ~np.isnan(smem)
    whole = np.nan_to_num(np.where(split, mainloop, smem))
    for key, color in FIT_COLORS.items():
        mine = fits == key
        if mine.any():
            ax.barh(y[mine], whole[mine], color=color, height=0.7, label=FIT_LABELS[key])
    if split.any():
        ax.barh(
            y[split],
            (smem - mainloop)[split],
            left=mainloop[split],
            color=[FIT_COLORS[f] for f in fits[split]],
            edgecolor="#333333",
            hatch="///",
            height=0.7,
            linewidth=0.3,
            label="epilogue + rest",
        )
    model = numeric(part, "smem_model_bytes").to_numpy() / 1024
    if not np.isnan(model).all():
        ax.plot(model, y, "D", color="black", markersize=4, ls="", label="hand estimate")
    for i, r in enumerate(rows):
        if np.isnan(smem[i]):
            ax.annotate(
                f"no number ({r.get('status')} failed: see the table)",
                (0 if np.isnan(model[i]) else model[i], i),
                xytext=(8, 0),
                textcoords="offset points",
                va="center",
                fontsize=plot.TEXT_PT,
                color="#555555",
            )
    tiers = _limit_lines(ax, part)
    ax.set_yticks(y, labels, fontsize=plot.TEXT_PT + 1)
    ax.set_ylim(len(rows) - 0.4, -0.6)
    arch = str(part["arch"].iloc[0]) if "arch" in part else ""
    note = " (the deployment's hardware)" if deployed else ""
    ax.set_title(
        f"{target} ({arch}){note}", fontsize=plot.TEXT_PT + 3, loc="left", pad=6 + tiers * TIER_PT
    )
    ax.set_xlabel("shared memory per block (KiB)")
    ax.xaxis.set_tick_params(labelbottom=True)
    ax.grid(axis="x", alpha=0.3)


def _limit_lines(ax, part: pd.DataFrame) -> int:
    """Draw the target's limits as vertical lines, names on their own tiers; return the tiers."""
    found = []
    for col, label, ls, color, width in LIMITS:
        values = numeric(part, col).dropna()
        if not values.empty:
            found.append((values.iloc[0] / 1024, label, ls, color, width))
    found.sort(key=lambda f: f[0])
    for tier, (kib, label, ls, color, width) in enumerate(found):
        # The wide per-SM band lies under the dashed opt-in line: where they coincide both show.
        zorder = 3 if ls == "-" else 4
        ax.axvline(kib, color=color, ls=ls, lw=width, zorder=zorder, gid=plot.REFERENCE)
        ax.annotate(
            f"{label} {kib:,.0f} KiB",
            (kib, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(2, 2 + tier * TIER_PT),
            textcoords="offset points",
            va="bottom",
            fontsize=plot.TEXT_PT,
            color=color,
            annotation_clip=False,
        )
    return len(found)


def deployment_target(verdict: pd.DataFrame) -> str | None:
    """Return the verdict's one hardware, or None when it names none or several."""
    names = list(dict.fromkeys(verdict["hardware"].astype(str))) if "hardware" in verdict else []
    return names[0] if len(names) == 1 else None
