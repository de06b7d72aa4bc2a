"""After the decode benchmark: the best tile per batch, written in the shape of vLLM's and
SGLang's fused-MoE config files.

Those files map a batch size M (tokens in the decode step) to kernel meta-parameters:
`{"<M>": {"BLOCK_SIZE_M": .., "BLOCK_SIZE_N": .., "BLOCK_SIZE_K": .., "GROUP_SIZE_M": 1,
"num_warps": .., "num_stages": ..}}`. Our sweep measures tokens per expert t; with E routed experts
and top-k routing, a step of M = t * E / k tokens gives each expert t tokens on average, so M is
the key. One config serves both expert GEMMs (gate/up and down), as in those engines: the tile
with the smallest summed time of the two wins.
"""

from __future__ import annotations

import json
import re

import pandas as pd

from tilesweep import backends
from tilesweep.io import concat_tables, write_json
from tilesweep.stages import logged
from tilesweep.tables import Status, fastest_runner


def tune_configs(
    settings_json: str,
    decode_paths: list[str],
    outputs: dict[str, str],
    log_path: str | None = None,
) -> None:
    """Write one config file per dtype (outputs maps dtype to path)."""
    settings = json.loads(settings_json)
    decode = concat_tables(decode_paths)
    with logged(log_path) as log:
        for dtype, path in outputs.items():
            config = fused_moe_config(decode, dtype, settings["model"])
            log.info("%s: best tiles for %d batch sizes", dtype, len(config))
            write_json(path, config)


def device_slug(device: str) -> str:
    """Return a file-name-safe device name, e.g. 'cuda:NVIDIA H200 x2' -> 'nvidia_h200'."""
    name = device.split(":", 1)[-1]
    name = re.sub(r"\s+x\d+$", "", name)
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def _tunable(runner: str) -> bool:
    """Return whether a runner is a kernel a fused-MoE config file can name."""
    try:
        backend = backends.backend_of(runner)
    except ValueError:
        return False
    return backend.fused_moe_configs and backend.runner_kernel(runner) is not None


def best_tiles(decode: pd.DataFrame, dtype: str) -> pd.DataFrame:
    """Return, per tokens-per-expert, the grid kernel with the smallest gate_up + down time.

    A kernel competes at a batch only where every op was timed correctly there.
    """
    if decode.empty or "time_ms" not in decode:
        return pd.DataFrame()
    ok = decode[
        (decode["status"] == Status.OK)
        & (decode["routing"] == "uniform")
        & (decode["dtype"] == dtype)
        & decode["runner"].map(_tunable)
        & decode["time_ms"].notna()
    ]
    if ok.empty:
        return pd.DataFrame()
    keys = ["kernel", "tokens_per_expert"]
    total = ok.groupby(keys, as_index=False).agg(time_ms=("time_ms", "sum"), ops=("op", "nunique"))
    total = total[total["ops"] == ok["op"].nunique()].assign(status=Status.OK)
    best = fastest_runner(total, by=["tokens_per_expert"])
    return best[["kernel", "tokens_per_expert", "time_ms", "ops"]]


def _parse_kernel(kernel: str) -> dict:
    """Return the tile, stages and warps encoded in a kernel slug (Triton's form)."""
    m = re.match(r"\w+-m(\d+)n(\d+)k(\d+)-s(\d+)-w(\d+)-", kernel)
    if not m:
        raise ValueError(f"not a Triton kernel slug: {kernel!r}")
    bm, bn, bk, stages, warps = (int(g) for g in m.groups())
    return {
        "BLOCK_SIZE_M": bm,
        "BLOCK_SIZE_N": bn,
        "BLOCK_SIZE_K": bk,
        "GROUP_SIZE_M": 1,
        "num_warps": warps,
        "num_stages": stages,
    }


def fused_moe_config(decode: pd.DataFrame, dtype: str, model: dict) -> dict[str, dict]:
    """Return {batch tokens M: kernel meta-parameters} for the best tile at each batch."""
    best = best_tiles(decode, dtype)
    config = {}
    for rec in best.sort_values("tokens_per_expert").to_dict("records"):
        batch = max(1, rec["tokens_per_expert"] * model["routed_experts"] // model["top_k"])
        config[str(batch)] = _parse_kernel(rec["kernel"])
    return config
