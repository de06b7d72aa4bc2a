"""Tune where it is used (`tilesweep engine-tune`): per batch key, the engine's current config, its
one-step neighbours and other tuners' configs are screened, a second round from the best, then the
finalists and the baseline timed decode-true on every routing. A finalist is picked only where its
p90 beats the baseline's p10 on every routing; the picks are then decided into a drop-in file
(dropins.decide_file). Also stage tune_engine: a job per engine, its files swapped in whole."""

from __future__ import annotations

import itertools
import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from tilesweep import package_data
from tilesweep.cells import write_cell_table
from tilesweep.errors import ConfigError, last_line
from tilesweep.fused_moe import space
from tilesweep.fused_moe.case import TOLERANCE
from tilesweep.fused_moe.engines import check, dropins
from tilesweep.fused_moe.engines.check import baseline_config, read_file
from tilesweep.fused_moe.engines.timer import effective, warm
from tilesweep.io import write_table, write_text
from tilesweep.settings import TuneSettings, Tuning
from tilesweep.stages import logged

if TYPE_CHECKING:
    from tilesweep.fused_moe.section import EngineTune, FusedMoeSettings, Space

# The engine summary of a job whose engine has no kernel here.
SUMMARY_GAP = ["engine", "version", "status", "reason"]
TUNE_COLUMNS = package_data.column_lists(__name__, "tilesweep.fused_moe")["TUNE_COLUMNS"]


def neighbours(config: dict, values: Space, fmt: str) -> list[dict]:
    """Return the configs one launch parameter away from `config`, as the engine runs them."""
    moved = [effective({**config, k: v}, fmt) for k in space.SPACE_KEYS for v in getattr(values, k)]
    return space.distinct([effective(config, fmt), *moved])[1:]


def export_pick(finals: dict, default: str, routings: list[str]) -> tuple[str, str]:
    """Return (slug exported, why): the fastest finalist where it beats the default beyond noise."""
    timed = {s: t for s, t in finals.items() if all(r in t for r in routings)}
    if default not in timed:
        return default, "the default could not be timed on every routing"
    best = min(timed, key=lambda s: (sum(timed[s][r]["time_ms"] for r in routings), s))
    if best == default:
        return default, "the default is the fastest"
    base = timed[default]
    if all(timed[best][r]["time_p90_ms"] < base[r]["time_p10_ms"] for r in routings):
        gains = (f"{r} {base[r]['time_ms'] / timed[best][r]['time_ms']:.3f}x" for r in routings)
        return best, f"beats the default beyond the p10-p90 noise ({', '.join(gains)})"
    return default, f"{best} is within the noise of the default on some routing"


def tune_problem(
    timer, keys: list[int], fused: FusedMoeSettings, tune: EngineTune, extra: dict, log, shipped
) -> tuple[pd.DataFrame, dict]:
    """Return (rows, {M: picked config}) for one problem in one engine's kernel."""
    fmt, problem = timer.fmt, timer.problem
    rules, values = fused.engine_defaults[timer.engine], fused.space
    shape = {"experts": problem["experts"], "n": problem["n"], "format": fmt}
    defaults = {m: effective(baseline_config(shipped, rules, m, shape), fmt) for m in keys}
    first = {}
    for m in keys:  # the default, its rule's config beside a shipped table, and their neighbours
        rule = [space.engine_default(rules, m, problem["experts"], fmt)] if shipped else []
        first[m] = [defaults[m], *rule, *neighbours(defaults[m], values, fmt)]
        first[m] = [effective(c, fmt) for c in (*first[m], *extra.get(m, []))]
    rows, screens = [], {m: {} for m in keys}
    _screen_round(timer, first, screens, rows, defaults, tune, log)
    second = {}
    for m in keys:
        for best in _best(screens[m], 1):
            moved = neighbours(best, values, fmt)
            second[m] = [c for c in moved if space.config_slug(c) not in screens[m]]
    if tune.rounds > 1:
        _screen_round(timer, second, screens, rows, defaults, tune, log)
    picks = {m: _finals(timer, m, screens[m], defaults[m], rows, tune, log) for m in keys}
    return pd.DataFrame(rows, columns=TUNE_COLUMNS), picks


def _best(screened: dict, count: int) -> list[dict]:
    """Return the `count` best screened configs by median time."""
    ok = sorted((t["time_ms"], s, c) for s, (c, t) in screened.items() if t is not None)
    return [c for _, _, c in ok[:count]]


def _row(timer, m, routing, phase, config, default, status, reason="", t=None):
    """Return one table row (x_default and exported: set once the key's finals are timed)."""
    slug, t = space.config_slug(config), t or {}
    row = {**timer.columns(), "m": m, "routing": routing, "phase": phase, "config": slug}
    row |= {"is_default": slug == space.config_slug(default), "status": status, "reason": reason}
    row |= {key: t.get(key) for key in ("time_ms", "time_p10_ms", "time_p90_ms", "rel_err")}
    return row | {"x_default": None, "exported": False}


def _screen_round(timer, cands: dict, screens: dict, rows: list, defaults: dict, tune, log):
    """Compile (in parallel) and screen every key's candidates on the first routing."""
    jobs = [(c, m) for m, cs in cands.items() for c in cs]
    work = (timer.engine, timer.version, timer.problem, timer.fmt, jobs, tune.compile_workers)
    refused = warm(*work) if timer.device == "cuda" else {}
    what = f"{timer.engine} {timer.fmt} N={timer.problem['n']}"
    log(f"{what}: screening {len(jobs)} (config, M), {len(refused)} refused at compile or launch")
    routing = tune.routing[0]
    for m, cs in cands.items():
        batch = timer.batch(m, routing)
        for config in cs:
            config = effective(config, timer.fmt)
            slug = space.config_slug(config)
            if slug in screens[m]:
                continue
            err = refused.get((slug, m))
            if err is None:
                try:
                    t = timer.time(config, batch, tune.screen_repeats)
                except Exception as exc:  # a refusal at launch is this config's result
                    err = last_line(exc)
            if err is not None:
                screens[m][slug] = (config, None)
                rows.append(_row(timer, m, routing, "screen", config, defaults[m], "launch", err))
                continue
            wrong = not t["rel_err"] <= TOLERANCE["bf16"]
            screens[m][slug] = (config, None if wrong else t)
            why = f"relative error {t['rel_err']:.3g} against the fp32 reference" if wrong else ""
            status = "correctness" if wrong else "ok"
            rows.append(_row(timer, m, routing, "screen", config, defaults[m], status, why, t))
        batch.refs.clear()


def _finals(timer, m, screened, default, rows, tune, log) -> dict:
    """Time the key's finalists and default on every routing; return the exported config."""
    slug_default = space.config_slug(default)
    finalists = _best(screened, tune.finalists)
    if all(space.config_slug(c) != slug_default for c in finalists):
        finalists.append(default)
    finals, first = {}, len(rows)
    for routing in tune.routing:
        batch = timer.batch(m, routing)
        for config in finalists:
            slug = space.config_slug(config)
            try:
                t = timer.time(config, batch, tune.final_repeats)
            except Exception as exc:
                err = last_line(exc)
                rows.append(_row(timer, m, routing, "final", config, default, "launch", err))
                continue
            finals.setdefault(slug, {})[routing] = t
            rows.append(_row(timer, m, routing, "final", config, default, "ok", "", t))
        batch.refs.clear()
    chosen, why = export_pick(finals, slug_default, tune.routing)
    for row in rows[first:]:  # this key's finals
        base = finals.get(slug_default, {}).get(row["routing"])
        if base and row["time_ms"]:
            row["x_default"] = base["time_ms"] / row["time_ms"]
        row["exported"] = row["config"] == chosen
        if row["exported"]:
            row["reason"] = why
    log(f"  M={m}: export {chosen} ({why})")
    return next(c for c in finalists if space.config_slug(c) == chosen)


def extra_candidates(paths: list[str], shape: dict) -> dict:
    """Return {M: [configs]} from other tuners' files of the same shape and format."""
    out = {}
    for path in paths:
        theirs, configs = read_file(path)
        if theirs == shape:
            for m, config in configs.items():
                out.setdefault(m, []).append({k: config[k] for k in space.SPACE_KEYS})
    return out


def _tune_and_decide(
    settings: Tuning, engine: str, shape: dict, how: tuple, out_dir: Path, log
) -> dict:
    """Tune and decide one (engine, format, shape); return its drop-in row with the counts."""
    import torch
    import triton

    keys, tune, extra, device_name = how
    fused = settings.backend.fused_moe
    version = fused.engine_versions[engine]
    folder = out_dir / f"{engine}-{version}"
    experts, n, fmt = shape["experts"], shape["n"], shape["format"]
    start = time.monotonic()
    name, shipped, _ = check.baseline_of(engine, version, shape, device_name, triton.__version__)
    timer = check.timer_for(engine, shape, settings)
    theirs = extra_candidates(extra, shape)
    table, picks = tune_problem(timer, keys, fused, tune, theirs, log, shipped)
    text = space.engine_file_text({str(m): c for m, c in picks.items()}, triton.__version__)
    picked = folder / f"{dropins.PICKS}{name}"
    write_text(picked, text)
    write_table(folder / f"tune_{fmt}_E={experts},N={n}.csv", table)
    tuned_s = time.monotonic() - start
    screened = int((table["phase"] == "screen").sum())
    del timer
    torch.cuda.empty_cache()
    repeats = tune.final_repeats
    row, checks = dropins.decide_file(engine, picked, settings, out_dir, repeats, log=log)
    write_table(folder / f"check_{fmt}_E={experts},N={n}.csv", pd.concat(checks, ignore_index=True))
    torch.cuda.empty_cache()
    return {**row, "screened": screened, "tune_s": round(tuned_s, 1)}


def run(
    settings: Tuning,
    engines: list[str],
    formats: list[str],
    shapes: list[tuple[int, int]],
    out_dir: str,
    keys: list[int] | None = None,
    extra: list[str] = (),
    log=print,
):
    """Tune and decide every (engine, format, shape); return the drop-in rows."""
    import torch

    fused = settings.backend.fused_moe
    tune = fused.engine_tune
    if not tune.compile_workers:  # 0: every core but one
        tune = tune.model_copy(update={"compile_workers": max(1, (os.cpu_count() or 2) - 1)})
    keys = sorted(keys or fused.batch_keys)
    if not torch.cuda.is_available():
        raise ConfigError("the engines' kernels are timed on a GPU; none is here")
    device_name = torch.cuda.get_device_name()
    summary = []
    for engine, fmt, (experts, n) in itertools.product(engines, formats, shapes):
        shape = {"experts": experts, "n": n, "format": fmt}
        how = (keys, tune, list(extra), device_name)
        summary.append(_tune_and_decide(settings, engine, shape, how, Path(out_dir), log))
        # after every problem, so a run cut short keeps what it finished
        write_table(Path(out_dir) / "dropins.csv", pd.DataFrame(summary))
    return pd.DataFrame(summary)


def tune_engine(
    settings_json: str,
    engine: str,
    summary_path: str,
    configs_dir: str,
    log_path: str | None = None,
) -> None:
    """Tune in one engine's kernel on the GPU at hand; write the summary and the files."""
    settings = TuneSettings.from_json(settings_json)
    fused = settings.backend.fused_moe
    version = fused.engine_versions[engine]
    problems = space.problems(settings.model, settings.grid.layouts)
    shapes = [(p["experts"], p["n"]) for p in problems]
    work = Path(f"{configs_dir}.partial")  # swapped in whole: nothing half-written is kept
    shutil.rmtree(work, ignore_errors=True)
    with logged(log_path) as log:
        try:
            formats = list(fused.engine_tune.formats)
            summary = run(settings, [engine], formats, shapes, str(work), log=log.info)
            summary.insert(2, "status", "ok")
        except (ConfigError, LookupError) as exc:  # no kernel of that engine here: a result
            log.warning("%s", exc)
            summary = pd.DataFrame([[engine, version, "skipped", str(exc)]], columns=SUMMARY_GAP)
            work.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(configs_dir, ignore_errors=True)
        work.rename(configs_dir)
        write_cell_table(summary_path, summary)
