"""Stage tune_engine: files tuned in one engine's own kernel (search.py), a job per engine."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd

from tilesweep.cells import write_cell_table
from tilesweep.errors import ConfigError
from tilesweep.fused_moe import space
from tilesweep.fused_moe.engines import search
from tilesweep.settings import TuneSettings
from tilesweep.stages import logged

SUMMARY_GAP = ["engine", "version", "status", "reason"]


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
            summary = search.run(settings, [engine], formats, shapes, str(work), log=log.info)
            summary.insert(2, "status", "ok")
        except (ConfigError, LookupError) as exc:  # no kernel of that engine here: a result
            log.warning("%s", exc)
            summary = pd.DataFrame([[engine, version, "skipped", str(exc)]], columns=SUMMARY_GAP)
            work.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(configs_dir, ignore_errors=True)
        work.rename(configs_dir)
        write_cell_table(summary_path, summary)
