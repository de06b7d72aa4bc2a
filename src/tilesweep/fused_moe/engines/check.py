"""Time an engine config file against what the engine runs today (`tilesweep engine-check FILE`), in
its own kernel: the baseline is its shipped table in the pinned wheel (wheels.shipped_table), else
its default rule. A key is `won` where the file's p90 is below the baseline's p10 and beats the
noise band (two timings of the baseline), `lost` on the mirror, else `tie`; `same config` and `wrong
result` as named. The format is read from the name (vLLM 0.33 writes `block_shape=[128,128]` without
the space, SGLang with it)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from tilesweep import package_data
from tilesweep.errors import ConfigError, last_line
from tilesweep.fused_moe import space
from tilesweep.fused_moe.case import TOLERANCE
from tilesweep.fused_moe.engines import wheels
from tilesweep.fused_moe.engines.timer import DECODE, EngineTimer, Method, effective
from tilesweep.io import write_text
from tilesweep.settings import Tuning

if TYPE_CHECKING:
    from tilesweep.fused_moe.section import EngineDefaults

NAME = re.compile(
    r"E=(\d+),N=(\d+),device_name=([^,]+?)(?:,dtype=([^,]+?))?(?:,block_shape=\[(\d+), ?(\d+)\])?"
    r"\.json$"
)
CHECK_COLUMNS = package_data.column_lists(__name__, "tilesweep.fused_moe")["CHECK_COLUMNS"]


# The format of each (dtype, block_shape) selector pair an engine file's name may carry.
FILE_FORMATS = {
    (None, None): "bf16",
    ("fp8_w8a8", None): "fp8",
    ("fp8_w8a8", ("128", "128")): "fp8_block",
}


def read_file(path: str | Path) -> tuple[dict, dict]:
    """Return ({experts, n, format}, {M: config}) of an engine config file, or raise ConfigError."""
    path = Path(path)
    found = NAME.search(path.name)
    if not found:
        raise ConfigError(f"{path}: not an engine config file name (E=..,N=..,device_name=...)")
    dtype, block = found.group(4), (found.group(5), found.group(6)) if found.group(5) else None
    fmt = FILE_FORMATS.get((dtype, block))
    if fmt is None:
        sel = f"dtype={dtype}" + (f",block_shape=[{block[0]}, {block[1]}]" if block else "")
        why = "not a format launched here (bf16, fp8_w8a8, fp8_w8a8 128x128)"
        raise ConfigError(f"{path}: {sel}: {why}")
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


def problem_of(shape: dict, settings: Tuning) -> dict:
    """Return the problem a file's shape stands for in the composed model."""
    hidden, top_k = settings.model.hidden, settings.model.top_k
    return {"experts": shape["experts"], "n": shape["n"], "hidden": hidden, "top_k": top_k}


def timer_for(engine: str, shape: dict, settings: Tuning, how: Method = DECODE):
    """Return the EngineTimer of a file's problem in an engine's kernel, or raise ConfigError."""
    import torch

    fused = settings.backend.fused_moe
    if engine not in fused.engine_versions:  # a bad argument first, wherever it runs
        raise ConfigError(f"--engine {engine}: not in backend.fused_moe.engine_versions")
    if how.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("the engines' kernels are timed on a GPU; none is here")
    problem, seed = problem_of(shape, settings), settings.bench.seed + how.seed_shift
    drawn = (shape["format"], seed, settings.bench.zipf_alpha, how)
    try:
        return EngineTimer(engine, fused.engine_versions[engine], problem, *drawn)
    except LookupError as exc:
        raise ConfigError(str(exc)) from None


def baseline_of(
    engine: str, version: str, shape: dict, device: str, triton_version: str
) -> tuple[str, dict | None, str]:
    """Return (the engine's file name of a shape on a device, its shipped table or None, where)."""
    dims = (shape["experts"], shape["n"], shape["format"])
    name = wheels.config_file_name(engine, version, *dims, device)
    return name, *wheels.shipped_table(engine, version, name, triton_version)


def device_of(path: str | Path) -> str:
    """Return the device a config file is named for, as torch names it ("NVIDIA H200")."""
    return NAME.search(Path(path).name).group(3).replace("_", " ")


def baseline_config(shipped: dict | None, rules: EngineDefaults, m: int, shape: dict) -> dict:
    """Return the config the engine runs at batch M today (shipped table, else default rule)."""
    if shipped:
        return wheels.nearest(shipped, m)
    return space.engine_default(rules, m, shape["experts"], shape["format"])


def check_file(
    path: str, settings: Tuning, repeats=20, engine="vllm", how=DECODE, keys=None, log=None
) -> pd.DataFrame:
    """Return one row per (M, routing, timing label) of a file against its baseline and default."""
    import triton

    shape, configs = read_file(path)
    timer = timer_for(engine, shape, settings, how)
    rules = settings.backend.fused_moe.engine_defaults[engine]
    named = (shape, device_of(path), triton.__version__)
    _, shipped, where = baseline_of(engine, timer.version, *named)
    head = timer.columns() | timer.provenance()
    head |= {"draw": settings.bench.seed + how.seed_shift, "baseline_from": where}
    head["baseline"] = "shipped" if shipped else "default"
    rows = []
    for m in sorted(k for k in configs if keys is None or k in keys):
        default = space.engine_default(rules, m, shape["experts"], shape["format"])
        base = baseline_config(shipped, rules, m, shape)
        labelled = [("file", configs[m]), ("baseline", base), ("baseline_again", base)]
        if shipped:
            labelled.append(("default", default))
        for routing in ("uniform", "zipf"):
            batch, done, key = timer.batch(m, routing), {}, {"m": m, "routing": routing}
            for label, config in labelled:
                slug = space.config_slug(effective(config, shape["format"]))
                if slug not in done or label == "baseline_again":
                    done[slug] = _timed(timer, config, batch, repeats, log)
                rows.append({**head, **key, "config_from": label, "config": slug, **done[slug]})
            batch.refs.clear()
    del timer
    return judge(pd.DataFrame(rows).reindex(columns=CHECK_COLUMNS))


def _timed(timer, config: dict, batch, repeats: int, log) -> dict:
    """Return a config's timing, or NaN times and an infinite error where the launch was refused."""
    try:
        return timer.time(config, batch, repeats)
    except Exception as exc:  # a refused launch is this config's result
        if log:
            log(f"  {space.config_slug(config)} at M={batch.m}: {last_line(exc)}")
        nan = float("nan")
        return {"time_ms": nan, "time_p10_ms": nan, "time_p90_ms": nan, "rel_err": float("inf")}


def _ratio(a: float, b: float) -> float:
    """Return a / b, NaN where either is missing."""
    return a / b if pd.notna(a) and pd.notna(b) and b else float("nan")


def judge(table: pd.DataFrame) -> pd.DataFrame:
    """Return the check's rows with each key's ratios, noise band (max(a/b, b/a) - 1), outcome."""
    table = table.copy()
    names = "x_baseline x_baseline_measured x_shipped x_default noise_band outcome"
    cols = {c: {} for c in names.split()}
    for _, pair in table.groupby(["m", "routing"], sort=False):
        by = {row["config_from"]: row for _, row in pair.iterrows()}
        f, b = by["file"], by["baseline"]
        again = by.get("baseline_again", b)
        noise = max(_ratio(b["time_ms"], again["time_ms"]), _ratio(again["time_ms"], b["time_ms"]))
        noise = noise - 1 if pd.notna(noise) else 0.0
        shipped = b if b["baseline"] == "shipped" else None
        default = by.get("default", b if b["baseline"] == "default" else None)
        x = _ratio(b["time_ms"], f["time_ms"])
        if f["config"] == b["config"]:
            outcome = "same config"
        elif f["time_p90_ms"] < b["time_p10_ms"] and x > 1 + noise:
            outcome = "won"
        elif f["time_p10_ms"] > b["time_p90_ms"] and x < 1 / (1 + noise):
            outcome = "lost"
        else:
            outcome = "tie"
        if pair["rel_err"].max() > TOLERANCE["bf16"] or pair["rel_err"].isna().any():
            outcome = "wrong result"  # against the fp32 reference: no timing counts
        for index, row in pair.iterrows():
            cols["x_baseline_measured"][index] = _ratio(b["time_ms"], row["time_ms"])
            for col, ref in (("x_baseline", b), ("x_shipped", shipped), ("x_default", default)):
                same = ref is not None and row["config"] == ref["config"]
                value = float("nan") if ref is None else _ratio(ref["time_ms"], row["time_ms"])
                cols[col][index] = 1.0 if same else value
            cols["noise_band"][index] = noise
            cols["outcome"][index] = outcome
    # whole columns at once: a column of missing values is float, and takes no words
    for col, values in cols.items():
        table[col] = pd.Series(values, dtype=object if col == "outcome" else float)
    return table


def decide(checks: list[pd.DataFrame]) -> dict[int, bool]:
    """Return {M: keep the file's config}: only where it won on every routing of every draw."""
    files = pd.concat(checks)
    files = files[files["config_from"] == "file"]
    return {int(m): set(o) == {"won"} for m, o in files.groupby("m")["outcome"]}


def export_table(
    configs: dict, keep: dict, shipped: dict | None, rules: EngineDefaults, shape: dict
) -> dict[str, dict]:
    """Return the exportable table: the shipped one, with only the file's winning keys changed."""
    out = {int(k): v for k, v in (shipped or {}).items()}
    for m, config in configs.items():
        out[m] = config if keep.get(m, False) else baseline_config(shipped, rules, m, shape)
    return {str(m): out[m] for m in sorted(out)}


def safe_file(table: pd.DataFrame, path: str, settings: Tuning, out: str, engine: str) -> tuple:
    """Write the file as it may be exported; return (keys kept, keys at the baseline)."""
    import triton  # the GPU stack: this module loads without it

    shape, configs = read_file(path)
    fused = settings.backend.fused_moe
    rules, version = fused.engine_defaults[engine], fused.engine_versions[engine]
    _, shipped, _ = baseline_of(engine, version, shape, device_of(path), triton.__version__)
    keep = decide([table])
    kept_triton = json.loads(Path(path).read_text()).get("triton_version", "")
    exported = export_table(configs, keep, shipped, rules, shape)
    write_text(out, space.engine_file_text(exported, kept_triton))
    kept = sum(keep.get(m, False) for m in configs)
    return kept, len(configs) - kept


def geomean(values) -> float:
    """Return the geometric mean of positive values (NaN for none)."""
    values = [v for v in values if pd.notna(v)]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def summary(table: pd.DataFrame) -> str:
    """Return the check's summary lines, one per routing."""
    out = []
    files = table[table["config_from"] == "file"]
    for routing, grp in files.groupby("routing"):
        worst = grp.loc[grp["x_baseline"].idxmin()]
        geo = geomean(grp[grp["m"] >= 1024]["x_baseline"])
        counts = grp["outcome"].value_counts().to_dict()
        out.append(
            f"{routing}: lowest {worst['x_baseline']:.3f}x the {worst['baseline']} baseline at "
            f"M={int(worst['m'])}; geomean over M>=1024 {geo:.3f}x; noise band up to "
            f"{grp['noise_band'].max():.3f}; {counts} ({worst['timing']})"
        )
    return "\n".join(out)
