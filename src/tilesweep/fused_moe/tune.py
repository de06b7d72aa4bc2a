"""Stage tune_configs (and tune_replay): the project's fused-MoE kernel tuned in the engines'
conditions, one job per dtype, in a supervised worker that journals each item (journal.py), so a
kill, crash or rerun resumes after the last item. Outputs results/tune/fused_moe/<dtype>.csv and the
project kernel's picks under a name no engine reads; the engines' files are tuned in their own
kernels (engines/search.py)."""

import json
import math
import os
from pathlib import Path

import pandas as pd

from tilesweep import backends, package_data
from tilesweep.cells import write_cell_table
from tilesweep.columns import TUNE_COLUMNS, Status
from tilesweep.device import catalog_name
from tilesweep.errors import ConfigError
from tilesweep.fused_moe import space
from tilesweep.fused_moe.backend import PROJECT_KERNEL, project_kernel_file
from tilesweep.fused_moe.backend import journal as kept_journal
from tilesweep.fused_moe.journal import FINAL, SCREEN, read_journal, supervise
from tilesweep.io import read_json, write_text
from tilesweep.provenance import device_info, package_version
from tilesweep.settings import TuneSettings, Tuning
from tilesweep.stages import logged

# backend.fused_moe's keys a worker's spec takes as they are.
SPEC_KEYS = """space variants engine_defaults routing direct_sparsity screen_repeats final_repeats
graph_calls graph_fill_ms finalists items_per_worker guard_default variant_tiles variant_finalists
config_timeout_s compile_timeout_s engines"""
# A timing's median, p10 and p90 (ms), as the worker journals them.
TIMES = ("time_ms", "time_p10_ms", "time_p90_ms")
# Beside a dtype's spec.json and journal: the driver and Triton that timed them.
VERSIONS = "versions.json"
# What a folder of the project kernel's picks holds, in the folder itself (README.txt).
DATA_FILES = ("fused_moe/data/project_kernel_README.txt",)
PROJECT_KERNEL_README = package_data.data_file("tilesweep", DATA_FILES[0]).format(
    prefix=PROJECT_KERNEL
)


def tune_spec(settings: Tuning, dtype: str, smem_limit: int, device: str) -> dict:
    """Return the worker's spec for one dtype: problems, space, batches and method (its JSON)."""
    mine = settings.backend.fused_moe
    problems = space.problems(settings.model, settings.grid.layouts)
    per_expert = mine.extra_tokens_per_expert
    # each batch M that gives each local expert t routed rows on average
    extra = {max(1, math.ceil(t * p["experts"] / p["top_k"])) for t in per_expert for p in problems}
    # model_dump: output only (spec.json, the document the worker, evaluate and replay read)
    written = mine.model_dump(include=set(SPEC_KEYS.split()), exclude_unset=True)
    keys = sorted(mine.batch_keys)
    spec = {**written, "dtype": dtype, "device": device, "problems": problems, "batch_keys": keys}
    spec["final_batches"] = sorted(set(keys) | extra)
    spec["check_batch"] = min(mine.batch_keys, key=lambda m: abs(m - 64))
    spec |= {"zipf_alpha": settings.bench.zipf_alpha, "seed": settings.bench.seed}
    spec["compile_workers"] = mine.compile_workers or max(1, (os.cpu_count() or 2) - 1)
    return spec | {"smem_limit_bytes": smem_limit}


def _timed(entry: dict | None) -> dict:
    """Return the median, p10 and p90 ms of a timing entry, or Nones."""
    return {key: entry[key] for key in TIMES} if entry else dict.fromkeys(TIMES)


def evaluate(spec: dict, records: dict, ceilings: dict) -> pd.DataFrame:
    """Return the tune table: every timing with its picks, its speed-ups over the defaults and
    torch, and its fractions of the measured ceilings (copy, read, the dtype's matmul rate)."""
    rows = []
    for rec in records.values():
        if rec["phase"] == SCREEN and rec["status"] != Status.OK:
            rows.append(_failed_screen(spec, rec))
        if rec["phase"] != FINAL:
            continue
        problem = spec["problems"][rec["problem"]]
        for entry in rec.get("rows", []):
            rows.extend(_final_rows(spec, problem, rec["m"], entry))
    table = pd.DataFrame(rows)
    if table.empty:
        return pd.DataFrame(columns=TUNE_COLUMNS)
    engine_space = space.engine_sources(spec["engine_defaults"])
    table = _mark_pick(spec, table, "tuned", engine_space, guard=space.guard_source(spec))
    table = _mark_pick(spec, table, "best", (*engine_space, "variant"))
    table = _speedups(table, spec["engine_defaults"])
    peak = (ceilings.get("matmul_tflops") or {}).get(spec["dtype"])
    for column, rate, ceiling in (
        ("copy_fraction", "gbs", ceilings.get("copy_gbs")),
        ("read_fraction", "gbs", ceilings.get("read_gbs")),
        ("math_fraction", "tflops", peak),
    ):
        if ceiling:
            table[column] = table[rate] / ceiling
    extra = [c for c in table.columns if c.startswith("over_") and c not in TUNE_COLUMNS]
    return table.reindex(columns=TUNE_COLUMNS + extra)  # a new engine's default: its column


def _columns(spec: dict, problem: dict) -> dict:
    """Return the problem's and the run's columns of every row."""
    where = {"dtype": spec["dtype"], "device": spec["device"]}
    return {"experts": problem["experts"], "n": problem["n"], **where}


def _failed_screen(spec: dict, rec: dict) -> dict:
    """Return the row of a config that could not be screened, with its reason."""
    row = _columns(spec, spec["problems"][rec["problem"]]) | {"runner": "fused_moe"}
    row |= {"source": "screen", "config": rec.get("slug") or rec.get("what")}
    return row | {"status": rec["status"], "reason": rec.get("reason", "")}


def _final_rows(spec: dict, problem: dict, m: int, entry: dict) -> list[dict]:
    """Return the table rows of one timed entry of a batch (one per GEMM, plus the sum)."""
    source = entry["source"] + (f":{entry['config_from']}" if "config_from" in entry else "")
    base = _columns(spec, problem) | {"m": m, "routing": entry["routing"], "source": source}
    base |= {"runner": entry.get("runner", "fused_moe"), "config": entry.get("slug", "")}
    base |= {"status": entry["status"], "reason": entry.get("reason", "")}
    base["tokens_per_expert"] = space.tokens_per_expert(m, problem)
    if entry["status"] != Status.OK:
        return [base]
    if "whole" in entry:  # the engine's whole MoE: compared with itself only
        return [{**base, "op": "whole_moe", **_timed(entry["whole"])}]
    out, calls, pairs = [], [], m * problem["top_k"]
    total = dict.fromkeys(("bytes", "flops", *TIMES), 0)
    touched = entry["touched"]  # experts the batch's routing reaches: their weights are read once
    for gemm in ("gate_up", "down"):
        work = space.pair_traffic(problem, gemm, pairs, touched, spec["dtype"])
        row = {**base, "op": gemm, **_timed(entry[gemm]), **work}
        row["calls_per_replay"] = entry[gemm].get("calls_per_replay", 1)
        calls.append(row["calls_per_replay"])
        out.append(row)
        for key in total:
            total[key] += row[key]
    out.append({**base, "op": "both", **total, "calls_per_replay": max(calls)})
    for row in out:
        seconds = row["time_ms"] * 1e-3
        row["gbs"] = row["bytes"] / seconds / 1e9
        row["tflops"] = row["flops"] / seconds / 1e12
    return out


def _mark_pick(
    spec: dict, table: pd.DataFrame, column: str, sources: tuple, guard: str | None = None
) -> pd.DataFrame:
    """Add a pick column: per (problem, batch), the config of `sources` fastest summed over every
    routing (one routing's pick loses to a default on another), guarded by `guard` where given.
    `tuned` is the project kernel's table; `best` adds the variants, unguarded."""
    table[column] = False
    project = table["runner"].astype(str).map(backends.runner_kind) == "fused"
    ok = (table["op"] == "both") & (table["status"] == Status.OK) & table["source"].isin(sources)
    both = table[ok & project]
    for (e, n, m), grp in both.groupby(["experts", "n", "m"]):
        timed = grp[["config", "routing", "source", "time_ms"]].itertuples(index=False)
        pick = space.pick_from(timed, spec["routing"], guard)
        sel = (table["experts"] == e) & (table["n"] == n) & (table["m"] == m)
        table.loc[sel & project & (table["config"] == pick), column] = True
    return table


def _speedups(table: pd.DataFrame, engines) -> pd.DataFrame:
    """Add each engine default's and the baseline's time over the row's (`over_<source>`)."""
    keys = ["experts", "n", "m", "routing", "op"]
    ok = table[table["status"] == Status.OK]
    pairs = [(f"{name}-default", f"over_{name}_default") for name in engines]
    for source, column in (*pairs, ("baseline", "over_baseline")):
        ref = ok[ok["source"] == source].groupby(keys)["time_ms"].min().rename(f"_{column}")
        table = table.join(ref, on=keys)
        table[column] = table[f"_{column}"] / table["time_ms"]
        table = table.drop(columns=f"_{column}")
    return table


def tuned_configs(table: pd.DataFrame, spec: dict) -> dict[tuple[int, int], dict[str, dict]]:
    """Return {(experts, n): {str(M): config}} of the tuned picks at every batch timed."""
    out: dict[tuple[int, int], dict[str, dict]] = {}
    first = table["routing"] == spec["routing"][0]
    picks = table[table["tuned"] & (table["op"] == "both") & first]
    for rec in picks.sort_values("m").to_dict("records"):
        parsed = space.parse_slug(rec["config"])  # the keys the engines' config files carry
        config = {key: parsed[key] for key in space.SPACE_KEYS}
        out.setdefault((int(rec["experts"]), int(rec["n"])), {})[str(int(rec["m"]))] = config
    return out


def write_configs(out_dir: Path, tuned: dict, device_name: str, dtype: str, triton: str) -> None:
    """Write each problem's table under a name no engine reads, with a README.txt."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_text(out_dir / "README.txt", PROJECT_KERNEL_README)
    for (experts, n), configs in tuned.items():
        name = project_kernel_file(experts, n, device_name, dtype)
        write_text(out_dir / name, space.engine_file_text(configs, triton))


def tune_fused_moe(
    settings_json: str,
    dtype: str,
    ceilings_path: str,
    table_path: str,
    configs_dir: str,
    work_dir: str,
    log_path: str | None = None,
) -> None:
    """Tune one dtype on the GPU at hand; write the tune table and the project kernel's picks."""
    settings = TuneSettings.from_json(settings_json)
    with logged(log_path) as log:
        info = device_info()
        hw_name = catalog_name(info["device"], settings.catalog)
        if info["device_kind"] != "cuda" or hw_name is None:
            raise RuntimeError(f"tuning needs a GPU of conf/hardware; here: {info['device']}")
        hardware = settings.catalog[hw_name]
        spec = tune_spec(settings, dtype, hardware.smem_per_block_optin, info["device"])
        records = supervise(spec, Path(work_dir), log)
        versions = {"driver": info["driver"], "triton": package_version("triton")}
        write_text(Path(work_dir) / VERSIONS, json.dumps(versions, sort_keys=True))  # for replays
        ceilings = read_json(ceilings_path)
        rows, files = write_outputs(spec, records, ceilings, versions, table_path, configs_dir)
        log.info("%s: %d rows, %d project-kernel tables (not for engines)", dtype, rows, files)


def write_outputs(
    spec: dict, records: dict, ceilings: dict, versions: dict, table_path, configs_dir
) -> tuple[int, int]:
    """Write the tune table and picks from journal records; return (rows, config files)."""
    dtype = spec["dtype"]
    table = evaluate(spec, records, ceilings)
    peak = (ceilings.get("matmul_tflops") or {}).get(dtype)  # measured; None is a gap
    gaps = [] if peak else [f"no measured {dtype} matmul rate"]
    if not ceilings.get("read_gbs"):  # ceilings measured before the read-only ceiling existed
        gaps.append("no measured read-only bandwidth")
    table["ceilings"] = f"gap: {'; '.join(gaps)}" if gaps else "measured here"
    table["driver"], table["triton"] = versions["driver"], versions["triton"]
    write_cell_table(table_path, table)
    tuned = tuned_configs(table, spec)
    write_configs(Path(configs_dir), tuned, spec["device"], dtype, versions["triton"])
    return len(table), len(tuned)


def replay(folder: str, dtype: str, table_path: str, configs_dir: str, log_path=None) -> None:
    """Re-evaluate a kept tuning run from its journals (no GPU) and write its outputs."""
    work = Path(folder) / dtype
    with logged(log_path) as log:
        spec, versions = read_json(work / "spec.json"), read_json(work / VERSIONS)
        if spec.get("dtype") != dtype:
            raise ConfigError(f"{work / 'spec.json'}: dtype {spec.get('dtype')!r}, not {dtype}")
        journal = kept_journal(work.parent.parent, work.parent.name, dtype)
        records = read_journal(journal)
        if not records:
            raise ConfigError(f"{journal}: no journalled item to replay")
        ceilings = read_json(Path(folder) / "ceilings.json")
        rows, files = write_outputs(spec, records, ceilings, versions, table_path, configs_dir)
        counts = (len(records), rows, files)
        log.info("%s: %d items, %d rows, %d project-kernel tables", dtype, *counts)
