"""What the tuning section derives from the tune table: the tuned config per batch and its figures
against the targets."""

from __future__ import annotations

import pandas as pd

from tilesweep import backends
from tilesweep.columns import TUNE_SUMMARY_COLUMNS, TUNE_TARGET_COLUMNS, Status


def tune_targets(summary: pd.DataFrame) -> pd.DataFrame:
    """Return one row per (dtype, problem, routing) of a tune summary: the lowest speed-ups over
    vLLM's default (all batches, M >= 1,024), the bandwidth fraction 1.15x needs (above 1: no
    once-reading kernel gets there), the lowest speed-up over torch at 1-256 tokens per expert and
    the copy fractions at 32 or fewer."""
    keys = ["dtype", "experts", "n", "routing"]
    rows = []
    for key, group in summary.groupby(keys):
        tpe = group["tokens_per_expert"]
        big = group[group["m"] >= 1024]
        decode = group[(tpe >= 1) & (tpe <= 256)]
        small = group[tpe <= 32]
        rows.append(
            {
                **dict(zip(keys, key, strict=True)),
                "x_vllm_min": group["x_vllm"].min(),
                "x_vllm_min_m1024": big["x_vllm"].min(),
                "best_x_vllm_min_m1024": big["best_x_vllm"].min(),
                # The read fraction 1.15x over the vLLM default needs (same bytes, 1.15x less time)
                "read_fraction_for_1_15x_m1024": (
                    big["read_fraction"] * 1.15 / big["x_vllm"]
                ).max(),
                "best_x_torch_min_tpe_1_256": decode["best_x_torch"].min(),
                "fastest_x_torch_min_tpe_1_256": decode["fastest_x_torch"].min(),
                **{
                    f"{prefix}copy_fraction_min_tpe_{span}": part[f"{prefix}copy_fraction"].min()
                    for prefix in ("", "fastest_")
                    for span, part in (
                        ("32", small),
                        ("1_32", small[small["tokens_per_expert"] >= 1]),
                    )
                },
            }
        )
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
    out = picked.rename(
        columns={
            "over_vllm_default": "x_vllm",
            "over_vllm_legacy_default": "x_vllm_legacy",
            "over_sglang_default": "x_sglang",
            "over_baseline": "x_torch",
        }
    )
    keys = ["dtype", "experts", "n", "routing", "m"]
    # A tuned config that is also an engine's default is timed under both names: the faster
    # row, as the pick took the faster of its times.
    out = out.sort_values([*keys, "time_ms"]).drop_duplicates(keys)
    if "best" in tune.columns:  # tables written before the variants have no best pick
        best = tune[(tune["best"] == True) & (tune["op"] == "both")]  # noqa: E712
        out = out.merge(_fastest_per_point(best, keys, "best_", _BEST_COLUMNS), on=keys, how="left")
    # The fastest config timed at each batch and routing, of any source (the engines' space,
    # their defaults, the project's variants): the project's kernel at its best on that batch.
    timed = tune[
        (tune["op"] == "both")
        & (tune["status"] == Status.OK)
        & (tune["runner"].astype(str).map(backends.runner_kind) == "fused")
        & tune["source"].ne("screen")
    ]
    fastest = _fastest_per_point(timed, keys, "fastest_", {**_BEST_COLUMNS, "copy_fraction": ""})
    out = out.merge(fastest, on=keys, how="left")
    return out.reindex(columns=TUNE_SUMMARY_COLUMNS)
