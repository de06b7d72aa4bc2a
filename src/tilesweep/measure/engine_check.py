"""Time an engine config file (any tuner's) against the engine's default, in the engine's own
kernel, on the GPU at hand: `tilesweep engine-check FILE`.

At every batch key M of the file and under uniform and Zipf routing, both expert GEMMs run with
the file's config and with the engine's default (conf engine_defaults, vLLM's
get_default_config rules), each checked against an fp32 reference and timed in CUDA-graph
replays (up to 10 calls a replay, as the engines' tuners do). A key is `won` when the file's
p90 (both GEMMs summed) is below the default's p10, `lost` when its p10 is above the default's
p90, else a `tie` within the noise; `wrong result` when either misses the reference. Only
vLLM's bf16 kernel is launched here (measure/vllm_kernel.py)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd

from tilesweep.errors import ConfigError
from tilesweep.plan import fused_moe_space as space

NAME = re.compile(r"E=(\d+),N=(\d+),device_name=([^,]+?)(?:,dtype=([^,]+))?\.json$")
CHECK_COLUMNS = [
    "engine", "version", "kernel_from", "experts", "n", "m", "routing", "config_from", "config",
    "time_ms", "time_p10_ms", "time_p90_ms", "rel_err", "x_default", "outcome",
]  # fmt: skip


def read_file(path: str | Path) -> tuple[dict, dict]:
    """Return ({experts, n, dtype}, {M: config}) of an engine config file, or raise ConfigError
    in one line naming it."""
    path = Path(path)
    found = NAME.search(path.name)
    if not found:
        raise ConfigError(f"{path}: not an engine config file name (E=..,N=..,device_name=...)")
    try:
        configs = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not readable JSON ({exc})") from None
    configs.pop("triton_version", None)
    if not configs or not all(k.isdigit() and isinstance(v, dict) for k, v in configs.items()):
        raise ConfigError(f"{path}: expected {{batch M: config}} entries")
    dtype = {None: "bf16", "fp8_w8a8": "fp8"}.get(found.group(4), found.group(4))
    shape = {"experts": int(found.group(1)), "n": int(found.group(2)), "dtype": dtype}
    return shape, {int(k): v for k, v in configs.items()}


def check_file(path: str, settings: dict, repeats: int = 20, device: str = "cuda") -> pd.DataFrame:
    """Return one row per (M, routing, file or default): times, error and the key's outcome
    (device "cpu": Triton's interpreter, for tests, not for numbers)."""
    import torch

    from tilesweep.engine_kernels import load
    from tilesweep.measure import fused_moe_case as case
    from tilesweep.measure import vllm_kernel
    from tilesweep.measure.fused_moe_case import TOLERANCE
    from tilesweep.measure.gemm_case import rel_error
    from tilesweep.measure.timing import time_call

    shape, configs = read_file(path)
    if shape["dtype"] != "bf16":
        raise ConfigError(f"{path}: {shape['dtype']}; only vLLM's bf16 kernel is launched here")
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("engine-check times on a GPU; none is here")
    fused = settings["backend"]["fused_moe"]
    version = fused["engine_versions"]["vllm"]
    try:
        kernel, where = load("vllm", version)
    except LookupError as exc:
        raise ConfigError(str(exc)) from None
    model = settings["model"]
    problem = {**shape, "hidden": model["hidden"], "top_k": model["top_k"]}
    gen = torch.Generator(device=device)
    gen.manual_seed(settings["bench"]["seed"])
    weights = case.make_weights(problem, "bf16", device, gen)
    rows, rules = [], fused["engine_defaults"]["vllm"]
    for m in sorted(configs):
        default = space.engine_default(rules, m, shape["experts"], "bf16")
        for routing in ("uniform", "zipf"):
            batch = case.make_batch(
                problem, weights, m, routing, settings["bench"]["zipf_alpha"], device, gen,
                direct=False,
            )  # fmt: skip
            timed = {}
            for label, config in (("file", configs[m]), ("default", default)):
                timed[label] = _time(kernel, vllm_kernel, problem, weights, batch, config,
                                     repeats, time_call, rel_error, case)  # fmt: skip
                rows.append({"engine": "vllm", "version": version, "kernel_from": where,
                             "experts": shape["experts"], "n": shape["n"], "m": m,
                             "routing": routing, "config_from": label,
                             "config": space.config_slug(config), **timed[label]})  # fmt: skip
            f, d = timed["file"], timed["default"]
            outcome = "won" if f["time_p90_ms"] < d["time_p10_ms"] else (
                "lost" if f["time_p10_ms"] > d["time_p90_ms"] else "tie")  # fmt: skip
            if max(f["rel_err"], d["rel_err"]) > TOLERANCE["bf16"]:
                outcome = "wrong result"  # against the fp32 reference: no timing counts
            for row in rows[-2:]:
                row["x_default"] = d["time_ms"] / row["time_ms"]
                row["outcome"] = outcome
            batch.refs.clear()
    return pd.DataFrame(rows, columns=CHECK_COLUMNS)


def _time(kernel, vk, problem, weights, batch, config, repeats, time_call, rel_error, case):
    """Return both GEMMs' summed median, p10 and p90 ms and the worse relative error."""
    blocks = vk.vllm_blocks(batch.topk_ids, config["BLOCK_SIZE_M"], problem["experts"])
    total = {"time_ms": 0.0, "time_p10_ms": 0.0, "time_p90_ms": 0.0}
    worst = 0.0
    for gemm in ("gate_up", "down"):
        top_k = problem["top_k"] if gemm == "gate_up" else 1
        weights_of = None if gemm == "gate_up" else batch.topk_weights

        def call(gemm=gemm, top_k=top_k, weights_of=weights_of):
            return vk.launch(kernel, batch.a[gemm], weights.w[gemm], batch.c[gemm], blocks,
                             config, top_k=top_k, topk_weights=weights_of)  # fmt: skip

        batch.c[gemm].fill_(float("nan"))
        call()
        if gemm not in batch.refs:
            batch.refs[gemm] = case.reference(problem, weights, batch, gemm)
        worst = max(worst, rel_error(batch.c[gemm], batch.refs[gemm]))
        t = time_call(call, repeats, 2, graph=True, max_calls=10, fill_ms=1.0)
        for key in total:
            total[key] += t[key]
    return {**total, "rel_err": worst if math.isfinite(worst) else float("inf")}


def safe_file(table: pd.DataFrame, path: str, settings: dict, out: str) -> tuple[int, int]:
    """Write the file as it may be exported: each key's config where it won on every routing
    (beyond the p10-p90 noise), else vLLM's default config; return (kept, replaced)."""
    from tilesweep.io import write_text

    shape, configs = read_file(path)
    triton = json.loads(Path(path).read_text()).get("triton_version", "")
    rules = settings["backend"]["fused_moe"]["engine_defaults"]["vllm"]
    files = table[table["config_from"] == "file"]
    won = files.groupby("m")["outcome"].agg(lambda o: set(o) == {"won"})
    safe, kept = {}, 0
    for m, config in configs.items():
        if bool(won.get(m, False)):
            safe[str(m)], kept = config, kept + 1
        else:
            safe[str(m)] = space.engine_default(rules, m, shape["experts"], shape["dtype"])
    write_text(out, space.engine_file_text(safe, triton))
    return kept, len(configs) - kept


def summary(table: pd.DataFrame) -> str:
    """Return the check's lines: per routing, the lowest file/default ratio and where, the
    outcomes, and the geometric mean over M >= 1,024."""
    out = []
    files = table[table["config_from"] == "file"]
    for routing, grp in files.groupby("routing"):
        worst = grp.loc[grp["x_default"].idxmin()]
        big = grp[grp["m"] >= 1024]["x_default"]
        geo = math.exp(big.map(math.log).mean()) if len(big) else float("nan")
        counts = grp["outcome"].value_counts().to_dict()
        out.append(
            f"{routing}: lowest {worst['x_default']:.3f}x the default at M={int(worst['m'])}; "
            f"geomean over M>=1024 {geo:.3f}x; {counts}"
        )
    return "\n".join(out)
