"""Expand a validated config into the cells each pipeline stage works on."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING

import pandas as pd

from tilesweep import backends
from tilesweep.errors import ConfigError
from tilesweep.plan.sharding import layout_name

if TYPE_CHECKING:
    from tilesweep.settings import RootSettings


def kernel_slug(cell: dict) -> str:
    """Return a readable, stable name for a kernel configuration."""
    stages = cell["stages"]
    tail = backends.builder(cell["backend"]).kernel_tail(cell)
    return (
        f"{cell['dtype']}-m{cell['tile_m']}n{cell['tile_n']}k{cell['tile_k']}"
        f"-s{stages}-{tail}-{cell['epilogue']}"
    )


def canonical(cell: dict) -> str:
    """Return a cell as canonical JSON, the only form passed to rules as a param."""
    return json.dumps(cell, sort_keys=True, separators=(",", ":"), default=_plain)


def _plain(value: object) -> object:
    """Return a settings model as the plain containers it was validated from."""
    from pydantic import BaseModel

    if isinstance(value, BaseModel):
        return value.model_dump(exclude_unset=True)  # model_dump: output only (a rule's JSON)
    raise TypeError(f"{type(value).__name__} is not JSON")


def check_size(settings: RootSettings) -> None:
    """Raise ConfigError when the grid would plan more than max_jobs jobs."""
    grid, limit = settings.grid, settings.max_jobs
    if limit < 1:
        raise ConfigError(f"max_jobs={limit}: must be at least 1")
    archs = {settings.catalog[t].arch for t in grid.targets}
    dims = {k: len(getattr(grid, k)) for k in ("tiles", "stages", "warps", "dtypes", "epilogues")}
    builders = sum(1 for b in backends.enabled(settings) if b.builder)
    configs = builders * math.prod(dims.values())
    jobs = configs * (len(archs) + len(grid.targets) + 1) + len(grid.layouts) * 2
    if jobs > limit:
        shape = " x ".join(f"{n} {k}" for k, n in dims.items())
        raise ConfigError(
            f"the grid plans up to {jobs:,} jobs ({shape} x {builders} backends, each built per "
            f"architecture, checked per target and timed), over max_jobs={limit:,}: cut the "
            "grid, or raise the limit with max_jobs=N"
        )


def build_cells(settings: RootSettings) -> pd.DataFrame:
    """Return one row per kernel to build: backend x architecture x kernel configuration."""
    catalog = settings.catalog
    archs = {catalog[name].arch: catalog[name].cc for name in settings.grid.targets}
    rows: list[dict] = []
    for arch, cc in sorted(archs.items()):
        for backend in backends.enabled(settings):
            if backend.builder:
                rows += backend.builder.cells(settings, arch, cc)
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    frame["kernel"] = [kernel_slug(r) for r in rows]
    frame["build_id"] = frame["backend"] + "/" + frame["arch"] + "/" + frame["kernel"]
    return frame.drop_duplicates("build_id").reset_index(drop=True)


def launch_cells(settings: RootSettings, builds: pd.DataFrame | None = None) -> pd.DataFrame:
    """Return one row per kernel and target: each is launch-checked against that target."""
    builds = build_cells(settings) if builds is None else builds
    rows = []
    for target in settings.grid.targets:
        arch = settings.catalog[target].arch
        for row in builds[builds["arch"] == arch].to_dict("records"):
            rows.append({**row, "target": target})
    frame = pd.DataFrame(rows)
    if not frame.empty:
        frame["launch_id"] = frame["backend"] + "/" + frame["target"] + "/" + frame["kernel"]
    return frame


def bench_kernels(settings: RootSettings, builds: pd.DataFrame | None = None) -> pd.DataFrame:
    """Return the kernels built one job each, which the decode benchmark times one job each."""
    builds = build_cells(settings) if builds is None else builds
    if builds.empty:
        return builds
    per_kernel = [b.name for b in backends.builders() if b.builder.build_per == "kernel"]
    rows = builds[builds["backend"].isin(per_kernel)]
    keep = ["backend", "dtype", "tile_m", "tile_n", "tile_k", "stages", "warps", "epilogue"]
    return rows[keep + ["kernel"]].drop_duplicates("kernel").reset_index(drop=True)


def layouts(settings: RootSettings) -> pd.DataFrame:
    """Return one row per parallel layout, with its world size and slug."""
    rows = []
    for layout in settings.grid.layouts:
        world = layout.tp * layout.pp * layout.ep
        rows.append(
            {
                "tp": layout.tp,
                "pp": layout.pp,
                "ep": layout.ep,
                # tp: the MoE split as attention's (the measured step's); ep: any other.
                "experts": "tp" if layout.moe_split()[0] == layout.tp else "ep",
                "moe_tp": layout.moe_split()[0],
                "world": world,
                "layout": layout_name(layout),
            }
        )
    return pd.DataFrame(rows).drop_duplicates("layout").reset_index(drop=True)


def cell_count(settings: RootSettings) -> int:
    """Return the number of grid cells: kernels x batches x targets x layouts."""
    dims = ("dtypes", "tiles", "stages", "warps", "epilogues", "tokens_per_expert", "targets")
    return math.prod(len(getattr(settings.grid, k)) for k in (*dims, "layouts"))
