"""Time an engine config file (any tuner's) against the engine's default, in the engine's own
kernel, on the GPU at hand: `tilesweep engine-check FILE [--engine vllm|sglang]`.

At every batch key M of the file and under uniform and Zipf routing, both expert GEMMs run with
the file's config and with the engine's default (conf engine_defaults: vLLM's or SGLang's
get_default_config rules for the file's format), each checked against an fp32 reference and
timed in CUDA-graph replays (measure/engine_timing.py). A key is `won` when the file's p90
(both GEMMs summed) is below the default's p10, `lost` when its p10 is above the default's p90,
else a `tie` within the noise; `wrong result` when either misses the reference. The file's
format is read from its name: bf16, `dtype=fp8_w8a8` (fp8 per tensor) or
`dtype=fp8_w8a8,block_shape=[128, 128]` (fp8 with 128 x 128 block scales)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd

from tilesweep.errors import ConfigError
from tilesweep.plan import fused_moe_space as space

NAME = re.compile(
    r"E=(\d+),N=(\d+),device_name=([^,]+?)(?:,dtype=([^,]+?))?(?:,block_shape=\[(\d+), ?(\d+)\])?"
    r"\.json$"
)
CHECK_COLUMNS = [
    "engine", "version", "kernel_from", "format", "experts", "n", "m", "routing", "config_from",
    "config", "time_ms", "time_p10_ms", "time_p90_ms", "rel_err", "x_default_measured",
    "x_default", "outcome",
]  # fmt: skip


def file_format(dtype: str | None, block: tuple | None) -> str:
    """Return the format of an engine file's dtype and block_shape selectors, or raise."""
    if dtype is None and block is None:
        return "bf16"
    if dtype == "fp8_w8a8":
        if block is None:
            return "fp8"
        if block == ("128", "128"):
            return "fp8_block"
    sel = f"dtype={dtype}" + (f",block_shape=[{block[0]}, {block[1]}]" if block else "")
    raise ConfigError(f"{sel}: not a format launched here (bf16, fp8_w8a8, fp8_w8a8 128x128)")


def read_file(path: str | Path) -> tuple[dict, dict]:
    """Return ({experts, n, format}, {M: config}) of an engine config file, or raise
    ConfigError in one line naming it."""
    path = Path(path)
    found = NAME.search(path.name)
    if not found:
        raise ConfigError(f"{path}: not an engine config file name (E=..,N=..,device_name=...)")
    block = (found.group(5), found.group(6)) if found.group(5) else None
    try:
        fmt = file_format(found.group(4), block)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    try:
        configs = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(configs, dict):
        raise ConfigError(f"{path}: a JSON {type(configs).__name__}; expected {{batch M: config}}")
    configs.pop("triton_version", None)
    if not configs or not all(k.isdigit() and isinstance(v, dict) for k, v in configs.items()):
        raise ConfigError(f"{path}: expected {{batch M: config}} entries")
    shape = {"experts": int(found.group(1)), "n": int(found.group(2)), "format": fmt}
    return shape, {int(k): v for k, v in configs.items()}


def problem_of(shape: dict, settings: dict) -> dict:
    """Return the problem a file's shape stands for in the composed model."""
    model = settings["model"]
    return {"experts": shape["experts"], "n": shape["n"], "hidden": model["hidden"],
            "top_k": model["top_k"]}  # fmt: skip


def timer_for(engine: str, shape: dict, settings: dict, device: str = "cuda", seed_shift: int = 0):
    """Return the EngineTimer of a file's problem in an engine's kernel, or raise ConfigError."""
    import torch

    from tilesweep.measure.engine_timing import EngineTimer

    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("the engines' kernels are timed on a GPU; none is here")
    fused = settings["backend"]["fused_moe"]
    if engine not in fused["engine_versions"]:
        raise ConfigError(f"--engine {engine}: not in backend.fused_moe.engine_versions")
    bench = settings["bench"]
    try:
        return EngineTimer(engine, fused["engine_versions"][engine], problem_of(shape, settings),
                           shape["format"], bench["seed"] + seed_shift, bench["zipf_alpha"],
                           device)  # fmt: skip
    except LookupError as exc:
        raise ConfigError(str(exc)) from None


def check_file(path: str, settings: dict, repeats: int = 20, device: str = "cuda",
               engine: str = "vllm", seed_shift: int = 0) -> pd.DataFrame:  # fmt: skip
    """Return one row per (M, routing, file or default): times, error and the key's outcome
    (device "cpu": Triton's interpreter, for tests, not for numbers)."""
    from tilesweep.measure.engine_timing import effective

    shape, configs = read_file(path)
    timer = timer_for(engine, shape, settings, device, seed_shift)
    rules = settings["backend"]["fused_moe"]["engine_defaults"][engine]
    rows = []
    for m in sorted(configs):
        default = space.engine_default(rules, m, shape["experts"], shape["format"])
        for routing in ("uniform", "zipf"):
            batch = timer.batch(m, routing)
            for label, config in (("file", configs[m]), ("default", default)):
                timed = timer.time(config, batch, repeats)
                rows.append({"engine": engine, "version": timer.version,
                             "kernel_from": timer.kernel_from, "format": shape["format"],
                             "experts": shape["experts"], "n": shape["n"], "m": m,
                             "routing": routing, "config_from": label,
                             "config": space.config_slug(effective(config, shape["format"])),
                             **timed})  # fmt: skip
            batch.refs.clear()
    return judge(pd.DataFrame(rows, columns=CHECK_COLUMNS))


def judge(table: pd.DataFrame) -> pd.DataFrame:
    """Return the check's rows with each key's outcome: `same config` where the file holds the
    default's config (the engine runs the same kernel: x_default 1, and x_default_measured is
    the noise between two timings of one config), else won / lost / tie by the p10-p90 of
    both timings, or `wrong result` where either missed the fp32 reference."""
    from tilesweep.measure.fused_moe_case import TOLERANCE

    table = table.copy()
    measured, ratio, outcomes = {}, {}, {}
    for _, pair in table.groupby(["m", "routing"], sort=False):
        f = pair[pair["config_from"] == "file"].iloc[0]
        d = pair[pair["config_from"] == "default"].iloc[0]
        outcome = "won" if f["time_p90_ms"] < d["time_p10_ms"] else (
            "lost" if f["time_p10_ms"] > d["time_p90_ms"] else "tie")  # fmt: skip
        same = f["config"] == d["config"]
        if same:
            outcome = "same config"
        if max(f["rel_err"], d["rel_err"]) > TOLERANCE["bf16"]:
            outcome = "wrong result"  # against the fp32 reference: no timing counts
        for index in pair.index:
            measured[index] = d["time_ms"] / table.at[index, "time_ms"]
            ratio[index] = 1.0 if same else measured[index]
            outcomes[index] = outcome
    # whole columns at once: a column of missing values is float, and takes no words
    table["x_default_measured"] = pd.Series(measured, dtype=float)
    table["x_default"] = pd.Series(ratio, dtype=float)
    table["outcome"] = pd.Series(outcomes, dtype=object)
    return table


def safe_file(table: pd.DataFrame, path: str, settings: dict, out: str,
              engine: str = "vllm") -> tuple[int, int]:  # fmt: skip
    """Write the file as it may be exported: each key's config where it won on every routing
    (beyond the p10-p90 noise), else the engine's default config; return (kept, replaced)."""
    from tilesweep.io import write_text

    shape, configs = read_file(path)
    triton = json.loads(Path(path).read_text()).get("triton_version", "")
    rules = settings["backend"]["fused_moe"]["engine_defaults"][engine]
    files = table[table["config_from"] == "file"]
    won = files.groupby("m")["outcome"].agg(lambda o: set(o) == {"won"})
    safe, kept = {}, 0
    for m, config in configs.items():
        if bool(won.get(m, False)):
            safe[str(m)], kept = config, kept + 1
        else:
            safe[str(m)] = space.engine_default(rules, m, shape["experts"], shape["format"])
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
