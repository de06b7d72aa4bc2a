"""What the tuning section derives from the tune table: the tuned config per batch, targets."""

from __future__ import annotations

import pandas as pd

from tilesweep import backends
from tilesweep.columns import TUNE_SUMMARY_COLUMNS, TUNE_TARGET_COLUMNS, Status


def tune_targets(summary: pd.DataFrame) -> pd.DataFrame:
    """Return one row per (dtype, problem, routing) of a tune summary: its lowest figures against
    the targets (a read fraction for 1.15x above 1: no once-reading kernel gets there)."""
    keys = ["dtype", "experts", "n", "routing"]
    rows = []
    for key, group in summary.groupby(keys):
        tpe, big = group["tokens_per_expert"], group[group["m"] >= 1024]
        decode, small = group[(tpe >= 1) & (tpe <= 256)], group[tpe <= 32]
        row = {**dict(zip(keys, key, strict=True)), "x_vllm_min": group["x_vllm"].min()}
        for col in ("x_vllm", "best_x_vllm"):
            row[f"{col}_min_m1024"] = big[col].min()
        # The read fraction 1.15x over the vLLM default needs (same bytes, 1.15x less time)
        row["read_fraction_for_1_15x_m1024"] = (big["read_fraction"] * 1.15 / big["x_vllm"]).max()
        for col in ("best_x_torch", "fastest_x_torch"):
            row[f"{col}_min_tpe_1_256"] = decode[col].min()
        for col in ("copy_fraction", "fastest_copy_fraction"):
            row[f"{col}_min_tpe_32"] = small[col].min()
            row[f"{col}_min_tpe_1_32"] = small[small["tokens_per_expert"] >= 1][col].min()
        rows.append(row)
    return pd.DataFrame(rows, columns=TUNE_TARGET_COLUMNS)


# Tune-table columns a summary carries for a picked config, and their names after its prefix
# ("" keeps the column's own name).
_BEST_COLUMNS = {"config": "config", "over_vllm_default": "x_vllm", "over_baseline": "x_torch"}


def _fastest_per_point(rows: pd.DataFrame, keys: list[str], prefix: str, columns: dict):
    """Return the fastest of `rows` per `keys` (ties: the smaller config), columns prefixed."""
    first = rows.sort_values([*keys, "time_ms", "config"]).drop_duplicates(keys)
    names = {col: prefix + (new or col) for col, new in columns.items()}
    return first[[*keys, *columns]].rename(columns=names)


def tune_summary(tune: pd.DataFrame) -> pd.DataFrame:
    """Return the tuned config per (dtype, problem, batch, routing) with its speed-ups."""
    picked = tune[(tune["tuned"] == True) & (tune["op"] == "both")]  # noqa: E712
    if picked.empty:
        return pd.DataFrame(columns=TUNE_SUMMARY_COLUMNS)
    names = {f"over_{e}_default": f"x_{e}" for e in ("vllm", "vllm_legacy", "sglang")}
    out = picked.rename(columns={**names, "over_baseline": "x_torch"})
    keys = ["dtype", "experts", "n", "routing", "m"]
    # A tuned config that is also an engine's default is timed under both names: the faster
    # row, as the pick took the faster of its times.
    out = out.sort_values([*keys, "time_ms"]).drop_duplicates(keys)
    best = tune[(tune["best"] == True) & (tune["op"] == "both")]  # noqa: E712
    out = out.merge(_fastest_per_point(best, keys, "best_", _BEST_COLUMNS), on=keys, how="left")
    # The fastest config timed at each batch and routing, of any source (the engines' space,
    # their defaults, the project's variants): the project's kernel at its best on that batch.
    ok = (tune["op"] == "both") & (tune["status"] == Status.OK) & tune["source"].ne("screen")
    timed = tune[ok & (tune["runner"].astype(str).map(backends.runner_kind) == "fused")]
    fastest = _fastest_per_point(timed, keys, "fastest_", {**_BEST_COLUMNS, "copy_fraction": ""})
    out = out.merge(fastest, on=keys, how="left")
    return out.reindex(columns=TUNE_SUMMARY_COLUMNS)
