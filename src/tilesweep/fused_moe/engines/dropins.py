"""Drop-in engine config files decided decode-true against what the engine runs today: each key of a
candidate is kept only where it won beyond the noise on every routing of two draws (bench.seed + 1,
+ 2), then checked on a held-out draw (+ 3; a loss beyond 1% withholds it). Files are named by the
engine's own get_config_file_name and laid out where it looks (VLLM_TUNED_CONFIG_FOLDER,
SGLANG_MOE_CONFIG_DIR/configs/triton_<T>/)."""

import gc
import hashlib
import json
import os
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd

from tilesweep import package_data
from tilesweep.errors import last_line
from tilesweep.fused_moe import space
from tilesweep.fused_moe.engines import check
from tilesweep.fused_moe.engines.base import data
from tilesweep.fused_moe.engines.timer import DECODE, Method, compile_pool, effective, warm_all
from tilesweep.io import write_table, write_text
from tilesweep.settings import Tuning

DROPIN_COLUMNS = package_data.column_lists(__name__, "tilesweep.fused_moe")["DROPIN_COLUMNS"]
PICK_DRAWS = (1, 2)  # bench.seed shifts of the draws that pick
HELD_OUT_DRAW = 3  # the draw that only checks
PICKS = "picks_"  # a tuning's picks: the engine's file name behind this
HELD_OUT_FLOOR = 0.99  # a kept key below this on the held-out draw is withheld
# The drop-in row's columns of a file with no key left.
NOT_EXPORTED = {
    "path": "",
    "status": "not exported: no key beat the engine's current table on both draws and the "
    "held-out one",
    "sha256": "",
    "worst_x_baseline": 1.0,
    "geomean_x_baseline_m_ge_1024": 1.0,
}


def dropin_path(engine: str, version: str, name: str, triton_version: str) -> str:
    """Return where a file goes below an export folder, as the engine looks for it."""
    triton = triton_version.replace(".", "_")
    return data(engine).dropin.format(engine=engine, version=version, triton=triton, name=name)


def candidates(folders: list[str | Path], engine: str, version: str) -> dict[tuple, Path]:
    """Return {(format, E, N): path} of a tuner's picks (picks_*.json), the first folder winning."""
    out = {}
    for folder in folders:
        for path in sorted(Path(folder).glob(f"{engine}-{version}/{PICKS}E=*.json")):
            shape, _ = check.read_file(path)
            out.setdefault((shape["format"], shape["experts"], shape["n"]), path)
    return out


def decide_file(
    engine: str, path: Path, settings: Tuning, out_dir: Path, repeats: int, how=DECODE, log=print
) -> tuple[dict, list]:
    """Decide and write one candidate's drop-in file; return (its row, the check tables)."""
    import triton  # heavy: imported only where a file is decided

    fused = settings.backend.fused_moe
    version, rules = fused.engine_versions[engine], fused.engine_defaults[engine]
    shape, configs = check.read_file(path)
    named_for = check.device_of(path)
    name, shipped, where = check.baseline_of(engine, version, shape, named_for, triton.__version__)

    def timed(file: Path, draw: int, keys: list[int] | None = None) -> pd.DataFrame:
        at = replace(how, seed_shift=draw, timing="decode")
        drawn = check.check_file(str(file), settings, repeats, engine, at, keys, log)
        log(check.summary(drawn))  # one draw's check in the engine's kernel
        return drawn

    checks = []
    for draw in PICK_DRAWS:
        log(f"{engine} {shape['format']} E={shape['experts']} N={shape['n']}: draw {draw}")
        checks.append(timed(path, draw))
        _release()
    keep = check.decide(checks)
    table = check.export_table(configs, keep, shipped, rules, shape)
    triton_kept = json.loads(path.read_text()).get("triton_version", "")
    text = space.engine_file_text(table, triton_kept)
    row = {"engine": engine, "version": version, "file_name": name, "candidate": str(path)}
    row |= {k: shape[k] for k in ("format", "experts", "n")} | {"keys": len(configs)}
    row |= {"baseline": "shipped" if shipped else "default", "baseline_from": where}
    row["held_out_draw"] = HELD_OUT_DRAW
    row["noise_band_max"] = max(c["noise_band"].max() for c in checks)
    kept = sorted(m for m, k in keep.items() if k)
    withheld: list[int] = []
    if kept:
        trial = out_dir / "held_out" / engine / name
        write_text(trial, text)
        log(f"  held-out draw {HELD_OUT_DRAW} at the kept keys {kept}")
        checks.append(timed(trial, HELD_OUT_DRAW, kept))
        files, withheld = _withheld(checks[-1], keep)
        if withheld:
            table = check.export_table(configs, keep, shipped, rules, shape)
            text = space.engine_file_text(table, triton_kept)
        row.update(_held_out_ratios(files, configs, withheld))
    row["keys_kept"] = len(kept) - len(withheld)
    row["keys_withheld_held_out"] = " ".join(str(m) for m in withheld)
    row["timing"] = checks[0]["timing"].iloc[0]
    _export(row, text, out_dir / "export", triton.__version__)
    return row, checks


def _export(row: dict, text: str, export_dir: Path, triton_version: str) -> None:
    """Write a file that kept any key below export_dir and fill its row's path, status, SHA-256."""
    if not row["keys_kept"]:
        row.update(NOT_EXPORTED)
        return
    rel = dropin_path(row["engine"], row["version"], row["file_name"], triton_version)
    write_text(export_dir / rel, text)
    row.update(path=rel, status="exported", sha256=hashlib.sha256(text.encode()).hexdigest())


def _withheld(held: pd.DataFrame, keep: dict) -> tuple[pd.DataFrame, list[int]]:
    """Return (held-out rows, kept keys lost beyond HELD_OUT_FLOOR), marking those not kept."""
    files = held[held["config_from"] == "file"]
    withheld = []
    for m, grp in files.groupby("m"):
        if grp["outcome"].eq("wrong result").any() or grp["x_baseline"].min() < HELD_OUT_FLOOR:
            withheld.append(int(m))
            keep[int(m)] = False
    return files, withheld


def _held_out_ratios(files: pd.DataFrame, configs: dict, withheld: list[int]) -> dict:
    """Return the held-out draw's worst and geometric-mean ratios (unkept keys: 1)."""
    timed = files[~files["m"].isin(withheld)]
    per_key = {(m, r): 1.0 for m in configs for r in ("uniform", "zipf")}
    for r in timed.itertuples():
        per_key[int(r.m), r.routing] = r.x_baseline
    worst = min(per_key, key=per_key.get)
    big = [v for (m, _), v in per_key.items() if m >= 1024]
    default = timed["x_default"].dropna()
    big_default = timed[timed["m"] >= 1024]["x_default"]
    row = {"worst_x_baseline": per_key[worst], "worst_at_m": worst[0], "worst_routing": worst[1]}
    row["geomean_x_baseline_m_ge_1024"] = check.geomean(big)
    row["worst_x_default"] = default.min() if len(default) else float("nan")
    return row | {"geomean_x_default_m_ge_1024": check.geomean(big_default)}


def _release() -> None:
    """Hand the cached device memory of a file's weight copies back before the next file."""
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _compile(settings: Tuning, engine: str, path: Path, pool, log) -> None:
    """Compile every config a candidate's check times (its own, the baseline's, the default) in
    the pool, and log how it went."""
    import triton  # heavy: imported only where a file is decided

    t0 = time.monotonic()
    fused = settings.backend.fused_moe
    version, rules = fused.engine_versions[engine], fused.engine_defaults[engine]
    shape, configs = check.read_file(path)
    problem, fmt = check.problem_of(shape, settings), shape["format"]
    named_for = check.device_of(path)
    _, shipped, _ = check.baseline_of(engine, version, shape, named_for, triton.__version__)
    jobs = {}
    for m, config in configs.items():
        default = space.engine_default(rules, m, shape["experts"], fmt)
        for cand in (config, check.baseline_config(shipped, rules, m, shape), default):
            cand = effective(cand, fmt)
            jobs.setdefault((space.config_slug(cand), m), (engine, version, problem, fmt, cand, m))
    refused = warm_all(list(jobs.values()), pool)
    took = f"{time.monotonic() - t0:.0f} s"
    log(f"{engine} {path.name}: compiled {len(jobs)} (config, M) in {took}, {len(refused)} refused")


def run(
    settings: Tuning,
    work: list[tuple[str, Path]],
    out_dir: str | Path,
    repeats: int,
    budget_s: float,
    check_experts: int | None = 16,
    workers: int = 0,
    log=print,
) -> pd.DataFrame:
    """Decide every candidate within budget_s (late ones a row saying so); return the drop-ins."""
    start = time.monotonic()
    out_dir = Path(out_dir)
    rows, spent = [], []
    with compile_pool(workers or max(1, (os.cpu_count() or 2) - 1)) as pool:
        for engine, path in work:
            shape, _ = check.read_file(path)
            gap = {"engine": engine, **{k: shape[k] for k in ("format", "experts", "n")}}
            gap["candidate"] = str(path)
            left = budget_s - (time.monotonic() - start)
            need = max(spent) if spent else 0.0
            if left < need:
                why = f"not re-checked: {left:.0f} s of the budget left, a file took {need:.0f} s"
                rows.append({**gap, "status": f"{why}; withheld"})
                continue
            t0 = time.monotonic()
            try:
                _compile(settings, engine, path, pool, log)
                how = (out_dir, repeats, Method(check_experts=check_experts), log)
                row, checks = decide_file(engine, path, settings, *how)
            except Exception as exc:  # one file's failure is its row; the others still run
                rows.append({**gap, "status": f"error, withheld: {last_line(exc)}"})
                log(f"{engine} {path.name}: {last_line(exc)}")
                continue
            finally:
                _release()
            spent.append(time.monotonic() - t0)
            stem = f"{engine}-{row['version']}_{row['format']}_E={row['experts']},N={row['n']}"
            write_table(out_dir / "checks" / f"{stem}.csv", pd.concat(checks, ignore_index=True))
            rows.append(row)
            log(f"{stem}: {row['status']} ({spent[-1]:.0f} s)")
            write_table(out_dir / "dropins.csv", pd.DataFrame(rows).reindex(columns=DROPIN_COLUMNS))
    frame = pd.DataFrame(rows).reindex(columns=DROPIN_COLUMNS)
    write_table(out_dir / "dropins.csv", frame)
    return frame
