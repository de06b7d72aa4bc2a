"""The engines' own fused-MoE kernels as decode.csv rows, from the tune table."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from tilesweep import backends, package_data
from tilesweep.columns import Status
from tilesweep.fused_moe.engines.base import installed

if TYPE_CHECKING:
    from tilesweep.fused_moe.section import FusedMoeSettings

_LISTS = package_data.column_lists("tilesweep.fused_moe.engines.decode_rows", "tilesweep.fused_moe")
ENGINE_COLUMNS = _LISTS["ENGINE_COLUMNS"]
ENGINE_KERNELS = {
    "engine": "fused_experts",
    "engine:tuned": "fused_experts, the project kernel's tuned table",
    "engine:default": "fused_experts, the engine's default",
}


def engine_rows(mine: FusedMoeSettings | None, tune: pd.DataFrame) -> pd.DataFrame:
    """Return decode.csv's engine rows, timed or each skipped; none where the section is off."""
    if mine is None or not mine.enabled:
        return pd.DataFrame(columns=ENGINE_COLUMNS)
    timed = pd.DataFrame()
    if not tune.empty and "runner" in tune:
        kinds = tune["runner"].astype(str).map(backends.runner_kind)
        timed = tune[kinds == "engine"]
    if not timed.empty:
        out = timed.rename(columns={"m": "tokens"}).reindex(columns=ENGINE_COLUMNS)
        out["kernel"] = timed["source"].map(ENGINE_KERNELS).fillna("fused_experts")
        out["op"] = "whole_moe"
        out["source"] = (timed["status"] == Status.OK).map({True: "measured", False: ""})
        return out.reset_index(drop=True)
    untimed = "no tuned table to time it with: tune_configs runs on GPU machines only"
    rows = [
        {"runner": f"engine:{e}", "kernel": "fused_experts", "op": "whole_moe", "source": ""}
        | {"status": "skipped", "reason": untimed if installed(e) else f"{e} is not installed"}
        for e in mine.engines
    ]
    return pd.DataFrame(rows).reindex(columns=ENGINE_COLUMNS)
